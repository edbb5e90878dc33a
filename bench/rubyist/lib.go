// Package rubyist benchmarks github.com/rubyist/circuitbreaker wrapped as
// an http.RoundTripper, with the scenarios of bench/internal/harness.
package rubyist

import (
	"net/http"

	"github.com/cenk/backoff"
	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
	circuit "github.com/rubyist/circuitbreaker"
)

// RoundTripper sends each request through one circuit.Breaker with
// CallContext (no timeout, so no goroutine). The breaker counts only
// errors: a 5xx response is handed to it as harness.ErrServer and
// returned to the caller as the response it is.
type RoundTripper struct {
	next http.RoundTripper
	cb   *circuit.Breaker
}

// New returns a RoundTripper whose breaker is a rate breaker (≥50% of ≥20
// samples in its default 10s window) that waits a constant
// cfg.OpenTimeout before letting a trial request through.
func New(next http.RoundTripper, cfg harness.Config) *RoundTripper {
	return &RoundTripper{next: next, cb: circuit.NewBreakerWithOptions(&circuit.Options{
		ShouldTrip: circuit.RateTripFunc(0.5, 20),
		BackOff:    backoff.NewConstantBackOff(cfg.OpenTimeout),
	})}
}

// RoundTrip implements http.RoundTripper.
func (t *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var resp *http.Response
	err := t.cb.CallContext(req.Context(), func() (err error) {
		resp, err = harness.Call(t.next, req)
		return err
	}, 0)
	return harness.Result(resp, err)
}

// Lib is this library in the shared scenarios.
var Lib = harness.ErrorLib("rubyist/circuitbreaker",
	func(next http.RoundTripper, cfg harness.Config) http.RoundTripper { return New(next, cfg) },
	circuit.ErrBreakerOpen)
