package httpbreaker

import (
	"math"
	"time"
)

// A Store shares hints about breakers between Transports, typically between
// the instances of a service, so that the fleet learns an outage once: when
// one instance's breaker opens, the others open too instead of each paying
// its own failure quota, and when the open period ends one instance probes
// for the fleet instead of each sending its own probes.
//
// A Store carries hints only: failure counting stays local, and every
// Transport keeps working on its own breakers when the Store is slow, down
// or returns nonsense. No request ever waits on a Store: every method must
// return at once, answering from memory and doing its I/O in the
// background, and must not call back into a Transport synchronously.
//
// The module github.com/httpbreaker/httpbreaker/redisstore implements a
// Store on Redis. A Store owns its background work and its Close; a
// Transport never closes it.
//
// If a Store also has a method Errors() uint64 (a count of failed
// operations), WithMetrics exports it as breaker_store_errors_total.
type Store interface {
	// Join attaches a Transport, once, when New runs: f receives the hints
	// published by every other member (other instances, and other
	// Transports on this Store), and the returned Member is how this
	// Transport publishes and asks for the probe lease. f is safe for
	// concurrent use and returns quickly. A Store keeps its members for
	// its lifetime: give a short-lived Transport no Store, or a Store of
	// its own that you Close with it.
	Join(f func(Hint)) Member
	// Lookup returns the latest hint known for key, from memory. A
	// Transport calls it when it makes a breaker, to learn an outage the
	// fleet already knows.
	Lookup(key string) (Hint, bool)
}

// A Member is one Transport's place in a Store (see Store.Join).
type Member interface {
	// Publish announces a local transition to the other members: a
	// breaker that opened (State StateOpen, with RetryAt) or closed
	// (StateClosed). It must not block; a Store may drop hints it cannot
	// send. A closed hint also gives back this member's probe lease for
	// the key, if it holds one.
	Publish(Hint)
	// ProbeLease asks whether this member may probe key for the fleet,
	// holding the lease for at most ttl (a crashed prober's lease
	// expires). It answers from memory: LeaseGranted when this member
	// holds the lease, LeaseDenied when another member holds it or the
	// answer is still on its way (the Store then acquires it in the
	// background), LeaseUnavailable when the Store cannot tell, and the
	// Transport decides locally.
	ProbeLease(key string, ttl time.Duration) Lease
}

// Hint is what a Store carries about one breaker.
type Hint struct {
	// Key is the breaker's key.
	Key string
	// State is StateOpen or StateClosed; other values are ignored.
	State State
	// RetryAt is, for StateOpen, when the next probe may go. A Transport
	// that receives it opens its own breaker until then, but never for
	// longer than its MaxOpenTimeout from now, and ignores a time in the
	// past. An operator's open hint (Operator) is taken exactly, uncapped;
	// its zero RetryAt means "until Reset".
	RetryAt time.Time
	// Cycles is, for StateOpen, the count of consecutive failed probe
	// cycles behind the open period: the breaker's backoff. A Transport
	// that receives it backs off from it, so that the fleet's open periods
	// grow as one breaker's do, whichever instance holds the probe lease.
	Cycles int
	// Operator marks a hint of Trip (StateOpen) or Reset (StateClosed): a
	// Transport that receives it opens its breaker for exactly the time
	// left, whatever its state, or closes it and clears its counts.
	Operator bool
}

// Lease is a Store's answer to ProbeLease.
type Lease int

const (
	// LeaseUnavailable: the Store cannot tell (it is down, or not yet
	// synchronised); the Transport probes on its own, as without a Store.
	LeaseUnavailable Lease = iota
	// LeaseGranted: this Transport holds the fleet's probe lease.
	LeaseGranted
	// LeaseDenied: another instance is probing, or the answer is pending;
	// the Transport stays open and asks again shortly.
	LeaseDenied
)

// WithStore shares breaker hints through s (see Store) [none]. Without a
// Store nothing is shared. A nil s panics.
func WithStore(s Store) Option {
	return structural("WithStore", func(c *config) {
		if s == nil {
			c.invalid("WithStore", "nil Store")
			return
		}
		c.store = s
	})
}

// learn has a new circuit take what the fleet already knows of its key.
func (t *Transport) learn(c *circuit) {
	if t.store == nil {
		return
	}
	if h, ok := t.store.Lookup(c.key()); ok && h.Key == c.key() {
		t.take(c, h)
	}
}

// applyHint takes a hint from the Store for a live circuit. Hints for
// keys without one are learnt through Store.Lookup when it is made.
func (t *Transport) applyHint(h Hint) {
	if c := t.breakers.get(canonicalHostKey(h.Key)); c != nil {
		t.take(c, h)
	}
}

// take applies hint h to c's breaker: an open hint opens a closed
// breaker until the hint's RetryAt, but never for longer than its
// maximum open timeout, and a closed hint closes an open or half-open
// one; an operator's hint opens for exactly the time left (or until
// Reset), or closes and clears, whatever the state. Every open hint
// carries its backoff.
func (t *Transport) take(c *circuit, h Hint) {
	if c.pol.Load().mode == ModeOff {
		return // no breaker
	}
	switch {
	case h.State == StateOpen && h.Operator:
		d := time.Duration(math.MaxInt64) // until Reset
		if !h.RetryAt.IsZero() {
			if d = time.Until(h.RetryAt); d <= 0 {
				return
			}
		}
		tr, _ := c.b.trip(t.now(), d, true, h.Cycles) // an evicted breaker's key learns it by Lookup when made again
		t.notify(tr)
	case h.State == StateOpen:
		t.notify(c.b.hintOpen(t.now(), time.Until(h.RetryAt), h.Cycles))
	case h.State == StateClosed && h.Operator:
		tr, _ := c.b.reset(t.now(), true)
		t.notify(tr)
	case h.State == StateClosed:
		t.notify(c.b.hintClose(t.now()))
	}
}

// fleet is what a breaker asks of the instances it shares an outage
// with: whether it may probe for all of them. A Member is one.
type fleet interface {
	ProbeLease(key string, ttl time.Duration) Lease
}

// hintOpen takes a fleet's word at clock time now that the dependency is
// down for d more, after cycles failed probe cycles: a closed breaker
// opens for d, but never for longer than its maximum open timeout; an
// open one stays open at least that long; and in any state the breaker
// backs off from at least cycles from now on. An evicted breaker takes
// no hint: its key's next breaker learns what the fleet knows when it is
// made (see Transport.create).
func (b *breaker) hintOpen(now int64, d time.Duration, cycles int) *transition {
	if d <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.evicted.Load() {
		return nil
	}
	b.cycles = max(b.cycles, cycles)
	d = min(d, b.cfg.Load().maxOpenTimeout)
	switch stateOf(b.word.Load()) {
	case StateOpen:
		if until := later(now, d); until > b.retryAt.Load() {
			b.retryAt.Store(until) // the fleet knows it is down for longer
		}
		return nil
	case StateHalfOpen:
		return nil
	}
	tr := b.openLocked(now, d, ReasonFleet, b.countsLocked(now))
	if tr != nil {
		tr.fleet = true
	}
	return b.queueLocked(tr)
}

// hintClose takes a fleet's word at clock time now that the dependency
// is back: an open or half-open breaker closes, unless an operator's
// trip still holds it (only a reset, or the trip's end, closes that). An
// evicted breaker takes no hint.
func (b *breaker) hintClose(now int64) *transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.evicted.Load() || stateOf(b.word.Load()) == StateClosed || b.operator && now < b.retryAt.Load() {
		return nil // an operator's trip holds until its end, or Reset
	}
	tr := b.closeLocked(now, ReasonFleet)
	if tr != nil {
		tr.fleet = true
	}
	return b.queueLocked(tr)
}
