// Package otelbreaker reports httpbreaker's decisions to OpenTelemetry:
// metrics for every call and transition, and attributes and events on the
// span of each request.
//
// One option turns it on:
//
//	bt := httpbreaker.New(next, otelbreaker.Option(
//		otelbreaker.WithMeterProvider(mp),
//		otelbreaker.WithTracerProvider(tp),
//	))
//	client := &http.Client{Transport: otelhttp.NewTransport(bt)}
//
// With neither provider given it uses the global ones (otel.GetMeterProvider
// and otel.GetTracerProvider), which may be set later.
//
// Wrap otelhttp outside the breaker, as above: then every call, a refused
// one included, has otelhttp's client span in its context, and this package
// marks it. Inside the breaker (httpbreaker.New(otelhttp.NewTransport(...)))
// a refused call never reaches otelhttp: no span, and otelhttp's metrics
// never see it.
//
// Metrics (the same facts as httpbreaker's Prometheus collector):
//
//   - httpbreaker.calls (counter, {call}): httpbreaker.breaker,
//     httpbreaker.outcome (success, failure, throttled, ignored, rejected),
//     httpbreaker.rejected.reason (only when refused, or when a shadow
//     breaker would have refused), httpbreaker.shadow (only when true)
//   - httpbreaker.call.duration (histogram, s): httpbreaker.breaker,
//     httpbreaker.outcome; admitted calls only
//   - httpbreaker.queue.duration (histogram, s): httpbreaker.breaker,
//     httpbreaker.outcome; calls that waited in a bulkhead's line
//   - httpbreaker.transitions (counter, {transition}): httpbreaker.breaker,
//     httpbreaker.transition.from, httpbreaker.transition.to,
//     httpbreaker.transition.reason
//   - httpbreaker.state (gauge): httpbreaker.breaker, httpbreaker.state;
//     one series per state, 1 for the current one, read from the
//     Transport's breakers at each collection (httpbreaker.Transport.States)
//
// On the span of the request's context (otelhttp's client span):
//
//   - attributes httpbreaker.breaker and httpbreaker.state;
//   - an event httpbreaker.rejected (httpbreaker.rejected.reason,
//     httpbreaker.retry_after in seconds) on a refused call;
//   - an event httpbreaker.transition on the call whose outcome moved
//     its breaker;
//   - and otelhttp's http.client.request.duration gets
//     httpbreaker.rejected=true for a refused call, so a synthetic 503 is
//     never mistaken for the dependency's own.
//
// docs/otel.md in the repository has the whole story.
package otelbreaker

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/httpbreaker/httpbreaker"
)

// ScopeName is the instrumentation scope of every meter and tracer this
// package asks for: the module's path.
const ScopeName = "github.com/httpbreaker/httpbreaker/otelbreaker"

// A Setting configures Option.
type Setting func(*config)

type config struct {
	mp    metric.MeterProvider
	tp    trace.TracerProvider
	attrs []attribute.KeyValue
}

// WithMeterProvider sets where the metrics go [otel.GetMeterProvider()].
// A nil mp means the global one.
func WithMeterProvider(mp metric.MeterProvider) Setting {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets the provider of the span each transition gets of
// its own, httpbreaker.transition, which shows transitions no traced call
// caused (an operator's Trip, a fleet hint, an open period's end)
// [otel.GetTracerProvider()]. A nil tp means the global one. The request
// spans this package marks are the callers' own, whatever their provider.
func WithTracerProvider(tp trace.TracerProvider) Setting {
	return func(c *config) { c.tp = tp }
}

// WithAttributes adds attributes to every metric this package records.
// Give them when two Transports of one process may use the same keys and
// share a MeterProvider (httpbreaker.transport=payments, say): otherwise
// their httpbreaker.state series are one series.
func WithAttributes(kv ...attribute.KeyValue) Setting {
	return func(c *config) { c.attrs = append(c.attrs, kv...) }
}

// Option returns the httpbreaker option that reports the Transport's calls
// and transitions to OpenTelemetry: httpbreaker.WithObserver with an
// observer of this package. Give each Transport an Option of its own; one
// shared by two Transports reports both as one.
func Option(settings ...Setting) httpbreaker.Option {
	return httpbreaker.WithObserver(newObserver(settings...))
}

func newConfig(settings []Setting) config {
	var c config
	for _, s := range settings {
		s(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return c
}
