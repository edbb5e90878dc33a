package httpbreaker

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithMinRequests(4), WithJitter(0))
		require.Empty(t, tr.Snapshot())
		start := time.Now()
		_, _ = get(t, tr, "http://b.test/")
		d.set(500, nil)
		time.Sleep(time.Second)
		for range 4 {
			_, _ = get(t, tr, "http://a.test/")
		}
		d.set(429, nil)
		_, _ = get(t, tr, "http://b.test/")
		snap := tr.Snapshot()
		require.Len(t, snap, 2)
		a, b := snap[0], snap[1]
		require.Equal(t, "a.test", a.Key)
		require.Equal(t, StateOpen, a.State)
		require.Equal(t, start.Add(time.Second), a.Since)
		require.Equal(t, start.Add(6*time.Second), a.RetryAt)
		require.EqualValues(t, 4, a.Requests)
		require.EqualValues(t, 4, a.Failures)
		require.Equal(t, 1.0, a.FailureRate())
		require.Equal(t, "b.test", b.Key)
		require.Equal(t, StateClosed, b.State)
		require.True(t, b.RetryAt.IsZero())
		require.EqualValues(t, 2, b.Requests)
		require.EqualValues(t, 1, b.Throttled)
		require.Zero(t, b.FailureRate())
		// Once the open period is over it shows as half-open.
		time.Sleep(5 * time.Second)
		require.Equal(t, StateHalfOpen, tr.Snapshot()[0].State)
		require.Zero(t, Status{}.FailureRate())
	})
}

func TestStatusHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMinRequests(2), WithJitter(0))
		for range 2 {
			_, _ = get(t, tr, testURL)
		}
		h := tr.StatusHandler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/breakers", nil))
		require.Equal(t, 200, rec.Code)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
		var out struct {
			Breakers []map[string]any `json:"breakers"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
		require.Len(t, out.Breakers, 1)
		b := out.Breakers[0]
		require.Equal(t, testKey, b["key"])
		require.Equal(t, "open", b["state"])
		require.EqualValues(t, 2, b["requests"])
		require.EqualValues(t, 2, b["failures"])
		require.EqualValues(t, 1, b["failure_rate"])
		require.Contains(t, b, "retry_at")
		require.Contains(t, b, "since")

		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/debug/breakers", nil))
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code)

		rec = httptest.NewRecorder()
		New(nil).StatusHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		require.JSONEq(t, `{"breakers":[]}`, rec.Body.String())
	})
}

// TestStatusHandlerShowsEveryTunable: a breaker's settings on the status
// page are every tunable, under the file's names and in its formats, and
// the object reads back as a policy of the file.
func TestStatusHandlerShowsEveryTunable(t *testing.T) {
	tr := New(newDep(200), WithPolicy(testKey, WithMode(ModeShadow), WithJitter(0.1), WithHalfOpenProbes(2),
		WithProbesToClose(4), WithThrottleSustain(time.Minute), WithSlowCallThreshold(300*time.Millisecond),
		WithBodyErrors(), WithRejectAsError(), WithMaxConcurrent(3), WithQueue(2, 800*time.Millisecond),
		WithRetryBudget(0.2, 10)))
	_, _ = get(t, tr, testURL)
	rec := httptest.NewRecorder()
	tr.StatusHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/breakers", nil))
	var out struct {
		Breakers []struct {
			Settings json.RawMessage `json:"settings"`
		} `json:"breakers"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Len(t, out.Breakers, 1)
	require.JSONEq(t, `{"mode":"shadow","failure_rate":0.5,"min_requests":20,"window":"10s",
		"slow_call_threshold":"300ms","open_timeout":"5s","max_open_timeout":"1m0s","jitter":0.1,
		"half_open_probes":2,"probes_to_close":4,"throttle_sustain":"1m0s","max_concurrent":3,
		"queue":2,"queue_wait":"800ms","call_timeout":"0s","body_errors":true,"reject_as_error":true,
		"retry_budget":{"ratio":0.2,"min_per_second":10}}`,
		string(out.Breakers[0].Settings))
	_, err := ParseConfig(out.Breakers[0].Settings)
	require.NoError(t, err, "an operator can paste it into the file")

	s := tr.Snapshot()[0].Settings
	require.Equal(t, ModeShadow, s.Mode)
	require.Equal(t, 0.1, s.Jitter)
	require.EqualValues(t, 2, s.HalfOpenProbes)
	require.EqualValues(t, 4, s.ProbesToClose)
	require.Equal(t, time.Minute, s.ThrottleSustain)
	require.Equal(t, 300*time.Millisecond, s.SlowCallThreshold)
	require.True(t, s.BodyErrors)
	require.True(t, s.RejectAsError)
}

// States yields every live breaker's state as a scrape reads it — an
// open breaker whose open period has ended as half-open — and moves
// none: no hook runs, and the breaker is still open until State finds it
// over. A key switched to ModeOff has no breaker to yield.
func TestStatesReadsWithoutMovingAnyBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		var log transitionLog
		tr := New(d, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second), WithOnTransition(log.record))
		_, _ = get(t, tr, "http://closed.test/")
		_, _ = get(t, tr, "http://off.test/")
		d.set(500, nil)
		_, _ = get(t, tr, "http://open.test/")
		states := func() map[string]State {
			got := map[string]State{}
			for k, s := range tr.States() {
				_, dup := got[k]
				require.False(t, dup, "key %q yielded twice", k)
				got[k] = s
			}
			return got
		}
		require.Equal(t, map[string]State{"closed.test": StateClosed, "off.test": StateClosed, "open.test": StateOpen}, states())

		require.NoError(t, tr.Update(WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
			WithPolicy("off.test", WithMode(ModeOff))))
		time.Sleep(time.Second) // the open period ends
		require.Equal(t, map[string]State{"closed.test": StateClosed, "open.test": StateHalfOpen}, states())
		require.Equal(t, []string{"open.test: closed→open"}, log.list(), "States moved no breaker and ran no hook")

		require.Equal(t, StateHalfOpen, tr.State("open.test"))
		require.Equal(t, []string{"open.test: closed→open", "open.test: open→half-open"}, log.list(), "State moves it")

		for range tr.States() {
			break // a caller may stop early
		}
		for range new(Transport).States() {
			t.Fatal("a Transport not made by New has no breakers")
		}
	})
}
