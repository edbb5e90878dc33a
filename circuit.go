package httpbreaker

import (
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// circuit is what a Transport keeps per key: the key's breaker, the
// policy its calls run under, and the Transport's own bookkeeping for it.
type circuit struct {
	b    breaker
	pol  atomic.Pointer[policy] // what its calls run under; a call loads it once
	hash uint64                 // of the key in the Transport's table; set before it is published
	// openErr is the error shared by the rejections of the current open
	// period (see Transport.rejectedError).
	openErr atomic.Pointer[RejectedError]
	// rejected counts refused calls by reason; shadowed the calls a
	// breaker in ModeShadow would have refused, and let through.
	rejected, shadowed [numReasons]atomic.Int64
	// bulk is the bulkhead's places and waiting line (WithMaxConcurrent,
	// WithQueue).
	bulk bulkhead
}

// key is the circuit's key.
func (c *circuit) key() string { return c.b.key }

// circuit returns the circuit a request goes through, making it if
// needed, or nil for a request that touches no breaker: one no
// dependency could answer (see RoundTrip), or one for which the cap
// leaves no room, not even for its host key.
func (t *Transport) circuit(req *http.Request) *circuit {
	if !routable(req) {
		return nil
	}
	switch {
	case t.keys.routes != nil:
		return t.routeCircuit(req)
	case t.keys.user != nil:
		return t.keyCircuit(req, t.keys.user(req))
	}
	return t.keyCircuit(req, HostKey(req))
}

// keyCircuit returns the circuit for the request's key, making it if
// needed.
func (t *Transport) keyCircuit(req *http.Request, key string) *circuit {
	if c := t.breakers.get(key); c != nil {
		return c
	}
	return t.create(req, key)
}

// create makes the circuit for key, evicting an idle closed one if the
// cap is reached, and has it learn what the fleet knows of key. Past the
// cap with nothing to evict, it falls back to the request's host key
// (for a request; nil for an operator's key), and returns nil when even
// that has no room. Without a request (an operator's key, or the outcome
// of a call whose circuit was evicted) a key whose mode is off gets none:
// only requests, which come again, keep the circuit that says a key is
// off.
func (t *Transport) create(req *http.Request, key string) *circuit {
	if t.policies.Load() == nil {
		return nil // not made by New: no breakers
	}
	if k := canonicalHostKey(key); k != key {
		if c := t.breakers.get(k); c != nil {
			return c
		}
		key = k
	}
	if len(key) > maxKeyLen {
		key = HostKey(req)
	}
	ps := t.policies.Load()
	if req == nil && ps.off(key) {
		return nil
	}
	if t.now() < t.nextEvict.Load() {
		return t.existing(ps, req, key) // no room: t.mu would only say so
	}
	t.mu.Lock()
	if c := t.breakers.get(key); c != nil {
		t.mu.Unlock()
		return c
	}
	now := t.now()
	if t.breakers.live >= t.maxBreakers && !t.evictLocked(now) {
		t.mu.Unlock()
		return t.existing(ps, req, key)
	}
	c := new(circuit)
	pol := t.policies.Load().of(key)
	c.pol.Store(pol)
	c.b.init(strings.Clone(key), &pol.settings, t.epoch, now, t.member) // the key: not the request's memory
	if o := t.telling[key]; o != nil && pol.mode != ModeOff {
		c.b.out = o // its hooks may still run for the breaker before (a key's off circuit, evictable at any time, has none to run)
		delete(t.telling, key)
	}
	t.breakers.insert(c)
	t.mu.Unlock()
	t.learn(c)
	return c
}

// settle counts the outcome o of the call tk admitted through c, at
// clock time end, with its response's Retry-After, and returns the
// transition it caused. A call whose circuit was evicted while it ran
// (a closed breaker without a bulkhead can be evicted with calls in
// flight, since counting them would cost every call) counts for its key
// all the same: through the key's live circuit, made again if needed, if
// that is closed.
func (t *Transport) settle(c *circuit, tk ticket, o Outcome, end int64, retryAfter time.Duration) *transition {
	if c.b.evicted.Load() {
		return t.settleEvicted(c, tk, o, end, retryAfter, false)
	}
	tr := c.b.count(tk, o, end, retryAfter)
	if tr == nil && c.b.evicted.Load() { // evicted as it counted: the count may have gone with it (see circuit.evict)
		return t.settleEvicted(c, tk, o, end, retryAfter, true)
	}
	return tr
}

// settleEvicted is settle for a call whose circuit c was evicted, and
// which c has counted already if counted. A key whose mode is now off (an
// Update dropped its circuit) has no breaker to count it. If c is still
// its key's live circuit, its eviction was called off (see circuit.evict).
func (t *Transport) settleEvicted(c *circuit, tk ticket, o Outcome, end int64, retryAfter time.Duration, counted bool) *transition {
	key := c.key()
	live := t.keyCircuit(nil, key)
	switch {
	case live == c && counted:
		return nil
	case live == c:
		return c.b.count(tk, o, end, retryAfter)
	case live == nil || live.key() != key || live.pol.Load().mode == ModeOff:
		return nil
	}
	tk, ok := live.b.adopt(tk)
	if !ok {
		return nil
	}
	return live.b.count(tk, o, end, retryAfter)
}

// existing is create when the cap leaves no room for a new circuit: the
// circuit of key, else of the request's host key, if either exists. A
// key whose mode is off gets none: its requests go straight to next.
func (t *Transport) existing(ps *policies, req *http.Request, key string) *circuit {
	if c := t.breakers.get(key); c != nil || req == nil || ps.off(key) {
		return c
	}
	if host := HostKey(req); host != key {
		return t.breakers.get(host)
	}
	return nil
}

// maxEvictWait bounds the wait between two scans for an idle circuit: a
// long window (or an Update that shortens it) must not leave new keys
// without a breaker for long.
const maxEvictWait = time.Second

// evictLocked removes one idle circuit, if there is one. When none is
// idle, it waits a bucket width (at most maxEvictWait) before scanning
// again, so a flood of new keys does not rescan a full table of busy
// breakers for each one.
// Requires t.mu held.
func (t *Transport) evictLocked(now int64) bool {
	if now < t.nextEvict.Load() {
		return false
	}
	var victim *circuit
	t.breakers.each(func(c *circuit) bool {
		if c.evictable(now) && c.evict(now) {
			victim = c
			return false
		}
		return true
	})
	if victim == nil {
		t.nextEvict.Store(later(now, min(t.policies.Load().base.window/bucketCount, maxEvictWait)))
		return false
	}
	t.breakers.remove(victim)
	return true
}

// evictable reports whether c may be evicted at clock time now: its key
// is off (it keeps nothing worth keeping), or its breaker is idle and its
// bulkhead empty.
func (c *circuit) evictable(now int64) bool {
	return c.pol.Load().mode == ModeOff || c.bulk.inflight.Load() == 0 && c.b.idle(now)
}

// evict marks c evicted if it is still evictable, and reports whether it
// did. The mark is set with the breaker's lock held, so that no Trip or
// trip lands on an evicted breaker (both look for it under the lock),
// and before the last look at the breaker: a call counted meanwhile
// either shows in that look, and the eviction is called off, or sees the
// mark after it counted, and counts for its key's next breaker (see
// Transport.settle).
func (c *circuit) evict(now int64) bool {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	c.b.evicted.Store(true)
	if !c.evictable(now) {
		c.b.evicted.Store(false)
		return false
	}
	return true
}

// adopt returns a ticket of b's current generation for a call admitted
// through another breaker of the same key (see Transport.settle), or
// false when b is not closed or has begun a generation since the call
// was admitted (other than the one it was made in): then the call was
// admitted in a state that is over, and says nothing now.
func (b *breaker) adopt(tk ticket) (ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.word.Load()
	if stateOf(w) != StateClosed || tk.probe != 0 || b.genSince > max(tk.start, b.created) {
		return ticket{}, false
	}
	tk.gen = genOf(w)
	return tk, true
}
