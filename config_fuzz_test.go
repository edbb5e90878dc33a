package httpbreaker

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseConfig: no document panics ParseConfig, Options or New; a
// document ParseConfig accepts round-trips through json.Marshal to the same
// Config, which is accepted again, and New takes its options without a
// panic.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(configJSON))
	f.Add([]byte(`{"policies": {"*.internal": {"mode": "off"}, "a.internal:8443": {"queue": 2, "queue_wait": "1s", "max_concurrent": 1}}}`))
	f.Add([]byte(`{"retry_budget": {"ratio": 0.2, "min_per_second": 10}, "policies": {"[::1]:8080": {"jitter": 0}}}`))
	f.Add([]byte(`{"open_timeout": "2562047h47m16.854775807s", "window": "10ms"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		opts, err := c.Options()
		require.NoError(t, err)
		require.NotPanics(t, func() { New(nil, opts...) })
		b, err := json.Marshal(c)
		require.NoError(t, err)
		back, err := ParseConfig(b)
		require.NoError(t, err, "%s", b)
		b2, err := json.Marshal(back)
		require.NoError(t, err)
		require.JSONEq(t, string(b), string(b2))
	})
}

// FuzzSelector: a selector WithPolicy accepts never panics New, names its
// own example key, and reads back as itself.
func FuzzSelector(f *testing.F) {
	for _, s := range []string{"pay.internal", "pay.internal:8443", "*.internal", "api.github.com GET /search/issues",
		"[::1]:8080", "Pay.Internal.:08443", "*.Internal.", "x:", "a.:1:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := parseSelector(s)
		if err != nil {
			require.Panics(t, func() { New(nil, WithPolicy(s, WithMinRequests(3))) })
			return
		}
		require.NotPanics(t, func() { New(nil, WithPolicy(s, WithMinRequests(3))) }, "%q", s)
		require.True(t, sel.matches(sel.example()), "%q", s)
		if sel.kind != selWildcard {
			again, err := parseSelector(sel.host)
			require.NoError(t, err, "%q read as %q", s, sel.host)
			require.Equal(t, sel.kind, again.kind, "%q read as %q", s, sel.host)
			require.Equal(t, sel.host, again.host, "%q", s)
		}
	})
}
