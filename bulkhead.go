package httpbreaker

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// This file is a circuit's bulkhead: the places that bound its calls in
// flight (WithMaxConcurrent) and the line of calls waiting for one
// (WithQueue). Its decisions read the circuit's current policy when they
// are taken, whichever call takes them, so that an Update that resizes
// the bulkhead applies at once: a larger one admits its waiters, oldest
// first, before any newcomer; a smaller one admits nobody until the
// calls in flight fall below it.
//
// A call admitted under a policy with a bulkhead holds a place (its
// ticket says so) until its outcome is counted; a call admitted under a
// policy without one never touches the bulkhead. A place comes back in
// one way only, giveBack, which also hands free places to the oldest
// waiters.

// bulkhead is a circuit's places and its waiting line. A waiter blocks
// on its own channel: it holds no lock while it waits and starts no
// goroutine.
type bulkhead struct {
	inflight atomic.Int64 // places taken
	waiting  atomic.Int64 // len(line), for giveBack to read without mu
	mu       sync.Mutex
	line     []*waiter // oldest first; guarded by mu
	gone     bool      // letGo ran: whoever joins now is let go at once; guarded by mu
}

// waiter is one call in the line.
type waiter struct {
	ready  chan struct{} // closed when the waiter has a place, is refused as open, or is let go
	open   bool          // set before ready is closed: the breaker opened
	off    bool          // set before ready is closed: its key is off, with no bulkhead
	shadow bool          // set before ready is closed: its key is in ModeShadow, which refuses nothing
}

// take takes a place if fewer than limit are taken. A limit of 0 (an
// Update removed the bulkhead) bounds nothing: the call takes a place
// all the same, since it gives one back when it ends. take never counts
// a place it does not take, even for an instant: a call that found the
// bulkhead full because another only looked at it could wait for a
// place nobody holds.
func (h *bulkhead) take(limit int64) bool {
	for {
		n := h.inflight.Load()
		if limit > 0 && n >= limit {
			return false
		}
		if h.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// join adds a waiter at the end of the line, unless n are waiting
// already. After letGo, the waiter it returns is let go at once.
func (h *bulkhead) join(n int64) (*waiter, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		w := &waiter{ready: make(chan struct{}), off: true}
		close(w.ready)
		return w, true
	}
	if int64(len(h.line)) >= n {
		return nil, false
	}
	w := &waiter{ready: make(chan struct{})}
	h.line = append(h.line, w)
	h.waiting.Add(1)
	return w, true
}

// leave takes w out of the line and reports whether it was still there:
// false means it was given a place, or refused, as it left.
func (h *bulkhead) leave(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, v := range h.line {
		if v == w {
			h.line = append(h.line[:i], h.line[i+1:]...)
			h.waiting.Add(-1)
			return true
		}
	}
	return false
}

// handOff takes a place for the oldest waiter, if one waits and fewer
// than limit places are taken, and tells it so. The place is taken with
// the line locked, so the waiter cannot leave without it.
func (h *bulkhead) handOff(limit int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.line) == 0 || !h.take(limit) {
		return false
	}
	w := h.line[0]
	h.line[0] = nil
	h.line = h.line[1:]
	h.waiting.Add(-1)
	close(w.ready)
	return true
}

// refuseAll refuses every waiter as open: the breaker opened.
func (h *bulkhead) refuseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dismissLocked(func(w *waiter) { w.open = true })
}

// letGo sends every waiter on without a place, now and whoever joins
// later: an Update turned the key off, so it has no bulkhead, and its
// circuit is gone.
func (h *bulkhead) letGo() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gone = true
	h.dismissLocked(func(w *waiter) { w.off = true })
}

// passAll sends every waiter on without a place, as a shadow pass: an
// Update put the key in ModeShadow, which refuses nothing.
func (h *bulkhead) passAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dismissLocked(func(w *waiter) { w.shadow = true })
}

// dismissLocked empties the line, marking each waiter before it is told.
// Requires h.mu held.
func (h *bulkhead) dismissLocked(mark func(*waiter)) {
	for _, w := range h.line {
		mark(w)
		close(w.ready)
	}
	h.line = nil
	h.waiting.Store(0)
}

// limit is the size of c's bulkhead now: 0 for none.
func (c *circuit) limit() int64 { return c.pol.Load().maxConcurrent }

// admitBulkhead decides at clock time now whether a call under policy p,
// which has a bulkhead, may go through c: by the bulkhead, then by the
// breaker's state (RoundTrip calls breaker.admit alone for a policy
// without one). An admitted call gives back its place with release,
// after its outcome is counted. A newcomer takes a free place
// only when nobody waits for one: waiters come first, oldest first. A
// call that finds the bulkhead full while the breaker is open is refused
// as open, so that its caller learns when the open period ends;
// otherwise as bulkhead full, and it may wait in the line (see
// Transport.wait).
func (c *circuit) admitBulkhead(now int64, p *policy) (ticket, rejectReason, *transition) {
	if c.bulk.waiting.Load() > 0 || !c.bulk.take(c.limit()) {
		if c.b.openAt(now) {
			return ticket{}, rejectOpen, nil
		}
		return ticket{}, rejectBulkhead, nil
	}
	return c.admitPlaced(now, p)
}

// admitPlaced admits by state, at clock time now, a call under policy p
// that holds a place in c's bulkhead, and gives the place back if the
// state refuses the call (or the fleet's ProbeLease panics).
func (c *circuit) admitPlaced(now int64, p *policy) (tk ticket, reason rejectReason, tr *transition) {
	defer func() {
		if !tk.place {
			c.giveBack()
		}
	}()
	tk, reason, tr = c.b.admit(now, &p.settings)
	tk.place = reason == admitted
	return tk, reason, tr
}

// release gives back the place the admitted call tk holds in c's
// bulkhead, if it holds one. Call it once per admitted call, after its
// outcome is counted: a waiter must not take a place the count closed.
func (c *circuit) release(tk ticket) {
	if tk.place {
		c.giveBack()
	}
}

// giveBack gives back one place of c's bulkhead, and hands free places
// to the oldest waiters. It is the only way a place comes back. The
// place is freed before the line is read, and a waiter joins the line
// before it looks for a place (see Transport.wait), so that one of the
// two always sees the other: no waiter waits for a place nobody holds.
func (c *circuit) giveBack() {
	c.bulk.inflight.Add(-1)
	if c.bulk.waiting.Load() > 0 { // only ever under WithQueue
		c.wake()
	}
}

// wake hands each free place of c's bulkhead, by its size now, to the
// oldest waiter, while calls wait: when a place comes back, when a call
// joins the line, and when Update resizes the bulkhead.
func (c *circuit) wake() {
	for c.bulk.waiting.Load() > 0 && c.bulk.handOff(c.limit()) {
	}
}

// wait is admission for a call that found c's bulkhead full: it waits in
// c's line for a place, if the line as c's policy now sets it has room
// and for as long as that policy's wait, then is admitted by state, by
// the settings the breaker holds when the place comes. A call that joins
// once the breaker is open is refused as open at once, as the line was
// when it opened. A call still waiting when an Update puts the key in
// ModeShadow, or that joins after it did, is refused as bulkhead full
// with shadow set: RoundTrip lets it through as a shadow breaker's pass.
// The error is the context's, for a caller that gave up waiting; such a
// call counts for nothing.
func (t *Transport) wait(req *http.Request, c *circuit) (tk ticket, reason rejectReason, tr *transition, shadow bool, err error) {
	cur := c.pol.Load() // the line's length and wait, as they are now
	if cur.queue == 0 {
		return ticket{}, rejectBulkhead, nil, false, nil // no line
	}
	w, ok := c.bulk.join(cur.queue)
	if !ok {
		return ticket{}, rejectBulkhead, nil, false, nil // the line is full
	}
	c.wake() // a place freed before the call joined goes to the oldest waiter
	if c.pol.Load().mode == ModeShadow && c.bulk.leave(w) {
		// An Update put the key in ModeShadow after admission looked,
		// and sent its line on before the call joined: sent on now, as
		// the line was.
		return ticket{}, rejectBulkhead, nil, true, nil
	}
	if c.b.openAt(t.now()) && c.bulk.leave(w) {
		// The breaker opened after admission looked, and its report
		// refused the line before the call joined: refused as open now,
		// as the line was.
		return ticket{}, rejectOpen, nil, false, nil
	}
	timer := time.NewTimer(cur.queueWait)
	defer timer.Stop()
	var ended error
	select {
	case <-w.ready:
	case <-timer.C:
	case <-req.Context().Done():
		ended = req.Context().Err()
	}
	if c.bulk.leave(w) { // still waiting: no place came
		if ended != nil {
			return ticket{}, admitted, nil, false, ended
		}
		return ticket{}, rejectBulkhead, nil, false, nil
	}
	<-w.ready
	switch {
	case w.open:
		return ticket{}, rejectOpen, nil, false, nil
	case w.off:
		// Its key is off now: the call goes on as one that no breaker
		// admitted, its outcome counted nowhere (see Transport.settle).
		return ticket{}, admitted, nil, false, ended
	case w.shadow:
		// Its key is in ModeShadow now: the call goes on without a
		// place, as a shadow breaker's pass.
		return ticket{}, rejectBulkhead, nil, true, ended
	case ended != nil:
		c.giveBack() // a place came as the caller left
		return ticket{}, admitted, nil, false, ended
	}
	// Admitted by state under the breaker's settings as they are now:
	// an Update while it waited may have changed its probes.
	tk, reason, tr = c.admitPlaced(t.now(), c.pol.Load())
	return tk, reason, tr, false, nil
}
