package httpbreaker

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// queue is a bulkhead's waiting line (WithQueue): calls that found the
// bulkhead full wait in it, in arrival order, for a place that a call
// ending hands them. A waiter blocks on its own channel: it holds no lock
// while it waits and starts no goroutine.
type queue struct {
	waiting atomic.Int64 // len(line), for release to read without mu
	mu      sync.Mutex
	line    []*waiter // oldest first; guarded by mu
}

// waiter is one call in a queue.
type waiter struct {
	ready chan struct{} // closed when the waiter has a place, or is refused as open
	open  bool          // set before ready is closed: the breaker opened
}

// join adds a waiter at the end of the line, unless n are waiting already.
func (q *queue) join(n int64) (*waiter, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if int64(len(q.line)) >= n {
		return nil, false
	}
	w := &waiter{ready: make(chan struct{})}
	q.line = append(q.line, w)
	q.waiting.Add(1)
	return w, true
}

// leave takes w out of the line and reports whether it was still there:
// false means it was given a place, or refused, as it left.
func (q *queue) leave(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, v := range q.line {
		if v == w {
			q.line = append(q.line[:i], q.line[i+1:]...)
			q.waiting.Add(-1)
			return true
		}
	}
	return false
}

// handOff gives a place to the oldest waiter, if there is one.
func (q *queue) handOff() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.line) == 0 {
		return false
	}
	w := q.line[0]
	q.line = q.line[1:]
	q.waiting.Add(-1)
	close(w.ready)
	return true
}

// refuseAll refuses every waiter as open: the breaker opened.
func (q *queue) refuseAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.line {
		w.open = true
		close(w.ready)
	}
	q.line = nil
	q.waiting.Store(0)
}

// release gives back the bulkhead place of the admitted call tk, and
// hands free places to waiting calls, oldest first.
func (c *circuit) release(tk ticket) {
	c.b.release(tk)
	if c.line.waiting.Load() > 0 { // only ever under WithQueue
		c.wake(tk.s)
	}
}

// wake takes each free place of the bulkhead of settings s for the
// oldest waiter, while calls wait. A place is given back before the line
// is read, and a waiter joins the line before it looks for a place, so
// that one of the two always sees the other.
func (c *circuit) wake(s *settings) {
	for c.line.waiting.Load() > 0 && c.b.tryPlace(s) {
		if !c.line.handOff() {
			c.b.release(ticket{s: s}) // the waiter left first
			return
		}
	}
}

// wait is admission for a call under policy p that found c's bulkhead
// full: it waits in c's line for a place, then is admitted by state. The
// error is the context's, for a caller that gave up waiting; such a call
// counts for nothing.
func (t *Transport) wait(req *http.Request, c *circuit, p *policy) (ticket, rejectReason, *transition, error) {
	w, ok := c.line.join(p.queue)
	if !ok {
		return ticket{}, rejectBulkhead, nil, nil // the line is full
	}
	if c.b.tryPlace(&p.settings) { // a place came free before the call joined
		if !c.line.leave(w) {
			<-w.ready
			if !w.open {
				c.release(ticket{s: &p.settings}) // handed a second one: give it back
			}
		}
		return t.admitPlaced(c, p)
	}
	timer := time.NewTimer(p.queueWait)
	defer timer.Stop()
	var ended error
	select {
	case <-w.ready:
	case <-timer.C:
	case <-req.Context().Done():
		ended = req.Context().Err()
	}
	if c.line.leave(w) { // still waiting: no place came
		if ended != nil {
			return ticket{}, admitted, nil, ended
		}
		return ticket{}, rejectBulkhead, nil, nil
	}
	<-w.ready
	switch {
	case w.open:
		return ticket{}, rejectOpen, nil, nil
	case ended != nil:
		c.release(ticket{s: &p.settings}) // a place came as the caller left
		return ticket{}, admitted, nil, ended
	}
	return t.admitPlaced(c, p)
}

// admitPlaced admits by state a call that holds a place in c's bulkhead,
// giving the place back if the state refuses the call.
func (t *Transport) admitPlaced(c *circuit, p *policy) (ticket, rejectReason, *transition, error) {
	giveBack := true
	defer func() {
		if giveBack { // refused by state, or the fleet's ProbeLease panicked
			c.release(ticket{s: &p.settings})
		}
	}()
	tk, reason, tr := c.b.admitState(t.now(), &p.settings)
	giveBack = reason != admitted
	return tk, reason, tr, nil
}
