package httpbreaker

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder is an Observer (and a WithOnTransition hook) that keeps what it
// is told.
type recorder struct {
	mu    sync.Mutex
	trs   []Transition
	calls []Call
	ctxs  []context.Context
}

func (r *recorder) Transition(tr Transition) { r.mu.Lock(); r.trs = append(r.trs, tr); r.mu.Unlock() }
func (r *recorder) Call(ctx context.Context, c Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.ctxs = append(r.ctxs, ctx)
	r.mu.Unlock()
}
func (r *recorder) transitions() []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.trs)
}
func (r *recorder) allCalls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// TestTransitionReasonsCountsAndTimes walks one breaker through every
// reason the machine itself produces, and checks each transition's
// reason, counts, OpenFor and At exactly.
func TestTransitionReasonsCountsAndTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		d := newDep(200)
		start := time.Now()
		tr := New(d, WithMinRequests(4), WithJitter(0), WithOpenTimeout(time.Second),
			WithMaxOpenTimeout(8*time.Second), WithProbesToClose(1), WithOnTransition(rec.Transition))
		for range 2 {
			_, _ = get(t, tr, testURL)
		}
		d.set(500, nil)
		for range 2 {
			_, _ = get(t, tr, testURL) // 2 of 4 fail: 0.5, the rate
		}
		time.Sleep(time.Second)    // the open period ends: open_elapsed, due at 1s
		time.Sleep(time.Second)    // noticed a second later
		_, _ = get(t, tr, testURL) // the probe fails: probe_failed, backed off to 2s
		time.Sleep(2 * time.Second)
		d.set(200, nil)
		_, _ = get(t, tr, testURL) // probes_succeeded

		got := rec.transitions()
		require.Len(t, got, 5)
		want := []struct {
			from, to State
			reason   Reason
			at       time.Duration
			counts   Counts
			openFor  time.Duration
		}{
			{StateClosed, StateOpen, ReasonFailureRate, 0, Counts{4, 2, 0}, time.Second},
			{StateOpen, StateHalfOpen, ReasonOpenElapsed, time.Second, Counts{4, 2, 0}, 0},
			{StateHalfOpen, StateOpen, ReasonProbeFailed, 2 * time.Second, Counts{5, 3, 0}, 2 * time.Second},
			{StateOpen, StateHalfOpen, ReasonOpenElapsed, 4 * time.Second, Counts{5, 3, 0}, 0},
			{StateHalfOpen, StateClosed, ReasonProbesSucceeded, 4 * time.Second, Counts{6, 3, 0}, 0},
		}
		for i, w := range want {
			g := got[i]
			require.Equal(t, testKey, g.Key, "%d", i)
			require.Equal(t, [2]State{w.from, w.to}, [2]State{g.From, g.To}, "%d", i)
			require.Equal(t, w.reason, g.Reason, "%d", i)
			require.Equal(t, w.at, g.At.Sub(start), "%d: At", i)
			require.Equal(t, w.counts, g.Counts, "%d: counts", i)
			require.Equal(t, w.openFor, g.OpenFor, "%d: OpenFor", i)
		}
		require.Equal(t, ReasonProbesSucceeded, tr.Snapshot()[0].Reason)
	})
}

func TestTransitionReasonThrottledAndProbeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		d := newDep(429)
		tr := New(d, WithMinRequests(2), WithJitter(0), WithOpenTimeout(time.Second),
			WithMaxOpenTimeout(4*time.Second), WithThrottleSustain(time.Second), WithObserver(rec))
		_, _ = get(t, tr, testURL)
		_, _ = get(t, tr, testURL)
		time.Sleep(time.Second)
		_, _ = get(t, tr, testURL) // 429s made up the rate for the sustain period
		require.Equal(t, StateOpen, tr.State(testKey))
		time.Sleep(time.Second)
		d.hangUntilDone()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _, _ = getCtx(t, ctx, tr, testURL) }() // a probe that hangs
		synctest.Wait()
		time.Sleep(4 * time.Second) // past the probe bound
		require.Equal(t, StateOpen, tr.State(testKey))
		got := rec.transitions()
		require.Len(t, got, 3)
		require.Equal(t, ReasonThrottled, got[0].Reason)
		require.Equal(t, Counts{3, 0, 3}, got[0].Counts)
		require.Equal(t, ReasonOpenElapsed, got[1].Reason)
		require.Equal(t, ReasonProbeTimeout, got[2].Reason)
		require.Equal(t, got[1].At.Add(4*time.Second), got[2].At, "at the bound, not when noticed")
		require.Equal(t, 2*time.Second, got[2].OpenFor, "backed off")
		cancel()
		synctest.Wait()
	})
}

func TestTransitionReasonsOfOperatorsAndTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		here, there := &recorder{}, &recorder{}
		a := New(newDep(200), WithStore(s), WithObserver(here), WithJitter(0))
		b := New(newDep(200), WithStore(s), WithObserver(there), WithJitter(0))
		_, _ = get(t, a, testURL)
		_, _ = get(t, b, testURL)

		a.Trip(testKey, time.Minute)
		a.Trip(testKey, 2*time.Minute) // already open: no transition, the reason stays trip
		a.Reset(testKey)
		require.Equal(t, []Reason{ReasonTrip, ReasonReset}, reasons(here.transitions()))
		require.Equal(t, []Reason{ReasonTrip, ReasonReset}, reasons(there.transitions()), "the other instance took the operator's hints")
		require.Equal(t, time.Minute, here.transitions()[0].OpenFor)

		a.Trip(testKey, time.Duration(1<<63-1))
		require.Zero(t, here.transitions()[2].OpenFor, "until Reset")
		require.Equal(t, ReasonTrip, a.Snapshot()[0].Reason)
		a.Reset(testKey)

		// An ordinary open hint from the fleet.
		s.publish(Hint{Key: testKey, State: StateOpen, RetryAt: time.Now().Add(3 * time.Second)})
		last := there.transitions()[len(there.transitions())-1]
		require.Equal(t, ReasonFleet, last.Reason)
		require.Equal(t, 3*time.Second, last.OpenFor, "the time to the hint's RetryAt")
		require.Equal(t, ReasonFleet, b.Snapshot()[0].Reason)
		s.publish(Hint{Key: testKey, State: StateClosed})
		last = there.transitions()[len(there.transitions())-1]
		require.Equal(t, [3]any{StateOpen, StateClosed, ReasonFleet}, [3]any{last.From, last.To, last.Reason})
	})
}

func reasons(trs []Transition) []Reason {
	var out []Reason
	for _, tr := range trs {
		out = append(out, tr.Reason)
	}
	return out
}

// TestTransitionsInOrderPerKeyNeverOverlapping has many goroutines move
// one breaker at once: its hook and observer see its transitions one at a
// time, each starting where the last ended.
func TestTransitionsInOrderPerKeyNeverOverlapping(t *testing.T) {
	var busy, overlaps atomic.Int32
	var mu sync.Mutex
	var seq []Transition
	hook := func(tr Transition) {
		if busy.Add(1) != 1 {
			overlaps.Add(1)
		}
		mu.Lock()
		seq = append(seq, tr)
		mu.Unlock()
		time.Sleep(50 * time.Microsecond) // widen the window for an overlap
		busy.Add(-1)
	}
	var n atomic.Int64
	next := rtFunc(func(r *http.Request) (*http.Response, error) {
		if n.Add(1)%3 == 0 {
			return response(r, 200, nil), nil
		}
		return response(r, 500, nil), nil
	})
	tr := New(next, WithMinRequests(2), WithJitter(0), WithOpenTimeout(time.Millisecond),
		WithProbesToClose(1), WithHalfOpenProbes(4), WithOnTransition(hook))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 300 {
				_, _ = get(t, tr, testURL)
			}
		})
	}
	wg.Wait()
	require.Zero(t, overlaps.Load(), "hooks for one key ran at the same time")
	require.Greater(t, len(seq), 3)
	for i := 1; i < len(seq); i++ {
		require.Equal(t, seq[i-1].To, seq[i].From, "transition %d starts where %d ended", i, i-1)
		require.False(t, seq[i].At.Before(seq[i-1].At), "transition %d comes after %d", i, i-1)
	}
}

func TestObserverToldOfEveryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec, also := &recorder{}, &recorder{}
		d := newDep(200)
		d.delay = 30 * time.Millisecond
		tr := New(d, WithMinRequests(1), WithJitter(0), WithOpenTimeout(2*time.Second), WithObserver(rec), WithObserver(also))
		type key struct{}
		ctx := context.WithValue(context.Background(), key{}, "mine")
		_, _ = getCtx(t, ctx, tr, testURL)
		d.set(500, nil)
		_, _ = get(t, tr, testURL) // trips
		_, _ = get(t, tr, testURL) // refused

		calls := rec.allCalls()
		require.Len(t, calls, 3)
		require.Equal(t, Call{Key: testKey, State: StateClosed, Outcome: OutcomeSuccess, Duration: 30 * time.Millisecond}, calls[0])
		require.Equal(t, "mine", rec.ctxs[0].Value(key{}), "the request's context")
		require.NotNil(t, calls[1].Moved)
		require.Equal(t, ReasonFailureRate, calls[1].Moved.Reason)
		require.Equal(t, OutcomeFailure, calls[1].Outcome)
		require.Equal(t, Call{Key: testKey, State: StateOpen, Outcome: OutcomeIgnored, Rejected: "open",
			RetryAfter: 2 * time.Second}, calls[2]) // the refusal came at the instant of the trip
		require.Equal(t, calls, also.allCalls(), "every observer is told everything")
	})
}

func TestObserverToldOfShadowQueueAndBodyCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		d := newDep(500)
		tr := New(d, WithMinRequests(1), WithJitter(0), WithMode(ModeShadow), WithObserver(rec))
		_, _ = get(t, tr, testURL) // trips, in shadow
		_, _ = get(t, tr, testURL) // would be refused: goes through
		calls := rec.allCalls()
		require.Len(t, calls, 2)
		require.Equal(t, Call{Key: testKey, State: StateOpen, Outcome: OutcomeFailure, Rejected: "open", Shadow: true}, calls[1])

		// A waiter in the bulkhead's line, then a waiter refused after maxWait.
		rec = &recorder{}
		q := newDep(200)
		q.block()
		tq := New(q, WithMaxConcurrent(1), WithQueue(1, time.Second), WithObserver(rec))
		go func() { _, _ = get(t, tq, testURL) }()
		synctest.Wait()
		_, _ = get(t, tq, testURL) // waits its whole second, refused
		q.release()
		synctest.Wait()
		calls = rec.allCalls()
		require.Len(t, calls, 2)
		require.Equal(t, Call{Key: testKey, State: StateClosed, Outcome: OutcomeIgnored, Rejected: "bulkhead",
			QueueWait: time.Second, RetryAfter: time.Second}, calls[0])
		require.Equal(t, OutcomeSuccess, calls[1].Outcome)

		// Under WithBodyErrors a call is told of at its body's end.
		rec = &recorder{}
		tb := New(newDep(200), WithBodyErrors(), WithObserver(rec))
		resp, err := tb.RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		require.Empty(t, rec.allCalls(), "not before the body ends")
		time.Sleep(time.Second)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, []Call{{Key: testKey, State: StateClosed, Outcome: OutcomeSuccess, Duration: time.Second}}, rec.allCalls())
	})
}

func TestReasonText(t *testing.T) {
	want := []string{"", "failure_rate", "throttled", "open_elapsed", "probe_failed", "probe_timeout",
		"probes_succeeded", "trip", "reset", "fleet"}
	for r := Reason(0); r < numReasonValues; r++ {
		require.Equal(t, want[r], r.String())
		b, err := r.MarshalText()
		require.NoError(t, err)
		require.Equal(t, want[r], string(b))
	}
	require.Equal(t, "Reason(42)", Reason(42).String())
	for _, k := range transitionKinds {
		require.Equal(t, k, transitionKinds[transitionKind(k.from, k.to, k.reason)])
	}
	require.Equal(t, -1, transitionKind(StateClosed, StateHalfOpen, ReasonTrip))
}

func TestOnStateChangeMayCallBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr *Transport
		var states []State
		var snaps int
		tr = New(newDep(500), WithMinRequests(1), onStateChange(func(key string, from, to State) {
			states = append(states, tr.State(key)) // would deadlock under a lock
			snaps += len(tr.Snapshot())
			if to == StateOpen {
				tr.Reset(key)
			}
		}))
		_, _ = get(t, tr, testURL)
		require.Equal(t, []State{StateOpen, StateClosed}, states)
		require.Equal(t, 2, snaps)
		require.Equal(t, StateClosed, tr.State(testKey))
	})
}

func TestLoggerLogsEveryTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
		d := newDep(500)
		tr := tripped(t, d, WithLogger(l), WithProbesToClose(1))
		time.Sleep(time.Second)
		d.set(200, nil)
		_, _ = get(t, tr, testURL)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 3)
		require.Contains(t, lines[0], "level=WARN")
		require.Contains(t, lines[0], "breaker=api.test")
		require.Contains(t, lines[0], "reason=failure_rate requests=1 failures=1 throttled=0")
		require.Contains(t, lines[1], "level=INFO")
		require.Contains(t, lines[1], "to=half-open")
		require.Contains(t, lines[1], "reason=open_elapsed")
		require.Contains(t, lines[2], "level=INFO")
		require.Contains(t, lines[2], "to=closed")
		require.Contains(t, lines[2], "reason=probes_succeeded requests=2 failures=1 throttled=0")
	})
}

// TestHooksOfAnEvictedKeyNeverOverlap: a breaker whose transitions are
// still being delivered is not idle, so it is not evicted while its hook
// runs: the key's next breaker cannot run a hook for the key beside it.
func TestHooksOfAnEvictedKeyNeverOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running, overlap atomic.Int32
		hold := make(chan struct{})
		d := newDep(http.StatusInternalServerError)
		tr := New(d, WithMaxBreakers(1), WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
			WithWindow(100*time.Millisecond), WithProbesToClose(1),
			WithOnTransition(func(x Transition) {
				if running.Add(1) > 1 {
					overlap.Add(1)
				}
				if x.Key == testKey && x.To == StateClosed {
					<-hold // a slow hook
				}
				running.Add(-1)
			}))
		_, _ = get(t, tr, testURL) // trips
		time.Sleep(2 * time.Second)
		d.set(http.StatusOK, nil)
		go func() { _, _ = get(t, tr, testURL) }() // the probe closes it; its hook blocks
		synctest.Wait()
		require.Equal(t, StateClosed, tr.State(testKey))
		_, _ = get(t, tr, "http://other.test/")
		require.Equal(t, []string{testKey}, keys(tr), "not idle while its hook runs: not evicted")
		close(hold)
		synctest.Wait()
		time.Sleep(time.Second)
		_, _ = get(t, tr, "http://other.test/")
		require.Equal(t, []string{"other.test"}, keys(tr), "idle once delivered")
		require.Zero(t, overlap.Load())
	})
}

// TestObserverToldOfAShadowPassAtItsBodysEnd: under WithBodyErrors a call
// a shadow breaker let through is told to the observers at its body's
// end, with its real outcome and its duration to then.
func TestObserverToldOfAShadowPassAtItsBodysEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		fail := true
		next := brokenBodyAfter500s(&fail)
		tr := New(next, WithMinRequests(1), WithJitter(0), WithMode(ModeShadow), WithBodyErrors(), WithObserver(rec))
		_, _ = get(t, tr, testURL) // trips, in shadow
		fail = false
		resp, err := tr.RoundTrip(mustReq(t, testURL)) // would be refused: goes through
		require.NoError(t, err)
		require.Len(t, rec.allCalls(), 1, "not told at the headers")
		time.Sleep(time.Second)
		_, rerr := io.ReadAll(resp.Body)
		require.Error(t, rerr)
		resp.Body.Close()
		calls := rec.allCalls()
		require.Len(t, calls, 2, "told once")
		require.True(t, calls[1].Shadow)
		require.Equal(t, "open", calls[1].Rejected)
		require.Equal(t, OutcomeFailure, calls[1].Outcome, "its real outcome: the body failed")
		require.Equal(t, time.Second, calls[1].Duration, "to the body's end")
		require.Zero(t, tr.Snapshot()[0].Requests-1, "a shadow pass counts for nothing")
	})
}

// TestObserverRetryAfterIsThe503s: a refused call's RetryAfter is what
// the synthetic 503 says, before rounding: at most an hour, also for a
// breaker tripped until Reset.
func TestObserverRetryAfterIsThe503s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		tr := New(newDep(http.StatusOK), WithObserver(rec))
		tr.Trip(testKey, time.Duration(math.MaxInt64))
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, "3600", resp.Header.Get("Retry-After"))
		calls := rec.allCalls()
		require.Len(t, calls, 1)
		require.Equal(t, time.Hour, calls[0].RetryAfter)
	})
}

// TestObserverToldOfAShadowPassWhoseUploadFailedAsIgnored: a call a
// shadow breaker would have refused, whose caller's own request body
// fails to read, is told with its real outcome. The design says an error
// reading the request's own body is ignored ("the caller's upload
// failed, not the dependency"), and so an enforcing breaker counts an
// admitted call of the kind: the shadow pass must say the same.
func TestObserverToldOfAShadowPassWhoseUploadFailedAsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			defer r.Body.Close()
			_, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				return nil, err // as net/http does: the upload failed
			}
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		tr := New(next, WithMinRequests(1), WithJitter(0), WithObserver(rec))
		post := func() error {
			req, err := http.NewRequest(http.MethodPost, testURL, &failingUpload{n: 1})
			require.NoError(t, err)
			_, err = tr.RoundTrip(req)
			return err
		}
		require.Error(t, post())
		require.Equal(t, OutcomeIgnored, rec.allCalls()[0].Outcome, "admitted: the caller's upload, ignored")

		rec = &recorder{}
		tr = New(next, WithMinRequests(1), WithJitter(0), WithMode(ModeShadow), WithObserver(rec))
		tr.Trip(testKey, time.Hour) // the shadow breaker would refuse every call
		require.Error(t, post())
		calls := rec.allCalls()
		require.Len(t, calls, 1)
		require.True(t, calls[0].Shadow)
		require.Equal(t, OutcomeIgnored, calls[0].Outcome, "a shadow pass: the caller's upload, ignored too")
	})
}

// attacher is a recorder that keeps the Transports it is attached to.
type attacher struct {
	recorder
	attached []*Transport
}

func (a *attacher) Attach(t *Transport) { a.attached = append(a.attached, t) }

// New attaches an Attacher to the Transport it makes, once, before it
// returns; an observer given to two Transports is attached to each, and
// a plain Observer is not asked for more.
func TestNewAttachesAnAttacherToItsTransport(t *testing.T) {
	a := new(attacher)
	var o Observer = a
	_, isAttacher := o.(Attacher)
	require.True(t, isAttacher)
	one := New(newDep(200), WithObserver(a), WithObserver(nopObserver{}))
	require.Equal(t, []*Transport{one}, a.attached)
	two := New(newDep(200), WithObserver(a))
	require.Equal(t, []*Transport{one, two}, a.attached)
}

// TestHooksOfAKeySwitchedOffAndBackNeverOverlap: hooks for one key never
// run at the same time, also when Update switches the key to ModeOff and
// back while a hook of its breaker still runs: the key's new breaker
// tells its transitions after the old one's, on the same goroutine. The
// outbox Update keeps for it waits for that breaker, not for the circuit
// that says the key is off, which the cap may evict at any time and the
// outbox with it.
func TestHooksOfAKeySwitchedOffAndBackNeverOverlap(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		off  func(t *testing.T, tr *Transport) // while the key is off
	}{
		{"back at once", nil, func(*testing.T, *Transport) {}},
		{"its off circuit evicted meanwhile", []Option{WithMaxBreakers(1)}, func(t *testing.T, tr *Transport) {
			_, _ = get(t, tr, testURL)              // an off circuit for the key
			_, _ = get(t, tr, "http://other.test/") // the cap evicts the off circuit
			require.Nil(t, tr.breakers.get(testKey))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var running, overlap, calls atomic.Int32
				hold := make(chan struct{})
				tr := New(newDep(200), append(tc.opts, WithOnTransition(func(x Transition) {
					if running.Add(1) > 1 {
						overlap.Add(1)
					}
					if calls.Add(1) == 1 {
						<-hold // a slow hook, on the first transition
					}
					running.Add(-1)
				}))...)
				_, _ = get(t, tr, testURL)     // the key has a breaker
				go tr.Trip(testKey, time.Hour) // its hook blocks
				synctest.Wait()
				require.NoError(t, tr.Update(WithPolicy(testKey, WithMode(ModeOff))))
				tc.off(t, tr)
				require.NoError(t, tr.Update()) // back on
				time.Sleep(11 * time.Second)    // any other key is idle: room for the key again
				tr.Trip(testKey, time.Hour)     // the new breaker's hook runs now
				got := overlap.Load()
				close(hold)
				synctest.Wait()
				require.EqualValues(t, 2, calls.Load())
				require.Zero(t, got, "two hooks for %s ran at the same time", testKey)
			})
		})
	}
}
