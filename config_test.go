package httpbreaker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const configJSON = `{
  "failure_rate": 0.6,
  "jitter": 0,
  "open_timeout": "2s",
  "policies": {
    "payments.internal": {"failure_rate": 0.25, "open_timeout": "30s", "max_concurrent": 40, "queue": 5, "queue_wait": "800ms"},
    "recs.internal": {"call_timeout": "150ms", "max_concurrent": 10, "mode": "shadow"},
    "api.github.com GET /search/issues": {"min_requests": 5, "reject_as_error": true}
  }
}`

func TestConfigDecodesIntoOptions(t *testing.T) {
	var cfg Config
	require.NoError(t, json.Unmarshal([]byte(configJSON), &cfg))
	opts, err := cfg.Options()
	require.NoError(t, err)
	tr := New(nil, opts...)
	ps := tr.policies.Load()
	base := ps.base
	require.Equal(t, 0.6, base.failureRate)
	require.Zero(t, base.jitter, "an explicit zero is a value")
	require.Equal(t, 2*time.Second, base.openTimeout)
	require.EqualValues(t, 20, base.minRequests, "unset: the default")

	pay := ps.of("payments.internal:443")
	require.Equal(t, 0.25, pay.failureRate)
	require.Equal(t, 30*time.Second, pay.openTimeout)
	require.Equal(t, 60*time.Second, pay.maxOpenTimeout)
	require.EqualValues(t, 40, pay.maxConcurrent)
	require.EqualValues(t, 5, pay.queue)
	require.Equal(t, 800*time.Millisecond, pay.queueWait)
	require.Zero(t, pay.jitter, "inherited from the top level")

	recs := ps.of("recs.internal")
	require.Equal(t, ModeShadow, recs.mode)
	require.Equal(t, 150*time.Millisecond, recs.callTimeout)
	require.Equal(t, 0.6, recs.failureRate, "inherited")

	gh := ps.of("api.github.com GET /search/issues")
	require.EqualValues(t, 5, gh.minRequests)
	require.True(t, gh.rejectAsError)
	require.False(t, ps.of("api.github.com").rejectAsError)
}

func TestConfigRoundTrips(t *testing.T) {
	var cfg Config
	require.NoError(t, json.Unmarshal([]byte(configJSON), &cfg))
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	var back Config
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, cfg, back)
	require.JSONEq(t, configJSON, string(b))
}

func TestConfigBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       []string // all in the error
	}{
		{"negative duration", `{"policies":{"pay":{"open_timeout":"-1s"}}}`, []string{`policies["pay"].open_timeout`, "positive"}},
		{"rate of 1.5", `{"policies":{"pay":{"failure_rate":1.5}}}`, []string{`policies["pay"].failure_rate`, "1.5"}},
		{"rate at the top", `{"failure_rate":0}`, []string{"failure_rate", "(0, 1]"}},
		{"unknown mode", `{"policies":{"pay":{"mode":"Shadow"}}}`, []string{`policies["pay"]`, "mode", "Shadow"}},
		{"unknown field", `{"policies":{"pay":{"failure_rat":0.3}}}`, []string{`policies["pay"]`, "failure_rat"}},
		{"unknown top field", `{"polices":{}}`, []string{"polices"}},
		{"not a duration", `{"window":"10"}`, []string{"window", `"10"`}},
		{"a string for a number", `{"policies":{"pay":{"min_requests":"5"}}}`, []string{`policies["pay"]`, "min_requests"}},
		{"bad selector", `{"policies":{"*":{"min_requests":5}}}`, []string{`policies["*"]`}},
		{"bad wildcard", `{"policies":{"a.*.b":{"min_requests":5}}}`, []string{`policies["a.*.b"]`}},
		{"queue without a wait", `{"policies":{"pay":{"max_concurrent":2,"queue":3}}}`, []string{`policies["pay"].queue`, "wait"}},
		{"maximum below the open timeout", `{"max_open_timeout":"10s","policies":{"pay":{"open_timeout":"20s"}}}`, []string{"WithMaxOpenTimeout", `"pay"`}},
		{"negative min", `{"min_requests":-3}`, []string{"min_requests", "-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.json))
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestConfigUpdate(t *testing.T) {
	tr := New(nil)
	cfg, err := ParseConfig([]byte(configJSON))
	require.NoError(t, err)
	opts, err := cfg.Options()
	require.NoError(t, err)
	require.NoError(t, tr.Update(opts...))
	require.Equal(t, 0.25, tr.policies.Load().of("payments.internal").failureRate)
}

func TestParseConfigRefusesTrailingDataAndNull(t *testing.T) {
	for _, bad := range []string{`{"min_requests": 3} {"min_requests": 5}`, `{"min_requests": 3} garbage`, `{"min_requests": 3}]`, `null`, ` null `} {
		_, err := ParseConfig([]byte(bad))
		require.Error(t, err, bad)
	}
	_, err := ParseConfig([]byte(`{"mode": "x"}`))
	require.ErrorContains(t, err, `httpbreaker: Config: mode: unknown mode "x"`, "one prefix")
}
