package otelbreaker_test

import (
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/httpbreaker/httpbreaker"
	"github.com/httpbreaker/httpbreaker/otelbreaker"
)

// The documented order: otelhttp outside the breaker, so that a refused
// call has otelhttp's client span and is labelled in its metrics.
func ExampleOption() {
	mp := sdkmetric.NewMeterProvider() // with the service's reader or exporter
	tp := sdktrace.NewTracerProvider() // with the service's span processor

	bt := httpbreaker.New(nil,
		httpbreaker.WithOpenTimeout(10*time.Second),
		otelbreaker.Option(otelbreaker.WithMeterProvider(mp), otelbreaker.WithTracerProvider(tp)),
	)
	client := &http.Client{
		Transport: otelhttp.NewTransport(bt, otelhttp.WithMeterProvider(mp), otelhttp.WithTracerProvider(tp)),
		Timeout:   10 * time.Second,
	}
	_ = client
}

// Two Transports on one MeterProvider that may share keys: an attribute
// each keeps their series apart.
func ExampleWithAttributes() {
	payments := httpbreaker.New(nil, otelbreaker.Option(otelbreaker.WithAttributes(attribute.String("client", "payments"))))
	search := httpbreaker.New(nil, otelbreaker.Option(otelbreaker.WithAttributes(attribute.String("client", "search"))))
	_, _ = payments, search
}
