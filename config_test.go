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
		{"a trailing space", `{"policies":{"pay.test ":{"min_requests":5}}}`, []string{`policies["pay.test "]`, "space"}},
		{"a leading space", `{"policies":{" pay.test GET /":{"min_requests":5}}}`, []string{`policies[" pay.test GET /"]`, "space"}},
		{"queue without a wait", `{"policies":{"pay":{"max_concurrent":2,"queue":3}}}`, []string{`policies["pay"].queue`, "wait"}},
		{"maximum below the open timeout", `{"max_open_timeout":"10s","policies":{"pay":{"open_timeout":"20s"}}}`, []string{`policies["pay"].max_open_timeout: must be at least open_timeout (20s)`}},
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

// TestConfigQueueHalvesInheritApart: "queue" and "queue_wait" each
// inherit on their own, in both directions.
func TestConfigQueueHalvesInheritApart(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"queue_wait": "1s", "max_concurrent": 2, "policies": {"pay.test": {"queue": 10}}}`))
	require.NoError(t, err, "a policy's queue under a Transport-wide queue_wait")
	opts, err := cfg.Options()
	require.NoError(t, err)
	pay := New(nil, opts...).policies.Load().of("pay.test")
	require.EqualValues(t, 10, pay.queue)
	require.Equal(t, time.Second, pay.queueWait, "inherited")

	cfg, err = ParseConfig([]byte(`{"queue": 4, "queue_wait": "1s", "max_concurrent": 2, "policies": {"pay.test": {"queue_wait": "3s"}}}`))
	require.NoError(t, err)
	opts, err = cfg.Options()
	require.NoError(t, err)
	pay = New(nil, opts...).policies.Load().of("pay.test")
	require.EqualValues(t, 4, pay.queue, "inherited, not reset to 0")
	require.Equal(t, 3*time.Second, pay.queueWait)
}

// TestConfigNarrowerLevelTurnsOffWhatAWiderOneTurnedOn: false and "0s"
// are values: reject-as-error, body errors and a call timeout turned on
// at the top are off for the policy that says so.
func TestConfigNarrowerLevelTurnsOffWhatAWiderOneTurnedOn(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"reject_as_error": true, "body_errors": true, "call_timeout": "1s",
		"policies": {"web.test": {"reject_as_error": false, "body_errors": false, "call_timeout": "0s"}}}`))
	require.NoError(t, err)
	opts, err := cfg.Options()
	require.NoError(t, err)
	requireTurnedOff(t, New(newDep(200), opts...), "web.test", "other.test")

	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.Contains(t, string(b), `"web.test":{"call_timeout":"0s","body_errors":false,"reject_as_error":false}`, "false round-trips")
}

// TestConfigRefusesWhatWouldBeIgnored: a selector or a field given twice
// (encoding/json would keep the last silently), two spellings of one
// selector, and null for a field are errors naming them, inside a
// composite value (retry_budget) too.
func TestConfigRefusesWhatWouldBeIgnored(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"policies": {"pricing.internal": {"min_requests": 5}, "pricing.internal": {"jitter": 0}}}`,
			`httpbreaker: Config: policies["pricing.internal"]: given twice`},
		{`{"policies": {"pay.test": {"queue": 1, "queue": 2}}}`, `httpbreaker: Config: policies["pay.test"].queue: given twice`},
		{`{"jitter": 0, "jitter": 0.5}`, `httpbreaker: Config: jitter: given twice`},
		{`{"policies": {}, "policies": {}}`, `httpbreaker: Config: policies: given twice`},
		{`{"policies": {"Pay.Test": {"min_requests": 5}, "pay.test": {"min_requests": 6}}}`,
			`httpbreaker: Config: policies["pay.test"]: names the same breakers as "Pay.Test": give each selector once`},
		{`{"jitter": null}`, `httpbreaker: Config: jitter: want a number, got null`},
		{`{"policies": {"pay.test": {"reject_as_error": null}}}`, `httpbreaker: Config: policies["pay.test"].reject_as_error: want true or false, got null`},
		{`{"policies": {"pay.test": null}}`, `httpbreaker: Config: policies["pay.test"]: want an object, got null`},
		{`{"policies": null}`, `httpbreaker: Config: policies: want an object, got null`},
		{`{"retry_budget": {"ratio": 0.1, "ratio": 0.5}}`, `httpbreaker: Config: retry_budget: ratio: given twice`},
		{`{"policies": {"pay.test": {"retry_budget": {"min_per_second": 1, "ratio": 0.2, "min_per_second": 5}}}}`,
			`httpbreaker: Config: policies["pay.test"].retry_budget: min_per_second: given twice`},
		{`{"retry_budget": {"ratio": null, "min_per_second": 1}}`, `httpbreaker: Config: retry_budget: ratio: want a number, got null`},
	} {
		_, err := ParseConfig([]byte(tc.json))
		require.EqualError(t, err, tc.want, tc.json)
	}
}

// TestConfigErrorsSpeakTheFilesTerms: a relation that does not hold and
// a value of the wrong type are told with the file's names and forms, at
// the top level and in a policy.
func TestConfigErrorsSpeakTheFilesTerms(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"open_timeout": "30s", "max_open_timeout": "10s"}`, `httpbreaker: Config: max_open_timeout: must be at least open_timeout (30s)`},
		{`{"policies": {"pricing.internal": {"open_timeout": "30s", "max_open_timeout": "10s"}}}`,
			`httpbreaker: Config: policies["pricing.internal"].max_open_timeout: must be at least open_timeout (30s)`},
		{`{"max_concurrent": 1, "policies": {"pay.test": {"queue": 3}}}`,
			`httpbreaker: Config: policies["pay.test"].queue_wait: must be positive while queue is 3, got 0s`},
		{`{"window": 10}`, `httpbreaker: Config: window: want a duration such as "800ms", got 10`},
		{`{"window": "10"}`, `httpbreaker: Config: window: want a duration such as "800ms", got "10"`},
		{`{"window": "99999999h"}`, `httpbreaker: Config: window: "99999999h" is out of range: at most 2562047h47m16.854775807s`},
		{`{"policies": {"pay.test": {"open_timeout": "1.5h9999999999m"}}}`,
			`httpbreaker: Config: policies["pay.test"].open_timeout: "1.5h9999999999m" is out of range: at most 2562047h47m16.854775807s`},
		{`{"window": "10sm"}`, `httpbreaker: Config: window: want a duration such as "800ms", got "10sm"`},
		{`{"window": "1..5s"}`, `httpbreaker: Config: window: want a duration such as "800ms", got "1..5s"`},
		{`{"window": "10s",}`, `httpbreaker: Config: invalid character '}' looking for beginning of object key string`},
		{`{"window": "10s"} {}`, `httpbreaker: Config: invalid character '{' after top-level value`},
		{`{"policies": {"pay.test": {"min_requests": "5"}}}`, `httpbreaker: Config: policies["pay.test"].min_requests: want a whole number, got "5"`},
		{`{"min_requests": 2.5}`, `httpbreaker: Config: min_requests: want a whole number, got 2.5`},
		{`{"failure_rate": "high"}`, `httpbreaker: Config: failure_rate: want a number, got "high"`},
		{`{"reject_as_error": "yes"}`, `httpbreaker: Config: reject_as_error: want true or false, got "yes"`},
		{`{"mode": 1}`, `httpbreaker: Config: mode: want "enforce", "shadow" or "off", got 1`},
		{`{"policies": []}`, `httpbreaker: Config: policies: want an object, got []`},
		{`{"policies": {"pay.test": 3}}`, `httpbreaker: Config: policies["pay.test"]: want an object, got 3`},
		{`{"policies": {"pay.test": {"failure_rat": 0.3}}}`, `httpbreaker: Config: policies["pay.test"]: unknown field "failure_rat"`},
		{`{"polices": {}}`, `httpbreaker: Config: unknown field "polices"`},
	} {
		_, err := ParseConfig([]byte(tc.json))
		require.EqualError(t, err, tc.want, tc.json)
	}
}

// TestConfigAsAFieldOfAServiceConfig holds Config's doc to what it says:
// as a named field, a Config decodes beside the service's own fields;
// embedded without a name, its UnmarshalJSON takes the whole document
// and refuses them as unknown.
func TestConfigAsAFieldOfAServiceConfig(t *testing.T) {
	doc := []byte(`{"port": 8080, "breaker": {"failure_rate": 0.25}}`)
	var named struct {
		Port    int    `json:"port"`
		Breaker Config `json:"breaker"`
	}
	require.NoError(t, json.Unmarshal(doc, &named))
	require.Equal(t, 8080, named.Port)
	require.Equal(t, 0.25, *named.Breaker.FailureRate)

	var embedded struct {
		Config
		Port int `json:"port"`
	}
	require.EqualError(t, json.Unmarshal([]byte(`{"port": 8080, "failure_rate": 0.25}`), &embedded),
		`httpbreaker: Config: unknown field "port"`)
}

// TestConfigWrongTypeInsideRetryBudgetNamesTheMember: a member of
// retry_budget's object of the wrong type is told by its name and the
// form it wants, as a null member is, not as if the object were missing.
func TestConfigWrongTypeInsideRetryBudgetNamesTheMember(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"retry_budget": {"ratio": "0.2", "min_per_second": 10}}`,
			`httpbreaker: Config: retry_budget: ratio: want a number, got string`},
		{`{"policies": {"pay.test": {"retry_budget": {"ratio": 0.2, "min_per_second": true}}}}`,
			`httpbreaker: Config: policies["pay.test"].retry_budget: min_per_second: want a number, got bool`},
	} {
		_, err := ParseConfig([]byte(tc.json))
		require.EqualError(t, err, tc.want, tc.json)
	}
}

// TestConfigRetryBudgetNeedsBothMembers: a member left out of
// retry_budget's object would be zero, as a null one would: refused as
// null is, so that {} or {"ratio": 0.2} does not silently turn off (or
// halve) a budget; the off form is {"ratio": 0, "min_per_second": 0}.
func TestConfigRetryBudgetNeedsBothMembers(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"retry_budget": {}}`, `httpbreaker: Config: retry_budget: ratio: missing`},
		{`{"retry_budget": {"ratio": 0.2}}`, `httpbreaker: Config: retry_budget: min_per_second: missing`},
		{`{"policies": {"pay.test": {"retry_budget": {"min_per_second": 5}}}}`,
			`httpbreaker: Config: policies["pay.test"].retry_budget: ratio: missing`},
	} {
		_, err := ParseConfig([]byte(tc.json))
		require.EqualError(t, err, tc.want, tc.json)
	}
	_, err := ParseConfig([]byte(`{"retry_budget": {"ratio": 0, "min_per_second": 0}}`))
	require.NoError(t, err, "the off form")
	_, err = ParseConfig([]byte(`{"window": "10s",}`))
	var syntax *json.SyntaxError
	require.ErrorAs(t, err, &syntax, "a file that is not JSON keeps encoding/json's error, wrapped")
}

// TestConfigNumberOutOfRangeIsNotAWrongType: a whole number too large for
// its field is out of range, not "want a whole number".
func TestConfigNumberOutOfRangeIsNotAWrongType(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"min_requests": 99999999999999999999}`, `httpbreaker: Config: min_requests: 99999999999999999999 is out of range`},
		{`{"policies": {"pay.test": {"max_concurrent": -99999999999999999999}}}`,
			`httpbreaker: Config: policies["pay.test"].max_concurrent: -99999999999999999999 is out of range`},
		{`{"failure_rate": 1e400}`, `httpbreaker: Config: failure_rate: 1e400 is out of range`},
		{`{"min_requests": 2.5}`, `httpbreaker: Config: min_requests: want a whole number, got 2.5`},
	} {
		_, err := ParseConfig([]byte(tc.json))
		require.EqualError(t, err, tc.want, tc.json)
	}
}
