package httpbreaker

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// This file is how a Transport tells others what its breakers do: the
// Transition a hook, the log, an Observer and the metrics see, with its
// Reason and the counts it was decided on, and the Call an Observer is
// told of at the end of every call.

// Reason says why a breaker moved. Its text (String, MarshalText) is the
// reason label of breaker_transitions_total and the reason of a
// transition's log record.
type Reason int

const (
	// ReasonFailureRate: failures (slow calls included) reached the
	// failure rate, closed → open.
	ReasonFailureRate Reason = iota + 1
	// ReasonThrottled: sustained 429s completed the failure rate, closed →
	// open; or a half-open probe was answered 429, half-open → open.
	ReasonThrottled
	// ReasonOpenElapsed: the open period ended, open → half-open.
	ReasonOpenElapsed
	// ReasonProbeFailed: a half-open probe failed, half-open → open.
	ReasonProbeFailed
	// ReasonProbeTimeout: a half-open probe outlived the probe bound
	// (WithMaxOpenTimeout), half-open → open.
	ReasonProbeTimeout
	// ReasonProbesSucceeded: WithProbesToClose consecutive probes
	// succeeded, half-open → closed.
	ReasonProbesSucceeded
	// ReasonTrip: Transport.Trip, on this instance or (with a Store) on
	// another.
	ReasonTrip
	// ReasonReset: Transport.Reset, on this instance or (with a Store) on
	// another.
	ReasonReset
	// ReasonFleet: a Store's hint that the fleet's breaker opened or
	// closed.
	ReasonFleet
	numReasonValues
)

var reasonText = [numReasonValues]string{
	"", "failure_rate", "throttled", "open_elapsed", "probe_failed", "probe_timeout",
	"probes_succeeded", "trip", "reset", "fleet",
}

// String returns the reason's text: "failure_rate", "throttled",
// "open_elapsed", "probe_failed", "probe_timeout", "probes_succeeded",
// "trip", "reset" or "fleet"; the empty string for the zero Reason.
func (r Reason) String() string {
	if r >= 0 && r < numReasonValues {
		return reasonText[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText encodes the reason as its String form.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Counts are a breaker's window, as Status shows it: Requests counts every
// outcome but OutcomeIgnored, and Failures and Throttled those outcomes
// among them.
type Counts struct{ Requests, Failures, Throttled int64 }

// countsOf returns the Counts of window counts c.
func countsOf(c counts) Counts {
	return Counts{Requests: c.requests(), Failures: c[OutcomeFailure], Throttled: c[OutcomeThrottled]}
}

// Transition is one state change of one breaker, as the hook of
// WithOnTransition, an Observer and the log see it.
type Transition struct {
	// Key is the breaker's key.
	Key string
	// From and To are the states before and after.
	From, To State
	// Reason is why it moved.
	Reason Reason
	// At is when it happened. A transition that time alone causes (an open
	// period that ended, a probe past its bound) carries the moment it
	// became due, which may be before it was noticed.
	At time.Time
	// Counts are the breaker's window when the transition was decided,
	// before any reset; for a transition that time alone causes, as read
	// when it was noticed.
	Counts Counts
	// OpenFor is, when To is StateOpen, the open period chosen (backoff,
	// upstream Retry-After, cap and jitter applied; for a fleet hint, the
	// time to the hint's RetryAt, capped as the breaker took it); 0 for an
	// operator's "until Reset" and for the other targets.
	OpenFor time.Duration
}

// Call is what an Observer is told of one call that reached a breaker:
// once, when its outcome is known or when it is refused.
type Call struct {
	// Key is the key of the breaker the call went through.
	Key string
	// State is the breaker's state when it admitted or refused the call:
	// StateHalfOpen for a probe.
	State State
	// Outcome is the outcome of an admitted call (or of a call a shadow
	// breaker let through); OutcomeIgnored for a refused one.
	Outcome Outcome
	// Rejected is "" for an admitted call; else the reason label of
	// breaker_rejections_total: "open", "half-open", "bulkhead" or
	// "retry_budget".
	Rejected string
	// Shadow reports that a breaker in ModeShadow would have refused the
	// call, for the reason in Rejected, and let it through.
	Shadow bool
	// Duration is the time from admission to the outcome: to the end of
	// the body under WithBodyErrors. 0 for a refused call.
	Duration time.Duration
	// QueueWait is the time the call spent in the bulkhead's waiting line
	// (WithQueue).
	QueueWait time.Duration
	// RetryAfter is, for a refused call, how long until the breaker may
	// admit calls again: the synthetic 503's Retry-After, before it is
	// rounded to whole seconds (so at most an hour).
	RetryAfter time.Duration
	// Moved is the transition this call's outcome caused, if any; nil
	// almost always. Do not modify it.
	Moved *Transition
}

// An Observer is told of every transition and every call of a
// Transport's breakers: the seam for exporters such as the
// OpenTelemetry module github.com/httpbreaker/httpbreaker/otelbreaker.
//
// Transition is called after each transition, with no lock held, once
// per transition; for one key, calls never overlap and come in the order
// the transitions happened. Call is called once per call that reached a
// breaker, on the caller's goroutine, with the request's context, when
// the call's outcome is known or it is refused; calls for one key may
// run at the same time, so Call must be safe for concurrent use. Neither
// may block: the caller waits for them. A Call that panics reaches the
// caller, and the transition its call caused is still reported. A
// Transition that panics (or a WithOnTransition hook, or a Store's
// Publish) reaches the caller too, once every other observer has been
// told of that transition and of those queued after it.
type Observer interface {
	Transition(Transition)
	Call(ctx context.Context, c Call)
}

// An Attacher is an Observer that reads its Transport's breakers itself,
// when it is asked rather than when they change: a metrics exporter whose
// state gauge is read at each collection, as otelbreaker's is. New calls
// Attach once with the Transport it made, before it returns and before
// the observer is told of any call or transition; an observer given to
// several Transports is attached to each. Transitions alone cannot keep
// such a gauge right: a breaker dropped by WithMaxBreakers' eviction or
// by an Update to ModeOff goes with no transition, and an open period
// ends with none until a call finds it over. Read the breakers with
// Transport.States, which moves none of them. An Attacher that outlives
// its Transport (a MeterProvider keeps its callbacks) should hold it
// weakly (package weak), so that a Transport its user dropped is freed.
type Attacher interface {
	Observer
	Attach(t *Transport)
}

// WithObserver adds o to the Transport's observers (see Observer). Several
// may be given; each is told everything. An o that is an Attacher is
// attached to the Transport. A nil o panics. Without an observer, the
// request path pays nothing for them.
func WithObserver(o Observer) Option {
	return structural("WithObserver", func(c *config) {
		if o == nil {
			c.invalid("WithObserver", "nil Observer")
			return
		}
		c.observers = append(c.observers, o)
	})
}

// WithOnTransition sets a function called after each transition of any
// breaker, with the transition's reason and counts [none]. It runs with
// no lock held; for one key, calls never overlap and come in the order
// the transitions happened, and no caller waits on another key's hook.
// It must not block for long: a caller whose call caused a transition, or
// found one due, may run it. A later WithOnTransition replaces an
// earlier one; a nil f sets none.
func WithOnTransition(f func(Transition)) Option {
	return structural("WithOnTransition", func(c *config) { c.onTransition = f })
}

// outbox delivers one breaker's transitions in the order they happened,
// one at a time, with no breaker lock held: transitions are queued under
// the breaker's lock, where they happen, and delivered by whichever
// caller finds the outbox idle.
type outbox struct {
	mu   sync.Mutex
	q    []*transition
	busy bool // a caller is delivering
}

// push queues tr and those chained to it. Call it with the breaker's
// lock held, so that the queue keeps the order of the transitions.
func (o *outbox) push(tr *transition) {
	o.mu.Lock()
	for ; tr != nil; tr = tr.next {
		tr.box = o
		o.q = append(o.q, tr)
	}
	o.mu.Unlock()
}

// quiet reports whether the outbox has nothing queued and nobody
// delivering: a breaker whose hooks may still run for its key is not
// idle, or its key's next breaker could run them beside it.
func (o *outbox) quiet() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.busy && len(o.q) == 0
}

// deliver reports every queued transition through report, oldest first,
// unless another caller is already doing so (it reports ours too).
func (o *outbox) deliver(report func(*transition)) {
	o.mu.Lock()
	if o.busy {
		o.mu.Unlock()
		return
	}
	o.busy = true
	o.drainLocked(report)
}

// drainLocked reports the queued transitions, oldest first, and leaves
// the outbox idle. Call it with mu held and busy set; it returns with mu
// released. A report that panics does not keep the transitions queued
// after it from being reported: they are, as its panic goes on to the
// caller.
func (o *outbox) drainLocked(report func(*transition)) {
	for len(o.q) > 0 {
		tr := o.q[0]
		o.q[0] = nil
		o.q = o.q[1:]
		o.mu.Unlock()
		done := false
		func() {
			defer func() {
				if !done {
					o.mu.Lock()
					o.drainLocked(report)
				}
			}()
			report(tr)
			done = true
		}()
		o.mu.Lock()
	}
	o.q = nil
	o.busy = false
	o.mu.Unlock()
}

// notify delivers the transitions queued with tr, if there is one, in
// the order of their breaker's transitions. It runs with no lock held, on
// the goroutine that caused the transition or found it due. It inlines:
// the request path, which almost never has a transition to report, does
// not call into deliver.
func (t *Transport) notify(tr *transition) {
	if tr != nil {
		tr.box.deliver(t.report)
	}
}

// logTransition logs opening at Warn and every other transition at Info,
// with the reason and the counts it was decided on.
func logTransition(l *slog.Logger, tr *Transition) {
	attrs := []slog.Attr{
		slog.String("breaker", tr.Key),
		slog.String("from", tr.From.String()),
		slog.String("to", tr.To.String()),
		slog.String("reason", tr.Reason.String()),
		slog.Int64("requests", tr.Counts.Requests),
		slog.Int64("failures", tr.Counts.Failures),
		slog.Int64("throttled", tr.Counts.Throttled),
	}
	level := slog.LevelInfo
	if tr.To == StateOpen {
		level = slog.LevelWarn
		attrs = append(attrs, slog.Duration("open_for", tr.OpenFor))
	}
	l.LogAttrs(context.Background(), level, "httpbreaker: breaker "+tr.To.String(), attrs...)
}

// report tells everyone of one transition: the bulkhead's waiting line
// (refused as open), the fleet, the log, the hook and the observers; of
// an operator's action that moved nothing (see breaker.operatorHint), the
// fleet alone. A Store, hook or observer that panics does not keep it
// from those after it.
func (t *Transport) report(tr *transition) {
	if tr.To == StateOpen && !tr.hintOnly {
		if c := t.breakers.get(tr.Key); c != nil && c.bulk.waiting.Load() > 0 {
			c.bulk.refuseAll() // calls waiting for the bulkhead are refused as open
		}
	}
	tell := make([]func(), 0, 3+len(t.observers))
	if s := t.member; s != nil && !tr.fleet {
		switch tr.To {
		case StateOpen:
			h := Hint{Key: tr.Key, State: StateOpen, Cycles: tr.cycles, Operator: tr.operator}
			if tr.retryAt != never || !tr.operator { // an operator's "until Reset" is the zero time
				h.RetryAt = wall(t.epoch, tr.retryAt) // any other open the clock cannot reach: centuries ahead
			}
			tell = append(tell, func() { s.Publish(h) })
		case StateClosed:
			tell = append(tell, func() { s.Publish(Hint{Key: tr.Key, State: StateClosed, Operator: tr.operator}) })
		}
	}
	if tr.hintOnly {
		callEach(tell) // an operator's action that moved nothing: the fleet alone hears of it
		return
	}
	if l := t.logger; l != nil {
		tell = append(tell, func() { logTransition(l, &tr.Transition) })
	}
	if f := t.onTransition; f != nil {
		tell = append(tell, func() { f(tr.Transition) })
	}
	for _, o := range t.observers {
		tell = append(tell, func() { o.Transition(tr.Transition) })
	}
	callEach(tell)
}

// callEach calls each of fs in turn. One that panics does not keep the
// rest from being called: they are, as its panic goes on to the caller.
func callEach(fs []func()) {
	for i, f := range fs {
		done := false
		func() {
			defer func() {
				if !done {
					callEach(fs[i+1:])
				}
			}()
			f()
			done = true
		}()
	}
}

// observe tells every observer of call c, with the request's context.
func (t *Transport) observe(ctx context.Context, c Call) {
	for _, o := range t.observers {
		o.Call(ctx, c)
	}
}

// observeShadow tells the observers of a call that c's shadow breaker
// let through, though it would have refused it for reason: admitted at
// clock time start, after queued in the bulkhead's line, with outcome o
// at end.
func (t *Transport) observeShadow(ctx context.Context, c *circuit, reason rejectReason, o Outcome, start, end int64, queued time.Duration) {
	t.observe(ctx, Call{Key: c.key(), State: c.refusedState(reason, start), Outcome: o, Rejected: reason.String(),
		Shadow: true, Duration: time.Duration(end - start), QueueWait: queued})
}

// observeCall tells the observers of the admitted call tk through c,
// whose outcome o was counted at clock time end after queued in the
// bulkhead's line, and which caused tr, if not nil.
func (t *Transport) observeCall(ctx context.Context, c *circuit, tk ticket, o Outcome, end int64, queued time.Duration, tr *transition) {
	call := Call{Key: c.key(), State: StateClosed, Outcome: o, Duration: time.Duration(end - tk.start), QueueWait: queued}
	if tk.probe != 0 {
		call.State = StateHalfOpen
	}
	if tr != nil {
		call.Moved = &tr.Transition
	}
	t.observe(ctx, call)
}
