package otelbreaker

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/httpbreaker/httpbreaker"
)

var (
	breakerAttr = keyBreaker.String(depKey)
	closedAttr  = keyState.String("closed")
	halfAttr    = keyState.String("half-open")
	openAttr    = keyState.String("open")
)

// sum is the expected cumulative monotonic counter with these points.
func sum(points ...metricdata.DataPoint[int64]) metricdata.Sum[int64] {
	return metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: points}
}

func point(v int64, kv ...attribute.KeyValue) metricdata.DataPoint[int64] {
	return metricdata.DataPoint[int64]{Attributes: set(kv...), Value: v}
}

// stateGauge is the expected httpbreaker.state of depKey in state cur.
func stateGauge(cur attribute.KeyValue, extra ...attribute.KeyValue) []metricdata.DataPoint[int64] {
	return statesOf(depKey, cur, extra...)
}

// statesOf is the expected httpbreaker.state of key in state cur.
func statesOf(key string, cur attribute.KeyValue, extra ...attribute.KeyValue) []metricdata.DataPoint[int64] {
	var pts []metricdata.DataPoint[int64]
	for _, st := range []attribute.KeyValue{closedAttr, halfAttr, openAttr} {
		var v int64
		if st == cur {
			v = 1
		}
		pts = append(pts, point(v, append([]attribute.KeyValue{keyBreaker.String(key), st}, extra...)...))
	}
	return pts
}

var ignore = []metricdatatest.Option{metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars()}

// A call the breaker refused and a 503 of the dependency's own are both
// 503s to the caller; every signal tells them apart: the outcome and
// reason in httpbreaker.calls, the event on the span, the state on the
// span, and the httpbreaker.rejected label on otelhttp's own
// http.client.request.duration.
func TestRefusedCallAndReal503GiveDifferentTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newFakeNext(http.StatusServiceUnavailable)
		tel := newTelemetry(t, next, nil, tripping()...)

		real1, real2 := tel.get(t), tel.get(t) // the second trips the breaker
		refused := tel.get(t)
		require.Equal(t, http.StatusServiceUnavailable, real1.StatusCode)
		require.Equal(t, http.StatusServiceUnavailable, refused.StatusCode)
		require.False(t, httpbreaker.IsRejected(real2))
		require.True(t, httpbreaker.IsRejected(refused))
		require.EqualValues(t, 2, next.calls.Load(), "the refused call never reached the dependency")

		rm := tel.collect(t)
		metricdatatest.AssertEqual(t, sum(
			point(2, breakerAttr, keyOutcome.String("failure")),
			point(1, breakerAttr, keyOutcome.String("rejected"), keyReason.String("open")),
		), metricNamed(t, rm, callsName).Data.(metricdata.Sum[int64]), ignore...)
		metricdatatest.AssertEqual(t, sum(
			point(1, breakerAttr, keyFrom.String("closed"), keyTo.String("open"), keyTransReason.String("failure_rate")),
		), metricNamed(t, rm, transitionsName).Data.(metricdata.Sum[int64]), ignore...)
		metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: stateGauge(openAttr)},
			metricNamed(t, rm, stateName).Data.(metricdata.Gauge[int64]), ignore...)

		dur := metricNamed(t, rm, callDuration)
		require.Equal(t, "s", dur.Unit)
		hist := dur.Data.(metricdata.Histogram[float64])
		require.Len(t, hist.DataPoints, 1, "a refused call has no call duration")
		require.Equal(t, set(breakerAttr, keyOutcome.String("failure")), hist.DataPoints[0].Attributes)
		require.EqualValues(t, 2, hist.DataPoints[0].Count)

		// otelhttp's own histogram: two series, told apart by our label.
		var rejected, upstream uint64
		for _, dp := range metricNamed(t, rm, "http.client.request.duration").Data.(metricdata.Histogram[float64]).DataPoints {
			code, _ := dp.Attributes.Value("http.response.status_code")
			require.EqualValues(t, http.StatusServiceUnavailable, code.AsInt64())
			if v, ok := dp.Attributes.Value(keyRejected); ok {
				require.True(t, v.AsBool())
				rejected += dp.Count
			} else {
				upstream += dp.Count
			}
		}
		require.EqualValues(t, 1, rejected)
		require.EqualValues(t, 2, upstream)

		spans := tel.clientSpans()
		require.Len(t, spans, 3)
		for i, want := range []string{"closed", "closed", "open"} {
			a := attrs(spans[i].Attributes())
			require.Equal(t, depKey, a[string(keyBreaker)], "span %d", i)
			require.Equal(t, want, a[string(keyState)], "span %d", i)
		}
		require.Empty(t, events(spans[0]), "an ordinary failure gets no event")
		require.Equal(t, map[string]map[string]any{eventTransition: {
			string(keyFrom): "closed", string(keyTo): "open", string(keyTransReason): "failure_rate",
			string(keyRequests): int64(2), string(keyFailures): int64(2), string(keyThrottled): int64(0),
			string(keyOpenFor): openFor.Seconds(),
		}}, events(spans[1]), "the call that tripped the breaker carries the transition")
		require.Equal(t, map[string]map[string]any{eventRejected: {
			string(keyReason): "open", string(keyRetryAfter): openFor.Seconds(),
		}}, events(spans[2]), "the refusal says why and for how long")

		trans := tel.spansNamed(spanTransition)
		require.Len(t, trans, 1)
		require.Equal(t, map[string]any{
			string(keyBreaker): depKey, string(keyFrom): "closed", string(keyTo): "open", string(keyTransReason): "failure_rate",
			string(keyRequests): int64(2), string(keyFailures): int64(2), string(keyThrottled): int64(0),
			string(keyOpenFor): openFor.Seconds(),
		}, attrs(trans[0].Attributes()))
	})
}

// After the open period a probe goes through, half-open; its success
// closes the breaker. Every step is counted with its reason, the gauge
// follows, and the probe's span says it was admitted half-open and
// closed the breaker.
func TestRecoveryIsReportedWithItsReasons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newFakeNext(http.StatusServiceUnavailable)
		tel := newTelemetry(t, next, nil, append(tripping(), httpbreaker.WithProbesToClose(1))...)
		tel.get(t)
		tel.get(t)
		time.Sleep(openFor) // the fake clock: the open period is over
		next.status.Store(http.StatusOK)
		probe := tel.get(t)
		require.Equal(t, http.StatusOK, probe.StatusCode)

		rm := tel.collect(t)
		metricdatatest.AssertEqual(t, sum(
			point(1, breakerAttr, keyFrom.String("closed"), keyTo.String("open"), keyTransReason.String("failure_rate")),
			point(1, breakerAttr, keyFrom.String("open"), keyTo.String("half-open"), keyTransReason.String("open_elapsed")),
			point(1, breakerAttr, keyFrom.String("half-open"), keyTo.String("closed"), keyTransReason.String("probes_succeeded")),
		), metricNamed(t, rm, transitionsName).Data.(metricdata.Sum[int64]), ignore...)
		metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: stateGauge(closedAttr)},
			metricNamed(t, rm, stateName).Data.(metricdata.Gauge[int64]), ignore...)

		spans := tel.clientSpans()
		require.Len(t, spans, 3)
		require.Equal(t, "half-open", attrs(spans[2].Attributes())[string(keyState)])
		ev := events(spans[2])[eventTransition]
		require.Equal(t, "half-open", ev[string(keyFrom)])
		require.Equal(t, "closed", ev[string(keyTo)])
		require.Equal(t, "probes_succeeded", ev[string(keyTransReason)])
		require.NotContains(t, ev, string(keyOpenFor), "only an opening has an open period")

		// Each transition is a span of its own too, at the moment it
		// happened; open_elapsed at the moment it became due.
		trans := tel.spansNamed(spanTransition)
		require.Len(t, trans, 3)
		require.Equal(t, "open_elapsed", attrs(trans[1].Attributes())[string(keyTransReason)])
		require.Equal(t, openFor, trans[1].StartTime().Sub(trans[0].StartTime()))
	})
}

// An operator's Trip and Reset reach no call: their transitions still
// count, move the gauge and get their own span, and a call refused during
// the Trip says for how long.
func TestOperatorTripAndResetAreCountedAndTraced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel := newTelemetry(t, newFakeNext(http.StatusOK), nil)
		tel.bt.Trip(depKey, time.Minute)
		rm := tel.collect(t)
		metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: stateGauge(openAttr)},
			metricNamed(t, rm, stateName).Data.(metricdata.Gauge[int64]), ignore...)

		time.Sleep(15 * time.Second)
		require.True(t, httpbreaker.IsRejected(tel.get(t)))
		ev := events(tel.clientSpans()[0])[eventRejected]
		require.Equal(t, map[string]any{string(keyReason): "open", string(keyRetryAfter): 45.0}, ev)

		tel.bt.Reset(depKey)
		rm = tel.collect(t)
		metricdatatest.AssertEqual(t, sum(
			point(1, breakerAttr, keyFrom.String("closed"), keyTo.String("open"), keyTransReason.String("trip")),
			point(1, breakerAttr, keyFrom.String("open"), keyTo.String("closed"), keyTransReason.String("reset")),
		), metricNamed(t, rm, transitionsName).Data.(metricdata.Sum[int64]), ignore...)
		metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: stateGauge(closedAttr)},
			metricNamed(t, rm, stateName).Data.(metricdata.Gauge[int64]), ignore...)

		trans := tel.spansNamed(spanTransition)
		require.Len(t, trans, 2)
		require.Equal(t, 60.0, attrs(trans[0].Attributes())[string(keyOpenFor)])
		require.Equal(t, "reset", attrs(trans[1].Attributes())[string(keyTransReason)])
	})
}

// A shadow breaker refuses nothing: the call it would have refused goes
// through with its real outcome, counted with the reason and shadow=true,
// and is not labelled rejected in otelhttp's metrics.
func TestShadowBreakerMarksWouldBeRefusalsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newFakeNext(http.StatusServiceUnavailable)
		tel := newTelemetry(t, next, nil, append(tripping(), httpbreaker.WithMode(httpbreaker.ModeShadow))...)
		tel.get(t)
		tel.get(t)
		through := tel.get(t)
		require.False(t, httpbreaker.IsRejected(through))
		require.EqualValues(t, 3, next.calls.Load())

		rm := tel.collect(t)
		metricdatatest.AssertEqual(t, sum(
			point(2, breakerAttr, keyOutcome.String("failure")),
			point(1, breakerAttr, keyOutcome.String("failure"), keyReason.String("open"), keyShadow.Bool(true)),
		), metricNamed(t, rm, callsName).Data.(metricdata.Sum[int64]), ignore...)
		for _, dp := range metricNamed(t, rm, "http.client.request.duration").Data.(metricdata.Histogram[float64]).DataPoints {
			_, ok := dp.Attributes.Value(keyRejected)
			require.False(t, ok, "a shadow breaker refused nothing")
		}
		require.EqualValues(t, 3, metricNamed(t, rm, callDuration).Data.(metricdata.Histogram[float64]).DataPoints[0].Count)

		require.Equal(t, map[string]map[string]any{eventRejected: {string(keyReason): "open", string(keyShadow): true}},
			events(tel.clientSpans()[2]))
	})
}

// A call that waits in the bulkhead's line for its whole maxWait is
// refused, and its wait is in httpbreaker.queue.duration to the tick.
func TestQueueWaitIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newFakeNext(http.StatusOK)
		next.hold.Store(true)
		const maxWait = 100 * time.Millisecond
		tel := newTelemetry(t, next, nil, httpbreaker.WithMaxConcurrent(1), httpbreaker.WithQueue(1, maxWait))
		var wg sync.WaitGroup
		wg.Go(func() { tel.get(t) })
		synctest.Wait() // the first call holds the only place
		require.True(t, httpbreaker.IsRejected(tel.get(t)))
		close(next.release)
		wg.Wait()

		rm := tel.collect(t)
		metricdatatest.AssertEqual(t, sum(
			point(1, breakerAttr, keyOutcome.String("success")),
			point(1, breakerAttr, keyOutcome.String("rejected"), keyReason.String("bulkhead")),
		), metricNamed(t, rm, callsName).Data.(metricdata.Sum[int64]), ignore...)
		q := metricNamed(t, rm, queueDuration)
		require.Equal(t, "s", q.Unit)
		pts := q.Data.(metricdata.Histogram[float64]).DataPoints
		require.Len(t, pts, 1, "the call that found a place at once did not wait")
		require.Equal(t, set(breakerAttr, keyOutcome.String("rejected")), pts[0].Attributes)
		require.EqualValues(t, 1, pts[0].Count)
		require.Equal(t, maxWait.Seconds(), pts[0].Sum)
		require.Equal(t, map[string]any{string(keyReason): "bulkhead", string(keyRetryAfter): 1.0},
			events(tel.clientSpans()[0])[eventRejected], "the refused call's span ended first")
	})
}

// With neither provider given, Option reports to the global ones.
func TestGlobalProvidersServeWhenNoneIsGiven(t *testing.T) {
	t.Cleanup(func() { // the first global provider set stays the delegate's: leave no-ops behind
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
	})
	tel := newProviders()
	otel.SetMeterProvider(tel.mp)
	otel.SetTracerProvider(tel.tp)
	bt := httpbreaker.New(newFakeNext(http.StatusOK), Option())

	bt.Trip(depKey, time.Minute)
	rm := tel.collect(t)
	metricdatatest.AssertEqual(t, sum(
		point(1, breakerAttr, keyFrom.String("closed"), keyTo.String("open"), keyTransReason.String("trip")),
	), metricNamed(t, rm, transitionsName).Data.(metricdata.Sum[int64]), ignore...)
	require.Len(t, tel.spansNamed(spanTransition), 1)
}

// Two Transports with the same key on one MeterProvider keep their state
// series apart by WithAttributes.
func TestWithAttributesKeepsTwoTransportsApart(t *testing.T) {
	tel := newProviders()
	mk := func(name string) *httpbreaker.Transport {
		return httpbreaker.New(newFakeNext(http.StatusOK), Option(WithMeterProvider(tel.mp), WithTracerProvider(tel.tp),
			WithAttributes(attribute.String("client", name))))
	}
	a, b := mk("a"), mk("b")
	a.Trip(depKey, time.Minute)
	resp, err := (&http.Client{Transport: b}).Get(depURL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	rm := tel.collect(t)
	metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: append(
		stateGauge(openAttr, attribute.String("client", "a")),
		stateGauge(closedAttr, attribute.String("client", "b"))...)},
		metricNamed(t, rm, stateName).Data.(metricdata.Gauge[int64]), ignore...)
	metricdatatest.AssertEqual(t, sum(point(1, breakerAttr, keyOutcome.String("success"), attribute.String("client", "b"))),
		metricNamed(t, rm, callsName).Data.(metricdata.Sum[int64]), ignore...)
}

// Recording a call makes no allocation of this package's own: measured
// with OpenTelemetry's no-op providers, whose own cost is nil, and without
// otelhttp's labeler, whose Add is otelhttp's.
func TestRecordingACallAllocatesNothingOfItsOwn(t *testing.T) {
	o := newObserver(WithMeterProvider(metricnoop.NewMeterProvider()), WithTracerProvider(tracenoop.NewTracerProvider()))
	ctx := context.Background()
	for _, c := range []httpbreaker.Call{
		{Key: depKey, Outcome: httpbreaker.OutcomeIgnored, Rejected: "open", State: httpbreaker.StateOpen, RetryAfter: time.Second},
		{Key: depKey, Outcome: httpbreaker.OutcomeSuccess, Duration: time.Millisecond},
		{Key: depKey, Outcome: httpbreaker.OutcomeFailure, Duration: time.Millisecond},
		{Key: depKey, Outcome: httpbreaker.OutcomeFailure, Rejected: "open", Shadow: true, Duration: time.Millisecond},
		{Key: depKey, Outcome: httpbreaker.OutcomeSuccess, Duration: time.Millisecond, QueueWait: time.Millisecond},
	} {
		o.Call(ctx, c) // the first of a kind makes its attribute sets
		require.Zero(t, testing.AllocsPerRun(100, func() { o.Call(ctx, c) }), "%+v", c)
	}
}

// A waiter whose context ends in the bulkhead's line was never admitted:
// its wait is in httpbreaker.queue.duration, and it has no call duration.
func TestAWaiterWhoLeavesTheLineHasAWaitAndNoDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newFakeNext(http.StatusOK)
		next.hold.Store(true)
		tel := newTelemetry(t, next, nil, httpbreaker.WithMaxConcurrent(1), httpbreaker.WithQueue(1, time.Minute))
		var wg sync.WaitGroup
		wg.Go(func() { tel.get(t) })
		synctest.Wait()
		const patience = 200 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, depURL, nil)
		require.NoError(t, err)
		_, err = tel.client.Do(req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		close(next.release)
		wg.Wait()

		rm := tel.collect(t)
		metricdatatest.AssertEqual(t, sum(
			point(1, breakerAttr, keyOutcome.String("success")),
			point(1, breakerAttr, keyOutcome.String("ignored")),
		), metricNamed(t, rm, callsName).Data.(metricdata.Sum[int64]), ignore...)
		q := metricNamed(t, rm, queueDuration).Data.(metricdata.Histogram[float64]).DataPoints
		require.Len(t, q, 1)
		require.Equal(t, set(breakerAttr, keyOutcome.String("ignored")), q[0].Attributes)
		require.Equal(t, patience.Seconds(), q[0].Sum)
		d := metricNamed(t, rm, callDuration).Data.(metricdata.Histogram[float64]).DataPoints
		require.Len(t, d, 1, "only the admitted call has a duration")
		require.Equal(t, set(breakerAttr, keyOutcome.String("success")), d[0].Attributes)
	})
}

// The table of breakers is bounded: full of closed breakers, it forgets
// them to make room; full of open ones, a new key's calls are still
// counted, with attributes made for the call, and the gauge leaves it out
// until a breaker closes and makes room.
func TestTheTableOfBreakersIsBounded(t *testing.T) {
	tel := newProviders()
	o := newObserver(WithMeterProvider(tel.mp), WithTracerProvider(tel.tp))
	const limit = 50
	o.breakers.limit = limit
	ctx := context.Background()
	for i := range limit {
		o.Call(ctx, httpbreaker.Call{Key: "closed-" + strconv.Itoa(i), Outcome: httpbreaker.OutcomeSuccess})
	}
	require.EqualValues(t, limit, o.breakers.n.Load())
	o.Call(ctx, httpbreaker.Call{Key: depKey, Outcome: httpbreaker.OutcomeSuccess})
	require.EqualValues(t, 1, o.breakers.n.Load(), "the closed breakers were forgotten")

	for i := 1; i < limit; i++ {
		o.breakers.moved(httpbreaker.Transition{Key: "open-" + strconv.Itoa(i), From: httpbreaker.StateClosed, To: httpbreaker.StateOpen})
	}
	o.breakers.moved(httpbreaker.Transition{Key: depKey, From: httpbreaker.StateClosed, To: httpbreaker.StateOpen})
	require.Nil(t, o.breakers.get("new.test"), "no room: every breaker is open")
	o.Call(ctx, httpbreaker.Call{Key: "new.test", Outcome: httpbreaker.OutcomeFailure})
	o.Call(ctx, httpbreaker.Call{Key: "new.test", Outcome: httpbreaker.OutcomeIgnored, Rejected: "half-open", State: httpbreaker.StateHalfOpen})

	o.breakers.moved(httpbreaker.Transition{Key: "open-1", From: httpbreaker.StateHalfOpen, To: httpbreaker.StateClosed})
	require.NotNil(t, o.breakers.get("newer.test"), "a breaker closed: there is room again")

	rm := tel.collect(t)
	var failures, refused int64
	for _, dp := range metricNamed(t, rm, callsName).Data.(metricdata.Sum[int64]).DataPoints {
		if k, _ := dp.Attributes.Value(keyBreaker); k.AsString() == "new.test" {
			if r, ok := dp.Attributes.Value(keyReason); ok {
				require.Equal(t, "half-open", r.AsString())
				refused += dp.Value
			} else {
				failures += dp.Value
			}
		}
	}
	require.EqualValues(t, 1, failures)
	require.EqualValues(t, 1, refused)
}

// The state gauge reports every breaker of the Transport, the ones whose
// key the table has no room for too.
func TestTheGaugeReportsBreakersTheTableHasNoRoomFor(t *testing.T) {
	tel := newProviders()
	o := newObserver(WithMeterProvider(tel.mp), WithTracerProvider(tel.tp))
	o.breakers.limit = 1
	bt := httpbreaker.New(newFakeNext(http.StatusOK), httpbreaker.WithObserver(o))
	bt.Trip(depKey, time.Minute)
	bt.Trip("other.test", time.Minute)
	require.NotNil(t, o.breakers.get(depKey))
	require.Nil(t, o.breakers.get("other.test"), "no room: the table is full of open breakers")

	metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: append(stateGauge(openAttr), statesOf("other.test", openAttr)...)},
		metricNamed(t, tel.collect(t), stateName).Data.(metricdata.Gauge[int64]), ignore...)
}

// Without otelhttp, the span marked is whichever the request's context
// holds: the caller's own. (And nothing breaks without one.)
func TestTheCallersOwnSpanIsMarkedWithoutOtelhttp(t *testing.T) {
	tel := newTelemetry(t, newFakeNext(http.StatusOK), nil)
	tel.bt.Trip(depKey, time.Minute)
	ctx, span := tel.tp.Tracer("app").Start(context.Background(), "checkout")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, depURL, nil)
	require.NoError(t, err)
	resp, err := tel.bt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	span.End()

	resp, err = tel.bt.RoundTrip(httptestRequest(t)) // no span at all
	require.NoError(t, err)
	require.True(t, httpbreaker.IsRejected(resp))

	app := tel.spansNamed("checkout")
	require.Len(t, app, 1)
	require.Equal(t, "open", attrs(app[0].Attributes())[string(keyState)])
	require.Equal(t, "open", events(app[0])[eventRejected][string(keyReason)])
}

func httptestRequest(t *testing.T) *http.Request {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, depURL, nil)
	require.NoError(t, err)
	return req
}

// A refusal returned as an error (WithRejectAsError) is labelled in
// otelhttp's histogram too, and its span has the event.
func TestARefusalAsAnErrorIsLabelledToo(t *testing.T) {
	tel := newTelemetry(t, newFakeNext(http.StatusOK), nil, httpbreaker.WithRejectAsError())
	tel.bt.Trip(depKey, time.Minute)
	_, err := tel.client.Do(httptestRequest(t))
	require.ErrorIs(t, err, httpbreaker.ErrOpen)

	rm := tel.collect(t)
	pts := metricNamed(t, rm, "http.client.request.duration").Data.(metricdata.Histogram[float64]).DataPoints
	require.Len(t, pts, 1)
	v, ok := pts[0].Attributes.Value(keyRejected)
	require.True(t, ok && v.AsBool(), "%v", pts[0].Attributes)
	require.Contains(t, events(tel.clientSpans()[0]), eventRejected)
}

// A key the table could not remember while it was full, and that it
// remembers later, starts in the state its call says the breaker is in,
// not closed: the table, full again, never forgets as closed a breaker
// that refuses calls as open.
func TestAKeyRememberedLateStartsInTheStateItsCallSaw(t *testing.T) {
	tel := newProviders()
	o := newObserver(WithMeterProvider(tel.mp), WithTracerProvider(tel.tp))
	const limit = 3
	o.breakers.limit = limit
	for i := range limit {
		o.breakers.moved(httpbreaker.Transition{Key: "open-" + strconv.Itoa(i), From: httpbreaker.StateClosed, To: httpbreaker.StateOpen})
	}
	// depKey opens while the table is full of open breakers: not remembered.
	o.breakers.moved(httpbreaker.Transition{Key: depKey, From: httpbreaker.StateClosed, To: httpbreaker.StateOpen})
	require.Nil(t, o.breakers.get(depKey))
	// Another breaker closes: there is room again, and depKey's next call,
	// refused as open, has the table remember it.
	o.breakers.moved(httpbreaker.Transition{Key: "open-0", From: httpbreaker.StateHalfOpen, To: httpbreaker.StateClosed})
	o.Call(context.Background(), httpbreaker.Call{Key: depKey, State: httpbreaker.StateOpen,
		Outcome: httpbreaker.OutcomeIgnored, Rejected: "open", RetryAfter: time.Second})

	b := o.breakers.get(depKey)
	require.NotNil(t, b)
	require.EqualValues(t, httpbreaker.StateOpen, b.state.Load(), "an open breaker the table must not forget as closed")
}

// The state gauge reads the breakers at each collection, as the core's
// Prometheus collector does: a key switched to ModeOff has no breaker and
// no series, whatever state its breaker was in, and a key switched back
// has a closed breaker from its first call on.
func TestTheGaugeShowsNoBreakerForAKeySwitchedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newFakeNext(http.StatusServiceUnavailable)
		tel := newTelemetry(t, next, nil, tripping()...)
		tel.get(t)
		tel.get(t) // trips
		gauge := func() metricdata.Gauge[int64] {
			rm := tel.collect(t)
			if !hasMetric(rm, stateName) {
				return metricdata.Gauge[int64]{} // no series at all
			}
			return metricNamed(t, rm, stateName).Data.(metricdata.Gauge[int64])
		}
		metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: stateGauge(openAttr)}, gauge(), ignore...)

		require.NoError(t, tel.bt.Update(append(tripping(), httpbreaker.WithPolicy(depKey, httpbreaker.WithMode(httpbreaker.ModeOff)))...))
		require.Empty(t, gauge().DataPoints, "no breaker, no series")
		next.status.Store(http.StatusOK)
		tel.get(t)
		require.Empty(t, gauge().DataPoints, "a call of a key that is off makes no breaker")

		require.NoError(t, tel.bt.Update(tripping()...))
		require.Empty(t, gauge().DataPoints, "switched back: no breaker until a call")
		tel.get(t)
		metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: stateGauge(closedAttr)}, gauge(), ignore...)
	})
}

// Once the open period has ended the gauge shows the breaker half-open,
// due to probe, before any call finds it so; reading it moves nothing.
func TestTheGaugeShowsAnEndedOpenPeriodAsHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel := newTelemetry(t, newFakeNext(http.StatusServiceUnavailable), nil, tripping()...)
		tel.get(t)
		tel.get(t) // trips
		time.Sleep(openFor)
		rm := tel.collect(t)
		metricdatatest.AssertEqual(t, metricdata.Gauge[int64]{DataPoints: stateGauge(halfAttr)},
			metricNamed(t, rm, stateName).Data.(metricdata.Gauge[int64]), ignore...)
		require.Len(t, metricNamed(t, rm, transitionsName).Data.(metricdata.Sum[int64]).DataPoints, 1,
			"the collection made no transition")
		require.Len(t, tel.spansNamed(spanTransition), 1)
	})
}

// The observer holds its Transport weakly: a Transport its user dropped is
// freed, though the MeterProvider keeps the gauge's callback, and the
// gauge stops reporting it.
func TestADroppedTransportIsFreed(t *testing.T) {
	tel := newProviders()
	o := newObserver(WithMeterProvider(tel.mp), WithTracerProvider(tel.tp))
	func() {
		bt := httpbreaker.New(newFakeNext(http.StatusOK), httpbreaker.WithObserver(o))
		bt.Trip(depKey, time.Minute)
		require.Len(t, o.live(), 1)
	}()
	for i := 0; i < 10 && len(o.live()) > 0; i++ {
		runtime.GC() // clears the weak pointer of a Transport nothing else holds
	}
	require.Empty(t, o.live())
	require.False(t, hasMetric(tel.collect(t), stateName), "no Transport, no state series")
}
