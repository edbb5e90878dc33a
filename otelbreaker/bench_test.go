package otelbreaker

import (
	"context"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// BenchmarkCall is what one admitted call costs the observer with the real
// metric SDK and no recording span: the request path's share of
// otelbreaker.
func BenchmarkCall(b *testing.B) {
	tel := newProviders()
	o := newObserver(WithMeterProvider(tel.mp), WithTracerProvider(tel.tp))
	c := httpbreaker.Call{Key: depKey, Outcome: httpbreaker.OutcomeSuccess, Duration: 3 * time.Millisecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		o.Call(ctx, c)
	}
}
