package httpbreaker

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// modeRows is one sequence of answers from the dependency, with the wait
// before each request: it trips, is refused while open (three calls),
// probes, fails a probe, and recovers.
var modeRows = []struct {
	after time.Duration
	code  int
}{
	{0, 500}, {0, 500}, {0, 500}, {0, 500}, // trips at 4
	{0, 200}, {100 * time.Millisecond, 200}, {200 * time.Millisecond, 200}, // refused while open
	{time.Second, 500},           // the probe fails: open for 2s
	{time.Second, 200},           // refused
	{time.Second, 200}, {0, 200}, // two probes close it
	{0, 500}, // one failure in a fresh window
}

// playModeRows plays modeRows through a Transport over d in mode m and
// returns the transitions it reported and how many calls reached d.
func playModeRows(t *testing.T, m Mode, reg prometheus.Registerer) ([]string, int64, *Transport) {
	d := newDep(200)
	log := &transitionLog{}
	opts := []Option{WithMinRequests(4), WithJitter(0), WithOpenTimeout(time.Second), WithProbesToClose(2),
		onStateChange(log.hook), WithPolicy(testKey, WithMode(m))}
	if reg != nil {
		opts = append(opts, WithMetrics(reg))
	}
	tr := New(d, opts...)
	for i, r := range modeRows {
		time.Sleep(r.after)
		d.set(r.code, nil)
		resp, err := get(t, tr, testURL)
		require.NoError(t, err, "row %d", i)
		if m == ModeShadow {
			require.False(t, IsRejected(resp), "row %d: shadow refuses nothing", i)
		}
	}
	return log.list(), d.calls.Load(), tr
}

// TestShadowModeMovesAsEnforcing: the same answers move a shadow breaker
// exactly as an enforcing one, but every call reaches the dependency, and
// what it would have refused is counted in its own metric only.
func TestShadowModeMovesAsEnforcing(t *testing.T) {
	var enforced, shadowed []string
	var enforcedCalls, shadowCalls int64
	synctest.Test(t, func(t *testing.T) {
		enforced, enforcedCalls, _ = playModeRows(t, ModeEnforce, nil)
	})
	reg := prometheus.NewPedanticRegistry()
	synctest.Test(t, func(t *testing.T) {
		var tr *Transport
		shadowed, shadowCalls, tr = playModeRows(t, ModeShadow, reg)
		s := tr.Snapshot()
		require.Len(t, s, 1)
		require.Equal(t, ModeShadow, s[0].Mode)
		require.EqualValues(t, 1, s[0].Requests, "the refused calls counted for nothing")
	})
	require.Equal(t, []string{
		testKey + ": closed→open", testKey + ": open→half-open", testKey + ": half-open→open",
		testKey + ": open→half-open", testKey + ": half-open→closed",
	}, enforced)
	require.Equal(t, enforced, shadowed)
	require.EqualValues(t, len(modeRows)-4, enforcedCalls)
	require.EqualValues(t, len(modeRows), shadowCalls)
	require.Equal(t, 4.0, gaugeValue(t, reg, "breaker_shadow_rejections_total", `reason="open"`))
	require.Zero(t, gaugeValue(t, reg, "breaker_rejections_total", `reason="open"`))
}

// TestShadowCountsOutliveShadowMode: a breaker an Update moves from shadow
// to enforce keeps the series of what it would have refused, at its count,
// so that a dashboard's rate does not read it as a reset.
func TestShadowCountsOutliveShadowMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		tr := New(newDep(500), WithMinRequests(1), WithMode(ModeShadow), WithMetrics(reg))
		for range 3 {
			_, err := get(t, tr, testURL)
			require.NoError(t, err)
		}
		require.Equal(t, 2.0, gaugeValue(t, reg, "breaker_shadow_rejections_total", `reason="open"`))
		require.NoError(t, tr.Update(WithMinRequests(1), WithMode(ModeEnforce)))
		require.Equal(t, 2.0, gaugeValue(t, reg, "breaker_shadow_rejections_total", `reason="open"`))

		never := prometheus.NewPedanticRegistry()
		_, err := get(t, New(newDep(200), WithMetrics(never)), testURL)
		require.NoError(t, err)
		n, err := testutil.GatherAndCount(never, "breaker_shadow_rejections_total")
		require.NoError(t, err)
		require.Zero(t, n, "an enforcing breaker that never ran in shadow has no shadow series")
	})
}

func TestOffModeHasNoBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		reg := prometheus.NewPedanticRegistry()
		tr := New(d, WithMinRequests(1), WithMetrics(reg), WithMaxConcurrent(1),
			WithPolicy("off.test", WithMode(ModeOff)))
		for range 50 {
			resp, err := get(t, tr, "http://off.test/")
			require.NoError(t, err)
			require.Equal(t, 500, resp.StatusCode, "straight to next")
		}
		require.EqualValues(t, 50, d.calls.Load())
		require.Equal(t, StateClosed, tr.State("off.test"))
		tr.Trip("off.test", time.Hour)
		require.Equal(t, StateClosed, tr.State("off.test"), "nothing to trip")
		require.Empty(t, tr.Snapshot())
		n, err := testutil.GatherAndCount(reg)
		require.NoError(t, err)
		require.Zero(t, n, "no series")
		_, _ = get(t, tr, testURL) // another key still has its breaker
		require.Equal(t, StateOpen, tr.State(testKey))
	})
}

func TestModeText(t *testing.T) {
	for _, m := range []Mode{ModeEnforce, ModeShadow, ModeOff} {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		var back Mode
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, m, back)
	}
	require.Equal(t, `"shadow"`, mustJSON(t, ModeShadow))
	for _, bad := range []string{`"Shadow"`, `""`, `"on"`, `1`} {
		var m Mode
		require.Error(t, json.Unmarshal([]byte(bad), &m), bad)
	}
	_, err := Mode(7).MarshalText()
	require.Error(t, err)
	require.Equal(t, "Mode(7)", Mode(7).String())
	require.Contains(t, panicMessage(t, func() { New(nil, WithMode(Mode(7))) }), "WithMode")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestOffModeKeyTakesNoBreakerSlot: a ModeOff key has no breaker, so it
// takes no place under the cap: an enforcing key still gets its breaker
// and trips.
func TestOffModeKeyTakesNoBreakerSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMaxBreakers(1), WithMinRequests(5),
			WithPolicy("off.test", WithMode(ModeOff)))
		_, _ = get(t, tr, "http://off.test/")
		for range 20 {
			_, _ = get(t, tr, testURL)
		}
		require.Equal(t, StateOpen, tr.State(testKey), "ModeOff means no breaker, yet off.test holds the only slot")
	})
}

// TestOffModeKeyTakesNoFleetHints: a fleet hint does not open a ModeOff
// key: State reports closed, and no transition fires for a key that has
// no breaker.
func TestOffModeKeyTakesNoFleetHints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		log := &transitionLog{}
		tr := New(newDep(200), WithStore(s), onStateChange(log.hook),
			WithPolicy("off.test", WithMode(ModeOff)))
		_, _ = get(t, tr, "http://off.test/")
		s.publish(Hint{Key: "off.test", State: StateOpen, RetryAt: time.Now().Add(time.Minute)})
		require.Equal(t, StateClosed, tr.State("off.test"), "DESIGN: State reports closed")
		require.Empty(t, log.list(), "no breaker, no transition")
	})
}
