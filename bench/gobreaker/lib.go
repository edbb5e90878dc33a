// Package gobreaker benchmarks github.com/sony/gobreaker/v2 wrapped as an
// http.RoundTripper, with the scenarios of bench/internal/harness.
package gobreaker

import (
	"net/http"
	"time"

	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
	gb "github.com/sony/gobreaker/v2"
)

// RoundTripper sends each request through one gobreaker.CircuitBreaker.
// gobreaker counts only errors, so a 5xx response is handed to it as
// harness.ErrServer and returned to the caller as the response it is.
type RoundTripper struct {
	next http.RoundTripper
	cb   *gb.CircuitBreaker[*http.Response]
}

// New returns a RoundTripper with httpbreaker's default thresholds:
// rolling 10s window in 1s buckets, trip at ≥50% failures of ≥20
// requests, one half-open probe.
func New(next http.RoundTripper, cfg harness.Config) *RoundTripper {
	return &RoundTripper{next: next, cb: gb.NewCircuitBreaker[*http.Response](gb.Settings{
		MaxRequests:  1,
		Interval:     10 * time.Second,
		BucketPeriod: time.Second,
		Timeout:      cfg.OpenTimeout,
		ReadyToTrip: func(c gb.Counts) bool {
			return c.Requests >= 20 && c.TotalFailures*2 >= c.Requests
		},
	})}
}

// RoundTrip implements http.RoundTripper.
func (t *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	return harness.Result(t.cb.Execute(func() (*http.Response, error) {
		return harness.Call(t.next, req)
	}))
}

// Lib is this library in the shared scenarios.
var Lib = harness.ErrorLib("sony/gobreaker v2",
	func(next http.RoundTripper, cfg harness.Config) http.RoundTripper { return New(next, cfg) },
	gb.ErrOpenState)
