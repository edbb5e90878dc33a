package httpbreaker

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestUpdateThresholdStepTable: trip at the old threshold, Update, no trip
// where the new one says no, trip where it says yes; the breaker that
// tripped before stays open with the same open period.
func TestUpdateThresholdStepTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMinRequests(4), WithJitter(0), WithOpenTimeout(10*time.Second))
		for range 4 {
			_, _ = get(t, tr, "http://old.test/")
		}
		require.Equal(t, StateOpen, tr.State("old.test"))
		retryAt := tr.Snapshot()[0].RetryAt

		require.NoError(t, tr.Update(WithMinRequests(8), WithJitter(0), WithOpenTimeout(time.Second)))
		s := tr.Snapshot()[0]
		require.Equal(t, StateOpen, s.State, "an open breaker stays open")
		require.Equal(t, retryAt, s.RetryAt, "with the open period it has")
		require.EqualValues(t, 8, s.Settings.MinRequests)

		for i := range 8 {
			_, _ = get(t, tr, "http://new.test/")
			want := StateClosed
			if i == 7 {
				want = StateOpen
			}
			require.Equal(t, want, tr.State("new.test"), "call %d", i+1)
		}
		require.Equal(t, time.Second, time.Until(tr.Snapshot()[0].RetryAt), "the new open timeout")
	})
}

// TestUpdateKeepsState: counts (when the window length is unchanged),
// backoff and probes survive an Update; a new window length starts a
// fresh window in the breaker's state.
func TestUpdateKeepsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMinRequests(10))
		for range 5 {
			_, _ = get(t, tr, testURL)
		}
		require.NoError(t, tr.Update(WithMinRequests(10), WithFailureRate(0.9)))
		s := tr.Snapshot()[0]
		require.EqualValues(t, 5, s.Requests, "the window is kept")
		for range 5 {
			_, _ = get(t, tr, testURL)
		}
		require.Equal(t, StateOpen, tr.State(testKey), "the kept counts decide: 10 of 10")

		require.NoError(t, tr.Update(WithMinRequests(10), WithWindow(20*time.Second)))
		s = tr.Snapshot()[0]
		require.Equal(t, StateOpen, s.State)
		require.Zero(t, s.Requests, "a new window length: a fresh window")
		require.Equal(t, 20*time.Second, s.Settings.Window)
	})
	synctest.Test(t, func(t *testing.T) {
		// Backoff: a failed probe cycle before the Update doubles the
		// open period after it.
		d := newDep(500)
		tr := New(d, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second))
		_, _ = get(t, tr, testURL)
		time.Sleep(time.Second)
		_, _ = get(t, tr, testURL) // the probe fails: 2s
		require.NoError(t, tr.Update(WithMinRequests(1), WithJitter(0), WithOpenTimeout(3*time.Second)))
		time.Sleep(2 * time.Second)
		_, _ = get(t, tr, testURL) // fails again: 3s doubled twice
		require.Equal(t, 12*time.Second, time.Until(tr.Snapshot()[0].RetryAt))
	})
}

// TestUpdateInFlightKeepsItsSettings: a call admitted before an Update
// is judged by the policy it was admitted under.
func TestUpdateInFlightKeepsItsSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		var judged []string
		var mu sync.Mutex
		tagged := func(tag string) Classifier {
			return func(req *http.Request, resp *http.Response, err error) Outcome {
				mu.Lock()
				judged = append(judged, tag)
				mu.Unlock()
				return DefaultClassifier(req, resp, err)
			}
		}
		tr := New(d, WithClassifier(tagged("old")))
		d.block()
		done := make(chan struct{})
		go func() { _, _ = get(t, tr, testURL); close(done) }()
		synctest.Wait()
		require.NoError(t, tr.Update(WithClassifier(tagged("new"))))
		d.release()
		<-done
		_, _ = get(t, tr, testURL)
		require.Equal(t, []string{"old", "new"}, judged)
	})
}

func TestUpdateRefusesWhatShapesTheTransport(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		name string
	}{
		{WithKeyFunc(HostKey), "WithKeyFunc"},
		{WithRoutes("/x"), "WithRoutes"},
		{WithMaxBreakers(5), "WithMaxBreakers"},
		{WithMetrics(prometheus.NewRegistry()), "WithMetrics"},
		{WithLogger(slog.Default()), "WithLogger"},
		{WithOnTransition(nil), "WithOnTransition"},
		{WithObserver(nopObserver{}), "WithObserver"},
		{WithStore(&memStore{}), "WithStore"},
		{WithFailureRate(1.5), "WithFailureRate"},
		{WithWindow(-time.Second), "WithWindow"},
		{WithPolicy("h", WithKeyFunc(HostKey)), "WithKeyFunc"},
		{WithPolicy("", WithMinRequests(1)), "WithPolicy"},
		{WithPolicy("h", WithMaxOpenTimeout(time.Second)), "WithMaxOpenTimeout"},
		{nil, "nil Option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			tr := New(newDep(200), WithMinRequests(7), WithMetrics(reg))
			_, _ = get(t, tr, testURL)
			err := tr.Update(WithMinRequests(3), tc.opt)
			require.ErrorContains(t, err, tc.name)
			require.EqualValues(t, 7, tr.Snapshot()[0].Settings.MinRequests, "nothing changed")
			require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_config_updates_total", `result="error"`))
			require.Zero(t, gaugeValue(t, reg, "breaker_config_updates_total", `result="ok"`))
		})
	}
}

// TestUpdateModeOffAndBack: a key switched to ModeOff loses its breaker;
// switched back, it starts closed.
func TestUpdateModeOffAndBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d)
		tr.Trip(testKey, time.Hour)
		require.Equal(t, StateOpen, tr.State(testKey))
		require.NoError(t, tr.Update(WithPolicy(testKey, WithMode(ModeOff))))
		require.Empty(t, tr.Snapshot())
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.False(t, IsRejected(resp), "no breaker: straight to next")
		require.NoError(t, tr.Update())
		resp, err = get(t, tr, testURL)
		require.NoError(t, err)
		require.False(t, IsRejected(resp))
		s := tr.Snapshot()
		require.Len(t, s, 1)
		require.Equal(t, StateClosed, s[0].State, "starts closed")
		require.EqualValues(t, 1, s[0].Requests)
	})
}

func TestUpdateLogsWhatChanged(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewPedanticRegistry()
	tr := New(nil, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), WithMetrics(reg),
		WithPolicy("pay.test", WithFailureRate(0.25)), WithPolicy("recs.test", WithMinRequests(3)))
	require.NoError(t, tr.Update(WithFailureRate(0.6), WithPolicy("pay.test", WithFailureRate(0.25), WithMode(ModeShadow)),
		WithPolicy("recs.test", WithMinRequests(3))))
	out := buf.String()
	require.Contains(t, out, `selector=* setting=failure_rate from=0.5 to=0.6`)
	require.Contains(t, out, `selector=pay.test setting=mode from=enforce to=shadow`)
	require.NotContains(t, out, `selector=pay.test setting=failure_rate`, "unchanged for that selector")
	require.NotContains(t, out, `selector=recs.test`, "it only inherits the Transport-wide change")
	require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_config_updates_total", `result="ok"`))
}

// TestUpdateUnderTraffic: 64 callers and a goroutine calling Update
// every millisecond with alternating settings, for 2s of fake time, on
// real concurrency under -race. Each call sees one coherent set of
// settings: the call timeout next sees always belongs to the classifier
// that judges it. Transitions stay exactly once.
func TestUpdateUnderTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		sentTimeout := map[string]time.Duration{}
		judgedBy := map[string]string{}
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			d, _ := req.Context().Deadline()
			mu.Lock()
			sentTimeout[req.Header.Get("X-ID")] = time.Until(d)
			mu.Unlock()
			code := http.StatusOK
			if req.Header.Get("X-Fail") != "" {
				code = http.StatusInternalServerError
			}
			return response(req, code, nil), nil
		})
		set := func(tag string, timeout time.Duration, min int) []Option {
			return []Option{WithCallTimeout(timeout), WithMinRequests(min), WithOpenTimeout(time.Hour), WithMaxOpenTimeout(time.Hour),
				WithClassifier(func(req *http.Request, resp *http.Response, err error) Outcome {
					mu.Lock()
					judgedBy[req.Header.Get("X-ID")] = tag
					mu.Unlock()
					return DefaultClassifier(req, resp, err)
				})}
		}
		var transitions atomic.Int64
		tr := New(next, append(set("a", time.Second, 1000), onStateChange(func(string, State, State) { transitions.Add(1) }))...)
		stop := make(chan struct{})
		updated := make(chan struct{})
		go func() {
			defer close(updated)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				if i%2 == 0 {
					require.NoError(t, tr.Update(set("b", 2*time.Second, 2000)...))
				} else {
					require.NoError(t, tr.Update(set("a", time.Second, 1000)...))
				}
			}
		}()
		var wg sync.WaitGroup
		var n atomic.Int64
		for g := range 64 {
			wg.Go(func() {
				for i := 0; time.Since(time.Unix(946684800, 0)) < 2*time.Second; i++ {
					req := mustReq(t, testURL)
					req.Header.Set("X-ID", strconv.Itoa(g)+"/"+strconv.Itoa(i))
					if i%3 != 0 { // two in three fail: it trips once, and stays open

						req.Header.Set("X-Fail", "1")
					}
					resp, err := tr.RoundTrip(req)
					if err == nil {
						resp.Body.Close()
					}
					n.Add(1)
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		close(stop)
		<-updated
		want := map[string]time.Duration{"a": time.Second, "b": 2 * time.Second}
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, judgedBy)
		seen := map[string]int{}
		for id, tag := range judgedBy {
			require.Equal(t, want[tag], sentTimeout[id], "call %s: judged by %s's classifier", id, tag)
			seen[tag]++
		}
		require.Positive(t, seen["a"])
		require.Positive(t, seen["b"])
		require.EqualValues(t, 1, transitions.Load(), "closed→open, exactly once")
	})
}

// inFlight starts a call to testURL that d holds until d.release, and
// returns its error once it has ended. The call has been admitted and
// waits in d when inFlight returns.
func inFlight(t *testing.T, tr *Transport, d *dep) <-chan error {
	d.block()
	before := d.calls.Load()
	done := make(chan error, 1)
	go func() {
		_, err := get(t, tr, testURL)
		done <- err
	}()
	synctest.Wait()
	require.Equal(t, before+1, d.calls.Load(), "the call is admitted and waits in next")
	return done
}

// TestUpdateLowerMinRequestsTripsOnOutcomeAdmittedBefore: a window
// already holding enough failures for a min requests lowered by Update
// trips on its next outcome, even one of a call admitted before the
// Update.
func TestUpdateLowerMinRequestsTripsOnOutcomeAdmittedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec transitionLog
		d := newDep(http.StatusInternalServerError)
		tr := New(d, WithMinRequests(10), WithJitter(0), WithOnTransition(rec.record))
		for range 5 {
			_, _ = get(t, tr, testURL)
		}
		require.Equal(t, StateClosed, tr.State(testKey), "5 of min 10")
		done := inFlight(t, tr, d)
		require.NoError(t, tr.Update(WithMinRequests(3), WithJitter(0)))
		d.release()
		require.NoError(t, <-done)
		require.Equal(t, StateOpen, tr.State(testKey), "6 failures of a new min 3: tripped")
		last := rec.last(t)
		require.Equal(t, ReasonFailureRate, last.Reason)
		require.EqualValues(t, 6, last.Counts.Requests)
	})
}

// TestUpdateLowerMinRequestsTripsOnTheNextSuccess: the next outcome
// after an Update checks the trip rule, a success included: a window
// already at the failure rate for a lowered minimum trips then.
func TestUpdateLowerMinRequestsTripsOnTheNextSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusInternalServerError)
		tr := New(d, WithMinRequests(20), WithJitter(0))
		for range 5 {
			_, _ = get(t, tr, testURL)
		}
		require.NoError(t, tr.Update(WithMinRequests(5), WithJitter(0)))
		require.Equal(t, StateClosed, tr.State(testKey), "Update itself trips nothing")
		d.set(http.StatusOK, nil)
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		resp.Body.Close()
		s := tr.Snapshot()[0]
		require.Equal(t, StateOpen, s.State, "5 failures of 6 at a new minimum of 5")
		require.Equal(t, ReasonFailureRate, s.Reason)
		require.False(t, tr.breakers.get(testKey).b.recheck.Load(), "only the first success after the Update checks the rule")
	})
}

// TestUpdateHigherMinRequestsStopsTripOfCallAdmittedBefore: an operator
// who raises min requests to stop a flapping breaker is not overruled by
// calls already in flight: their outcomes decide by the new rule.
func TestUpdateHigherMinRequestsStopsTripOfCallAdmittedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusInternalServerError)
		tr := New(d, WithMinRequests(5), WithJitter(0))
		for range 4 {
			_, _ = get(t, tr, testURL)
		}
		done := inFlight(t, tr, d)
		require.NoError(t, tr.Update(WithMinRequests(20), WithJitter(0)))
		d.release()
		require.NoError(t, <-done)
		require.Equal(t, StateClosed, tr.State(testKey), "5 failures: the old min 5 would trip, the new min 20 does not")
		for i := 6; i <= 20; i++ {
			_, _ = get(t, tr, testURL)
			want := StateClosed
			if i == 20 {
				want = StateOpen
			}
			require.Equal(t, want, tr.State(testKey), "failure %d", i)
		}
	})
}

// TestUpdateOpenTimeoutAppliesToTripByCallAdmittedBefore: a new open
// timeout applies from the next open period, also when the call whose
// outcome trips the breaker was admitted before the Update.
func TestUpdateOpenTimeoutAppliesToTripByCallAdmittedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec transitionLog
		d := newDep(http.StatusInternalServerError)
		tr := New(d, WithMinRequests(5), WithJitter(0), WithOpenTimeout(time.Second), WithOnTransition(rec.record))
		for range 4 {
			_, _ = get(t, tr, testURL)
		}
		done := inFlight(t, tr, d)
		require.NoError(t, tr.Update(WithMinRequests(5), WithJitter(0), WithOpenTimeout(30*time.Second)))
		d.release()
		require.NoError(t, <-done)
		require.Equal(t, 30*time.Second, openFor(t, tr), "the new open timeout")
		last := rec.last(t)
		require.Equal(t, StateOpen, last.To)
		require.Equal(t, 30*time.Second, last.OpenFor)
	})
}

// TestUpdateOpenTimeoutAppliesToReopenByProbeAdmittedBefore: the open
// period after a failed probe is the open timeout the breaker holds when
// the probe's outcome arrives, backed off, even for a probe admitted
// before the Update.
func TestUpdateOpenTimeoutAppliesToReopenByProbeAdmittedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusInternalServerError)
		tr := tripped(t, d) // open for 1s
		time.Sleep(time.Second)
		done := inFlight(t, tr, d) // the probe
		require.NoError(t, tr.Update(WithMinRequests(1), WithJitter(0), WithOpenTimeout(10*time.Second)))
		d.release()
		require.NoError(t, <-done)
		require.Equal(t, 20*time.Second, openFor(t, tr), "the new 10s, doubled for the failed probe")
	})
}

// TestUpdateProbesToCloseDecidesProbeAdmittedBefore: probes to close is
// read when a probe's outcome arrives: lowered by Update while a probe is
// in flight, that probe's success closes the breaker.
func TestUpdateProbesToCloseDecidesProbeAdmittedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusInternalServerError)
		tr := tripped(t, d, WithProbesToClose(3))
		time.Sleep(time.Second)
		d.set(http.StatusOK, nil)
		done := inFlight(t, tr, d)
		require.NoError(t, tr.Update(WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second), WithProbesToClose(1)))
		d.release()
		require.NoError(t, <-done)
		require.Equal(t, StateClosed, tr.State(testKey), "one good probe of a new probes-to-close 1")
	})
}

// TestUpdateModeOffCountsNothingInFlight: calls in flight when Update
// turns their key off end with no breaker to count them, and none is
// made for them: their failures open nothing, State stays closed, and no
// transition is reported to the hook or the fleet.
func TestUpdateModeOffCountsNothingInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusInternalServerError)
		d.block()
		var log transitionLog
		s := newMemStore()
		tr := New(d, WithMinRequests(3), WithOnTransition(log.record), WithStore(s))
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { _, _ = get(t, tr, testURL) })
		}
		synctest.Wait() // all three in flight
		require.NoError(t, tr.Update(WithMinRequests(3), WithMode(ModeOff)))
		d.release()
		wg.Wait()
		require.Zero(t, tr.breakers.live, "no breaker made to count them")
		require.Equal(t, StateClosed, tr.State(testKey), "no breaker")
		require.Empty(t, log.list())
		require.Empty(t, s.hints(), "nothing told to the fleet")
	})
}

// TestUpdateRecheckOpensForTheOpenTimeoutFromNow: the first outcome after
// an Update that finds the window at the new minimum trips the breaker,
// even a success of a call admitted before it, and the open period runs
// the open timeout from then, not from the call's admission: a call
// longer than the open timeout must not open a breaker already due to
// probe.
func TestUpdateRecheckOpensForTheOpenTimeoutFromNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var calls atomic.Int64
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			calls.Add(1)
			if req.Header.Get("X-ID") == "slow" {
				<-gate
				return response(req, 200, nil), nil
			}
			return response(req, 500, nil), nil
		})
		var log transitionLog
		opts := []Option{WithWindow(time.Minute), WithJitter(0), WithOpenTimeout(5 * time.Second)}
		tr := New(next, append(opts, WithMinRequests(100), WithOnTransition(log.record))...)
		for range 10 {
			_, _ = get(t, tr, testURL) // 10 failures: below the minimum of 100
		}
		require.Equal(t, StateClosed, tr.State(testKey))

		done := make(chan struct{})
		go func() {
			defer close(done)
			req := mustReq(t, testURL)
			req.Header.Set("X-ID", "slow")
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
		}()
		synctest.Wait() // the slow call is admitted and waits in next

		time.Sleep(6 * time.Second)
		require.NoError(t, tr.Update(append(opts, WithMinRequests(10))...))
		updated := time.Now()
		close(gate) // the slow call succeeds: the first outcome after the Update
		<-done

		require.Len(t, log.got, 1, "the success after the Update trips the breaker")
		got := log.got[0]
		require.Equal(t, StateOpen, got.To)
		require.Equal(t, 5*time.Second, got.OpenFor)
		require.Equal(t, StateOpen, tr.State(testKey), "open for the new open timeout from now")
		before := calls.Load()
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "the next request is refused, not sent as a probe")
		require.Equal(t, before, calls.Load())
		require.False(t, got.At.Before(updated), "the trip happened after the Update, not %v before it", updated.Sub(got.At))
	})
}
