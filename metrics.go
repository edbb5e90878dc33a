package httpbreaker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports a Transport's breakers to Prometheus. It reads them at
// scrape time: the request path pays nothing for metrics beyond the
// counts the breakers keep anyway.
type collector struct {
	t *Transport

	state      *prometheus.Desc
	requests   *prometheus.Desc
	rejections *prometheus.Desc
	// shadowRejections counts what breakers in ModeShadow let through.
	shadowRejections *prometheus.Desc
	transitions      *prometheus.Desc
	openSeconds      *prometheus.Desc
	probes           *prometheus.Desc

	updates *prometheus.Desc

	// storeErrors is set when the Store counts its errors.
	storeErrors *prometheus.Desc
	store       errorCounter
}

// errorCounter is a Store that counts its failed operations.
type errorCounter interface{ Errors() uint64 }

func newCollector(t *Transport) *collector {
	l := []string{"breaker"}
	c := &collector{
		t: t,
		state: prometheus.NewDesc("breaker_state",
			"Current state of the circuit breaker: 1 for the state it is in, 0 for the others.",
			[]string{"breaker", "state"}, nil),
		requests: prometheus.NewDesc("breaker_requests_total",
			"Calls the breaker admitted, by outcome.",
			[]string{"breaker", "outcome"}, nil),
		rejections: prometheus.NewDesc("breaker_rejections_total",
			"Calls the breaker refused without sending them, by reason.",
			[]string{"breaker", "reason"}, nil),
		shadowRejections: prometheus.NewDesc("breaker_shadow_rejections_total",
			"Calls a breaker in shadow mode would have refused, by reason; they went through and counted for nothing.",
			[]string{"breaker", "reason"}, nil),
		transitions: prometheus.NewDesc("breaker_transitions_total",
			"State transitions of the breaker, by the reason it moved.",
			[]string{"breaker", "from", "to", "reason"}, nil),
		openSeconds: prometheus.NewDesc("breaker_open_seconds_total",
			"Time the breaker has spent open, in seconds.",
			l, nil),
		updates: prometheus.NewDesc("breaker_config_updates_total",
			"Calls of Transport.Update, by result: ok (the settings changed) or error (nothing changed).",
			[]string{"result"}, nil),
		probes: prometheus.NewDesc("breaker_probes_total",
			"Half-open probes by result: success, failure (the dependency is still down, or throttled the probe), timeout (the probe outlived the probe bound) and ignored (the caller cancelled, or the outcome was ignored).",
			[]string{"breaker", "result"}, nil),
	}
	if ec, ok := t.store.(errorCounter); ok {
		c.store = ec
		c.storeErrors = prometheus.NewDesc("breaker_store_errors_total",
			"Failed operations of the Store that shares breaker hints; each instance then relies on its local breakers.",
			nil, nil)
	}
	return c
}

// registerMetrics registers the Transport's collector with reg; it panics
// if reg refuses it.
func (t *Transport) registerMetrics(reg prometheus.Registerer) {
	if err := reg.Register(newCollector(t)); err != nil {
		panic("httpbreaker: WithMetrics: " + err.Error())
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.requests
	ch <- c.rejections
	ch <- c.shadowRejections
	ch <- c.transitions
	ch <- c.openSeconds
	ch <- c.probes
	ch <- c.updates
	if c.storeErrors != nil {
		ch <- c.storeErrors
	}
}

// Collect implements prometheus.Collector. It changes nothing: a breaker
// shows as time alone has moved it (see breaker.displayLocked), an open
// breaker whose open period has ended as half-open, due to probe, and no
// user hook ever runs in a scrape.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	now := c.t.now()
	c.t.eachBreaker(func(k *circuit) bool { // each key once: a second series would fail the scrape
		st, _ := k.b.stats(now, false)
		c.emit(ch, k, &st)
		return true
	})
	if ok, bad := c.t.updates.Load(), c.t.updateErrors.Load(); ok+bad > 0 { // from the first Update on
		ch <- prometheus.MustNewConstMetric(c.updates, prometheus.CounterValue, float64(ok), "ok")
		ch <- prometheus.MustNewConstMetric(c.updates, prometheus.CounterValue, float64(bad), "error")
	}
	if c.storeErrors != nil {
		ch <- prometheus.MustNewConstMetric(c.storeErrors, prometheus.CounterValue, float64(c.store.Errors()))
	}
}

func (c *collector) emit(ch chan<- prometheus.Metric, k *circuit, m *stats) {
	key := k.key()
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	for s := State(0); s < numStates; s++ {
		v := 0.0
		if s == m.state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.state, gauge, v, key, s.String())
	}
	for o := Outcome(0); o < numOutcomes; o++ {
		ch <- prometheus.MustNewConstMetric(c.requests, counter, float64(m.totals[o]), key, o.String())
	}
	for r := rejectOpen; r < numReasons; r++ {
		ch <- prometheus.MustNewConstMetric(c.rejections, counter, float64(k.rejected[r].Load()), key, r.String())
		// A breaker that has run in shadow mode keeps its counts' series
		// after an Update moves it to enforce: a counter that vanished
		// would read as a reset.
		if n := k.shadowed[r].Load(); n > 0 || k.pol.Load().mode == ModeShadow {
			ch <- prometheus.MustNewConstMetric(c.shadowRejections, counter, float64(n), key, r.String())
		}
	}
	for i, k := range transitionKinds {
		ch <- prometheus.MustNewConstMetric(c.transitions, counter, float64(m.transitions[i]), key, k.from.String(), k.to.String(), k.reason.String())
	}
	ch <- prometheus.MustNewConstMetric(c.openSeconds, counter, m.open.Seconds(), key)
	for p := probeResult(0); p < numProbeResults; p++ {
		ch <- prometheus.MustNewConstMetric(c.probes, counter, float64(m.probes[p]), key, p.String())
	}
}

// transitionKinds are the transitions a breaker can make, each with the
// reasons it can be made for: one series of breaker_transitions_total
// each.
var transitionKinds = [...]struct {
	from, to State
	reason   Reason
}{
	{StateClosed, StateOpen, ReasonFailureRate},
	{StateClosed, StateOpen, ReasonThrottled},
	{StateClosed, StateOpen, ReasonTrip},
	{StateClosed, StateOpen, ReasonFleet},
	{StateOpen, StateHalfOpen, ReasonOpenElapsed},
	{StateHalfOpen, StateOpen, ReasonProbeFailed},
	{StateHalfOpen, StateOpen, ReasonThrottled},
	{StateHalfOpen, StateOpen, ReasonProbeTimeout},
	{StateHalfOpen, StateOpen, ReasonTrip},
	{StateHalfOpen, StateClosed, ReasonProbesSucceeded},
	{StateHalfOpen, StateClosed, ReasonReset},
	{StateHalfOpen, StateClosed, ReasonFleet},
	{StateOpen, StateClosed, ReasonReset},
	{StateOpen, StateClosed, ReasonFleet},
}

// numTransitionKinds is the number of transitionKinds.
const numTransitionKinds = len(transitionKinds)

// transitionKind returns the index in transitionKinds of a transition
// from → to for reason, or -1 for a combination the machine does not
// make (a test proves it makes none).
func transitionKind(from, to State, reason Reason) int {
	for i, k := range transitionKinds {
		if k.from == from && k.to == to && k.reason == reason {
			return i
		}
	}
	return -1
}
