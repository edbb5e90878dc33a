package httpbreaker

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestMetricsAtScrapeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		d := newDep(500)
		tr := New(d, WithMetrics(reg), WithMinRequests(3), WithJitter(0), WithOpenTimeout(2*time.Second),
			WithProbesToClose(1))
		_, _ = getCtx(t, t.Context(), tr, testURL)
		d.set(429, nil)
		_, _ = get(t, tr, testURL)
		d.set(500, nil)
		_, _ = get(t, tr, testURL) // trips: 2 failures of 3
		_, _ = get(t, tr, testURL) // rejected
		time.Sleep(time.Second)

		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP breaker_state Current state of the circuit breaker: 1 for the state it is in, 0 for the others.
# TYPE breaker_state gauge
breaker_state{breaker="api.test",state="closed"} 0
breaker_state{breaker="api.test",state="half-open"} 0
breaker_state{breaker="api.test",state="open"} 1
# HELP breaker_requests_total Calls the breaker admitted, by outcome.
# TYPE breaker_requests_total counter
breaker_requests_total{breaker="api.test",outcome="failure"} 2
breaker_requests_total{breaker="api.test",outcome="ignored"} 0
breaker_requests_total{breaker="api.test",outcome="success"} 0
breaker_requests_total{breaker="api.test",outcome="throttled"} 1
# HELP breaker_rejections_total Calls the breaker refused without sending them, by reason.
# TYPE breaker_rejections_total counter
breaker_rejections_total{breaker="api.test",reason="bulkhead"} 0
breaker_rejections_total{breaker="api.test",reason="half-open"} 0
breaker_rejections_total{breaker="api.test",reason="open"} 1
breaker_rejections_total{breaker="api.test",reason="retry_budget"} 0
# HELP breaker_open_seconds_total Time the breaker has spent open, in seconds.
# TYPE breaker_open_seconds_total counter
breaker_open_seconds_total{breaker="api.test"} 1
`), "breaker_state", "breaker_requests_total", "breaker_rejections_total", "breaker_open_seconds_total"))

		// The open period has passed: a scrape shows it due for half-open,
		// not stale-open.
		time.Sleep(time.Second)
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_state", `state="half-open"`))
		d.set(200, nil)
		_, _ = get(t, tr, testURL) // the probe closes it
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_state", `state="closed"`))
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_transitions_total", `from="closed",reason="failure_rate",to="open"`))
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_transitions_total", `from="open",reason="open_elapsed",to="half-open"`))
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_transitions_total", `from="half-open",reason="probes_succeeded",to="closed"`))
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_probes_total", `result="success"`))
		require.Equal(t, 2.0, gaugeValue(t, reg, "breaker_open_seconds_total", ``))
		// Totals never go backwards when the window is cleared.
		require.Equal(t, 2.0, gaugeValue(t, reg, "breaker_requests_total", `outcome="failure"`))
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_requests_total", `outcome="success"`))

		problems, err := testutil.GatherAndLint(reg)
		require.NoError(t, err)
		require.Empty(t, problems)
	})
}

func TestMetricsTwoTransportsOneRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := New(newDep(200), WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"client": "payments"}, reg)))
	b := New(newDep(200), WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"client": "search"}, reg)))
	_, _ = get(t, a, testURL)
	_, _ = get(t, b, testURL)
	n, err := testutil.GatherAndCount(reg, "breaker_state")
	require.NoError(t, err)
	require.Equal(t, 6, n, "3 states × 2 transports")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestMetricsForgetEvictedBreakers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		tr := New(newDep(200), WithMetrics(reg), WithMaxBreakers(1))
		_, _ = get(t, tr, "http://one.test/")
		time.Sleep(11 * time.Second)
		_, _ = get(t, tr, "http://two.test/")
		n, err := testutil.GatherAndCount(reg, "breaker_state")
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_state", `breaker="two.test",state="closed"`))
	})
}

func TestMetricsNotInTheGlobalRegistry(t *testing.T) {
	before, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	tr := New(newDep(200))
	_, _ = get(t, tr, testURL)
	after, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	require.Equal(t, len(before), len(after))
}

// TestMetricsOpenSeconds: breaker_open_seconds_total counts an open
// period up to its end, however late the next request comes, and never
// goes backwards, even for clock reads taken before the breaker's lock:
// a scrape's, read before a breaker opened, or a Reset's, read before
// the trip that beat it to the lock.
func TestMetricsOpenSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		tr := New(newDep(200), WithMetrics(reg), WithJitter(0))
		open := func() float64 {
			t.Helper()
			return gaugeValue(t, reg, "breaker_open_seconds_total", `breaker="api.test"`)
		}
		tr.Trip(testKey, time.Second)
		time.Sleep(time.Hour)
		require.Equal(t, StateHalfOpen, tr.State(testKey), "due to probe")
		require.Equal(t, 1.0, open(), "open for its one second, not the hour since")

		b := &tr.breakers.get(testKey).b
		before := tr.now() // read, then the breaker opens
		time.Sleep(time.Second)
		tr.Trip(testKey, time.Minute)
		st, _ := b.stats(before, false)
		require.Equal(t, 1.0, st.open.Seconds(), "nothing added for a period that starts after now")
		time.Sleep(30 * time.Second)
		require.Equal(t, 31.0, open())
		b.reset(before, false) // a Reset whose clock read came before the trip
		require.Equal(t, 31.0, open(), "a counter does not go backwards")
		require.Equal(t, StateClosed, tr.State(testKey))
		tr.Trip(testKey, time.Second)
		time.Sleep(time.Second)
		require.Equal(t, 32.0, open())
	})
}

// TestMetricsKeysThatAreNotUTF8: a custom KeyFunc that returns invalid
// UTF-8 gets the key with U+FFFD in its place, for the breaker and its
// labels: two such keys share a breaker rather than make the scrape fail
// with duplicate series.
func TestMetricsKeysThatAreNotUTF8(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	tr := New(newDep(200), WithMetrics(reg), WithKeyFunc(func(r *http.Request) string {
		return "tenant-" + r.Header.Get("X-Tenant")
	}))
	for _, tenant := range []string{"\xff", "\xfe", "\xff"} {
		req := mustReq(t, testURL)
		req.Header.Set("X-Tenant", tenant)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	_, err := reg.Gather()
	require.NoError(t, err)
	snap := tr.Snapshot()
	require.Len(t, snap, 1)
	require.Equal(t, "tenant-\uFFFD", snap[0].Key)
	require.EqualValues(t, 3, snap[0].Requests)
	tr.Trip("tenant-\xfe", time.Minute)
	require.Equal(t, StateOpen, tr.State("tenant-\uFFFD"), "Trip, State and Reset take the same keys")
	tr.Reset("tenant-\xff")
	require.Equal(t, StateClosed, tr.State("tenant-\xfe"))
}

// TestMetricsAndSnapshotMeetAKeyOnce: a key evicted and made again while
// a scrape walks the table can sit in two slots at once, the old breaker
// and the new. The scrape must still have one series per key (a second
// fails it with duplicate series), and Snapshot one Status.
func TestMetricsAndSnapshotMeetAKeyOnce(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	tr := New(newDep(200), WithMetrics(reg))
	_, _ = get(t, tr, testURL)
	tr.mu.Lock()
	tr.breakers.insert(testCircuit(testKey)) // the same key again, as in that walk
	tr.mu.Unlock()
	n, err := testutil.GatherAndCount(reg, "breaker_state")
	require.NoError(t, err)
	require.Equal(t, int(numStates), n)
	require.Len(t, tr.Snapshot(), 1)
}

// TestMetricsThrottledProbeIsAFailure: a probe answered 429 reopens the
// breaker, so breaker_probes_total counts it as a failure, and the
// series' help says so rather than calling it ignored.
func TestMetricsThrottledProbeIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		d := newDep(500)
		tr := tripped(t, d, WithMetrics(reg))
		time.Sleep(time.Second)
		d.set(http.StatusTooManyRequests, nil)
		_, _ = get(t, tr, testURL) // the probe, throttled: reopens
		require.Equal(t, StateOpen, tr.State(testKey))
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_probes_total", `result="failure"`))
		require.Equal(t, 0.0, gaugeValue(t, reg, "breaker_probes_total", `result="ignored"`))
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "breaker_probes_total" {
				require.Equal(t, "Half-open probes by result: success, failure (the dependency is still down, or throttled the probe), timeout (the probe outlived the probe bound) and ignored (the caller cancelled, or the outcome was ignored).", mf.GetHelp())
			}
		}
	})
}

// TestRequestsTotalCountsLateOutcomes: breaker_requests_total counts
// every call the breaker admitted, as the observers do, also one whose
// answer came after another call tripped the breaker: that outcome
// decides nothing, but it was admitted and classified.
func TestRequestsTotalCountsLateOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		d := newHeldDep()
		reg := prometheus.NewRegistry()
		tr := New(d, WithMinRequests(1), WithJitter(0), WithMetrics(reg), WithObserver(rec))
		calls := []chan result{send(t, context.Background(), tr, "a"), send(t, context.Background(), tr, "b")}
		d.let("a", http.StatusInternalServerError) // trips
		synctest.Wait()
		d.let("b", http.StatusInternalServerError) // admitted while closed, answered while open
		for _, c := range calls {
			r := <-c
			require.NoError(t, r.err)
			require.Equal(t, http.StatusInternalServerError, r.resp.StatusCode)
		}
		failures := 0
		for _, c := range rec.allCalls() {
			if c.Rejected == "" && c.Outcome == OutcomeFailure {
				failures++
			}
		}
		require.Equal(t, 2, failures)
		require.EqualValues(t, 2, gaugeValue(t, reg, "breaker_requests_total", `outcome="failure"`))
		require.EqualValues(t, 1, tr.Snapshot()[0].Failures, "the window holds the one that decided")
	})
}

// TestRequestsTotalCountsAProbePastItsBound: a probe that answers after
// the probe bound reopened its breaker decides nothing, but it was
// admitted: breaker_requests_total counts its outcome.
func TestRequestsTotalCountsAProbePastItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := false
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			if slow {
				time.Sleep(2 * time.Second) // past the probe bound (1 s)
				return response(r, http.StatusOK, nil), nil
			}
			return response(r, http.StatusInternalServerError, nil), nil
		})
		reg := prometheus.NewRegistry()
		tr := New(next, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
			WithMaxOpenTimeout(time.Second), WithMetrics(reg))
		_, _ = get(t, tr, testURL) // trips
		time.Sleep(time.Second)
		slow = true
		resp, err := get(t, tr, testURL) // the probe
		require.NoError(t, err)
		resp.Body.Close()
		require.NotEqual(t, StateClosed, tr.State(testKey), "it decided nothing")
		require.EqualValues(t, 1, gaugeValue(t, reg, "breaker_requests_total", `outcome="success"`))
	})
}

// TestRequestsTotalKeepsEveryOutcomeAcrossAWindowChange: an Update that
// changes the window's length starts a fresh window, and the totals
// behind breaker_requests_total carry over: none of the outcomes counted
// while it does so is lost, and no scrape sees the total go down.
func TestRequestsTotalKeepsEveryOutcomeAcrossAWindowChange(t *testing.T) {
	s10, s20 := defaultSettings(), defaultSettings()
	s20.window = 20 * time.Second
	b := newBreaker(testKey, &s10, time.Now(), 0, nil)
	const workers, each = 4, 50000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				b.count(ticket{}, OutcomeSuccess, 1, 0)
			}
		})
	}
	stop := make(chan struct{})
	var scraped sync.WaitGroup
	var wentDown int64
	scraped.Go(func() {
		var last int64
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				b.configure(&s20)
			} else {
				b.configure(&s10)
			}
			st, _ := b.stats(1, false)
			if n := st.totals[OutcomeSuccess]; n < last {
				wentDown++
			} else {
				last = n
			}
		}
	})
	wg.Wait()
	close(stop)
	scraped.Wait()
	st, _ := b.stats(1, false)
	require.Zero(t, wentDown, "scrapes that saw the total go down")
	require.EqualValues(t, workers*each, st.totals[OutcomeSuccess], "outcomes lost across window changes")
}
