// Package failsafe benchmarks failsafe-go's circuit breaker through its
// own failsafehttp RoundTripper, with the scenarios of
// bench/internal/harness.
package failsafe

import (
	"net/http"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
)

// New returns failsafehttp.NewRoundTripper(next, breaker), the breaker
// set to httpbreaker's default thresholds: failure rate ≥50% of ≥20
// executions in a 10s period, open for cfg.OpenTimeout, 3 successes to
// close; failures are errors and 5xx responses.
func New(next http.RoundTripper, cfg harness.Config) http.RoundTripper {
	cb := circuitbreaker.NewBuilder[*http.Response]().
		HandleIf(harness.IsFailure).
		WithFailureRateThreshold(0.5, 20, 10*time.Second).
		WithDelay(cfg.OpenTimeout).
		WithSuccessThreshold(3).
		Build()
	return failsafehttp.NewRoundTripper(next, cb)
}

// Lib is this library in the shared scenarios.
var Lib = harness.ErrorLib("failsafe-go (failsafehttp)", New, circuitbreaker.ErrOpen)
