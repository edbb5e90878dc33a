package otelbreaker

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/httpbreaker/httpbreaker"
)

// depKey is the breaker key of every test request: HostKey of depURL.
const (
	depURL = "http://dep.test/v1/items"
	depKey = "dep.test"
)

// fakeNext is the in-memory dependency: it answers every request with
// status, or blocks until release is closed when hold is set.
type fakeNext struct {
	status  atomic.Int32
	hold    atomic.Bool
	release chan struct{}
	calls   atomic.Int64
}

func newFakeNext(status int) *fakeNext {
	f := &fakeNext{release: make(chan struct{})}
	f.status.Store(int32(status))
	return f
}

func (f *fakeNext) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if r.Body != nil {
		r.Body.Close()
	}
	if f.hold.Load() {
		select {
		case <-f.release:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	code := int(f.status.Load())
	return &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		Body:          io.NopCloser(strings.NewReader("upstream\n")),
		ContentLength: int64(len("upstream\n")),
		Request:       r,
	}, nil
}

// telemetry is one test's OpenTelemetry SDK: a manual metric reader and a
// span recorder, and a client in the documented order,
// otelhttp.NewTransport(httpbreaker.New(next, otelbreaker.Option(...))).
type telemetry struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	bt     *httpbreaker.Transport
	client *http.Client
}

func newTelemetry(t *testing.T, next http.RoundTripper, settings []Setting, opts ...httpbreaker.Option) *telemetry {
	t.Helper()
	tel := newProviders()
	settings = append([]Setting{WithMeterProvider(tel.mp), WithTracerProvider(tel.tp)}, settings...)
	tel.bt = httpbreaker.New(next, append(opts, Option(settings...))...)
	tel.client = &http.Client{Transport: otelhttp.NewTransport(tel.bt,
		otelhttp.WithMeterProvider(tel.mp), otelhttp.WithTracerProvider(tel.tp))}
	return tel
}

func newProviders() *telemetry {
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	return tel
}

// tripping are breaker options under which two failures open the breaker
// for exactly openFor.
func tripping() []httpbreaker.Option {
	return []httpbreaker.Option{
		httpbreaker.WithMinRequests(2),
		httpbreaker.WithFailureRate(0.5),
		httpbreaker.WithOpenTimeout(openFor),
		httpbreaker.WithJitter(0),
	}
}

// openFor is the open period of tripping.
const openFor = 10 * time.Second

// get sends one GET to depURL and reads and closes the body, which ends
// otelhttp's span.
func (tel *telemetry) get(t *testing.T) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, depURL, nil)
	require.NoError(t, err)
	resp, err := tel.client.Do(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp
}

// collect reads every metric of the providers.
func (tel *telemetry) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(context.Background(), &rm))
	return rm
}

// metric returns the metric called name, failing the test if there is none.
func metricNamed(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	require.Failf(t, "no such metric", "%s", name)
	return metricdata.Metrics{}
}

// hasMetric reports whether rm holds a metric called name.
func hasMetric(rm metricdata.ResourceMetrics, name string) bool {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return true
			}
		}
	}
	return false
}

// spansNamed returns the ended spans called name, in the order they ended.
func (tel *telemetry) spansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// clientSpans are otelhttp's client spans, one per request, in order.
func (tel *telemetry) clientSpans() []sdktrace.ReadOnlySpan { return tel.spansNamed("HTTP GET") }

// attrs returns kv as a map from key to value, for assertions.
func attrs(kv []attribute.KeyValue) map[string]any {
	m := make(map[string]any, len(kv))
	for _, a := range kv {
		m[string(a.Key)] = a.Value.AsInterface()
	}
	return m
}

// events returns the span's events as name → attributes; a name given
// twice keeps the last.
func events(s sdktrace.ReadOnlySpan) map[string]map[string]any {
	m := map[string]map[string]any{}
	for _, e := range s.Events() {
		m[e.Name] = attrs(e.Attributes)
	}
	return m
}

// set is an attribute set of kv.
func set(kv ...attribute.KeyValue) attribute.Set { return attribute.NewSet(kv...) }
