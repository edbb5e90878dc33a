// Package eapache benchmarks github.com/eapache/go-resiliency/breaker
// wrapped as an http.RoundTripper, with the scenarios of
// bench/internal/harness.
package eapache

import (
	"net/http"

	"github.com/eapache/go-resiliency/breaker"
	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
)

// RoundTripper sends each request through one breaker.Breaker. The
// breaker counts only errors: a 5xx response is handed to it as
// harness.ErrServer and returned to the caller as the response it is.
type RoundTripper struct {
	next http.RoundTripper
	b    *breaker.Breaker
}

// New returns a RoundTripper whose breaker opens after 10 errors with no
// error-free gap of cfg.OpenTimeout (go-resiliency has no rate and no
// minimum volume: 10 ≈ 50% of httpbreaker's 20), stays open
// cfg.OpenTimeout, and closes after 3 successes.
func New(next http.RoundTripper, cfg harness.Config) *RoundTripper {
	return &RoundTripper{next: next, b: breaker.New(10, 3, cfg.OpenTimeout)}
}

// RoundTrip implements http.RoundTripper.
func (t *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var resp *http.Response
	err := t.b.Run(func() error {
		var err error
		resp, err = t.next.RoundTrip(req)
		if err == nil && resp.StatusCode >= 500 {
			return harness.ErrServer
		}
		return err
	})
	if err == harness.ErrServer {
		return resp, nil
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

var Lib = harness.Lib{
	Name: "eapache/go-resiliency",
	One:  func(next http.RoundTripper, cfg harness.Config) http.RoundTripper { return New(next, cfg) },
	PerHost: func(next http.RoundTripper, cfg harness.Config) http.RoundTripper {
		return harness.NewHostMap(func() http.RoundTripper { return New(next, cfg) })
	},
	Open: map[string]harness.OpenMode{"error": {
		Wrap:     func(next http.RoundTripper, cfg harness.Config) http.RoundTripper { return New(next, cfg) },
		Rejected: harness.IsErr(breaker.ErrBreakerOpen),
	}},
}
