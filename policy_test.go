package httpbreaker

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// minOf returns the MinRequests the breaker of key resolves to in tr.
func minOf(t *testing.T, tr *Transport, key string) int64 {
	t.Helper()
	p, err := tr.policies.Load().resolve(key)
	require.NoError(t, err)
	return p.minRequests
}

func TestPolicySelectorForms(t *testing.T) {
	tr := New(nil,
		WithMinRequests(20),
		WithPolicy("payments.internal", WithMinRequests(2)),
		WithPolicy("Pay.Internal:8443", WithMinRequests(3)),
		WithPolicy("*.corp.example", WithMinRequests(4)),
		WithPolicy("api.github.com GET /search/issues", WithMinRequests(5)),
		WithPolicy("tenant-a", WithMinRequests(6)),
	)
	for _, tc := range []struct {
		key  string
		want int64
	}{
		{"payments.internal", 2},                           // a host: its host key
		{"payments.internal:8443", 2},                      // on any port
		{"payments.internal POST /v1/charges", 2},          // and its route keys
		{"payments.internal.evil", 20},                     // not a suffix match
		{"pay.internal:8443", 3},                           // host and port, lower-cased
		{"pay.internal:8443 GET /x", 3},                    // its route keys too
		{"pay.internal", 20},                               // not on another port
		{"pay.internal:443", 20},                           //
		{"a.corp.example", 4},                              // a wildcard
		{"a.b.corp.example:8080 GET /", 4},                 // any depth, any port
		{"corp.example", 20},                               // not the suffix itself
		{"xcorp.example", 20},                              //
		{"api.github.com GET /search/issues", 5},           // a whole key
		{"api.github.com GET /search/code", 20},            //
		{"api.github.com", 20},                             //
		{"tenant-a", 6},                                    // a custom KeyFunc's key
		{"tenant-ab", 20},                                  //
		{"[::1]:8443", 20},                                 // IPv6 literal, no rule
		{"payments.internal:notaport", 20},                 // not a port: the whole thing is the host
		{"payments.internal:8443 GET /v1/charges/{id}", 2}, //
	} {
		require.Equal(t, tc.want, minOf(t, tr, tc.key), tc.key)
	}
}

// TestSelectorsReadAsKeysAre: a selector's host is read exactly as
// HostKey reads a key's: lower case, no trailing dot (on a wildcard too),
// an empty port for none, no leading zeros in a port. So each selector
// below names the keys a request for it gets.
func TestSelectorsReadAsKeysAre(t *testing.T) {
	for _, tc := range []struct {
		selector string
		names    []string // keys it names
		not      []string // keys it does not
	}{
		{"*.internal.", []string{"payments.internal", "a.b.internal:8443 GET /x"}, []string{"internal", "payments.internal.evil"}},
		{"*.Internal..", []string{"payments.internal"}, []string{"internal"}},
		{"*.internal:", []string{"payments.internal", "payments.internal:8443"}, []string{"internal"}},
		{"Payments.Internal.", []string{"payments.internal", "payments.internal:8443", "payments.internal GET /v1"}, []string{"pay.internal"}},
		{"payments.internal:", []string{"payments.internal", "payments.internal:8443"}, []string{"pay.internal"}},
		{"payments.internal.:08443", []string{"payments.internal:8443", "payments.internal:8443 GET /v1"}, []string{"payments.internal", "payments.internal:443"}},
		{"API.GitHub.com.:0443 GET /search", []string{"api.github.com:443 GET /search"}, []string{"api.github.com GET /search", "api.github.com:443"}},
		{"api.github.com: GET /search", []string{"api.github.com GET /search"}, []string{"api.github.com"}},
	} {
		tr := New(nil, WithMinRequests(20), WithPolicy(tc.selector, WithMinRequests(2)))
		for _, k := range tc.names {
			require.EqualValues(t, 2, minOf(t, tr, k), "%q names %q", tc.selector, k)
		}
		for _, k := range tc.not {
			require.EqualValues(t, 20, minOf(t, tr, k), "%q does not name %q", tc.selector, k)
		}
	}
	// Keys are read the same way before they are matched: an operator's or
	// a KeyFunc's spelling of a key meets the selector its reading meets.
	tr := New(nil, WithMinRequests(20), WithPolicy("*.internal", WithMinRequests(2)))
	for _, k := range []string{"Payments.Internal.", "payments.internal:", "payments.internal.:0080 GET /x"} {
		require.EqualValues(t, 2, minOf(t, tr, k), k)
	}
	// What is left of a wildcard once read must still name a suffix.
	for _, s := range []string{"*..", "*.:", "*.internal:80", "*..internal"} {
		msg := panicMessage(t, func() { New(nil, WithPolicy(s, WithMinRequests(2))) })
		require.Contains(t, msg, "WithPolicy", s)
		require.Contains(t, msg, s, s)
	}
	// A suffix that leaves no room for a host in a key names no breaker.
	long := "*." + strings.Repeat("a", maxKeyLen-1)
	require.Contains(t, panicMessage(t, func() { New(nil, WithPolicy(long, WithMinRequests(2))) }), "leaves no room for a host")
	fits := "*." + strings.Repeat("a", maxKeyLen-3)
	tr = New(nil, WithMinRequests(20), WithPolicy(fits, WithMinRequests(2)))
	require.EqualValues(t, 2, minOf(t, tr, "b"+fits[1:]), "the longest suffix that a host fits under")
}

// TestSelectorPortIsNeverTheDefault: a key leaves out its scheme's
// default port, so a selector with port 443 names plain-http calls to
// port 443, never https ones, which the host selector names.
func TestSelectorPortIsNeverTheDefault(t *testing.T) {
	tr := New(newDep(200), WithMinRequests(20),
		WithPolicy("payments.internal:443", WithMinRequests(3)),
		WithPolicy("payments.internal", WithMinRequests(4)))
	for u, want := range map[string]int64{
		"http://payments.internal:443/":  3,
		"https://payments.internal:443/": 4,
		"https://payments.internal/":     4,
	} {
		key := HostKey(mustReq(t, u))
		require.EqualValues(t, want, minOf(t, tr, key), "%s, keyed %q", u, key)
	}
}

func TestPolicyPrecedence(t *testing.T) {
	// Each pair: the narrower selector wins over the wider one, whatever
	// the order they are given in.
	const key = "a.b.internal:8443 GET /x"
	for _, tc := range []struct {
		name          string
		wide, narrow  string
		wantNarrowWin bool
	}{
		{"shorter wildcard < longer wildcard", "*.internal", "*.b.internal", true},
		{"wildcard < host", "*.b.internal", "a.b.internal", true},
		{"host < host:port", "a.b.internal", "a.b.internal:8443", true},
		{"host:port < whole key", "a.b.internal:8443", key, true},
		{"wildcard < whole key", "*.internal", key, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range []string{"wide first", "narrow first"} {
				wide := WithPolicy(tc.wide, WithMinRequests(7))
				narrow := WithPolicy(tc.narrow, WithMinRequests(9))
				opts := []Option{wide, narrow}
				if order == "narrow first" {
					opts = []Option{narrow, wide}
				}
				require.EqualValues(t, 9, minOf(t, New(nil, opts...), key), order)
			}
		})
	}
	t.Run("each level applies only what it names", func(t *testing.T) {
		tr := New(nil, WithFailureRate(0.9), WithOpenTimeout(2*time.Second),
			WithPolicy("*.internal", WithMinRequests(3)),
			WithPolicy("a.b.internal", WithFailureRate(0.25)))
		p, err := tr.policies.Load().resolve(key)
		require.NoError(t, err)
		require.EqualValues(t, 3, p.minRequests)
		require.Equal(t, 0.25, p.failureRate)
		require.Equal(t, 2*time.Second, p.openTimeout, "Transport-wide")
		require.Equal(t, 0.2, p.jitter, "default")
	})
	t.Run("the same selector twice applies both, the later winning", func(t *testing.T) {
		tr := New(nil, WithPolicy("h", WithMinRequests(3), WithFailureRate(0.3)), WithPolicy("h", WithMinRequests(4)))
		p, err := tr.policies.Load().resolve("h")
		require.NoError(t, err)
		require.EqualValues(t, 4, p.minRequests)
		require.Equal(t, 0.3, p.failureRate)
	})
	t.Run("a key no selector names shares the Transport-wide policy", func(t *testing.T) {
		tr := New(nil, WithPolicy("h", WithMinRequests(3)))
		p, err := tr.policies.Load().resolve("other")
		require.NoError(t, err)
		require.Same(t, tr.policies.Load().base, p)
	})
}

func TestPolicyBadSelectorsAndOptionsPanic(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Option
		want []string // all in the panic message
	}{
		{"empty", WithPolicy("", WithMinRequests(1)), []string{"WithPolicy", `""`}},
		{"star", WithPolicy("*", WithMinRequests(1)), []string{"WithPolicy", `"*"`}},
		{"star dot", WithPolicy("*.", WithMinRequests(1)), []string{"WithPolicy", `"*."`}},
		{"inner star", WithPolicy("a.*.internal", WithMinRequests(1)), []string{"WithPolicy", "a.*.internal"}},
		{"trailing star", WithPolicy("api.*", WithMinRequests(1)), []string{"WithPolicy", "api.*"}},
		{"double star", WithPolicy("*.*.internal", WithMinRequests(1)), []string{"WithPolicy", "*.*.internal"}},
		{"star in a key", WithPolicy("*.x GET /", WithMinRequests(1)), []string{"WithPolicy", "*.x GET /"}},
		{"IPv6 without brackets", WithPolicy("::1", WithMinRequests(1)), []string{"WithPolicy", `"::1"`, `"[::1]:8080"`}},
		{"IPv6 and port without brackets", WithPolicy("fe80::1:8080", WithMinRequests(1)), []string{"WithPolicy", "in brackets"}},
		{"space before a trailing dot", WithPolicy("pay\t.", WithMinRequests(1)), []string{"WithPolicy", `reads as "pay\t"`, "ends with a space"}},
		{"space before a wildcard's dot", WithPolicy("*.x\t.", WithMinRequests(1)), []string{"WithPolicy", `reads as ".x\t"`}},
		{"WithKeyFunc", WithPolicy("h", WithKeyFunc(HostKey)), []string{"WithPolicy", "WithKeyFunc"}},
		{"WithRoutes", WithPolicy("h", WithRoutes("/x")), []string{"WithPolicy", "WithRoutes"}},
		{"WithMaxBreakers", WithPolicy("h", WithMaxBreakers(5)), []string{"WithPolicy", "WithMaxBreakers"}},
		{"WithMetrics", WithPolicy("h", WithMetrics(prometheus.NewRegistry())), []string{"WithPolicy", "WithMetrics"}},
		{"WithLogger", WithPolicy("h", WithLogger(slog.Default())), []string{"WithPolicy", "WithLogger"}},
		{"WithOnTransition", WithPolicy("h", WithOnTransition(nil)), []string{"WithPolicy", "WithOnTransition"}},
		{"WithObserver", WithPolicy("h", WithObserver(nopObserver{})), []string{"WithPolicy", "WithObserver"}},
		{"WithStore", WithPolicy("h", WithStore(&memStore{})), []string{"WithPolicy", "WithStore"}},
		{"WithPolicy", WithPolicy("h", WithPolicy("g", WithMinRequests(1))), []string{"WithPolicy", `"h"`}},
		{"nil option", WithPolicy("h", nil), []string{"WithPolicy", "nil Option"}},
		{"invalid value", WithPolicy("h", WithFailureRate(2)), []string{"WithFailureRate", `"h"`}},
		{"relation in a policy", WithPolicy("h", WithMaxOpenTimeout(time.Second)), []string{"WithMaxOpenTimeout", `"h"`}},
		{"relation across levels", WithPolicy("*.x", WithOpenTimeout(time.Minute)), []string{"WithMaxOpenTimeout", `"*.x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{tc.opt}
			if tc.name == "relation across levels" {
				opts = append(opts, WithMaxOpenTimeout(30*time.Second))
			}
			msg := panicMessage(t, func() { New(nil, opts...) })
			for _, w := range tc.want {
				require.Contains(t, msg, w)
			}
		})
	}
}

// TestPolicyKeysTripApart: two hosts in one Transport; one trips at its
// own MinRequests while the other, on the defaults, does not.
func TestPolicyKeysTripApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithPolicy("strict.test", WithMinRequests(3)))
		for range 3 {
			_, _ = get(t, tr, "http://strict.test/")
			_, _ = get(t, tr, "http://lenient.test/")
		}
		require.Equal(t, StateOpen, tr.State("strict.test"))
		require.Equal(t, StateClosed, tr.State("lenient.test"))
		s := tr.Snapshot()
		require.Len(t, s, 2)
		require.EqualValues(t, 20, s[0].Settings.MinRequests, s[0].Key)
		require.EqualValues(t, 3, s[1].Settings.MinRequests, s[1].Key)
	})
}

// TestPolicyFallbacksAndRejectionApart: fallbacks, classifiers and the
// error mode per dependency.
func TestPolicyFallbacksAndRejectionApart(t *testing.T) {
	d := newDep(200)
	degraded := func(req *http.Request, err error) (*http.Response, error) {
		return response(req, http.StatusOK, http.Header{"X-Degraded": {"1"}}), nil
	}
	tr := New(d,
		WithPolicy("recs.test", WithFallback(degraded)),
		WithPolicy("pay.test", WithRejectAsError()),
		WithPolicy("s3.test", WithClassifier(func(*http.Request, *http.Response, error) Outcome { return OutcomeThrottled })))
	for _, h := range []string{"recs.test", "pay.test", "other.test"} {
		tr.Trip(h, time.Hour)
	}
	resp, err := get(t, tr, "http://recs.test/")
	require.NoError(t, err)
	require.Equal(t, "1", resp.Header.Get("X-Degraded"))
	_, err = get(t, tr, "http://pay.test/")
	require.ErrorIs(t, err, ErrOpen)
	resp, err = get(t, tr, "http://other.test/")
	require.NoError(t, err)
	require.True(t, IsRejected(resp))
	_, err = get(t, tr, "http://s3.test/")
	require.NoError(t, err)
	for _, s := range tr.Snapshot() {
		if s.Key == "s3.test" {
			require.EqualValues(t, 1, s.Throttled, "s3.test's own classifier")
		}
	}
}

// TestPolicyCostsNothingPerRequest: a policy is resolved once, when the
// breaker is made.
func TestPolicyCostsNothingPerRequest(t *testing.T) {
	tr := New(newDep(200), WithPolicy("api.test", WithMinRequests(3)))
	_, _ = get(t, tr, testURL)
	p := tr.breakers.get(testKey).pol.Load()
	for range 10 {
		_, _ = get(t, tr, testURL)
	}
	require.Same(t, p, tr.breakers.get(testKey).pol.Load())
	plain := New(newStub())
	var policies []Option
	for i := range 50 {
		policies = append(policies, WithPolicy("h"+itoaTest(i)+".test", WithMinRequests(3)))
	}
	tuned := New(newStub(), append(policies, WithPolicy("api.test", WithMinRequests(3)))...)
	req := mustReq(t, testURL)
	for _, tr := range []*Transport{plain, tuned} {
		require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = tr.RoundTrip(req) }))
	}
}

// TestPolicyWildcardWithPortIsChecked: the options inside a wildcard
// selector with a port are checked like any other: an invalid one makes
// New panic rather than apply silently to no breaker.
func TestPolicyWildcardWithPortIsChecked(t *testing.T) {
	require.Panics(t, func() {
		New(newDep(200), WithPolicy("*.internal:8443", WithFailureRate(7)))
	}, "an invalid option inside WithPolicy must make New panic")
}

// TestPolicySelectorMatchesAMixedCaseCustomKey: a selector naming a key
// that a custom KeyFunc returns in mixed case matches it.
func TestPolicySelectorMatchesAMixedCaseCustomKey(t *testing.T) {
	tr := New(newDep(200), WithKeyFunc(func(*http.Request) string { return "Billing" }),
		WithPolicy("Billing", WithMinRequests(3)))
	_, _ = get(t, tr, testURL)
	s := tr.Snapshot()
	require.Len(t, s, 1)
	require.EqualValues(t, 3, s[0].Settings.MinRequests, "the policy of the key the KeyFunc returns")
}

// TestPolicySelectorLowerCasesAsHostKey: a selector's host is
// lower-cased as HostKey lower-cases it, beyond ASCII too.
func TestPolicySelectorLowerCasesAsHostKey(t *testing.T) {
	tr := New(newDep(200), WithPolicy("ÄPI.test", WithMinRequests(3)))
	_, err := get(t, tr, "http://ÄPI.test/")
	require.NoError(t, err)
	s := tr.Snapshot()
	require.Len(t, s, 1)
	require.Equal(t, "äpi.test", s[0].Key)
	require.EqualValues(t, 3, s[0].Settings.MinRequests, "selector host lower-cased as HostKey does")
}

// TestPolicyStarInAWholeKeySelectorPanics: a "*" inside a whole-key
// selector is refused by New's panic, as a bad selector.
func TestPolicyStarInAWholeKeySelectorPanics(t *testing.T) {
	require.Panics(t, func() { New(nil, WithPolicy("api.test GET /v1/*", WithMinRequests(3))) })
}

// TestPolicyWildcardCheckedApartFromAHostItCovers: a wildcard's settings
// are checked on a key that only wildcards name, so a host selector
// that happens to be spelled like the key the check uses neither hides
// a wildcard that is invalid for every other host (whose breakers would
// silently run under the Transport-wide policy) nor takes the blame for
// a conflict that is its own.
func TestPolicyWildcardCheckedApartFromAHostItCovers(t *testing.T) {
	require.PanicsWithValue(t, `httpbreaker: WithMaxOpenTimeout: maximum open timeout 1m30s is shorter than the open timeout 2m0s (in WithPolicy("*.internal", ...))`, func() {
		New(nil, WithMaxOpenTimeout(90*time.Second),
			WithPolicy("*.internal", WithOpenTimeout(2*time.Minute)),
			WithPolicy("x.internal", WithMaxOpenTimeout(3*time.Minute)))
	})
	_, err := ParseConfig([]byte(`{"policies": {"*.internal": {"max_open_timeout": "90s"}, "x.internal": {"open_timeout": "2m"}}}`))
	require.EqualError(t, err, `httpbreaker: Config: policies["x.internal"].max_open_timeout: must be at least open_timeout (2m0s)`)
}
