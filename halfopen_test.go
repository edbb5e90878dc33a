package httpbreaker

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Half-open, seen over HTTP: how many probes go, what a failed,
// cancelled or hung probe does, and late outcomes that decide nothing.

func TestHalfOpenBoundsProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d, WithHalfOpenProbes(2))
		time.Sleep(time.Second)
		d.set(200, nil)
		d.block()
		before := d.calls.Load()
		var wg sync.WaitGroup
		results := make(chan bool, 10)
		for range 10 {
			wg.Go(func() {
				resp, err := get(t, tr, testURL)
				results <- err == nil && IsRejected(resp)
			})
		}
		synctest.Wait()
		require.EqualValues(t, 2, d.calls.Load()-before, "only two probes reach the dependency")
		d.release()
		wg.Wait()
		close(results)
		rejected := 0
		for r := range results {
			if r {
				rejected++
			}
		}
		require.Equal(t, 8, rejected)
		require.Equal(t, StateHalfOpen, tr.State(testKey), "two of three successes")
	})
}

func TestCancelledProbeFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d)
		time.Sleep(time.Second)
		d.hangUntilDone()
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan error)
		go func() {
			_, err := getCtx(t, ctx, tr, testURL)
			done <- err
		}()
		synctest.Wait()
		// The slot is taken: others are rejected.
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		cancel(context.Canceled)
		require.Error(t, <-done)
		// Cancelled: counted for nothing, slot free, still half-open.
		require.Equal(t, StateHalfOpen, tr.State(testKey))
		d.set(200, nil)
		run(t, tr, d, steps(
			step{code: 200, sent: true, want: StateHalfOpen},
			step{code: 200, sent: true, want: StateHalfOpen},
			step{code: 200, sent: true, want: StateClosed},
		))
	})
}

func TestHungProbeCannotHoldItsSlotForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		log := &transitionLog{}
		tr := tripped(t, d, WithMaxOpenTimeout(30*time.Second), onStateChange(log.hook))
		time.Sleep(time.Second)
		d.set(200, nil)
		d.block() // the probe hangs, ignoring nothing but release
		done := make(chan struct{})
		go func() {
			_, _ = get(t, tr, testURL)
			close(done)
		}()
		synctest.Wait()
		time.Sleep(29 * time.Second)
		require.Equal(t, StateHalfOpen, tr.State(testKey))
		time.Sleep(time.Second)
		// Past the bound the probe counts as failed: open again, backed off.
		require.Equal(t, StateOpen, tr.State(testKey))
		s := tr.Snapshot()[0]
		require.Equal(t, 2*time.Second, time.Until(s.RetryAt))
		d.release()
		<-done
		// Its late success decides nothing.
		require.Equal(t, StateOpen, tr.State(testKey))
		require.Equal(t, []string{
			testKey + ": closed→open", testKey + ": open→half-open", testKey + ": half-open→open",
		}, log.list())
	})
}

// TestHungProbeReopensFromTheBound: a probe that hangs past the probe
// bound reopens the breaker from the moment the bound passed, not from
// whenever the next request comes. A dependency called rarely is probed
// on its first call after a long stall, not refused for an open period
// that ended long before; and Since says when each state began.
func TestHungProbeReopensFromTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d, WithMaxOpenTimeout(30*time.Second))
		start := time.Now()
		time.Sleep(time.Second)
		d.set(200, nil)
		d.block() // the probe hangs
		done := make(chan struct{})
		go func() {
			_, _ = get(t, tr, testURL)
			close(done)
		}()
		synctest.Wait()
		time.Sleep(time.Hour) // nobody calls
		s := tr.Snapshot()[0]
		require.Equal(t, StateHalfOpen, s.State, "reopened at the bound for 2s, long over")
		require.Equal(t, start.Add(33*time.Second), s.Since, "due to probe since the reopened period ended")
		before := d.calls.Load()
		d.mu.Lock()
		gate := d.gate
		d.gate = nil // the next call answers at once
		d.mu.Unlock()
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.False(t, IsRejected(resp), "the first call after the stall is a probe")
		require.Equal(t, before+1, d.calls.Load())
		close(gate)
		<-done
	})
}

func TestStaleOutcomesAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithMinRequests(2), WithJitter(0), WithOpenTimeout(time.Second), WithProbesToClose(1))
		// A call admitted while closed hangs.
		d.block()
		d.set(500, nil)
		done := make(chan struct{})
		go func() {
			_, _ = get(t, tr, testURL)
			close(done)
		}()
		synctest.Wait()
		// Meanwhile the breaker trips (the gate is per call: open it for
		// these two) and recovers.
		gate := d.gate
		d.mu.Lock()
		d.gate = nil
		d.mu.Unlock()
		run(t, tr, d, steps(
			step{code: 500, sent: true, want: StateClosed},
			step{code: 500, sent: true, want: StateOpen},
			step{after: time.Second, code: 200, sent: true, want: StateClosed},
		))
		close(gate)
		<-done
		// The late failure, admitted two generations ago, is dropped.
		s := tr.Snapshot()[0]
		require.Zero(t, s.Failures)
		require.Zero(t, s.Requests)
	})
}

// A slow-call threshold must not stop a half-open breaker from closing:
// the probe's slot is freed by its admission time, not its call time.
func TestSlowCallThresholdLetsHalfOpenClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d, WithSlowCallThreshold(time.Second))
		run(t, tr, d, steps(
			step{after: time.Second, code: 200, sent: true, want: StateHalfOpen},
			step{code: 200, sent: true, want: StateHalfOpen},
			step{code: 200, sent: true, want: StateClosed},
		))
	})
}

// TestLateProbeFailsAtTheBound: a probe that outlives the probe bound
// counts as failed when the bound passed, even when it returns before
// anything asks the breaker (no admission, State or Snapshot in
// between): its late success does not close the breaker.
func TestLateProbeFailsAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		log := &transitionLog{}
		tr := New(d, WithOpenTimeout(time.Second), WithMaxOpenTimeout(2*time.Second), WithJitter(0),
			WithProbesToClose(1), onStateChange(log.hook))
		tr.Trip(testKey, time.Second)
		time.Sleep(time.Second)
		d.mu.Lock()
		d.delay = 5 * time.Second // the probe takes 5s; the bound is 2s
		d.mu.Unlock()
		_, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, []string{
			testKey + ": closed→open", testKey + ": open→half-open",
			testKey + ": half-open→open", // at the bound, 2s after the probe went
		}, log.list()[:3], "the late probe must not close the breaker")
	})
}

// TestHalfOpenProbeThrottledReopensForRetryAfter: a probe answered 429
// with Retry-After reopens the breaker, for reason throttled, for at
// least that Retry-After; the refusals say so, no further call reaches
// the dependency meanwhile, and the throttled cycle counts in the
// backoff of the next open period.
func TestHalfOpenProbeThrottledReopensForRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec transitionLog
		d := newDep(http.StatusInternalServerError)
		tr := New(d, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
			WithMaxOpenTimeout(time.Minute), WithProbesToClose(1), WithOnTransition(rec.record))
		_, _ = get(t, tr, testURL)
		require.Equal(t, StateOpen, tr.State(testKey))
		time.Sleep(time.Second)

		d.set(http.StatusTooManyRequests, nil)
		d.setHeader(http.Header{"Retry-After": {"20"}})
		requireAnswers(t, tr, http.StatusTooManyRequests) // the probe
		require.Equal(t, StateOpen, tr.State(testKey), "a throttled probe reopens")
		require.Equal(t, 20*time.Second, openFor(t, tr), "for its Retry-After (the 2s backoff is shorter)")
		last := rec.last(t)
		require.Equal(t, StateHalfOpen, last.From)
		require.Equal(t, StateOpen, last.To)
		require.Equal(t, ReasonThrottled, last.Reason)
		require.Equal(t, 20*time.Second, last.OpenFor)

		reached := d.calls.Load()
		requireRefused(t, tr, "20")
		time.Sleep(19 * time.Second)
		requireRefused(t, tr, "1")
		require.Equal(t, reached, d.calls.Load(), "no retry became a probe")

		time.Sleep(time.Second)
		require.Equal(t, StateHalfOpen, tr.State(testKey))
		d.setHeader(nil)
		d.set(http.StatusInternalServerError, nil)
		requireAnswers(t, tr, http.StatusInternalServerError) // the next probe fails
		require.Equal(t, 4*time.Second, openFor(t, tr), "1s doubled for each failed cycle, the throttled one included")
		require.Equal(t, ReasonProbeFailed, rec.last(t).Reason)
	})
}

// TestHalfOpenProbeThrottledOpenPeriodBounds: a throttled probe without
// Retry-After reopens for the backoff; one whose Retry-After is past
// the maximum open timeout, for the maximum.
func TestHalfOpenProbeThrottledOpenPeriodBounds(t *testing.T) {
	for _, tc := range []struct {
		retryAfter string
		want       time.Duration
	}{
		{"", 2 * time.Second},
		{"3600", time.Minute},
	} {
		t.Run("Retry-After "+strconv.Quote(tc.retryAfter), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rec transitionLog
				d := newDep(http.StatusInternalServerError)
				tr := New(d, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
					WithMaxOpenTimeout(time.Minute), WithOnTransition(rec.record))
				_, _ = get(t, tr, testURL)
				time.Sleep(time.Second)
				d.set(http.StatusTooManyRequests, nil)
				if tc.retryAfter != "" {
					d.setHeader(http.Header{"Retry-After": {tc.retryAfter}})
				}
				requireAnswers(t, tr, http.StatusTooManyRequests)
				require.Equal(t, tc.want, openFor(t, tr))
				require.Equal(t, ReasonThrottled, rec.last(t).Reason)
				requireRefused(t, tr, strconv.Itoa(int(tc.want/time.Second)))
			})
		})
	}
}
