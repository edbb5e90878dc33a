package httpbreaker

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestInvalidOptionsPanicInNew(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		name string
	}{
		{WithKeyFunc(nil), "WithKeyFunc"},
		{WithClassifier(nil), "WithClassifier"},
		{WithWindow(0), "WithWindow"},
		{WithWindow(-time.Second), "WithWindow"},
		{WithWindow(time.Millisecond), "WithWindow"},
		{WithMinRequests(0), "WithMinRequests"},
		{WithFailureRate(0), "WithFailureRate"},
		{WithFailureRate(1.5), "WithFailureRate"},
		{WithFailureRate(math.NaN()), "WithFailureRate"},
		{WithSlowCallThreshold(-1), "WithSlowCallThreshold"},
		{WithOpenTimeout(0), "WithOpenTimeout"},
		{WithMaxOpenTimeout(-time.Second), "WithMaxOpenTimeout"},
		{WithMaxOpenTimeout(time.Second), "WithMaxOpenTimeout"}, // shorter than the 5s open timeout
		{WithJitter(-0.1), "WithJitter"},
		{WithJitter(2), "WithJitter"},
		{WithHalfOpenProbes(0), "WithHalfOpenProbes"},
		{WithHalfOpenProbes(math.MaxInt), "WithHalfOpenProbes"},
		{WithProbesToClose(0), "WithProbesToClose"},
		{WithThrottleSustain(-time.Second), "WithThrottleSustain"},
		{WithMaxConcurrent(-1), "WithMaxConcurrent"},
		{WithMaxBreakers(0), "WithMaxBreakers"},
		{WithMetrics(nil), "WithMetrics"},
		{nil, "nil Option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				require.NotNil(t, r, "New must panic")
				msg, ok := r.(string)
				require.True(t, ok)
				require.Contains(t, msg, "httpbreaker: ")
				require.Contains(t, msg, tc.name)
			}()
			New(nil, tc.opt)
		})
	}
}

func TestValidEdgeOptions(t *testing.T) {
	require.NotPanics(t, func() {
		New(nil, WithWindow(10*time.Millisecond), WithFailureRate(1), WithJitter(0), WithJitter(1),
			WithSlowCallThreshold(0), WithThrottleSustain(0), WithMaxConcurrent(0),
			WithOpenTimeout(time.Second), WithMaxOpenTimeout(time.Second),
			onStateChange(nil), WithLogger(nil), WithMaxBreakers(1))
	})
}

func TestDefaultConfig(t *testing.T) {
	c := defaultConfig()
	require.Equal(t, 10*time.Second, c.window)
	require.EqualValues(t, 20, c.minRequests)
	require.Equal(t, 0.5, c.failureRate)
	require.Zero(t, c.slowCall)
	require.Equal(t, 5*time.Second, c.openTimeout)
	require.Equal(t, 60*time.Second, c.maxOpenTimeout)
	require.Equal(t, 60*time.Second, newConfig("New", nil).maxOpenTimeout)
	require.Equal(t, 0.2, c.jitter)
	require.EqualValues(t, 1, c.halfOpenProbes)
	require.EqualValues(t, 3, c.probesToClose)
	require.Equal(t, 10*time.Second, c.throttleSustain)
	require.Zero(t, c.maxConcurrent)
	require.Equal(t, 1000, c.maxBreakers)
	require.Nil(t, c.registerer)
}

func TestWithMetricsRegistrationConflictPanics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	New(nil, WithMetrics(reg))
	require.PanicsWithValue(t, "httpbreaker: WithMetrics: duplicate metrics collector registration attempted", func() {
		New(nil, WithMetrics(reg))
	})
}

// TestUnsetMaxOpenTimeoutFollowsTheOpenTimeout: a user who sets a long
// open timeout and no maximum gets a maximum as long as the open timeout,
// not a panic; an explicit maximum below it still panics.
func TestUnsetMaxOpenTimeoutFollowsTheOpenTimeout(t *testing.T) {
	var tr *Transport
	require.NotPanics(t, func() { tr = New(nil, WithOpenTimeout(10*time.Minute)) })
	require.Equal(t, 10*time.Minute, tr.policies.Load().base.maxOpenTimeout)
	require.Equal(t, 60*time.Second, New(nil, WithOpenTimeout(time.Second)).policies.Load().base.maxOpenTimeout)
	require.PanicsWithValue(t, "httpbreaker: WithMaxOpenTimeout: maximum open timeout 1m0s is shorter than the open timeout 10m0s", func() {
		New(nil, WithOpenTimeout(10*time.Minute), WithMaxOpenTimeout(time.Minute))
	})
}

// TestOffFormsTurnOffAWiderLevel: a policy turns off what the
// Transport-wide options turned on — reject-as-error, body errors, a call
// timeout, a fallback — and a later option beats an earlier one.
func TestOffFormsTurnOffAWiderLevel(t *testing.T) {
	fallback := func(req *http.Request, err error) (*http.Response, error) {
		return response(req, http.StatusTeapot, nil), nil
	}
	tr := New(newDep(200), WithRejectAsError(), WithBodyErrors(), WithCallTimeout(time.Second), WithFallback(fallback),
		WithPolicy("off.test", WithoutRejectAsError(), WithoutBodyErrors(), WithCallTimeout(0), WithFallback(nil)))
	requireTurnedOff(t, tr, "off.test", "on.test")
	ps := tr.policies.Load()
	require.Nil(t, ps.of("off.test").fallback)
	require.NotNil(t, ps.of("on.test").fallback)
	tr.Trip("on.test", time.Hour)
	resp, err := get(t, tr, "http://on.test/")
	require.NoError(t, err)
	require.Equal(t, http.StatusTeapot, resp.StatusCode, "the fallback")

	base := New(nil, WithRejectAsError(), WithoutRejectAsError(), WithBodyErrors(), WithoutBodyErrors()).policies.Load().base
	require.False(t, base.rejectAsError, "the later option wins")
	require.False(t, base.bodyErrors)
}
