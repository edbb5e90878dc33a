// Package httpbreaker benchmarks github.com/httpbreaker/httpbreaker with
// the scenarios of bench/internal/harness.
package httpbreaker

import (
	"net/http"

	hb "github.com/httpbreaker/httpbreaker"
	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
)

func opts(cfg harness.Config, extra ...hb.Option) []hb.Option {
	o := []hb.Option{hb.WithOpenTimeout(cfg.OpenTimeout), hb.WithMaxOpenTimeout(max(cfg.OpenTimeout, 60e9))}
	return append(o, extra...)
}

// Lib is httpbreaker as the harness sees it: one Transport with its
// default HostKey serves both the single-dependency and the per-host
// scenarios (keying by host is what it does), WithRoutes the route one.
var Lib = harness.Lib{
	Name: "httpbreaker",
	One: func(next http.RoundTripper, cfg harness.Config) http.RoundTripper {
		return hb.New(next, opts(cfg)...)
	},
	PerHost: func(next http.RoundTripper, cfg harness.Config) http.RoundTripper {
		return hb.New(next, opts(cfg)...)
	},
	Route: func(next http.RoundTripper, cfg harness.Config, patterns []string) http.RoundTripper {
		return hb.New(next, opts(cfg, hb.WithRoutes(patterns...))...)
	},
	Open: map[string]harness.OpenMode{
		"error": {
			Wrap: func(next http.RoundTripper, cfg harness.Config) http.RoundTripper {
				return hb.New(next, opts(cfg, hb.WithRejectAsError())...)
			},
			Rejected: harness.IsErr(hb.ErrOpen),
		},
		"503": {
			Wrap: func(next http.RoundTripper, cfg harness.Config) http.RoundTripper {
				return hb.New(next, opts(cfg)...)
			},
			Rejected: func(resp *http.Response, _ error) bool { return hb.IsRejected(resp) },
		},
	},
}
