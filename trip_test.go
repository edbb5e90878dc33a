package httpbreaker

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// When a breaker opens and for how long, seen over HTTP: the failure
// rate and minimum volume, what counts as a failure, sustained 429s,
// open periods (backoff, Retry-After, jitter), Trip and Reset, and
// transitions that happen once.

func TestTripsOnFailureRateAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithMinRequests(4), WithFailureRate(0.5), WithJitter(0), WithOpenTimeout(5*time.Second))
		run(t, tr, d, steps(
			ok200, ok200,
			fail500, // 1 of 3: below the minimum volume
			step{code: 500, sent: true, want: StateOpen}, // 2 of 4 = 0.5
			step{code: 200, sent: false, want: StateOpen},
			step{after: 4 * time.Second, code: 200, sent: false, want: StateOpen},
			// The open period ends: three probes in a row close it.
			step{after: time.Second, code: 200, sent: true, want: StateHalfOpen},
			step{code: 200, sent: true, want: StateHalfOpen},
			step{code: 200, sent: true, want: StateClosed},
			// Counts were cleared on closing: one failure does not trip.
			fail500,
		))
	})
}

func TestTripsAtTheDefaultMinimumAndRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d) // defaults: 20 requests, rate 0.5
		run(t, tr, d, steps(
			rep(19, fail500), // 19 failures: still below 20 requests
			step{code: 500, sent: true, want: StateOpen},
		))
	})
	// A higher minimum and rate: TestBreakerNeedsTheMinimumVolumeAndRate.
}

// TestTripsAtExactlyTheRate: a window exactly at the failure rate trips,
// also where rate·requests rounds past the failures in float64 (0.14·50
// is 7.000000000000001).
func TestTripsAtExactlyTheRate(t *testing.T) {
	for _, tc := range []struct {
		rate               float64
		requests, failures int
	}{{0.14, 50, 7}, {0.07, 100, 7}, {0.28, 25, 7}, {0.56, 25, 14}, {0.55, 100, 55}, {0.5, 20, 10}} {
		t.Run(fmt.Sprint(tc.failures, "/", tc.requests), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(200)
				tr := New(d, WithMinRequests(tc.requests), WithFailureRate(tc.rate))
				run(t, tr, d, steps(
					rep(tc.requests-tc.failures, ok200),
					rep(tc.failures-1, fail500),
					step{code: 500, sent: true, want: StateOpen},
				))
			})
		})
	}
}

func TestFourxxAndIgnoredNeverTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithMinRequests(2))
		rows := []step{}
		for _, code := range []int{400, 401, 403, 404, 409, 422, 501, 505} {
			rows = append(rows, rep(3, step{code: code, sent: true, want: StateClosed})...)
		}
		run(t, tr, d, rows)
		s := tr.Snapshot()
		require.EqualValues(t, 18, s[0].Requests, "501 and 505 are ignored, 4xx are successes")
		require.Zero(t, s[0].Failures)
	})
}

func TestSlowCallIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.delay = 200 * time.Millisecond
		tr := New(d, WithMinRequests(3), WithSlowCallThreshold(100*time.Millisecond))
		run(t, tr, d, steps(
			ok200, ok200,
			step{code: 200, sent: true, want: StateOpen},
		))
	})
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.delay = 50 * time.Millisecond
		tr := New(d, WithMinRequests(3), WithSlowCallThreshold(100*time.Millisecond))
		run(t, tr, d, rep(10, ok200))
	})
}

func TestSustained429BurstNeverTrips(t *testing.T) {
	throttled := step{code: 429, sent: true, want: StateClosed}
	synctest.Test(t, func(t *testing.T) {
		// A burst shorter than the sustain period never trips.
		d := newDep(200)
		tr := New(d, WithMinRequests(4), WithThrottleSustain(10*time.Second))
		run(t, tr, d, steps(
			rep(10, throttled),
			rep(9, with(throttled, func(s *step) { s.after = time.Second })), // 9s of 429s
			rep(20, with(ok200, func(s *step) { s.after = 100 * time.Millisecond })),
		))
		s := tr.Snapshot()[0]
		require.NotZero(t, s.Throttled, "429s are in the window")
	})
	// 429s that make up the failure rate for the whole sustain period, and
	// 429s that are a minority: TestBreakerTripsOnSustained429sOnly.
}

// TestSustained429sMustHoldWithoutInterruption: successes that dilute
// 429s below the rate end their streak. Two bursts apart, the second
// finding the rate met again only because older successes left the
// window, have not been sustained for ThrottleSustain and do not trip.
func TestSustained429sMustHoldWithoutInterruption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusOK)
		tr := New(d, WithWindow(10*time.Second), WithMinRequests(20), WithFailureRate(0.5),
			WithThrottleSustain(5*time.Second), WithJitter(0))
		send := func(code, n int) {
			t.Helper()
			d.set(code, nil)
			for range n {
				resp, err := get(t, tr, testURL)
				require.NoError(t, err)
				resp.Body.Close()
			}
		}
		send(http.StatusOK, 100) // at 0 s
		time.Sleep(5 * time.Second)
		send(http.StatusTooManyRequests, 100) // at 5 s: 100 of 200, the streak starts
		time.Sleep(time.Second)
		send(http.StatusOK, 10) // at 6 s: 100 of 210, no longer the rate
		s := tr.Snapshot()[0]
		require.Less(t, 2*s.Throttled, s.Requests)
		time.Sleep(4*time.Second + 500*time.Millisecond)
		send(http.StatusTooManyRequests, 1) // at 10.5 s: 101 of 111, the first successes gone
		require.Equal(t, StateClosed, tr.State(testKey), "held for 0.5 s, not the 5 s sustain")

		for range 4 {
			time.Sleep(time.Second)
			send(http.StatusTooManyRequests, 10) // a steady stream from 11.5 s on
			require.Equal(t, StateClosed, tr.State(testKey))
		}
		time.Sleep(time.Second)
		send(http.StatusTooManyRequests, 1) // at 15.5 s: held since 10.5 s
		require.Equal(t, StateOpen, tr.State(testKey), "held without interruption for 5 s")
		require.Equal(t, ReasonThrottled, tr.Snapshot()[0].Reason)
	})
}

func TestOpenDurationBackoffAndCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
			WithMaxOpenTimeout(5*time.Second), WithProbesToClose(1))
		openFor := func() time.Duration {
			s := tr.Snapshot()[0]
			require.Equal(t, StateOpen, s.State)
			return time.Until(s.RetryAt)
		}
		_, _ = get(t, tr, testURL)
		require.Equal(t, time.Second, openFor())
		// Each failed probe cycle doubles it, up to the cap.
		for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
			time.Sleep(openFor())
			before := d.calls.Load()
			_, _ = get(t, tr, testURL) // the probe fails
			require.Equal(t, before+1, d.calls.Load())
			require.Equal(t, want, openFor())
		}
		// A successful probe closes and resets the backoff.
		time.Sleep(openFor())
		d.set(200, nil)
		_, _ = get(t, tr, testURL)
		require.Equal(t, StateClosed, tr.State(testKey))
		d.set(500, nil)
		_, _ = get(t, tr, testURL)
		require.Equal(t, time.Second, openFor())
	})
}

func TestOpenDurationHonoursRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"30", 30 * time.Second},  // raised to upstream's Retry-After
		{"1", 5 * time.Second},    // never lowered below the base
		{"600", 60 * time.Second}, // capped at MaxOpenTimeout
		{"-5", 5 * time.Second},   // garbage is ignored
		{"soon", 5 * time.Second}, // garbage is ignored
		{"99999999999999999999", 60 * time.Second},
	} {
		t.Run(tc.header, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(503)
				d.setHeader(http.Header{"Retry-After": {tc.header}})
				tr := New(d, WithMinRequests(2), WithJitter(0))
				_, _ = get(t, tr, testURL)
				_, _ = get(t, tr, testURL)
				s := tr.Snapshot()[0]
				require.Equal(t, StateOpen, s.State)
				require.Equal(t, tc.want, time.Until(s.RetryAt))
			})
		})
	}
}

// TestOpenDurationForgetsAnOldRetryAfter: a Retry-After is honoured only
// from responses in the window that trips. One from a burst of 429s an
// hour earlier, which never tripped, does not stretch a trip on plain
// 500s; one in the window does.
func TestOpenDurationForgetsAnOldRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause time.Duration
		want  time.Duration
	}{
		{"an hour before", time.Hour, 5 * time.Second},
		{"in the window", time.Second, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(http.StatusTooManyRequests)
				d.setHeader(http.Header{"Retry-After": {"60"}})
				tr := New(d, WithMinRequests(5), WithJitter(0))
				for range 5 {
					_, _ = get(t, tr, testURL) // a burst: 429s never trip at once
				}
				require.Equal(t, StateClosed, tr.State(testKey))
				d.setHeader(nil)
				time.Sleep(tc.pause)
				d.set(http.StatusInternalServerError, nil)
				for range 10 {
					_, _ = get(t, tr, testURL)
				}
				s := tr.Snapshot()[0]
				require.Equal(t, StateOpen, s.State)
				require.Equal(t, tc.want, time.Until(s.RetryAt))
			})
		})
	}
}

// TestOpenDurationHonoursTheLongestRetryAfterInTheWindow: the open
// period is raised to the longest Retry-After of the responses in the
// window that trips. A longer one that has since left the window does not
// count, and does not hide the shorter ones still in it.
func TestOpenDurationHonoursTheLongestRetryAfterInTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusServiceUnavailable)
		tr := New(d, WithWindow(10*time.Second), WithMinRequests(20), WithJitter(0),
			WithOpenTimeout(5*time.Second), WithMaxOpenTimeout(time.Minute))
		d.setHeader(http.Header{"Retry-After": {"30"}})
		_, _ = get(t, tr, testURL) // at 0 s; out of the window from 10 s
		time.Sleep(5 * time.Second)
		d.setHeader(http.Header{"Retry-After": {"20"}})
		for range 17 {
			_, _ = get(t, tr, testURL)
		}
		d.setHeader(http.Header{"Retry-After": {"15"}})
		_, _ = get(t, tr, testURL)
		require.Equal(t, StateClosed, tr.State(testKey))
		time.Sleep(5*time.Second + 500*time.Millisecond)
		d.setHeader(nil)
		for range 2 {
			_, _ = get(t, tr, testURL) // 20 failures in the window: it trips
		}
		s := tr.Snapshot()[0]
		require.Equal(t, StateOpen, s.State)
		require.Equal(t, 20*time.Second, time.Until(s.RetryAt), "the longest Retry-After in the window")
	})
}

func TestJitterSpreadsOpenPeriods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMinRequests(1), WithOpenTimeout(10*time.Second), WithJitter(0.2))
		seen := map[time.Duration]bool{}
		for i := range 50 {
			_, _ = get(t, tr, "http://h"+itoaTest(i)+".test/")
		}
		for _, s := range tr.Snapshot() {
			d := time.Until(s.RetryAt)
			require.GreaterOrEqual(t, d, 10*time.Second)
			require.LessOrEqual(t, d, 12*time.Second)
			seen[d] = true
		}
		require.Greater(t, len(seen), 10, "open periods are spread out")
	})
}

func TestJitterAppliesAfterTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(503)
		d.setHeader(http.Header{"Retry-After": {"3600"}})
		tr := New(d, WithMinRequests(1), WithMaxOpenTimeout(60*time.Second), WithJitter(0.5))
		var longest time.Duration
		for i := range 40 {
			_, _ = get(t, tr, "http://h"+itoaTest(i)+".test/")
		}
		for _, s := range tr.Snapshot() {
			dd := time.Until(s.RetryAt)
			require.GreaterOrEqual(t, dd, 60*time.Second)
			require.LessOrEqual(t, dd, 90*time.Second)
			longest = max(longest, dd)
		}
		require.Greater(t, longest, 60*time.Second, "breakers held at the cap still spread out")
	})
}

func TestTransitionsHappenExactlyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		log := &transitionLog{}
		tr := New(d, WithMinRequests(10), onStateChange(log.hook))
		d.block()
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() { _, _ = get(t, tr, testURL) })
		}
		synctest.Wait()
		d.release() // 200 failures cross the threshold together
		wg.Wait()
		require.Equal(t, []string{testKey + ": closed→open"}, log.list())
	})
}

// TestTransitionsUnderRealContention runs without a bubble, on real
// goroutines, for the race detector.
func TestTransitionsUnderRealContention(t *testing.T) {
	d := newDep(500)
	var mu sync.Mutex
	counts := map[[2]State]int{}
	tr := New(d, WithMinRequests(5), WithOpenTimeout(time.Hour), WithMaxOpenTimeout(time.Hour),
		onStateChange(func(_ string, from, to State) {
			mu.Lock()
			counts[[2]State{from, to}]++
			mu.Unlock()
		}))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				_, _ = get(t, tr, testURL)
			}
		})
	}
	wg.Wait()
	require.Equal(t, map[[2]State]int{{StateClosed, StateOpen}: 1}, counts)
	require.Less(t, d.calls.Load(), int64(100), "once open, the dependency is left alone")
}

// TestTripForever: Trip with the longest duration there is, the usual way
// to say "until I Reset it", must not overflow into a time in the past.
func TestTripForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d)
		time.Sleep(time.Second) // the Transport's clock is past zero
		tr.Trip(testKey, time.Duration(math.MaxInt64))
		require.Equal(t, StateOpen, tr.State(testKey))
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		require.Zero(t, d.calls.Load())
		require.Equal(t, "3600", resp.Header.Get("Retry-After"), "capped, not overflowed")
		time.Sleep(100 * 365 * 24 * time.Hour)
		require.Equal(t, StateOpen, tr.State(testKey), "a century later")
		resp, err = get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, "3600", resp.Header.Get("Retry-After"))
	})
}

// TestTripForeverAdvertisesAnHour: an "until Reset" trip says
// Retry-After: 3600, also during the Transport's first second, where the
// round-up used to overflow into 1.
func TestTripForeverAdvertisesAnHour(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newDep(200))
		tr.Trip(testKey, time.Duration(math.MaxInt64))
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, "3600", resp.Header.Get("Retry-After"))
		tr.Trip(testKey, 2*time.Hour)
		resp, err = get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, "3600", resp.Header.Get("Retry-After"), "at most an hour")
		tr.Trip(testKey, 90*time.Second)
		resp, err = get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, "90", resp.Header.Get("Retry-After"))
	})
}

// TestTripForeverSaysUntilReset: the error of a refusal by an "until
// Reset" trip says so, not a wait of 292 years.
func TestTripForeverSaysUntilReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newDep(200), WithRejectAsError())
		tr.Trip(testKey, time.Duration(math.MaxInt64))
		_, err := get(t, tr, testURL)
		require.EqualError(t, err, "httpbreaker: circuit open for "+testKey+" (until reset)")
		tr.Trip(testKey, 90*time.Second)
		_, err = get(t, tr, testURL)
		require.EqualError(t, err, "httpbreaker: circuit open for "+testKey+" (retry after 1m30s)")
	})
}

// TestResetStartsTheGenerationBeforeClearing: Reset must start a new
// generation before it clears the window, or a call admitted before it,
// which passed its generation check while the clear ran, adds its
// outcome to the cleared window. The test holds the window's lock, which
// the clear needs, and watches the generation move while Reset waits.
func TestResetStartsTheGenerationBeforeClearing(t *testing.T) {
	tr := New(newDep(200))
	_, _ = get(t, tr, testURL)
	b := &tr.breakers.get(testKey).b
	gen := genOf(b.word.Load())
	b.win.mu.Lock()
	done := make(chan struct{})
	go func() { defer close(done); tr.Reset(testKey) }()
	deadline := time.Now().Add(10 * time.Second)
	for genOf(b.word.Load()) == gen && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	moved := genOf(b.word.Load()) != gen
	b.win.mu.Unlock()
	<-done
	require.True(t, moved, "the generation moved while the clear waited")
}

func TestTripOpensForExactlyItsDurationUntilReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		log := &transitionLog{}
		tr := New(d, onStateChange(log.hook), WithJitter(0.5), WithMaxOpenTimeout(10*time.Second))
		require.Equal(t, StateClosed, tr.State("never.test"), "unknown key")
		tr.Trip(testKey, time.Hour) // exactly d: no jitter, no cap
		require.Equal(t, StateOpen, tr.State(testKey))
		require.Equal(t, time.Hour, time.Until(tr.Snapshot()[0].RetryAt))
		resp, _ := get(t, tr, testURL)
		require.True(t, IsRejected(resp))
		require.Zero(t, d.calls.Load())
		tr.Reset(testKey)
		require.Equal(t, StateClosed, tr.State(testKey))
		_, _ = get(t, tr, testURL)
		require.EqualValues(t, 1, d.calls.Load())
		tr.Trip(testKey, 0)      // no-op
		tr.Reset("unknown.test") // no-op
		require.Equal(t, StateClosed, tr.State(testKey))
		require.Equal(t, []string{testKey + ": closed→open", testKey + ": open→closed"}, log.list())
	})
}

// TestTripOnAnOffKeyMakesNoBreaker: Trip on a key whose mode is off
// says so in the log and makes no breaker for it, so it takes no place
// under the cap; its requests still go straight to next.
func TestTripOnAnOffKeyMakesNoBreaker(t *testing.T) {
	var buf bytes.Buffer
	d := newDep(200)
	tr := New(d, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), WithPolicy(testKey, WithMode(ModeOff)))
	tr.Trip(testKey, time.Hour)
	require.Contains(t, buf.String(), "Trip: the key's mode is off: no breaker")
	require.Zero(t, tr.breakers.live, "no circuit made for the off key")
	resp, err := get(t, tr, testURL)
	require.NoError(t, err)
	require.False(t, IsRejected(resp), "no breaker: straight to next")
}

// TestTripOfAnOpenBreakerKeepsItsSince: a Trip of an open breaker is no
// transition: Status.Since stays when the breaker entered open, its
// Reason becomes trip, and the open time counts each instant once.
func TestTripOfAnOpenBreakerKeepsItsSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newDep(http.StatusOK), WithJitter(0))
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		resp.Body.Close()
		tr.Trip(testKey, time.Minute)
		first := tr.Snapshot()[0]
		require.Equal(t, StateOpen, first.State)

		time.Sleep(10 * time.Second)
		tr.Trip(testKey, time.Minute) // open until 70 s from the first Trip
		again := tr.Snapshot()[0]
		require.Equal(t, StateOpen, again.State)
		require.Equal(t, ReasonTrip, again.Reason)
		require.Equal(t, first.Since, again.Since, "Since is when it entered open")
		require.Equal(t, first.Since.Add(70*time.Second), again.RetryAt)

		time.Sleep(2 * time.Minute)
		st, _ := tr.breakers.get(testKey).b.stats(tr.now(), false)
		require.Equal(t, 70*time.Second, st.open, "open from the first Trip to the end of the second")
	})
}

// TestResetOfAClosedBreakerKeepsItsSinceAndReason: a Reset of a closed
// breaker clears its counts but is no transition: Since stays when it
// was made, and its Reason stays zero (the status page leaves it out).
func TestResetOfAClosedBreakerKeepsItsSinceAndReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &transitionLog{}
		tr := New(newDep(http.StatusInternalServerError), WithOnTransition(rec.record))
		_, _ = get(t, tr, testURL)
		made := tr.Snapshot()[0]
		require.Zero(t, made.Reason)
		require.EqualValues(t, 1, made.Failures)

		time.Sleep(10 * time.Second)
		tr.Reset(testKey)
		require.Empty(t, rec.list(), "no transition")
		after := tr.Snapshot()[0]
		require.Equal(t, StateClosed, after.State)
		require.Zero(t, after.Reason)
		require.Equal(t, made.Since, after.Since)
		require.Zero(t, after.Requests, "the counts are cleared")
	})
}

// TestResetClosesTheBreakerMadeAfterTheOneItFoundWasDropped: a Reset
// whose breaker an Update drops between finding it and resetting it
// closes the key's next one, made meanwhile (here by a Trip), and tells
// the fleet of it once, with that breaker's transition.
func TestResetClosesTheBreakerMadeAfterTheOneItFoundWasDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		var log transitionLog
		tr := New(newDep(http.StatusOK), WithStore(s), WithOnTransition(log.record))
		_, _ = get(t, tr, testURL)
		found := tr.breakers.get(testKey)
		var before int // the Store's hints before the Reset's
		tr.beforeReset = func(c *circuit) {
			tr.beforeReset = nil
			require.Same(t, found, c)
			require.NoError(t, tr.Update(WithPolicy(testKey, WithMode(ModeOff)))) // drops it
			require.NoError(t, tr.Update())
			tr.Trip(testKey, time.Hour) // the key's next breaker
			require.NotSame(t, found, tr.breakers.get(testKey))
			require.Equal(t, StateOpen, tr.State(testKey))
			before = len(s.hints())
		}
		tr.Reset(testKey)
		require.Nil(t, tr.beforeReset, "Reset found the breaker the Update dropped")
		require.Equal(t, StateClosed, tr.State(testKey), "the key's next breaker is reset")
		require.Equal(t, []string{testKey + ": closed→open", testKey + ": open→closed"}, log.list())
		require.Equal(t, ReasonReset, log.got[1].Reason)
		require.Equal(t, []Hint{{Key: testKey, State: StateClosed, Operator: true}}, s.hints()[before:], "the fleet is told once")
	})
}

// TestTripOfABreakerDueForHalfOpen: an open breaker whose open period is
// over is due for half-open, as State and the metrics show it; a Trip of
// it reopens it (half-open → open, reason trip, Since the Trip's time)
// whether or not anyone looked at it before.
func TestTripOfABreakerDueForHalfOpen(t *testing.T) {
	run := func(t *testing.T, look bool) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			log := &transitionLog{}
			tr := New(newDep(http.StatusInternalServerError), WithMinRequests(1), WithJitter(0),
				WithOpenTimeout(time.Second), WithOnTransition(log.record))
			_, _ = get(t, tr, testURL) // open for 1 s
			time.Sleep(2 * time.Second)
			if look {
				require.Equal(t, StateHalfOpen, tr.State(testKey))
			}
			tr.Trip(testKey, time.Minute)
			s := tr.Snapshot()[0]
			require.Equal(t, StateOpen, s.State)
			require.Equal(t, ReasonTrip, s.Reason)
			require.Equal(t, 2*time.Second, s.Since.Sub(start))
			require.Equal(t, []string{testKey + ": closed→open", testKey + ": open→half-open", testKey + ": half-open→open"}, log.list())
			st, _ := tr.breakers.get(testKey).b.stats(tr.now(), false)
			require.Equal(t, time.Second, st.open, "the first open period, until it ended")
		})
	}
	t.Run("looked at", func(t *testing.T) { run(t, true) })
	t.Run("not looked at", func(t *testing.T) { run(t, false) })
}
