package httpbreaker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// result is what one call through the queue got.
type result struct {
	resp *http.Response
	err  error
}

// send starts a call with id through tr, once the bubble is idle after
// the previous one, so that calls join the line in the order sent.
func send(t *testing.T, ctx context.Context, tr *Transport, id string) chan result {
	t.Helper()
	out := make(chan result, 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, testURL, nil)
	require.NoError(t, err)
	req.Header.Set("X-ID", id)
	go func() {
		resp, err := tr.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		out <- result{resp, err}
	}()
	synctest.Wait()
	return out
}

func TestQueueIsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(2), WithQueue(3, time.Minute))
		ctx := context.Background()
		calls := map[string]chan result{}
		for _, id := range []string{"h1", "h2", "w1", "w2", "w3"} {
			calls[id] = send(t, ctx, tr, id)
		}
		require.Equal(t, []string{"h1", "h2"}, d.order(), "the bulkhead holds two")
		r := <-send(t, ctx, tr, "w4")
		require.NoError(t, r.err)
		require.True(t, IsRejected(r.resp), "the line is full: the fourth waiter is refused at once")
		require.Equal(t, "1", r.resp.Header.Get("Retry-After"))
		for _, step := range []struct{ let, next string }{{"h2", "w1"}, {"h1", "w2"}, {"w1", "w3"}} {
			d.let(step.let, 200)
			synctest.Wait()
			require.Equal(t, step.next, d.order()[len(d.order())-1], "after %s ends", step.let)
		}
		for _, id := range []string{"w2", "w3"} {
			d.let(id, 200)
		}
		for id, c := range calls {
			r := <-c
			require.NoError(t, r.err, id)
			require.Equal(t, 200, r.resp.StatusCode, id)
		}
		require.Equal(t, []string{"h1", "h2", "w1", "w2", "w3"}, d.order())
		c := tr.breakers.get(testKey)
		require.Zero(t, c.bulk.inflight.Load(), "every place given back")
		require.Zero(t, c.bulk.waiting.Load())
	})
}

func TestQueueMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(1), WithQueue(1, time.Second), WithRejectAsError())
		ctx := context.Background()
		held := send(t, ctx, tr, "h")
		start := time.Now()
		r := <-send(t, ctx, tr, "w")
		require.Equal(t, time.Second, time.Since(start), "waited maxWait")
		require.ErrorIs(t, r.err, ErrBulkheadFull)
		require.ErrorIs(t, r.err, ErrOpen)
		d.let("h", 200)
		require.NoError(t, (<-held).err)
		require.Equal(t, []string{"h"}, d.order())
		require.Zero(t, tr.breakers.get(testKey).bulk.inflight.Load())
	})
}

func TestQueueWaiterCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(1), WithQueue(2, time.Minute))
		held := send(t, context.Background(), tr, "h")
		ctx, cancel := context.WithCancel(context.Background())
		waiting := send(t, ctx, tr, "w")
		cancel()
		r := <-waiting
		require.ErrorIs(t, r.err, context.Canceled, "leaves the line at once with its context's error")
		require.Nil(t, r.resp)
		d.let("h", 200)
		require.NoError(t, (<-held).err)
		s := tr.Snapshot()[0]
		require.EqualValues(t, 1, s.Requests, "the waiter counted for nothing")
		c := tr.breakers.get(testKey)
		require.Zero(t, c.bulk.inflight.Load())
		require.Zero(t, c.bulk.waiting.Load())
	})
}

func TestQueueRefusedAsOpenWhenTheBreakerOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMinRequests(2), WithMaxConcurrent(2), WithQueue(5, time.Minute), WithRejectAsError())
		ctx := context.Background()
		h1, h2 := send(t, ctx, tr, "h1"), send(t, ctx, tr, "h2")
		w1, w2 := send(t, ctx, tr, "w1"), send(t, ctx, tr, "w2")
		d.let("h1", 500)
		synctest.Wait()  // w1 takes h1's place
		d.let("h2", 500) // the breaker opens; w2 still waits
		require.NoError(t, (<-h1).err)
		require.NoError(t, (<-h2).err)
		r := <-w2
		require.ErrorIs(t, r.err, ErrOpen)
		require.NotErrorIs(t, r.err, ErrBulkheadFull, "refused as open")
		var re *RejectedError
		require.ErrorAs(t, r.err, &re)
		require.Equal(t, StateOpen, re.State)
		d.let("w1", 200)
		require.NoError(t, (<-w1).err)
		require.Equal(t, []string{"h1", "h2", "w1"}, d.order())
	})
}

// TestQueueJoinerAfterTheOpenIsRefusedAtOnce: a call that found the
// bulkhead full while the breaker was closed, and reaches the line only
// after the open was reported (so the line's refusal missed it), is
// refused as open at once rather than waiting for a place.
func TestQueueJoinerAfterTheOpenIsRefusedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(1), WithQueue(5, time.Minute), WithRejectAsError())
		h1 := send(t, context.Background(), tr, "h1") // holds the only place
		tr.Trip("api.test", time.Hour)                // reported with nobody in the line
		req := mustReq(t, testURL)
		c := tr.circuit(req)
		start := time.Now()
		_, reason, _, _, err := tr.wait(req, c) // as if admission saw it closed
		require.NoError(t, err)
		require.Equal(t, rejectOpen, reason)
		require.Zero(t, time.Since(start), "refused without waiting")
		require.Zero(t, c.bulk.waiting.Load(), "not left in the line")
		d.let("h1", 200)
		require.NoError(t, (<-h1).err)
	})
}

// TestQueueLosesNoPlace: 200 callers through a bulkhead of 8 and a line
// of 64, on real goroutines for the race detector: never more than 8 in
// next at once, and every place given back.
func TestQueueLosesNoPlace(t *testing.T) {
	var in, most atomic.Int64
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		n := in.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		defer in.Add(-1)
		if req.Header.Get("X-Fail") != "" {
			return nil, errors.New("refused")
		}
		return response(req, http.StatusOK, nil), nil
	})
	tr := New(next, WithMaxConcurrent(8), WithQueue(64, time.Second), WithMinRequests(1000))
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range 200 {
		wg.Go(func() {
			for range 20 {
				req := mustReq(t, testURL)
				if i%7 == 0 {
					req.Header.Set("X-Fail", "1")
				}
				resp, err := tr.RoundTrip(req)
				if err == nil {
					if IsRejected(resp) {
						refused.Add(1)
					}
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int64(8))
	c := tr.breakers.get(testKey)
	require.Zero(t, c.bulk.inflight.Load(), "no place lost")
	require.Zero(t, c.bulk.waiting.Load())
	t.Logf("refused %d of %d", refused.Load(), 200*20)
}

// TestBulkheadRefusesAsOpenWhenFullAndOpen: with both places taken, a
// third call is refused as bulkhead full while the breaker is closed,
// and as open once it has opened, so that its caller learns when the
// open period ends.
func TestBulkheadRefusesAsOpenWhenFullAndOpen(t *testing.T) {
	c := testCircuit("k")
	p := *c.pol.Load()
	p.minRequests, p.maxConcurrent, p.jitter = 1, 2, 0
	c.pol.Store(&p)
	c.b.configure(&p.settings)
	ms := int64(time.Millisecond)

	a, reason, _ := c.admitBulkhead(0, &p)
	require.Equal(t, admitted, reason, "a")
	b, reason, _ := c.admitBulkhead(0, &p)
	require.Equal(t, admitted, reason, "b")
	_, reason, _ = c.admitBulkhead(0, &p)
	require.Equal(t, rejectBulkhead, reason, "full and closed")
	require.NotNil(t, c.b.count(a, OutcomeFailure, ms, 0), "a's failure opens the breaker")
	state, _ := c.b.current(ms)
	require.Equal(t, StateOpen, state)
	_, reason, _ = c.admitBulkhead(2*ms, &p) // a is counted, and holds its place until released
	require.Equal(t, rejectOpen, reason, "full and open: refused as open")
	c.release(a)
	_, reason, _ = c.admitBulkhead(2*ms, &p)
	require.Equal(t, rejectOpen, reason, "a place free, and open: refused by state")
	require.EqualValues(t, 1, c.bulk.inflight.Load(), "b still holds its place; the refused call gave its back")
	c.release(b)
	require.Zero(t, c.bulk.inflight.Load())
}

// TestBulkheadHandsAnEndingCallsPlaceToItsWaiter: a waiter gets the
// place of the call that ends (the race where the give-back read an
// empty line just before the waiter joined is
// TestBulkheadLosesNoWakeUpUnderContention's).
func TestBulkheadHandsAnEndingCallsPlaceToItsWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithMaxConcurrent(1), WithQueue(1, time.Second), WithRejectAsError())
		_, _ = get(t, tr, testURL) // make the circuit
		c := tr.breakers.get(testKey)
		// B is admitted and holds the one place.
		tkB, reason, _ := c.admitBulkhead(tr.now(), c.pol.Load())
		require.Equal(t, admitted, reason)
		require.True(t, tkB.place)
		// A arrives: bulkhead full, joins, finds no place, waits.
		out := make(chan error, 1)
		go func() { _, err := get(t, tr, testURL); out <- err }()
		synctest.Wait()
		require.EqualValues(t, 1, c.bulk.waiting.Load(), "A waits")
		// B ends: its place goes to A.
		c.release(tkB)
		err := <-out
		require.NoError(t, err, "A was refused although a place was free for its whole wait")
	})
}

// TestBulkheadLosesNoWakeUpUnderContention: the lost wake-up of
// TestBulkheadHandsAnEndingCallsPlaceToItsWaiter on real goroutines,
// where it happens without stepping.
func TestBulkheadLosesNoWakeUpUnderContention(t *testing.T) {
	gate := make(chan chan struct{}, 1)
	next := rtFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("X-Hold") != "" {
			ch := make(chan struct{})
			gate <- ch
			<-ch
		}
		return response(r, 200, nil), nil
	})
	// A long maxWait: a waiter refused for its wait would have to be
	// descheduled for 5s, so a refusal here is a lost place.
	tr := New(next, WithMaxConcurrent(1), WithQueue(1, 5*time.Second), WithRejectAsError())
	lost := 0
	for i := 0; i < 3000 && lost == 0; i++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequest("GET", testURL, nil)
			req.Header.Set("X-Hold", "1")
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
		ch := <-gate
		aDone := make(chan error, 1)
		go func() {
			req, _ := http.NewRequest("GET", testURL, nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			aDone <- err
		}()
		close(ch)
		<-done
		if err := <-aDone; err != nil {
			lost++
			t.Logf("iteration %d: %v; inflight now %d", i, err, tr.breakers.get(testKey).bulk.inflight.Load())
		}
	}
	require.Zero(t, lost, "a waiter refused though the only call in flight had ended")
}

// panicLeaseStore is a Store whose ProbeLease panics.
type panicLeaseStore struct{ memStore }

type panicMember struct{}

func (*panicLeaseStore) Join(func(Hint)) Member            { return panicMember{} }
func (panicMember) Publish(Hint)                           {}
func (panicMember) ProbeLease(string, time.Duration) Lease { panic("store bug") }

// TestBulkheadPlaceFreedWhenProbeLeasePanics: a panic in Store.ProbeLease,
// called by the state's admission after the call took a bulkhead place,
// must not leak the place.
func TestBulkheadPlaceFreedWhenProbeLeasePanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &panicLeaseStore{memStore: *newMemStore()}
		tr := New(newDep(200), WithStore(s), WithMaxConcurrent(1))
		tr.Trip(testKey, time.Second)
		time.Sleep(time.Second)
		func() {
			defer func() { _ = recover() }()
			_, _ = get(t, tr, testURL)
		}()
		require.Zero(t, tr.breakers.get(testKey).bulk.inflight.Load(), "the guard frees what was held")
	})
}

// TestBulkheadRaisedAdmitsItsWaitersAtOnce: an Update that raises the
// bulkhead from 1 to 10 admits the call waiting in its line at once, not
// after its whole wait with nine places free.
func TestBulkheadRaisedAdmitsItsWaitersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(1), WithQueue(5, time.Minute), WithRejectAsError())
		ctx := context.Background()
		h := send(t, ctx, tr, "h")
		w := send(t, ctx, tr, "w")
		require.Equal(t, []string{"h"}, d.order(), "w waits in the line")
		require.NoError(t, tr.Update(WithMaxConcurrent(10), WithQueue(5, time.Minute), WithRejectAsError()))
		synctest.Wait()
		require.Equal(t, []string{"h", "w"}, d.order(), "the larger bulkhead admits its waiter at once")
		for _, id := range []string{"h", "w"} {
			d.let(id, 200)
		}
		requireAnswered(t, h, w)
	})
}

// TestBulkheadLoweredAdmitsNobodyUntilBelowIt: an Update that lowers the
// bulkhead from 3 to 1 while calls wait lets no waiter in until the calls
// in flight fall below 1; no call in flight is cut.
func TestBulkheadLoweredAdmitsNobodyUntilBelowIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(3), WithQueue(5, time.Minute))
		ctx := context.Background()
		var calls []chan result
		for _, id := range []string{"h1", "h2", "h3", "w1", "w2"} {
			calls = append(calls, send(t, ctx, tr, id))
		}
		require.Equal(t, []string{"h1", "h2", "h3"}, d.order())
		require.NoError(t, tr.Update(WithMaxConcurrent(1), WithQueue(5, time.Minute)))
		calls = append(calls, send(t, ctx, tr, "n"))
		require.Equal(t, []string{"h1", "h2", "h3"}, d.order(), "a newcomer waits too")
		for _, step := range []struct {
			let  string
			want []string
		}{
			{"h1", []string{"h1", "h2", "h3"}},
			{"h2", []string{"h1", "h2", "h3"}},
			{"h3", []string{"h1", "h2", "h3", "w1"}},
			{"w1", []string{"h1", "h2", "h3", "w1", "w2"}},
			{"w2", []string{"h1", "h2", "h3", "w1", "w2", "n"}},
			{"n", []string{"h1", "h2", "h3", "w1", "w2", "n"}},
		} {
			d.let(step.let, 200)
			synctest.Wait()
			require.Equal(t, step.want, d.order(), "after %s ends", step.let)
		}
		requireAnswered(t, calls...)
	})
}

// TestBulkheadAddedCountsCallsFromThenOn: a bulkhead added by Update to
// a key that had none counts the calls admitted from then on; the calls
// already in flight hold no place in it (nothing counted them).
func TestBulkheadAddedCountsCallsFromThenOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithRejectAsError())
		ctx := context.Background()
		var calls []chan result
		for _, id := range []string{"h1", "h2", "h3"} {
			calls = append(calls, send(t, ctx, tr, id))
		}
		require.NoError(t, tr.Update(WithMaxConcurrent(2), WithRejectAsError()))
		for _, id := range []string{"n1", "n2"} {
			calls = append(calls, send(t, ctx, tr, id))
		}
		require.Equal(t, []string{"h1", "h2", "h3", "n1", "n2"}, d.order(), "two places, both free")
		_, err := getCtx(t, ctx, tr, testURL)
		require.ErrorIs(t, err, ErrBulkheadFull, "the third newcomer")
		for _, id := range []string{"h1", "h2", "h3", "n1", "n2"} {
			d.let(id, 200)
		}
		requireAnswered(t, calls...)
	})
}

// TestBulkheadRaisedAdmitsItsWaitersOldestFirstUpToItsSize: raised from
// 1 to 3 with three calls waiting, the bulkhead admits the two oldest at
// once; the third, and a newcomer behind it, wait for a place.
func TestBulkheadRaisedAdmitsItsWaitersOldestFirstUpToItsSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(1), WithQueue(5, time.Minute))
		ctx := context.Background()
		var calls []chan result
		for _, id := range []string{"h", "w1", "w2", "w3"} {
			calls = append(calls, send(t, ctx, tr, id))
		}
		require.NoError(t, tr.Update(WithMaxConcurrent(3), WithQueue(5, time.Minute)))
		synctest.Wait()
		require.ElementsMatch(t, []string{"h", "w1", "w2"}, d.order(), "the two oldest waiters, at once (in either order)")
		calls = append(calls, send(t, ctx, tr, "n"))
		require.Len(t, d.order(), 3, "full: the newcomer waits behind w3")
		d.let("h", 200)
		synctest.Wait()
		require.Equal(t, "w3", d.order()[3])
		d.let("w1", 200)
		synctest.Wait()
		require.Equal(t, "n", d.order()[4])
		for _, id := range []string{"w2", "w3", "n"} {
			d.let(id, 200)
		}
		requireAnswered(t, calls...)
		requireBulkheadEmpty(t, tr, "every place given back")
	})
}

// TestBulkheadRaisedAdmitsAWaiterByTheProbesTheBreakerHoldsNow: a call
// that waits in the bulkhead's line while an Update raises both the
// bulkhead and the half-open probes is admitted, when the larger bulkhead
// hands it a place, by the probes the breaker holds then (2), not by
// those of the policy it joined the line under (1): a breaker's own
// decisions are taken by the settings it holds at the moment of the
// decision.
func TestBulkheadRaisedAdmitsAWaiterByTheProbesTheBreakerHoldsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		opts := func(bulk, probes int) []Option {
			return []Option{WithJitter(0), WithMaxConcurrent(bulk), WithQueue(5, time.Hour),
				WithHalfOpenProbes(probes), WithRejectAsError()}
		}
		tr := New(d, opts(1, 1)...)
		tr.Trip(testKey, time.Second)
		time.Sleep(time.Second)                     // due for half-open
		a := send(t, context.Background(), tr, "a") // the one probe, holding the one place
		w := send(t, context.Background(), tr, "w") // waits in the line for a place
		synctest.Wait()
		require.Equal(t, []string{"a"}, d.order())

		require.NoError(t, tr.Update(opts(2, 2)...))
		synctest.Wait()
		require.Equal(t, []string{"a", "w"}, d.order(), "the waiter, handed the second place, is the second probe")
		d.let("a", 200)
		d.let("w", 200)
		requireAnswered(t, a, w)
	})
}

// TestBulkheadNewcomerQueuesBehindWaiters: a newcomer that finds a place
// free while calls wait for one (as in the instant between an Update
// that raised the bulkhead and its wake-up) joins the line behind them,
// and the oldest waiter gets the place.
func TestBulkheadNewcomerQueuesBehindWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(1), WithQueue(5, time.Minute))
		ctx := context.Background()
		h, w := send(t, ctx, tr, "h"), send(t, ctx, tr, "w")
		c := tr.breakers.get(testKey)
		p := *c.pol.Load()
		p.maxConcurrent = 2
		c.pol.Store(&p) // resized, and nobody woken yet
		n := send(t, ctx, tr, "n")
		require.Equal(t, []string{"h", "w"}, d.order(), "the waiter first, not the newcomer")
		d.let("h", 200)
		synctest.Wait()
		require.Equal(t, []string{"h", "w", "n"}, d.order())
		for _, id := range []string{"w", "n"} {
			d.let(id, 200)
		}
		requireAnswered(t, h, w, n)
		requireBulkheadEmpty(t, tr, "every place given back")
	})
}

// TestBulkheadRemovedAdmitsItsWaiters: an Update that removes the
// bulkhead admits the calls waiting in its line at once, and the calls
// admitted under it still give their places back.
func TestBulkheadRemovedAdmitsItsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithMaxConcurrent(1), WithQueue(5, time.Minute))
		ctx := context.Background()
		h, w := send(t, ctx, tr, "h"), send(t, ctx, tr, "w")
		require.NoError(t, tr.Update())
		synctest.Wait()
		require.Equal(t, []string{"h", "w"}, d.order(), "no bulkhead: the waiter goes at once")
		n := send(t, ctx, tr, "n")
		require.Equal(t, []string{"h", "w", "n"}, d.order())
		for _, id := range []string{"h", "w", "n"} {
			d.let(id, 200)
		}
		requireAnswered(t, h, w, n)
		requireBulkheadEmpty(t, tr, "the calls admitted under the bulkhead gave their places back")
	})
}

// TestBulkheadTurnedOffSendsItsWaiters: an Update that turns a key off
// leaves it no breaker and no bulkhead, so the calls waiting in its line
// go to next at once, and what they answer counts for nothing.
func TestBulkheadTurnedOffSendsItsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		opts := []Option{WithMaxConcurrent(1), WithQueue(5, time.Minute), WithMinRequests(1)}
		tr := New(d, opts...)
		ctx := context.Background()
		h, w := send(t, ctx, tr, "h"), send(t, ctx, tr, "w")
		require.Equal(t, []string{"h"}, d.order())
		require.NoError(t, tr.Update(append(opts, WithMode(ModeOff))...))
		synctest.Wait()
		require.Equal(t, []string{"h", "w"}, d.order(), "no bulkhead: the waiter goes at once")
		d.let("h", 500)
		d.let("w", 500)
		for _, c := range []chan result{h, w} {
			r := <-c
			require.NoError(t, r.err)
			require.Equal(t, 500, r.resp.StatusCode, "next's own answer, not a refusal")
		}
		require.Empty(t, tr.Snapshot(), "an off key has no breaker")
		require.Equal(t, StateClosed, tr.State(testKey))
	})
}

// TestBulkheadTurnedShadowSendsItsWaiters: an Update that moves a key
// from enforce to shadow, which refuses nothing, sends the calls waiting
// in its line to next at once, as shadow passes of a full bulkhead:
// counted in breaker_shadow_rejections_total and told to observers as
// such, their outcomes counted for nothing, and holding no place.
func TestBulkheadTurnedShadowSendsItsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		reg := prometheus.NewPedanticRegistry()
		rec := &recorder{}
		opts := []Option{WithMaxConcurrent(1), WithQueue(2, time.Minute), WithMinRequests(1)}
		tr := New(d, append(slices.Clone(opts), WithMetrics(reg), WithObserver(rec))...)
		ctx := context.Background()
		h, w1, w2 := send(t, ctx, tr, "h"), send(t, ctx, tr, "w1"), send(t, ctx, tr, "w2")
		require.Equal(t, []string{"h"}, d.order(), "w1 and w2 wait in the line")
		start := time.Now()
		require.NoError(t, tr.Update(append(opts, WithMode(ModeShadow))...))
		synctest.Wait()
		require.ElementsMatch(t, []string{"h", "w1", "w2"}, d.order(), "shadow refuses nothing: the waiters go at once (in either order)")
		require.Zero(t, time.Since(start), "not after their wait")
		d.let("h", 200)
		d.let("w1", 500)
		d.let("w2", 500)
		requireAnswered(t, h)
		for _, c := range []chan result{w1, w2} {
			r := <-c
			require.NoError(t, r.err)
			require.Equal(t, 500, r.resp.StatusCode, "next's own answer")
			require.False(t, IsRejected(r.resp))
		}
		require.Equal(t, StateClosed, tr.State(testKey), "a shadow pass's failure counts for nothing")
		require.Equal(t, 2.0, gaugeValue(t, reg, "breaker_shadow_rejections_total", `reason="bulkhead"`))
		require.Equal(t, 0.0, gaugeValue(t, reg, "breaker_rejections_total", `reason="bulkhead"`))
		var passes int
		for _, c := range rec.allCalls() {
			if c.Shadow {
				passes++
				require.Equal(t, Call{Key: testKey, State: StateClosed, Outcome: OutcomeFailure, Rejected: "bulkhead", Shadow: true}, c)
			}
		}
		require.Equal(t, 2, passes, "both waiters observed as shadow passes")
		requireBulkheadEmpty(t, tr, "the place h held is back, and the waiters took none")
	})
}

// TestBulkheadShadowJoinerGoesAtOnce: a call that found the bulkhead full
// under enforce, and reaches the line only after an Update moved the key
// to shadow and sent the line on, goes on at once as a shadow pass rather
// than waiting for a place.
func TestBulkheadShadowJoinerGoesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		opts := []Option{WithMaxConcurrent(1), WithQueue(5, time.Minute)}
		tr := New(d, opts...)
		h := send(t, context.Background(), tr, "h") // holds the only place
		req := mustReq(t, testURL)
		c := tr.circuit(req) // found under enforce
		require.NoError(t, tr.Update(append(opts, WithMode(ModeShadow))...))
		start := time.Now()
		tk, reason, _, shadow, err := tr.wait(req, c)
		require.NoError(t, err)
		require.True(t, shadow)
		require.Equal(t, rejectBulkhead, reason)
		require.False(t, tk.place, "a shadow pass holds no place")
		require.Zero(t, time.Since(start), "sent on without waiting")
		require.Zero(t, c.bulk.waiting.Load(), "not left in the line")
		d.let("h", 200)
		requireAnswered(t, h)
		requireBulkheadEmpty(t, tr, "every place given back")
	})
}

// TestBulkheadLetGoLetsLaterJoinersGo: a call that found the circuit
// before an Update turned its key off, and joins the line after the line
// was let go, is let go at once too, not left waiting on a line nobody
// serves.
func TestBulkheadLetGoLetsLaterJoinersGo(t *testing.T) {
	var h bulkhead
	early, ok := h.join(5)
	require.True(t, ok)
	h.letGo()
	late, ok := h.join(5)
	require.True(t, ok)
	for _, w := range []*waiter{early, late} {
		select {
		case <-w.ready:
		default:
			t.Fatal("a waiter of a line let go still waits")
		}
		require.True(t, w.off)
		require.False(t, w.open)
	}
	require.Zero(t, h.waiting.Load())
	require.False(t, h.leave(late), "never in the line")
}

// TestBulkheadResizedUnderTrafficLosesNoPlace: Updates that resize the
// bulkhead between 1 and 8 while 64 callers go through it, on real
// goroutines for the race detector: never more than 8 in next at once,
// and every place given back.
func TestBulkheadResizedUnderTrafficLosesNoPlace(t *testing.T) {
	var in, most atomic.Int64
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		n := in.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		defer in.Add(-1)
		return response(req, http.StatusOK, nil), nil
	})
	tr := New(next, WithMaxConcurrent(4), WithQueue(16, time.Second))
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			n := []int{1, 8, 2, 5}[i%4]
			require.NoError(t, tr.Update(WithMaxConcurrent(n), WithQueue(16, time.Second)))
		}
	})
	var callers sync.WaitGroup
	for range 64 {
		callers.Go(func() {
			for range 30 {
				resp, err := tr.RoundTrip(mustReq(t, testURL))
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	callers.Wait()
	stop.Store(true)
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int64(8))
	requireBulkheadEmpty(t, tr, "no place lost")
}

// requireAnswered requires that each of calls got next's 200.
func requireAnswered(t *testing.T, calls ...chan result) {
	t.Helper()
	for _, c := range calls {
		r := <-c
		require.NoError(t, r.err)
		require.Equal(t, 200, r.resp.StatusCode)
	}
}

// requireBulkheadEmpty requires that the bulkhead of testKey's breaker in
// tr holds no place and no waiter.
func requireBulkheadEmpty(t *testing.T, tr *Transport, msg string) {
	t.Helper()
	c := tr.breakers.get(testKey)
	require.Zero(t, c.bulk.inflight.Load(), msg)
	require.Zero(t, c.bulk.waiting.Load(), msg)
}

func TestBulkheadBoundsCallsInFlightPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.block()
		tr := New(d, WithMaxConcurrent(3), WithRejectAsError())
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, err := get(t, tr, testURL)
				require.NoError(t, err)
			})
		}
		synctest.Wait()
		_, err := get(t, tr, testURL)
		require.ErrorIs(t, err, ErrBulkheadFull)
		require.ErrorIs(t, err, ErrOpen)
		var re *RejectedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, StateClosed, re.State)
		// Another key has its own bulkhead.
		d2 := newDep(200)
		_, err = get(t, New(d2, WithMaxConcurrent(3)), "http://other.test/")
		require.NoError(t, err)
		d.release()
		wg.Wait()
		_, err = get(t, tr, testURL)
		require.NoError(t, err, "places are freed when calls finish")
		require.EqualValues(t, 4, d.calls.Load())
		require.Equal(t, StateClosed, tr.State(testKey), "bulkhead rejections do not count as failures")
	})
}

// fullBulkhead returns a Transport with a bulkhead of one, held by a call
// that d keeps in flight until d.release. Call it in a synctest bubble.
func fullBulkhead(t *testing.T) (*dep, *Transport) {
	d := newDep(200)
	d.block()
	tr := New(d, WithMaxConcurrent(1))
	go func() { _, _ = get(t, tr, testURL) }()
	synctest.Wait()
	return d, tr
}

func TestBulkheadRejectionLooksLikeAnyRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tr := fullBulkhead(t)
		resp, err := tr.RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, rejectBody, string(b))
		d.release()
	})
}

// TestOpenWithFullBulkheadTellsWhenItOpens: calls admitted before the
// breaker opened still fill its bulkhead; a caller refused then is told
// the open period, not to come back in a second.
func TestOpenWithFullBulkheadTellsWhenItOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tr := fullBulkhead(t)
		tr.Trip(testKey, time.Minute)
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		require.Equal(t, "60", resp.Header.Get("Retry-After"))
		tr.Reset(testKey)
		resp, err = get(t, tr, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "closed: the bulkhead refuses")
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		d.release()
	})
}

// TestBulkheadRefusalOfABreakerDueToProbeSaysHalfOpen: a full bulkhead
// refuses a call to a breaker whose open period has ended, and which no
// call has moved yet, with the state State shows, half-open: never
// StateOpen, which RejectedError.State keeps for a breaker that refuses
// because it is open.
func TestBulkheadRefusalOfABreakerDueToProbeSaysHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.block()
		tr := New(d, WithMaxConcurrent(1), WithRejectAsError(), WithJitter(0))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = get(t, tr, testURL) // holds the bulkhead's one place
		}()
		defer func() { d.release(); <-done }() // also when a require fails
		synctest.Wait()
		tr.Trip(testKey, time.Second)
		time.Sleep(time.Second) // the open period is over: due for half-open

		_, err := tr.RoundTrip(mustReq(t, testURL))
		var rej *RejectedError
		require.ErrorAs(t, err, &rej)
		require.ErrorIs(t, err, ErrBulkheadFull)
		require.NotEqual(t, StateOpen, rej.State, "a bulkhead refusal is never StateOpen (RejectedError.State's doc)")
		require.Equal(t, StateHalfOpen, tr.State(testKey))
	})
}
