package httpbreaker

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// heldDep is a next whose calls each wait until the test lets them go,
// by the X-ID of their request, and that records the order they arrived.
type heldDep struct {
	mu      sync.Mutex
	arrived []string
	gates   map[string]chan int // the status each call answers with
}

func newHeldDep() *heldDep { return &heldDep{gates: map[string]chan int{}} }

func (d *heldDep) gate(id string) chan int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gates[id] == nil {
		d.gates[id] = make(chan int, 1)
	}
	return d.gates[id]
}

func (d *heldDep) RoundTrip(req *http.Request) (*http.Response, error) {
	id := req.Header.Get("X-ID")
	d.mu.Lock()
	d.arrived = append(d.arrived, id)
	d.mu.Unlock()
	select {
	case code := <-d.gate(id):
		return response(req, code, nil), nil
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

func (d *heldDep) let(id string, code int) { d.gate(id) <- code }

func (d *heldDep) order() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.arrived...)
}

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
		require.Zero(t, c.b.inflight.Load(), "every place given back")
		require.Zero(t, c.line.waiting.Load())
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
		require.Zero(t, tr.breakers.get(testKey).b.inflight.Load())
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
		require.Zero(t, c.b.inflight.Load())
		require.Zero(t, c.line.waiting.Load())
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
	require.Zero(t, c.b.inflight.Load(), "no place lost")
	require.Zero(t, c.line.waiting.Load())
	t.Logf("refused %d of %d", refused.Load(), 200*20)
}
