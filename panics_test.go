package httpbreaker

// Panics in the next RoundTripper and in user callbacks.
//
// Every one of them propagates to the caller of RoundTrip (and through
// http.Client, which recovers nothing): the Transport never swallows a
// panic. What it owes is that the panic leaves nothing behind: the
// breaker's state and counts are what they would be had the call never
// been made, a half-open probe slot or a bulkhead place taken by the call
// is given back, a response that next produced but the caller never
// received is closed, and the next call behaves.
//
//	next panics             → the call counts for nothing; slot and place freed
//	classifier panics       → as next; next's response body is closed
//	fallback panics         → a rejection: nothing was taken, nothing counts
//	OnStateChange panics    → the transition has happened (once); a slot or
//	                          place taken by the call that caused it is freed,
//	                          and a response it carried is closed
//	KeyFunc panics          → before any breaker is touched
//
// And whatever panics, a request body that next never had is closed.
//
// (TestPanicInNextFreesTheProbeSlot in transport_test.go covers next in
// half-open.)

import (
	"context"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// panicValue is what the tests panic with.
const panicValue = "user code blew up"

// panicsNext returns a next RoundTripper that panics while *on is set and
// otherwise asks d.
func panicsNext(d *dep, on *bool) http.RoundTripper {
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		if *on {
			panic(panicValue)
		}
		return d.RoundTrip(r)
	})
}

func requirePanics(t *testing.T, tr http.RoundTripper) {
	t.Helper()
	require.PanicsWithValue(t, panicValue, func() { _, _ = tr.RoundTrip(mustReq(t, testURL)) })
}

func TestPanicInNextWhileClosedCountsNothing(t *testing.T) {
	for name, opts := range map[string][]Option{
		"bulkhead": {WithMinRequests(1), WithMaxConcurrent(1)},
		"plain":    {WithMinRequests(1)},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(200)
				on := true
				tr := New(panicsNext(d, &on), opts...)
				for range 10 {
					requirePanics(t, tr)
				}
				s := tr.Snapshot()[0]
				require.Equal(t, StateClosed, s.State)
				require.Zero(t, s.Requests, "a panicking call is no outcome")
				on = false
				resp, err := get(t, tr, testURL)
				require.NoError(t, err)
				require.Equal(t, 200, resp.StatusCode, "any bulkhead place was given back ten times")
				require.EqualValues(t, 1, tr.Snapshot()[0].Requests)
			})
		})
	}
}

// panicClassifier panics for 200 responses while *on is set, and
// otherwise defers to DefaultClassifier.
func panicClassifier(on *bool) Classifier {
	return func(req *http.Request, resp *http.Response, err error) Outcome {
		if *on && resp != nil && resp.StatusCode == 200 {
			panic(panicValue)
		}
		return DefaultClassifier(req, resp, err)
	}
}

func TestPanicInNextFreesTheProbeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d)
		time.Sleep(time.Second)
		panicky := true
		tr.next = rtFunc(func(r *http.Request) (*http.Response, error) {
			if panicky {
				panic("next blew up")
			}
			return d.RoundTrip(r)
		})
		require.PanicsWithValue(t, "next blew up", func() { _, _ = tr.RoundTrip(mustReq(t, testURL)) })
		panicky = false
		d.set(200, nil)
		before := d.calls.Load()
		_, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, before+1, d.calls.Load(), "the slot was freed: the next call is a probe")
		require.Equal(t, StateHalfOpen, tr.State(testKey))
	})
}

func TestPanicInClassifierFreesTheProbeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		on := true
		tr := tripped(t, d, WithClassifier(panicClassifier(&on)), WithProbesToClose(1))
		time.Sleep(time.Second)
		d.set(200, nil)
		requirePanics(t, tr)
		require.Equal(t, StateHalfOpen, tr.State(testKey), "the panicking probe decided nothing")
		on = false
		before := d.calls.Load()
		_, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, before+1, d.calls.Load(), "the slot was freed: the next call is a probe")
		require.Equal(t, StateClosed, tr.State(testKey))
	})
}

func TestPanicInClassifierFreesTheBulkheadPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		on := true
		tr := New(d, WithClassifier(panicClassifier(&on)), WithMaxConcurrent(2), WithMinRequests(1))
		for range 5 {
			requirePanics(t, tr)
		}
		on = false
		require.Zero(t, tr.Snapshot()[0].Requests)
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode, "no place leaked")
	})
}

// TestPanicInClassifierClosesTheResponseBody: next has answered, the
// classifier panics, and the caller never receives the response. Nobody
// but the Transport can close its body; with a real *http.Transport an
// unclosed body holds its connection (and the goroutines reading it)
// forever.
func TestPanicInClassifierClosesTheResponseBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := newBody("never read")
		tr := New(rtFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: body, Request: r}, nil
		}), WithClassifier(func(*http.Request, *http.Response, error) Outcome { panic(panicValue) }))
		requirePanics(t, tr)
		require.True(t, body.closed.Load(), "the response nobody will see must be closed")
	})
}

// panicObserver is an Observer that panics when told of a Call that
// when picks.
type panicObserver struct {
	nopObserver
	when func(Call) bool
}

func (o panicObserver) Call(_ context.Context, c Call) {
	if o.when(c) {
		panic(panicValue)
	}
}

// TestPanicInShadowPassClosesTheResponseBody: a shadow breaker lets
// through a call it would have refused, and with an observer the call's
// outcome is classified and observed after next answered. A panic in the
// classifier or the observer there leaves a response nobody will see:
// the Transport closes it, as on the enforcing path.
func TestPanicInShadowPassClosesTheResponseBody(t *testing.T) {
	for name, opts := range map[string][]Option{
		"classifier": {WithObserver(nopObserver{}), WithClassifier(func(_ *http.Request, resp *http.Response, _ error) Outcome {
			if resp != nil && resp.StatusCode == 200 {
				panic(panicValue)
			}
			return OutcomeFailure
		})},
		"observer": {WithObserver(panicObserver{when: func(c Call) bool { return c.Shadow }})},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(500)
				tr := tripped(t, d, append([]Option{WithMode(ModeShadow)}, opts...)...)
				body := newBody("never read")
				tr.next = rtFunc(func(r *http.Request) (*http.Response, error) {
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: body, Request: r}, nil
				})
				requirePanics(t, tr) // open: a shadow pass
				require.True(t, body.closed.Load(), "the response nobody will see must be closed")
			})
		})
	}
}

// TestPanicInObserverStillReportsTheTransition: an observer that panics
// when told of the call that tripped the breaker does not hold back the
// transition: the hook hears of it before the panic reaches the caller.
// It holds where the call is counted at the headers and at the body's
// end (WithBodyErrors).
func TestPanicInObserverStillReportsTheTransition(t *testing.T) {
	for name, bodyErrors := range map[string]bool{"headers": false, "body end": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var moved []string
				opts := []Option{WithMinRequests(1), WithObserver(panicObserver{when: func(c Call) bool { return c.Moved != nil }}),
					WithOnTransition(func(tr Transition) { moved = append(moved, tr.From.String()+"→"+tr.To.String()) })}
				if !bodyErrors {
					requirePanics(t, New(newDep(500), opts...))
				} else {
					tr := New(bodyDep(func() io.ReadCloser { return errBody{} }), append(opts, WithBodyErrors())...)
					resp, err := tr.RoundTrip(mustReq(t, testURL))
					require.NoError(t, err)
					require.PanicsWithValue(t, panicValue, func() { _, _ = io.ReadAll(resp.Body) })
				}
				require.Equal(t, []string{"closed→open"}, moved, "the transition is reported, panic or not")
			})
		})
	}
}

func TestPanicInFallbackLeavesTheBreakerAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		log := &transitionLog{}
		tr := tripped(t, d, onStateChange(log.hook), WithProbesToClose(1),
			WithFallback(func(*http.Request, error) (*http.Response, error) { panic(panicValue) }))
		for range 5 {
			requirePanics(t, tr) // rejected while open: the fallback panics
		}
		s := tr.Snapshot()[0]
		require.Equal(t, StateOpen, s.State)
		require.EqualValues(t, 1, s.Requests)
		require.EqualValues(t, 1, s.Failures)
		// The open period still ends on time, and the probe goes.
		time.Sleep(time.Second)
		d.set(200, nil)
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, StateClosed, tr.State(testKey))
		require.Equal(t, []string{
			testKey + ": closed→open", testKey + ": open→half-open", testKey + ": half-open→closed",
		}, log.list())
	})
	synctest.Test(t, func(t *testing.T) {
		// A bulkhead rejection whose fallback panics has given its place
		// back before the fallback ran.
		d := newDep(200)
		d.block()
		tr := New(d, WithMaxConcurrent(1),
			WithFallback(func(*http.Request, error) (*http.Response, error) { panic(panicValue) }))
		done := make(chan struct{})
		go func() {
			_, _ = get(t, tr, testURL)
			close(done)
		}()
		synctest.Wait()
		for range 5 {
			requirePanics(t, tr)
		}
		d.release()
		<-done
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
	})
}

// panicHook returns an OnStateChange hook that panics on transitions to
// the given state while *on is set, counting its calls.
func panicHook(to State, on *bool, calls *int) func(string, State, State) {
	return func(_ string, _, got State) {
		*calls++
		if *on && got == to {
			panic(panicValue)
		}
	}
}

func TestPanicInOnStateChangeStillTransitionsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		on, calls := true, 0
		tr := New(d, WithMinRequests(2), WithJitter(0), WithOpenTimeout(time.Second),
			onStateChange(panicHook(StateOpen, &on, &calls)))
		_, _ = get(t, tr, testURL)
		requirePanics(t, tr) // the second failure trips; the hook panics
		require.Equal(t, 1, calls)
		require.Equal(t, StateOpen, tr.State(testKey), "the transition happened before the hook ran")
		before := d.calls.Load()
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		require.Equal(t, before, d.calls.Load())
		require.Equal(t, 1, calls, "and it happened once")
	})
}

// TestPanicInOnStateChangeAtAdmissionFreesTheProbeSlot: the call that
// finds the open period over moves the breaker to half-open and takes a
// probe slot in the same step; the hook for that transition then panics
// before the call reaches next. The slot must be given back, or the
// breaker refuses everything until the probe bound (a minute by default)
// passes, and then counts the phantom probe as a failure and backs off.
func TestPanicInOnStateChangeAtAdmissionFreesTheProbeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		on, calls := true, 0
		tr := tripped(t, d, onStateChange(panicHook(StateHalfOpen, &on, &calls)))
		time.Sleep(time.Second)
		d.set(200, nil)
		before := d.calls.Load()
		requirePanics(t, tr)
		require.Equal(t, before, d.calls.Load(), "the panicking call never reached next")
		on = false
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.False(t, IsRejected(resp), "the probe slot was given back: this call is the probe")
		require.Equal(t, before+1, d.calls.Load())
	})
}

// TestPanicInOnStateChangeAtAdmissionFreesTheBulkheadPlace: as above,
// with a bulkhead: the place taken at admission must be given back, or
// every such panic shrinks the bulkhead for good.
func TestPanicInOnStateChangeAtAdmissionFreesTheBulkheadPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		on, calls := true, 0
		tr := tripped(t, d, WithMaxConcurrent(1), WithHalfOpenProbes(1),
			onStateChange(panicHook(StateHalfOpen, &on, &calls)))
		time.Sleep(time.Second)
		requirePanics(t, tr)
		on = false
		tr.Reset(testKey)
		d.set(200, nil)
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.False(t, IsRejected(resp), "the bulkhead place was given back")
		require.Equal(t, 200, resp.StatusCode)
	})
}

// TestPanicInOnStateChangeAfterTheCallClosesTheResponseBody: the call's
// outcome trips the breaker and the hook panics; the response next
// returned never reaches the caller and must be closed.
func TestPanicInOnStateChangeAfterTheCallClosesTheResponseBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := newBody("never read")
		on, calls := true, 0
		tr := New(rtFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 500, Header: http.Header{}, Body: body, Request: r}, nil
		}), WithMinRequests(1), onStateChange(panicHook(StateOpen, &on, &calls)))
		requirePanics(t, tr)
		require.Equal(t, StateOpen, tr.State(testKey))
		require.True(t, body.closed.Load(), "the response nobody will see must be closed")
	})
}

func TestPanicInKeyFuncTouchesNoBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		on := true
		tr := New(d, WithMaxConcurrent(1), WithKeyFunc(func(r *http.Request) string {
			if on {
				panic(panicValue)
			}
			return HostKey(r)
		}))
		requirePanics(t, tr)
		require.Empty(t, tr.Snapshot())
		require.Zero(t, d.calls.Load())
		on = false
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
	})
}

// TestPanicBeforeNextClosesTheRequestBody: a panic in a KeyFunc, or in
// the hook of a transition made at admission (before a rejection or
// before the call goes to next), comes before next has the request: the
// Transport still owes its body a Close.
func TestPanicBeforeNextClosesTheRequestBody(t *testing.T) {
	send := func(t *testing.T, tr *Transport) *trackedBody {
		t.Helper()
		body := newBody("payload")
		req, err := http.NewRequest(http.MethodPost, testURL, body)
		require.NoError(t, err)
		require.PanicsWithValue(t, panicValue, func() { _, _ = tr.RoundTrip(req) })
		return body
	}
	t.Run("KeyFunc", func(t *testing.T) {
		tr := New(newDep(200), WithKeyFunc(func(*http.Request) string { panic(panicValue) }))
		require.True(t, send(t, tr).closed.Load())
	})
	t.Run("hook, then the call goes to next", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			d := newDep(500)
			on, calls := true, 0
			tr := tripped(t, d, onStateChange(panicHook(StateHalfOpen, &on, &calls)))
			time.Sleep(time.Second)
			before := d.calls.Load()
			require.True(t, send(t, tr).closed.Load())
			require.Equal(t, before, d.calls.Load(), "next never had it")
		})
	})
	t.Run("hook, then a rejection", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A probe outlives the probe bound: the next call reopens
			// the breaker, and is refused, in one step.
			d := newDep(500)
			on, calls := false, 0
			tr := tripped(t, d, WithMaxOpenTimeout(10*time.Second), onStateChange(panicHook(StateOpen, &on, &calls)))
			time.Sleep(time.Second)
			d.set(200, nil)
			d.block()
			go func() { _, _ = get(t, tr, testURL) }() // the probe, held
			synctest.Wait()
			time.Sleep(10 * time.Second)
			on = true
			before := d.calls.Load()
			require.True(t, send(t, tr).closed.Load())
			require.Equal(t, before, d.calls.Load(), "refused")
			require.Equal(t, StateOpen, tr.State(testKey))
			d.release()
			synctest.Wait()
		})
	})
}

// TestPanicInOnTransitionStillTellsTheObservers: a transition hook that
// panics does not keep the transition from the observers, nor a
// panicking observer from the observers after it; the panic goes on to
// the caller.
func TestPanicInOnTransitionStillTellsTheObservers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, last := &recorder{}, &recorder{}
		tr := New(newDep(http.StatusInternalServerError), WithMinRequests(1), WithJitter(0),
			WithObserver(first), WithObserver(panickingObserver{}), WithObserver(last),
			WithOnTransition(func(Transition) { panic(panicValue) }))
		requirePanics(t, tr) // trips; the hook panics
		require.Equal(t, StateOpen, tr.State(testKey))
		require.Len(t, first.transitions(), 1, "told although the hook panicked")
		require.Len(t, last.transitions(), 1, "told although the hook and an observer before it panicked")
	})
}

// panickingObserver panics at every transition.
type panickingObserver struct{}

func (panickingObserver) Transition(Transition)      { panic(panicValue) }
func (panickingObserver) Call(context.Context, Call) {}

// TestPanicInAProbePastItsBoundReportsTheReopening: a probe that outlives
// the probe bound and whose next then panics reopens the breaker
// (probe_timeout) as the panic unwinds, and the hook is told then, not
// when some later call delivers it.
func TestPanicInAProbePastItsBoundReportsTheReopening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &transitionLog{}
		boom := false
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			if boom {
				time.Sleep(1500 * time.Millisecond) // past the probe bound (1 s), not past the reopened period
				panic(panicValue)
			}
			return response(r, http.StatusInternalServerError, nil), nil
		})
		tr := New(next, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
			WithMaxOpenTimeout(time.Second), WithOnTransition(log.record))
		_, _ = get(t, tr, testURL) // trips
		time.Sleep(time.Second)
		boom = true
		requirePanics(t, tr) // the probe
		require.Equal(t, []string{
			testKey + ": closed→open", testKey + ": open→half-open", testKey + ": half-open→open",
		}, log.list())
	})
}

// TestPanicInAHookDoesNotHoldBackTheNextTransition: a Trip of a breaker
// whose open period is over makes two transitions in one step
// (open→half-open, then half-open→open for the Trip); a hook that panics
// on the first does not hold the Trip's back from the observers until
// some later transition of the key: both are told as the panic goes on.
func TestPanicInAHookDoesNotHoldBackTheNextTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		d := newDep(500)
		tr := tripped(t, d, WithObserver(rec), WithOnTransition(func(x Transition) {
			if x.Reason == ReasonOpenElapsed {
				panic(panicValue)
			}
		}))
		time.Sleep(time.Second) // the open period is over
		func() {
			defer func() { require.Equal(t, panicValue, recover()) }()
			tr.Trip(testKey, time.Hour)
		}()
		require.Equal(t, StateOpen, tr.State(testKey), "tripped for an hour")
		_ = tr.Snapshot()
		var got []Reason
		for _, x := range rec.transitions() {
			got = append(got, x.Reason)
		}
		require.Equal(t, []Reason{ReasonFailureRate, ReasonOpenElapsed, ReasonTrip}, got,
			"the observer is told of the Trip")
	})
}
