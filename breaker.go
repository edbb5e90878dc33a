package httpbreaker

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// State is the state of one breaker.
type State int32

const (
	// StateClosed: requests flow and outcomes are counted.
	StateClosed State = iota
	// StateHalfOpen: a bounded number of probes may go; the rest are
	// rejected.
	StateHalfOpen
	// StateOpen: every request is rejected until the open period ends.
	StateOpen
)

const numStates = 3

// String returns "closed", "half-open" or "open"; these are also the
// values of the state labels in metrics.
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateHalfOpen:
		return "half-open"
	case StateOpen:
		return "open"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText encodes the state as its String form, so JSON shows
// "half-open" rather than 1.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// rejectReason says why a request was refused.
type rejectReason int

const (
	admitted rejectReason = iota
	rejectOpen
	rejectHalfOpen
	rejectBulkhead
	numReasons
)

func (r rejectReason) String() string {
	switch r {
	case rejectOpen:
		return "open"
	case rejectHalfOpen:
		return "half-open"
	case rejectBulkhead:
		return "bulkhead"
	}
	return "admitted"
}

// probeResult is what became of a half-open probe.
type probeResult int

const (
	probeSuccess probeResult = iota // the dependency answered well
	probeFailure                    // the dependency failed: reopened
	probeTimeout                    // the probe outlived the probe bound: reopened
	probeIgnored                    // the caller cancelled, or the outcome was ignored or throttled
	numProbeResults
)

func (p probeResult) String() string {
	return [...]string{"success", "failure", "timeout", "ignored"}[p]
}

// ticket is what an admitted call carries to its outcome. It is passed by
// value on the hot path: keep it at three fields, which the compiler keeps
// in registers (a fourth word cost ~20ns; so did a fifth field).
type ticket struct {
	gen uint64 // generation the call was admitted in
	// start is the clock at admission, when read: always for probes (where
	// it also identifies the probe's slot) and rejections, and for a
	// request with a deadline or under a slow-call threshold (tkTimed).
	start int64
	flags ticketFlags
}

// ticketFlags say what else a ticket knows of its admission.
type ticketFlags uint8

const (
	tkProbe ticketFlags = 1 << iota // a half-open probe holding a slot
	tkShort                         // the deadline budget at admission was under minBudget
	tkTimed                         // start was read for a deadline or a slow-call threshold
)

// is reports whether every flag of f is set.
func (tk ticket) is(f ticketFlags) bool { return tk.flags&f == f }

// transition is a state change to report once every lock is released.
type transition struct {
	key      string
	from, to State
	rate     float64 // failure rate that tripped it (closed→open)
	samples  int64   // requests in the window that tripped it
	reason   string  // why: "failure rate", "probe failed", "probe timed out", "manual", "fleet", ...
	openFor  time.Duration
	retryAt  int64 // clock time the open period ends, when to is StateOpen
	fleet    bool  // caused by a Store hint: not published back
}

// breaker is the state machine of one key. The closed path is lock-free:
// admission is one atomic load, recording an outcome one atomic add and
// one clock read. Every transition happens under mu, exactly once: it
// checks that the generation it saw is still current.
type breaker struct {
	// The closed path reads key through win.width in the first cache line
	// and one bucket of win in the lines that follow it (see window).
	key  string
	hash uint64 // of key in the Transport's table; set before it is published
	cfg  *config

	// word is gen<<2 | state. Written only with mu held.
	word atomic.Uint64
	// evicted is set when the Transport drops the breaker, for those that
	// still hold a pointer to it (see Transport.routeBreaker).
	evicted atomic.Bool
	// retryAt is the clock time at which an open breaker lets probes go.
	// Stored before word when opening.
	retryAt atomic.Int64

	win window

	// inflight counts calls in flight; kept only with a bulkhead.
	inflight atomic.Int64
	// throttleSince is 1 + the clock time at which 429s started to make
	// up the failure rate, or 0 when they do not.
	throttleSince atomic.Int64
	// throttleLast is the clock time of the last 429 seen.
	throttleLast atomic.Int64
	// retryHint is the longest Retry-After (ns) seen on a failed or
	// throttled response since the last transition, and retryHintAt the
	// clock time it was seen: a hint older than the window is not one of
	// the responses that trip the breaker, and counts for nothing.
	retryHint   atomic.Int64
	retryHintAt atomic.Int64
	// rejections counts refused calls by reason.
	rejections [numReasons]atomic.Int64
	// openErr is the error shared by the rejections of the current open
	// period (see Transport.rejectedError).
	openErr atomic.Pointer[RejectedError]

	created int64 // clock time the breaker was made

	mu          sync.Mutex
	since       int64                       // clock time the current state began; guarded by mu
	cycles      int                         // consecutive failed probe cycles; guarded by mu
	probeStarts []int64                     // admission times of probes in flight; guarded by mu
	successes   int64                       // consecutive probe successes; guarded by mu
	transitions [numStates][numStates]int64 // guarded by mu
	openNanos   int64                       // time spent in finished open periods; guarded by mu
	openSeen    int64                       // the most open time reported (openTotalLocked); guarded by mu
	probes      [numProbeResults]int64      // guarded by mu
}

func newBreaker(key string, cfg *config, now int64) *breaker {
	b := &breaker{
		key:         key,
		cfg:         cfg,
		since:       now,
		created:     now,
		probeStarts: make([]int64, 0, cfg.halfOpenProbes),
	}
	b.win.init(int64(cfg.window))
	return b
}

func stateOf(w uint64) State { return State(w & 3) }
func genOf(w uint64) uint64  { return w >> 2 }

// admit decides whether a call may go: first the bulkhead, then the
// state. A call refused by a full bulkhead while the breaker is open is
// refused as open, so that its caller learns when the open period ends.
// now is called at most once, and only when the breaker is not closed.
func (b *breaker) admit(now func() int64) (ticket, rejectReason, *transition) {
	if max := b.cfg.maxConcurrent; max > 0 {
		if b.inflight.Add(1) > max {
			b.inflight.Add(-1)
			if stateOf(b.word.Load()) == StateOpen {
				if t := now(); t < b.retryAt.Load() {
					return ticket{start: t}, rejectOpen, nil
				}
			}
			return ticket{}, rejectBulkhead, nil
		}
		tk, r, tr := b.admitState(now)
		if r != admitted {
			b.inflight.Add(-1)
		}
		return tk, r, tr
	}
	return b.admitState(now)
}

// admitState decides by state alone.
func (b *breaker) admitState(now func() int64) (ticket, rejectReason, *transition) {
	w := b.word.Load()
	if stateOf(w) == StateClosed {
		return ticket{gen: genOf(w)}, admitted, nil
	}
	t := now()
	if stateOf(w) == StateOpen {
		if t < b.retryAt.Load() {
			return ticket{start: t}, rejectOpen, nil
		}
		if m := b.cfg.member; m != nil && m.ProbeLease(b.key, b.cfg.maxOpenTimeout) == LeaseDenied {
			// Another instance probes for the fleet: stay open a little
			// longer and ask again.
			b.mu.Lock()
			if b.word.Load() == w {
				b.retryAt.Store(t + int64(b.cfg.leaseRecheck()))
			}
			b.mu.Unlock()
			return ticket{start: t}, rejectOpen, nil
		}
	}
	b.mu.Lock()
	tr := b.advanceLocked(t, true)
	w = b.word.Load()
	switch stateOf(w) {
	case StateClosed:
		b.mu.Unlock()
		return ticket{gen: genOf(w)}, admitted, tr
	case StateOpen:
		b.mu.Unlock()
		return ticket{start: t}, rejectOpen, tr
	}
	if int64(len(b.probeStarts)) >= b.cfg.halfOpenProbes {
		b.mu.Unlock()
		return ticket{start: t}, rejectHalfOpen, tr
	}
	b.probeStarts = append(b.probeStarts, t)
	b.mu.Unlock()
	return ticket{gen: genOf(w), start: t, flags: tkProbe}, admitted, tr
}

// advanceLocked applies the transitions that time alone causes: an open
// period that has ended becomes half-open, and a half-open breaker whose
// oldest probe has outlived the probe bound reopens. At most one
// transition happens per call. With a Store, only an admission (which has
// asked for the fleet's probe lease) moves an open breaker to half-open.
// Requires mu held.
func (b *breaker) advanceLocked(now int64, admission bool) *transition {
	w := b.word.Load()
	switch stateOf(w) {
	case StateOpen:
		if now >= b.retryAt.Load() && (admission || b.cfg.store == nil) {
			return b.setLocked(StateHalfOpen, now, "open period ended")
		}
	case StateHalfOpen:
		bound := int64(b.cfg.maxOpenTimeout)
		for _, s := range b.probeStarts {
			if now-s >= bound {
				b.probes[probeTimeout]++
				return b.reopenLocked(now, "probe timed out")
			}
		}
	}
	return nil
}

// current returns the state as of clock time now, applying any transition
// time alone has caused.
func (b *breaker) current(now int64) (State, *transition) {
	w := b.word.Load()
	if stateOf(w) == StateClosed {
		return StateClosed, nil
	}
	b.mu.Lock()
	tr := b.advanceLocked(now, false)
	s := b.displayStateLocked(now)
	b.mu.Unlock()
	return s, tr
}

// displayStateLocked is the state to show: an open breaker whose open
// period has ended shows as half-open, due to probe, even while it waits
// for the fleet's probe lease. Requires mu held.
func (b *breaker) displayStateLocked(now int64) State {
	s := stateOf(b.word.Load())
	if s == StateOpen && now >= b.retryAt.Load() {
		return StateHalfOpen
	}
	return s
}

// setLocked moves to state to at clock time now and starts a new
// generation. It returns nil when the state stays the same (a manual trip
// of an open breaker), which is not a transition. Requires mu held.
func (b *breaker) setLocked(to State, now int64, reason string) *transition {
	w := b.word.Load()
	from := stateOf(w)
	if from == StateOpen {
		b.openNanos = b.openTotalLocked(now)
	}
	b.since = now
	b.probeStarts = b.probeStarts[:0]
	b.successes = 0
	b.retryHint.Store(0)
	b.throttleSince.Store(0)
	if to != StateOpen {
		b.retryAt.Store(0)
	}
	b.word.Store((genOf(w)+1)<<2 | uint64(to))
	if from == to {
		return nil
	}
	b.transitions[from][to]++
	return &transition{key: b.key, from: from, to: to, reason: reason}
}

// openLocked opens the breaker for d. Requires mu held.
func (b *breaker) openLocked(now int64, d time.Duration, reason string) *transition {
	until := now + int64(d)
	if until < now {
		until = math.MaxInt64 // "forever": a d that overflows the clock opens until its end
	}
	b.retryAt.Store(until)
	tr := b.setLocked(StateOpen, now, reason)
	if tr != nil {
		tr.openFor = d
		tr.retryAt = until
	}
	return tr
}

// openTotalLocked is the time spent open as of clock time now: finished
// open periods, and the current one up to now but not past its end, after
// which the breaker is due for half-open however late the next request
// comes. It never decreases, whatever now: a clock read before mu was
// taken may be earlier than one a scrape has already used, or than the
// start of the open period. Requires mu held.
func (b *breaker) openTotalLocked(now int64) int64 {
	total := b.openNanos
	if stateOf(b.word.Load()) == StateOpen {
		total += min(now, b.retryAt.Load()) - b.since
	}
	total = max(total, b.openSeen)
	b.openSeen = total
	return total
}

// reopenLocked reopens a half-open breaker after a failed probe cycle,
// with backoff. Requires mu held.
func (b *breaker) reopenLocked(now int64, reason string) *transition {
	b.cycles++
	return b.openLocked(now, b.openDuration(now), reason)
}

// openDuration is the base open timeout doubled per consecutive failed
// probe cycle, raised to the upstream Retry-After of a response in the
// window at clock time now, capped at the maximum, then jittered upward.
func (b *breaker) openDuration(now int64) time.Duration {
	c := b.cfg
	d := c.openTimeout
	for i := 0; i < b.cycles && d < c.maxOpenTimeout; i++ {
		d *= 2
	}
	if h := time.Duration(b.retryHint.Load()); h > d && b.hintFresh(now) {
		d = h
	}
	d = min(d, c.maxOpenTimeout)
	if c.jitter > 0 {
		if span := int64(float64(d) * c.jitter); span > 0 {
			d += time.Duration(rand.Int64N(span + 1))
		}
	}
	return d
}

// record takes the outcome of an admitted call and returns the transition
// it caused, if any.
func (b *breaker) record(tk ticket, o Outcome, now int64, resp *http.Response) *transition {
	if b.plainSuccess(tk, o) {
		b.win.add(now, o)
		return nil
	}
	return b.recordOther(tk, o, now, resp)
}

// recordOther is record for every outcome but a plainSuccess.
func (b *breaker) recordOther(tk ticket, o Outcome, now int64, resp *http.Response) *transition {
	b.release()
	return b.outcome(tk, o, now, resp)
}

// release gives back the call's bulkhead place, if there is a bulkhead.
func (b *breaker) release() {
	if b.cfg.maxConcurrent > 0 {
		b.inflight.Add(-1)
	}
}

// outcome is record once the call's bulkhead place is given back: it
// counts o, unless the call was admitted in an earlier state, and returns
// the transition it caused.
func (b *breaker) outcome(tk ticket, o Outcome, now int64, resp *http.Response) *transition {
	if o < OutcomeSuccess || o > OutcomeIgnored {
		o = OutcomeIgnored
	}
	if tk.is(tkProbe) {
		return b.recordProbe(tk, o, now, resp)
	}
	w := b.word.Load()
	if genOf(w) != tk.gen {
		return nil // admitted in an earlier state: says nothing now
	}
	b.win.add(now, o)
	switch o {
	case OutcomeFailure:
		b.noteRetryAfter(resp, now)
		return b.maybeTrip(w, now, false)
	case OutcomeThrottled:
		b.noteRetryAfter(resp, now)
		return b.maybeTrip(w, now, true)
	}
	return nil
}

// plainSuccess reports whether o is record's common case: a success of a
// closed-path call, without a bulkhead, in the generation it was admitted
// in, which only needs counting. It inlines into the request path.
func (b *breaker) plainSuccess(tk ticket, o Outcome) bool {
	return o == OutcomeSuccess && !tk.is(tkProbe) && b.cfg.maxConcurrent == 0 && genOf(b.word.Load()) == tk.gen
}

// noteRetryAfter keeps the longest Retry-After of failed responses.
func (b *breaker) noteRetryAfter(resp *http.Response, now int64) {
	if resp == nil {
		return
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return
	}
	d, ok := ParseRetryAfter(v, time.Now())
	if !ok {
		return
	}
	fresh := b.hintFresh(now)
	for {
		old := b.retryHint.Load()
		if fresh && int64(d) <= old {
			return
		}
		if b.retryHint.CompareAndSwap(old, int64(d)) {
			b.retryHintAt.Store(now)
			return
		}
	}
}

// hintFresh reports whether retryHint was seen within the window before
// clock time now.
func (b *breaker) hintFresh(now int64) bool {
	return now-b.retryHintAt.Load() <= int64(b.cfg.window)
}

// maybeTrip opens the breaker if the window's failure rate has reached
// the threshold. w is the state word the outcome was recorded under; the
// transition happens only if it is still current, so it happens once.
func (b *breaker) maybeTrip(w uint64, now int64, throttled bool) *transition {
	c := b.win.sums(now)
	req := c.requests()
	if req < b.cfg.minRequests {
		if throttled {
			b.throttleSince.Store(0)
		}
		return nil
	}
	rate := b.cfg.failureRate
	bad := c[OutcomeFailure]
	if b.throttleSustained(now, c, throttled) {
		bad += c[OutcomeThrottled]
	}
	if float64(bad) < rate*float64(req) {
		return nil
	}
	b.mu.Lock()
	if b.word.Load() != w {
		b.mu.Unlock()
		return nil
	}
	tr := b.openLocked(now, b.openDuration(now), "failure rate")
	b.mu.Unlock()
	tr.rate = float64(bad) / float64(req)
	tr.samples = req
	return tr
}

// throttleSustained reports whether 429s have made up the failure rate of
// at least MinRequests outcomes for the sustain period without
// interruption. The streak is checked on every 429 (throttled is true) and
// on every failure; it breaks when the condition fails or when no 429 has
// been seen for a bucket width, so a burst that ended never counts.
func (b *breaker) throttleSustained(now int64, c counts, throttled bool) bool {
	holds := float64(c[OutcomeThrottled]) >= b.cfg.failureRate*float64(c.requests())
	if holds && !throttled && now-b.throttleLast.Load() > b.win.width {
		holds = false // the 429s stopped: the streak is over
	}
	if !holds {
		b.throttleSince.Store(0)
		return false
	}
	if throttled {
		if s := b.throttleSince.Load(); s != 0 && now-b.throttleLast.Load() > b.win.width {
			b.throttleSince.CompareAndSwap(s, 0) // a gap: start a new streak
		}
		b.throttleLast.Store(now)
		b.throttleSince.CompareAndSwap(0, now+1)
	}
	s := b.throttleSince.Load()
	return s != 0 && now-(s-1) >= int64(b.cfg.throttleSust)
}

// recordProbe takes the outcome of a half-open probe.
func (b *breaker) recordProbe(tk ticket, o Outcome, now int64, resp *http.Response) *transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.word.Load()
	if genOf(w) != tk.gen || stateOf(w) != StateHalfOpen {
		return nil // a newer state already decided
	}
	b.releaseProbeLocked(tk.start)
	b.win.add(now, o)
	switch o {
	case OutcomeSuccess:
		b.probes[probeSuccess]++
		b.successes++
		if b.successes >= b.cfg.probesToClose {
			return b.closeLocked(now, "probes succeeded")
		}
	case OutcomeFailure:
		b.probes[probeFailure]++
		b.noteRetryAfter(resp, now)
		return b.reopenLocked(now, "probe failed")
	default:
		b.probes[probeIgnored]++
	}
	return nil
}

// releaseProbeLocked frees the slot of the probe admitted at start.
// Requires mu held.
func (b *breaker) releaseProbeLocked(start int64) {
	for i, s := range b.probeStarts {
		if s == start {
			last := len(b.probeStarts) - 1
			b.probeStarts[i] = b.probeStarts[last]
			b.probeStarts = b.probeStarts[:last]
			return
		}
	}
}

// trip opens the breaker for exactly d, whatever its state.
func (b *breaker) trip(now int64, d time.Duration) *transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openLocked(now, d, "manual")
}

// reset closes the breaker and clears its counts and backoff.
func (b *breaker) reset(now int64) *transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closeLocked(now, "manual")
}

// closeLocked closes the breaker with its backoff and window counts
// cleared. It starts a new generation even when the breaker was closed
// already, and before it clears the window, so that calls admitted
// before do not refill the cleared window. (One that passed its
// generation check an instant before, and adds its count an instant
// after the clear, still lands in it: the check and the add are two
// atomic operations, not one.) Requires mu held.
func (b *breaker) closeLocked(now int64, reason string) *transition {
	b.cycles = 0
	tr := b.setLocked(StateClosed, now, reason)
	b.win.clear()
	return tr
}

// idle reports whether the breaker can be evicted: closed, older than a
// window, no call in flight that a bulkhead counts, and nothing recorded
// in its window.
func (b *breaker) idle(now int64) bool {
	if stateOf(b.word.Load()) != StateClosed || b.inflight.Load() != 0 || now-b.created < int64(b.cfg.window) {
		return false
	}
	c := b.win.sums(now)
	return c.requests()+c[OutcomeIgnored] == 0
}

// applyHint takes a hint from the fleet: an open hint opens a closed
// breaker until the hint's RetryAt, but never for longer than the maximum
// open timeout; a closed hint closes an open or half-open one. now is the
// clock, wall its wall time.
func (b *breaker) applyHint(h Hint, now int64, wall time.Time) *transition {
	var tr *transition
	switch h.State {
	case StateOpen:
		d := h.RetryAt.Sub(wall)
		if d <= 0 {
			return nil
		}
		d = min(d, b.cfg.maxOpenTimeout)
		b.mu.Lock()
		if stateOf(b.word.Load()) == StateClosed {
			tr = b.openLocked(now, d, "fleet")
		}
		b.mu.Unlock()
	case StateClosed:
		b.mu.Lock()
		if stateOf(b.word.Load()) != StateClosed {
			tr = b.closeLocked(now, "fleet")
		}
		b.mu.Unlock()
	}
	if tr != nil {
		tr.fleet = true
	}
	return tr
}
