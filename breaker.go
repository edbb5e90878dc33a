package httpbreaker

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the state machine of one breaker. It knows nothing of
// HTTP: it takes admissions, outcomes, durations and clock times
// (nanoseconds since the owning Transport's epoch), and returns decisions
// and transitions. The Transport turns requests, responses, errors and
// Retry-After headers into those.

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

// settings are what one breaker decides by. They are resolved from the
// options when the breaker is made and never change under it: a call
// decides by the settings it was admitted with (see ticket).
type settings struct {
	window          time.Duration // rolling window length
	minRequests     int64         // no trip below this many outcomes in the window
	failureRate     float64       // trip at failures/requests ≥ this
	slowCall        time.Duration // a call slower than this is a failure; 0: off
	openTimeout     time.Duration // base open duration
	maxOpenTimeout  time.Duration // cap on the open duration; also the probe bound
	jitter          float64       // open durations drawn from [d, d·(1+jitter)]
	halfOpenProbes  int64         // probes in flight at once
	probesToClose   int64         // consecutive probe successes that close
	throttleSustain time.Duration // how long 429s must make up the rate to count
	maxConcurrent   int64         // bulkhead: calls in flight; 0: unlimited

	retryBudget RetryBudget // zero: none
}

// defaultSettings returns the defaults: the tunables' (see settings.go).
func defaultSettings() settings { return defaultConfig().settings }

// defaultMaxOpenTimeout is the maximum open timeout when none is set and
// the open timeout is not longer.
const defaultMaxOpenTimeout = 60 * time.Second

// leaseRecheck is how long a breaker denied the fleet's probe lease stays
// open before it asks again: the fleet's prober is expected to settle the
// matter (and publish it) sooner.
func (s *settings) leaseRecheck() time.Duration {
	return min(s.openTimeout, time.Second)
}

// rejectReason says why a call was refused, or that it was admitted.
type rejectReason int

const (
	admitted rejectReason = iota
	rejectOpen
	rejectHalfOpen
	rejectBulkhead
	rejectRetryBudget
	numReasons
)

// String returns the reason label of breaker_rejections_total.
func (r rejectReason) String() string {
	switch r {
	case rejectOpen:
		return "open"
	case rejectHalfOpen:
		return "half-open"
	case rejectBulkhead:
		return "bulkhead"
	case rejectRetryBudget:
		return "retry_budget"
	}
	return "admitted"
}

// probeResult is what became of a half-open probe.
type probeResult int

const (
	probeSuccess probeResult = iota // the dependency answered well
	probeFailure                    // the dependency failed, or throttled the probe: reopened
	probeTimeout                    // the probe outlived the probe bound: reopened
	probeIgnored                    // the caller cancelled, or the outcome was ignored
	numProbeResults
)

func (p probeResult) String() string {
	return [...]string{"success", "failure", "timeout", "ignored"}[p]
}

// ticket is what an admitted call carries to its outcome.
type ticket struct {
	gen   uint64 // the generation it was admitted in
	probe uint64 // the half-open probe slot it holds; 0 for none
	start int64  // clock time of its admission
	place bool   // it holds a place in its circuit's bulkhead (see circuit.release)
}

// transition is a state change, queued in the breaker's outbox where it
// happens and reported once every lock is released. A breaker that time
// alone has moved through several states since it was last asked makes
// each transition, oldest first, chained through next. It is not
// modified once queued.
type transition struct {
	Transition       // what hooks, observers and the log see
	retryAt    int64 // clock time the open period ends, when To is StateOpen
	cycles     int   // failed probe cycles behind this open period, when To is StateOpen
	operator   bool  // opened or closed by Trip or Reset
	fleet      bool  // caused by a Store hint: not published back
	hintOnly   bool  // no transition, only the fleet's hint of an operator's action (see breaker.operatorHint)
	next       *transition
	box        *outbox // the breaker's outbox it is queued in
}

// probe is a half-open probe in flight.
type probe struct {
	id    uint64
	start int64
}

// breaker is the state machine of one key. The closed path is lock-free:
// admission is one atomic load, recording an outcome one atomic add in
// the window. Every transition happens under mu, exactly once: it checks
// that the generation it saw is still current.
type breaker struct {
	key   string
	fleet fleet // nil without a Store

	// word is gen<<2 | state. Written only with mu held.
	word atomic.Uint64
	// retryAt is the clock time at which an open breaker lets probes go.
	// Stored before word when opening.
	retryAt atomic.Int64

	// win is the rolling window; resized in place when the window's
	// length changes (see configure), so that no outcome counted then is
	// lost from its totals.
	win window
	// budget counts first attempts and retries for the retry budget, in a
	// window of the same length; made on first use (see budgetWindow).
	budget atomic.Pointer[window]
	// retryMu serializes takeRetry: concurrent retries cannot all pass on
	// one allowance.
	retryMu sync.Mutex

	// cfg is the breaker's current settings, for what no call carries
	// (State, Snapshot, time-driven transitions).
	cfg atomic.Pointer[settings]

	// throttleSince is 1 + the clock time at which 429s started to make
	// up the failure rate, or 0 when they do not.
	throttleSince atomic.Int64
	// recheck makes the next success check the trip rule: configure sets
	// it, since new settings may find the window at the rate already.
	recheck atomic.Bool
	// evicted is set, with mu held, when the Transport drops the breaker's
	// circuit, for those that still hold a pointer to it (see
	// Transport.routeCircuit, Transport.settle); nothing that takes mu
	// changes an evicted breaker's state (see trip, reset, maybeTrip,
	// hintOpen, hintClose).
	evicted atomic.Bool

	created int64     // clock time the breaker was made
	epoch   time.Time // the wall time of clock time 0, for transitions' At

	// out delivers the breaker's transitions in order, with no lock held.
	// A breaker made for a key whose breaker before it was dropped while
	// its transitions were still being told shares that one's, so that
	// hooks for one key never overlap (see Transport.update).
	out *outbox

	mu          sync.Mutex
	since       int64                     // clock time the current state began; guarded by mu
	genSince    int64                     // clock time the current generation began (a Trip of an open breaker, a Reset of a closed one start one); guarded by mu
	cycles      int                       // consecutive failed probe cycles; guarded by mu
	jitterDraw  uint64                    // the random draw of the next open period's jitter (see openDuration); guarded by mu
	probes      []probe                   // probes in flight; guarded by mu
	probeSeq    uint64                    // the last probe id given; guarded by mu
	successes   int64                     // consecutive probe successes; guarded by mu
	operator    bool                      // opened by trip: only a reset, or its end, closes it; guarded by mu
	reason      Reason                    // of the transition into the current state, or of a Trip; guarded by mu
	transitions [numTransitionKinds]int64 // by transitionKinds' index; guarded by mu
	openNanos   int64                     // time spent in finished open periods; guarded by mu
	openSeen    int64                     // the most open time reported (openTotalLocked); guarded by mu
	results     [numProbeResults]int64    // probes by result; guarded by mu
}

// newBreaker returns a closed breaker for key, made at clock time now on
// a clock that started at epoch, deciding by s and asking f (if not nil)
// for the fleet's probe lease.
func newBreaker(key string, s *settings, epoch time.Time, now int64, f fleet) *breaker {
	b := new(breaker)
	b.init(key, s, epoch, now, f)
	return b
}

// init makes b, which must be new, the breaker newBreaker returns.
func (b *breaker) init(key string, s *settings, epoch time.Time, now int64, f fleet) {
	b.key, b.fleet, b.epoch, b.since, b.genSince, b.created = key, f, epoch, now, now, now
	b.out = new(outbox)
	b.cfg.Store(s)
	b.win.init(int64(s.window))
	b.jitterDraw = rand.Uint64()
}

// configure makes s the breaker's settings from now on (see
// Transport.Update): every decision not made by a call already admitted
// uses s. A change of window length starts a fresh window, in the state
// the breaker is in; its totals carry over, outcomes counted meanwhile
// included.
func (b *breaker) configure(s *settings) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.cfg.Swap(s)
	b.recheck.Store(true)
	if old.window != s.window {
		b.win.resize(int64(s.window)) // in place: an outcome counted meanwhile is not lost from the totals
		b.budget.Store(nil)           // made afresh, of the new length, on first use
	}
}

func stateOf(w uint64) State { return State(w & 3) }
func genOf(w uint64) uint64  { return w >> 2 }

// admit decides at clock time now, by state and settings s, whether a
// call may go. An admitted call must be counted with count. (The
// bulkhead, which comes before the state, is the circuit's: see
// circuit.admitBulkhead.)
func (b *breaker) admit(now int64, s *settings) (ticket, rejectReason, *transition) {
	if w := b.word.Load(); stateOf(w) == StateClosed {
		return ticket{gen: genOf(w), start: now}, admitted, nil // nothing to hold
	}
	return b.admitState(now, s)
}

// openAt reports whether b refuses every call at clock time now: it is
// open, and its open period has not ended.
func (b *breaker) openAt(now int64) bool {
	return stateOf(b.word.Load()) == StateOpen && now < b.retryAt.Load()
}

// refuse is admit's answer for a call refused for reason.
func (b *breaker) refuse(reason rejectReason) (ticket, rejectReason, *transition) {
	return ticket{}, reason, nil
}

// admitState is admit by state alone.
func (b *breaker) admitState(now int64, s *settings) (ticket, rejectReason, *transition) {
	w := b.word.Load()
	if stateOf(w) == StateClosed {
		return ticket{gen: genOf(w), start: now}, admitted, nil
	}
	if stateOf(w) == StateOpen {
		if now < b.retryAt.Load() {
			return b.refuse(rejectOpen)
		}
		if b.fleet != nil && b.fleet.ProbeLease(b.key, s.maxOpenTimeout) == LeaseDenied {
			// Another instance probes for the fleet: stay open a little
			// longer and ask again.
			b.mu.Lock()
			if b.word.Load() == w {
				b.retryAt.Store(later(now, s.leaseRecheck()))
				b.operator = false // an operator's trip is over: the fleet's close may close it
			}
			b.mu.Unlock()
			return b.refuse(rejectOpen)
		}
	}
	b.mu.Lock()
	tr := b.queueLocked(b.advanceLocked(now, b.cfg.Load(), true))
	w = b.word.Load()
	var tk ticket
	reason := admitted
	switch {
	case stateOf(w) == StateClosed:
		tk = ticket{gen: genOf(w), start: now}
	case stateOf(w) == StateOpen:
		reason = rejectOpen
	case int64(len(b.probes)) >= s.halfOpenProbes:
		reason = rejectHalfOpen
	default:
		b.probeSeq++
		b.probes = append(b.probes, probe{id: b.probeSeq, start: now})
		tk = ticket{gen: genOf(w), probe: b.probeSeq, start: now}
	}
	b.mu.Unlock()
	return tk, reason, tr
}

// count takes the outcome o of the call tk at clock time now, with the
// Retry-After (0 for none) of its response, and returns the transition
// it caused. An outcome of a call admitted in an earlier generation is
// dropped: a late result never decides the new state. What the outcome
// decides, it decides by the breaker's settings as they are now (see
// Transport.Update), not those the call was admitted under.
func (b *breaker) count(tk ticket, o Outcome, now int64, retryAfter time.Duration) *transition {
	if o < OutcomeSuccess || o > OutcomeIgnored {
		o = OutcomeIgnored
	}
	if tk.probe != 0 {
		return b.countProbe(tk, o, now, retryAfter)
	}
	w := b.word.Load()
	if genOf(w) != tk.gen {
		b.win.addTotal(o) // admitted in a state that is over: it decides nothing
		return nil
	}
	b.win.add(now, o)
	switch {
	case o == OutcomeFailure || o == OutcomeThrottled:
		b.noteRetryAfter(retryAfter, now)
		return b.maybeTrip(w, now, b.cfg.Load(), o)
	case o == OutcomeSuccess && b.successDecides():
		if b.recheck.Load() {
			b.recheck.Store(false)
		}
		return b.maybeTrip(w, now, b.cfg.Load(), o)
	}
	return nil
}

// successDecides reports whether a success, counted now, checks the trip
// rule: a success may interrupt a streak of 429s, which must hold without
// interruption, and after an Update the rule may be met already. Such a
// success's clock time must be when it ended, not when it was admitted:
// a trip it causes happens then (see Transport.RoundTrip).
func (b *breaker) successDecides() bool {
	return b.throttleSince.Load() != 0 || b.recheck.Load()
}

// countProbe is count for a half-open probe: it frees the probe's slot
// and moves the breaker as its outcome says. A probe answered 429
// reopens, for at least its Retry-After: the dependency said "not now".
func (b *breaker) countProbe(tk ticket, o Outcome, now int64, retryAfter time.Duration) *transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.cfg.Load()
	if tr := b.advanceLocked(now, s, false); tr != nil {
		b.win.addTotal(o)
		return b.queueLocked(tr) // the probe outlived the bound: it counted as failed then
	}
	w := b.word.Load()
	if genOf(w) != tk.gen || stateOf(w) != StateHalfOpen {
		b.win.addTotal(o)
		return nil // a newer state already decided
	}
	b.releaseProbeLocked(tk.probe)
	b.win.add(now, o)
	switch o {
	case OutcomeSuccess:
		b.results[probeSuccess]++
		b.successes++
		if b.successes >= s.probesToClose {
			return b.queueLocked(b.closeLocked(now, ReasonProbesSucceeded))
		}
	case OutcomeFailure, OutcomeThrottled:
		b.results[probeFailure]++
		reason := ReasonProbeFailed
		if o == OutcomeThrottled {
			reason = ReasonThrottled
		}
		b.noteRetryAfter(retryAfter, now)
		return b.queueLocked(b.reopenLocked(now, s, reason, b.countsLocked(now)))
	default:
		b.results[probeIgnored]++
	}
	return nil
}

// queueLocked queues tr, and those chained to it, for delivery, and
// returns it. Requires mu held: the queue keeps the order in which the
// breaker's transitions happened.
func (b *breaker) queueLocked(tr *transition) *transition {
	if tr != nil {
		b.out.push(tr)
	}
	return tr
}

// releaseProbeLocked frees the slot of probe id. Requires mu held.
func (b *breaker) releaseProbeLocked(id uint64) {
	for i, p := range b.probes {
		if p.id == id {
			last := len(b.probes) - 1
			b.probes[i] = b.probes[last]
			b.probes = b.probes[:last]
			return
		}
	}
}

// noteRetryAfter records the Retry-After d of a failed or throttled
// response counted at clock time now. The window's buckets keep the
// longest of each, so that an open period honours the longest of the
// responses in the window that trips it (see openDuration); a transition
// forgets them all (see setLocked).
func (b *breaker) noteRetryAfter(d time.Duration, now int64) {
	if d > 0 {
		b.win.hint(now, int64(d))
	}
}

// maybeTrip opens the breaker if the window's failure rate has reached
// the threshold, on counting outcome o. It is checked when a failure or
// a 429 is counted, and when a success is only while a streak of 429s
// runs or as the first success after an Update (see count): otherwise a
// success cannot raise the rate. w is the state word the outcome was
// counted under; the transition happens only if it is still current, so
// it happens once. Failures alone at the rate trip it for
// ReasonFailureRate; sustained 429s that complete the rate, for
// ReasonThrottled, at a 429 or a failure: a success may end their streak
// but never trips on it, so that the tail of a burst shorter than the
// sustain, still in the window, does not trip it.
func (b *breaker) maybeTrip(w uint64, now int64, s *settings, o Outcome) *transition {
	c := b.win.sums(now)
	req := c.requests()
	if req < s.minRequests {
		b.throttleSince.Store(0) // 429s no longer make up the rate of MinRequests outcomes
		return nil
	}
	sustained := b.throttleSustained(now, c, s, o == OutcomeThrottled)
	reason := ReasonFailureRate
	bad := c[OutcomeFailure]
	if !atRate(bad, req, s.failureRate) {
		if !sustained || o == OutcomeSuccess {
			return nil
		}
		reason = ReasonThrottled
		if bad += c[OutcomeThrottled]; !atRate(bad, req, s.failureRate) {
			return nil
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.word.Load() != w || b.evicted.Load() {
		return nil // decided already, or evicted: the outcome counts for the key's next breaker (see Transport.settle)
	}
	return b.queueLocked(b.openLocked(now, b.openDuration(now, s, b.cycles), reason, countsOf(c)))
}

// atRate reports whether n of req outcomes reach the rate r, as
// WithFailureRate reads it: n/req ≥ r. The quotient is exact where n/req
// is r (7 of 50 is 0.14), where r·req may round past n (0.14·50 is
// 7.000000000000001 in float64).
func atRate(n, req int64, r float64) bool {
	return req > 0 && float64(n)/float64(req) >= r
}

// throttleSustained reports whether 429s have made up the failure rate of
// at least MinRequests outcomes in the window for the sustain period
// without interruption. The condition is checked on every 429 (throttled
// is true), on every failure and, while the streak runs, on every
// success, against the window as it is then; the streak starts at the
// first 429 that finds it holding, and breaks at the first check that
// finds it not holding (maybeTrip breaks it too when the window holds
// fewer than MinRequests outcomes). Gaps between 429s do not
// break it while the window still shows them making up the rate: 429s
// that arrive in batches count as sustained as a steady stream does.
func (b *breaker) throttleSustained(now int64, c counts, s *settings, throttled bool) bool {
	if !atRate(c[OutcomeThrottled], c.requests(), s.failureRate) {
		b.throttleSince.Store(0) // the condition stopped holding: the streak is over
		return false
	}
	if throttled {
		b.throttleSince.CompareAndSwap(0, now+1)
	}
	since := b.throttleSince.Load()
	return since != 0 && now-(since-1) >= int64(s.throttleSustain)
}

// advanceLocked applies, as of clock time now, the transitions that time
// alone causes, each at the time it happened: an open period that ended
// at retryAt became half-open then, and a half-open breaker whose oldest
// probe outlived the probe bound reopened when the bound passed (and may
// since have become half-open again). Each carries the window as read
// now. With a fleet, only an admission (which has asked for the fleet's
// probe lease) moves an open breaker to half-open. The transitions are
// chained, oldest first, not yet queued. Requires mu held.
func (b *breaker) advanceLocked(now int64, s *settings, admission bool) *transition {
	var first, last *transition
	for {
		var tr *transition
		w := b.word.Load()
		switch stateOf(w) {
		case StateOpen:
			if at := b.retryAt.Load(); now >= at && (admission || b.fleet == nil) {
				tr = b.setLocked(StateHalfOpen, at, ReasonOpenElapsed, b.countsLocked(now))
			}
		case StateHalfOpen:
			if at, ok := b.probeBoundLocked(s); ok && now >= at {
				b.results[probeTimeout]++
				tr = b.reopenLocked(at, s, ReasonProbeTimeout, b.countsLocked(now))
			}
		}
		if tr == nil {
			return first
		}
		if first == nil {
			first = tr
		} else {
			last.next = tr
		}
		last = tr
	}
}

// countsLocked returns the window's Counts at clock time now.
func (b *breaker) countsLocked(now int64) Counts { return countsOf(b.win.sums(now)) }

// probeBoundLocked returns the clock time at which the oldest probe in
// flight outlives the probe bound, if one is in flight. Requires mu held.
func (b *breaker) probeBoundLocked(s *settings) (int64, bool) {
	if len(b.probes) == 0 {
		return 0, false
	}
	oldest := b.probes[0].start
	for _, p := range b.probes[1:] {
		oldest = min(oldest, p.start)
	}
	return later(oldest, s.maxOpenTimeout), true
}

// setLocked moves to state to at clock time at, for reason, decided on
// window counts c, and starts a new generation. It returns nil when the
// state stays the same (a manual trip of an open breaker, a reset of a
// closed one), which is not a transition: the state keeps the time it
// began and its reason. Requires mu held.
func (b *breaker) setLocked(to State, at int64, reason Reason, c Counts) *transition {
	w := b.word.Load()
	from := stateOf(w)
	if from == StateOpen {
		b.openNanos = b.openTotalLocked(at)
	}
	b.genSince = at
	if from != to {
		b.since, b.reason = at, reason
	}
	b.operator = false
	b.probes = b.probes[:0]
	b.successes = 0
	b.win.clearHints()
	b.throttleSince.Store(0)
	if to != StateOpen {
		b.retryAt.Store(0)
	}
	b.word.Store((genOf(w)+1)<<2 | uint64(to))
	if from == to {
		return nil
	}
	if k := transitionKind(from, to, reason); k >= 0 {
		b.transitions[k]++
	}
	return &transition{Transition: Transition{
		Key: b.key, From: from, To: to, Reason: reason, At: wall(b.epoch, at), Counts: c,
	}}
}

// openLocked opens the breaker at clock time at for d, for reason,
// decided on window counts c; a d the clock cannot reach opens it until
// the clock's end. Requires mu held.
func (b *breaker) openLocked(at int64, d time.Duration, reason Reason, c Counts) *transition {
	b.jitterDraw = rand.Uint64() // for the next open period
	until := later(at, d)
	b.retryAt.Store(until)
	tr := b.setLocked(StateOpen, at, reason, c)
	if tr != nil {
		tr.retryAt, tr.cycles = until, b.cycles
		if until != never {
			tr.OpenFor = d
		}
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
		total += max(min(now, b.retryAt.Load())-b.genSince, 0) // the current open period began with its generation
	}
	total = max(total, b.openSeen)
	b.openSeen = total
	return total
}

// reopenLocked reopens a half-open breaker at clock time at after a
// failed probe cycle, with backoff, for reason, decided on window counts
// c. Requires mu held.
func (b *breaker) reopenLocked(at int64, s *settings, reason Reason, c Counts) *transition {
	b.cycles++
	return b.openLocked(at, b.openDuration(at, s, b.cycles), reason, c)
}

// openDuration is the open period that begins at clock time now after
// cycles consecutive failed probe cycles: the base open timeout doubled
// per cycle, raised to the longest upstream Retry-After of the responses
// in the window at now, capped at the maximum, then jittered upward by
// the draw made when the last open period began, so that a scrape can
// tell, without moving the breaker, when an open period it has not yet
// begun would end (see displayLocked).
// It saturates: a maximum of time.Duration(math.MaxInt64) still backs off.
// Requires mu held.
func (b *breaker) openDuration(now int64, s *settings, cycles int) time.Duration {
	d := s.openTimeout
	for i := 0; i < cycles && d < s.maxOpenTimeout; i++ {
		d = doubled(d)
	}
	d = max(d, time.Duration(b.win.longestHint(now)))
	d = min(d, s.maxOpenTimeout)
	if s.jitter > 0 {
		if span := scaled(d, s.jitter); span > 0 {
			j := time.Duration(b.jitterDraw % (uint64(min(span, math.MaxInt64-1)) + 1))
			d = time.Duration(later(int64(d), j))
		}
	}
	return d
}

// closeLocked closes the breaker at clock time at, for reason, with its
// backoff and window counts cleared. It starts a new generation even when
// the breaker was closed already, and before it clears the window, so
// that calls admitted before do not refill the cleared window. (One that
// passed its generation check an instant before, and adds its count an
// instant after the clear, still lands in it: the check and the add are
// two atomic operations, not one.) The transition carries the window as
// it was before the clear. Requires mu held.
func (b *breaker) closeLocked(at int64, reason Reason) *transition {
	b.cycles = 0
	tr := b.setLocked(StateClosed, at, reason, b.countsLocked(at))
	b.win.clear()
	return tr
}

// current returns the state as of clock time now, applying any transition
// time alone has caused.
func (b *breaker) current(now int64) (State, *transition) {
	if stateOf(b.word.Load()) == StateClosed {
		return StateClosed, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tr := b.queueLocked(b.advanceLocked(now, b.cfg.Load(), false))
	s, _, _ := b.displayLocked(now)
	return s, tr
}

// displayLocked is the state to show, when it began and why, as time
// alone has moved the breaker by clock time now, without moving it (see
// advanceLocked): an open breaker whose open period has ended shows as
// half-open since that end, due to probe, even while it waits for the
// fleet's probe lease; a half-open one whose probe has outlived the
// probe bound shows as reopened then, and once that open period has
// ended too, as half-open again. Requires mu held.
func (b *breaker) displayLocked(now int64) (State, int64, Reason) {
	switch stateOf(b.word.Load()) {
	case StateOpen:
		if at := b.retryAt.Load(); now >= at {
			return StateHalfOpen, at, ReasonOpenElapsed
		}
	case StateHalfOpen:
		s := b.cfg.Load()
		if at, ok := b.probeBoundLocked(s); ok && now >= at {
			if end := later(at, b.openDuration(at, s, b.cycles+1)); now >= end { // as reopenLocked will make it
				return StateHalfOpen, end, ReasonOpenElapsed
			}
			return StateOpen, at, ReasonProbeTimeout
		}
	}
	return stateOf(b.word.Load()), b.since, b.reason
}

// trip opens the breaker at clock time now for exactly d, whatever its
// state, once the transitions time alone has caused by now are made: an
// operator's action, here or (fleet) on another instance, whose breaker
// had backed off cycles failed probe cycles (the breaker backs off from
// at least that many from now on). A trip of an open breaker is no
// transition, but the breaker's reason becomes ReasonTrip, and the fleet
// is still told (see operatorHint). It returns the first transition it
// queued (delivering it delivers the rest), and reports false, doing
// nothing, for an evicted breaker.
func (b *breaker) trip(now int64, d time.Duration, fleet bool, cycles int) (*transition, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.evicted.Load() {
		return nil, false
	}
	b.cycles = max(b.cycles, cycles)
	due := b.queueLocked(b.advanceLocked(now, b.cfg.Load(), false)) // an open period that is over is over: its Trip reopens it
	tr := b.openLocked(now, d, ReasonTrip, b.countsLocked(now))
	b.operator = true
	b.reason = ReasonTrip
	if tr == nil {
		tr = b.operatorHint(StateOpen, fleet)
	} else {
		tr.operator, tr.fleet = true, fleet
	}
	if b.queueLocked(tr); due != nil {
		return due, true // the first queued: delivering it delivers the Trip's too
	}
	return tr, true
}

// reset closes the breaker at clock time now and clears its counts and
// backoff: an operator's action, here or (fleet) on another instance. A
// reset of a closed breaker is no transition, but the fleet is still told
// (see operatorHint). It returns the transition it queued, and reports
// false, doing nothing, for an evicted breaker: no caller reaches it any
// more, and a transition of its would be told beside those of its key's
// next breaker.
func (b *breaker) reset(now int64, fleet bool) (*transition, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.evicted.Load() {
		return nil, false
	}
	tr := b.closeLocked(now, ReasonReset)
	if tr == nil {
		tr = b.operatorHint(StateClosed, fleet)
	} else {
		tr.operator, tr.fleet = true, fleet
	}
	return b.queueLocked(tr), true
}

// operatorHint is, for an operator's action here that moved the breaker
// to no new state (a Trip of an open breaker, a Reset of a closed one),
// the entry that tells the fleet of it all the same, so that every
// instance does as this one: queued in the outbox like a transition, it
// is published after what the breaker did before it, and told to no hook,
// observer or log (see Transport.report). An open one carries the open
// period and backoff the breaker has now. It is nil for an action a fleet
// hint carried here, and without a Store. Requires mu held.
func (b *breaker) operatorHint(s State, fleet bool) *transition {
	if fleet || b.fleet == nil {
		return nil
	}
	return &transition{Transition: Transition{Key: b.key, From: s, To: s},
		retryAt: b.retryAt.Load(), cycles: b.cycles, operator: true, hintOnly: true}
}

// idle reports whether the breaker can be evicted at clock time now:
// closed, older than a window, nothing recorded in its window, and no
// transition of its left to deliver. (Its circuit's bulkhead must be empty
// too: see Transport.evictLocked.)
// Other calls may still be in flight: their outcomes count for the key's
// next breaker (see Transport.settle).
func (b *breaker) idle(now int64) bool {
	if stateOf(b.word.Load()) != StateClosed || now-b.created < int64(b.cfg.Load().window) || !b.out.quiet() {
		return false
	}
	c := b.win.sums(now)
	return c.requests()+c[OutcomeIgnored] == 0
}
