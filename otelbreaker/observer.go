package otelbreaker

import (
	"context"
	"sync"
	"weak"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/httpbreaker/httpbreaker"
)

// Instrument names, units and attribute keys: the contract of DESIGN.md's
// "Seeing every decision", documented in docs/otel.md.
const (
	callsName       = "httpbreaker.calls"
	callDuration    = "httpbreaker.call.duration"
	queueDuration   = "httpbreaker.queue.duration"
	transitionsName = "httpbreaker.transitions"
	stateName       = "httpbreaker.state"

	keyBreaker     = attribute.Key("httpbreaker.breaker")
	keyOutcome     = attribute.Key("httpbreaker.outcome")
	keyReason      = attribute.Key("httpbreaker.rejected.reason")
	keyShadow      = attribute.Key("httpbreaker.shadow")
	keyState       = attribute.Key("httpbreaker.state")
	keyFrom        = attribute.Key("httpbreaker.transition.from")
	keyTo          = attribute.Key("httpbreaker.transition.to")
	keyTransReason = attribute.Key("httpbreaker.transition.reason")
	keyRequests    = attribute.Key("httpbreaker.requests")
	keyFailures    = attribute.Key("httpbreaker.failures")
	keyThrottled   = attribute.Key("httpbreaker.throttled")
	keyOpenFor     = attribute.Key("httpbreaker.open_for")
	keyRetryAfter  = attribute.Key("httpbreaker.retry_after")
	keyRejected    = attribute.Key("httpbreaker.rejected")

	eventRejected   = "httpbreaker.rejected"
	eventTransition = "httpbreaker.transition"
	spanTransition  = "httpbreaker.transition"

	// outcomeRejected is the outcome of a refused call in
	// httpbreaker.calls and the queue histogram.
	outcomeRejected = "rejected"
)

// durationBounds are the buckets of both duration histograms: OpenTelemetry's
// advice for http.client.request.duration, so the two line up.
var durationBounds = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// rejectedLabel is what a refused call adds to otelhttp's client labeler.
var rejectedLabel = keyRejected.Bool(true)

// observer is the httpbreaker.Observer that Option installs.
type observer struct {
	calls       metric.Int64Counter
	callDur     metric.Float64Histogram
	queueDur    metric.Float64Histogram
	transitions metric.Int64Counter
	tracer      trace.Tracer

	breakers table

	mu         sync.Mutex                            // guards transports
	transports []weak.Pointer[httpbreaker.Transport] // those observed: the gauge reads them
}

var _ httpbreaker.Attacher = (*observer)(nil)

func newObserver(settings ...Setting) *observer {
	c := newConfig(settings)
	m := c.mp.Meter(ScopeName)
	o := &observer{tracer: c.tp.Tracer(ScopeName)}
	o.breakers.extra, o.breakers.limit = c.attrs, maxTracked
	var err error
	o.calls, err = m.Int64Counter(callsName, metric.WithUnit("{call}"),
		metric.WithDescription("Calls that reached a breaker, by outcome; a refused call's outcome is rejected."))
	handle(err)
	o.callDur, err = m.Float64Histogram(callDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from a call's admission to its outcome."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	handle(err)
	o.queueDur, err = m.Float64Histogram(queueDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a call waited in a bulkhead's line."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	handle(err)
	o.transitions, err = m.Int64Counter(transitionsName, metric.WithUnit("{transition}"),
		metric.WithDescription("Breaker state transitions, by reason."))
	handle(err)
	state, err := m.Int64ObservableGauge(stateName,
		metric.WithDescription("1 for a breaker's current state, 0 for the others."))
	handle(err)
	_, err = m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		o.observeStates(ob, state)
		return nil
	}, state)
	handle(err)
	return o
}

// Attach implements httpbreaker.Attacher: New gives the observer the
// Transport whose breakers the state gauge reads. It is held weakly: the
// MeterProvider keeps the gauge's callback, and with it the observer, for
// its whole life, and must not keep a Transport its user dropped.
func (o *observer) Attach(t *httpbreaker.Transport) {
	p := weak.Make(t)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, q := range o.transports {
		if q == p {
			return // given twice to one Transport
		}
	}
	o.transports = append(o.transports, p)
}

// live returns the observed Transports that are still in use, and
// forgets the others.
func (o *observer) live() []*httpbreaker.Transport {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*httpbreaker.Transport, 0, len(o.transports))
	kept := o.transports[:0]
	for _, p := range o.transports {
		if t := p.Value(); t != nil {
			out = append(out, t)
			kept = append(kept, p)
		}
	}
	clear(o.transports[len(kept):])
	o.transports = kept
	return out
}

// observeStates reports the state of every live breaker of the observed
// Transports, read now (httpbreaker.Transport.States), as the core's
// Prometheus collector reads it at a scrape: three series per breaker,
// 1 for its state. A breaker the core dropped (evicted, or its key
// switched to ModeOff) has none.
func (o *observer) observeStates(ob metric.Observer, g metric.Int64ObservableGauge) {
	for _, t := range o.live() {
		for key, st := range t.States() {
			opts := o.breakers.gaugeOptions(key, st)
			for series, opt := range opts {
				var one int64
				if httpbreaker.State(series) == st {
					one = 1
				}
				ob.ObserveInt64(g, one, opt)
			}
		}
	}
}

// handle passes an instrument's error to OpenTelemetry's error handler; the
// instrument returned beside it still works (or does nothing).
func handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

// Call records one call's end: its metrics, and the marks on its span and
// on otelhttp's labeler.
func (o *observer) Call(ctx context.Context, c httpbreaker.Call) {
	st := c.State
	if st < httpbreaker.StateClosed || st > httpbreaker.StateOpen {
		st = httpbreaker.StateClosed
	}
	if c.Moved != nil {
		st = c.Moved.To
	}
	b := o.breakers.getIn(c.Key, st)
	var attrs *callAttrs
	if b != nil {
		attrs = b.call(c)
	} else {
		attrs = o.breakers.uncached(c)
	}
	o.calls.Add(ctx, 1, attrs.add...)
	refused := c.Rejected != "" && !c.Shadow
	if !refused && !leftTheLine(c) {
		o.callDur.Record(ctx, c.Duration.Seconds(), attrs.record...)
	}
	if c.QueueWait > 0 {
		o.queueDur.Record(ctx, c.QueueWait.Seconds(), attrs.record...)
	}
	if refused {
		labelRejected(ctx)
	}

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if st = c.State; st < httpbreaker.StateClosed || st > httpbreaker.StateOpen {
		st = httpbreaker.StateClosed
	}
	if b != nil {
		span.SetAttributes(b.span[st]...)
	} else {
		span.SetAttributes(keyBreaker.String(c.Key), keyState.String(st.String()))
	}
	if c.Rejected != "" {
		ev := []attribute.KeyValue{keyReason.String(c.Rejected)}
		if c.Shadow {
			ev = append(ev, keyShadow.Bool(true))
		} else {
			ev = append(ev, keyRetryAfter.Float64(c.RetryAfter.Seconds()))
		}
		span.AddEvent(eventRejected, trace.WithAttributes(ev...))
	}
	if t := c.Moved; t != nil {
		span.AddEvent(eventTransition, trace.WithTimestamp(t.At), trace.WithAttributes(transitionAttrs(t, false)...))
	}
}

// leftTheLine reports whether c is a call whose context ended while it
// waited for the bulkhead: never admitted, it has a wait and no duration.
func leftTheLine(c httpbreaker.Call) bool {
	return c.Rejected == "" && c.Outcome == httpbreaker.OutcomeIgnored && c.Duration == 0 && c.QueueWait > 0
}

// labelRejected adds httpbreaker.rejected=true to the attributes otelhttp's
// Transport records http.client.request.duration with, if ctx is a request
// context of one. It looks twice: ClientLabelerFromContext makes an empty
// Labeler when there is none, which stays on the stack only when the
// result is not used.
func labelRejected(ctx context.Context) {
	if _, ok := otelhttp.ClientLabelerFromContext(ctx); !ok {
		return
	}
	l, _ := otelhttp.ClientLabelerFromContext(ctx)
	l.Add(rejectedLabel)
}

// Transition records one transition: the counter, the state the gauge
// reports, and a span of its own.
func (o *observer) Transition(t httpbreaker.Transition) {
	o.breakers.moved(t)
	attrs := transitionAttrs(&t, true)
	o.transitions.Add(context.Background(), 1, metric.WithAttributes(append(attrs[:4:4], o.breakers.extra...)...))
	_, span := o.tracer.Start(context.Background(), spanTransition,
		trace.WithTimestamp(t.At), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(t.At))
}

// transitionAttrs describes t: breaker (when withKey), from, to, reason,
// then the counts it was decided on and, opening, the open period.
func transitionAttrs(t *httpbreaker.Transition, withKey bool) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 8)
	if withKey {
		kv = append(kv, keyBreaker.String(t.Key))
	}
	kv = append(kv,
		keyFrom.String(t.From.String()),
		keyTo.String(t.To.String()),
		keyTransReason.String(t.Reason.String()),
		keyRequests.Int64(t.Counts.Requests),
		keyFailures.Int64(t.Counts.Failures),
		keyThrottled.Int64(t.Counts.Throttled),
	)
	if t.To == httpbreaker.StateOpen {
		kv = append(kv, keyOpenFor.Float64(t.OpenFor.Seconds()))
	}
	return kv
}
