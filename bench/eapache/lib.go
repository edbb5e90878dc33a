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
	err := t.b.Run(func() (err error) {
		resp, err = harness.Call(t.next, req)
		return err
	})
	return harness.Result(resp, err)
}

// Lib is this library in the shared scenarios.
var Lib = harness.ErrorLib("eapache/go-resiliency",
	func(next http.RoundTripper, cfg harness.Config) http.RoundTripper { return New(next, cfg) },
	breaker.ErrBreakerOpen)
