// Package resty benchmarks resty v3's circuit breaker (resty.dev/v3
// CircuitBreakerRatio) taken out of the resty client and wrapped as an
// http.RoundTripper, with the scenarios of bench/internal/harness.
package resty

import (
	"net/http"

	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
	"resty.dev/v3"
)

// RoundTripper does what resty's Client.execute does around a request:
// Allow before, ApplyPolicies with a *resty.Response after.
type RoundTripper struct {
	next http.RoundTripper
	cb   *resty.CircuitBreakerRatio
}

// failurePolicy counts 5xx (resty's default policy) and, unlike the resty
// client, transport errors too: resty's client only reports an error to
// its breaker in half-open (through an unexported method a wrapper cannot
// call), so a dead dependency that never answers would never trip it.
func failurePolicy(r *resty.Response) bool { return r.RawResponse == nil || r.StatusCode() >= 500 }

// New returns a RoundTripper whose breaker trips at ≥50% failures of ≥20
// requests. resty's sliding window spans the reset timeout
// (cfg.OpenTimeout) in 10 buckets; ratio mode closes after one probe
// success.
func New(next http.RoundTripper, cfg harness.Config) *RoundTripper {
	return &RoundTripper{next: next, cb: resty.NewCircuitBreakerRatio(0.5, 20, cfg.OpenTimeout, failurePolicy)}
}

// RoundTrip implements http.RoundTripper.
func (t *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.cb.Allow(); err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(req)
	t.cb.ApplyPolicies(&resty.Response{RawResponse: resp})
	return resp, err
}

// Lib is this library in the shared scenarios.
var Lib = harness.ErrorLib("resty v3",
	func(next http.RoundTripper, cfg harness.Config) http.RoundTripper { return New(next, cfg) },
	resty.ErrCircuitBreakerOpen)
