// Command otel shows httpbreaker reporting to OpenTelemetry through the
// otelbreaker module: one client, wrapped in the documented order
//
//	otelhttp.NewTransport(httpbreaker.New(next, otelbreaker.Option(...)))
//
// calls one dependency on 127.0.0.1 that answers every request 503. The
// first three calls reach it and trip the breaker; the next two are
// refused in microseconds with the breaker's synthetic 503. The spans and
// metrics go to OpenTelemetry's stdout exporters, one JSON object a line:
// the trip is an event on the call that caused it (and a span of its own),
// each refusal an event on its span, and otelhttp's
// http.client.request.duration tells the refused 503s from the
// dependency's own by httpbreaker.rejected=true.
//
// Run it with: go run . (in this directory). README.md says what to look
// for in what it prints.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/httpbreaker/httpbreaker/otelbreaker"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otel:", err)
		os.Exit(1)
	}
}

// Breaker settings, small so that the failing dependency trips within the
// example's few requests; no jitter, so the open period is exactly 30s.
const (
	minRequests = 3
	openTimeout = 30 * time.Second
	// requests is how many requests the client sends.
	requests = 5
)

// Markers of the two JSON sections of the output.
const (
	tracesHeader  = "--- traces (stdouttrace, one span a line)"
	metricsHeader = "--- metrics (stdoutmetric)"
)

// run sends the requests and writes what happened to w: one line per
// request, then the spans, then the metrics.
func run(ctx context.Context, w io.Writer) error {
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "the dependency is down", http.StatusServiceUnavailable)
	}))
	defer dep.Close()

	// The SDK: spans are kept until the end, so that they print after the
	// requests; metrics are read once, at the end.
	var spans spanBuffer
	traceExp, err := stdouttrace.New(stdouttrace.WithWriter(&spans), stdouttrace.WithoutTimestamps())
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(traceExp))
	defer tp.Shutdown(ctx)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	// The client: otelhttp outside, so that a refused call has otelhttp's
	// span and is in otelhttp's metrics.
	breaker := httpbreaker.New(nil,
		httpbreaker.WithMinRequests(minRequests),
		httpbreaker.WithOpenTimeout(openTimeout),
		httpbreaker.WithJitter(0),
		otelbreaker.Option(otelbreaker.WithMeterProvider(mp), otelbreaker.WithTracerProvider(tp)),
	)
	defer breaker.CloseIdleConnections()
	client := &http.Client{
		Transport: otelhttp.NewTransport(breaker, otelhttp.WithMeterProvider(mp), otelhttp.WithTracerProvider(tp)),
		Timeout:   5 * time.Second,
	}

	for i := 1; i <= requests; i++ {
		line, err := get(ctx, client, dep.URL)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "request %d: %s\n", i, line)
	}
	fmt.Fprintf(w, "breaker %s is %s\n", "127.0.0.1:<port>", breaker.State(dep.Listener.Addr().String()))

	fmt.Fprintln(w, tracesHeader)
	if _, err := w.Write(spans.b); err != nil {
		return err
	}
	fmt.Fprintln(w, metricsHeader)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	metricExp, err := stdoutmetric.New(stdoutmetric.WithWriter(w), stdoutmetric.WithoutTimestamps())
	if err != nil {
		return err
	}
	return metricExp.Export(ctx, &rm)
}

// get sends one request and says what came back: the dependency's own
// answer or the breaker's refusal.
func get(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", err
	}
	if httpbreaker.IsRejected(resp) {
		return fmt.Sprintf("%s refused by the breaker, Retry-After: %s", resp.Status, resp.Header.Get("Retry-After")), nil
	}
	return resp.Status + " from the dependency", nil
}

// spanBuffer keeps what the span exporter writes.
type spanBuffer struct{ b []byte }

func (s *spanBuffer) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}
