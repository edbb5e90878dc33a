package httpbreaker

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// DefaultClientTimeout is the Timeout of the *http.Client that NewClient
// returns: an upper bound on a whole request, so that a hung dependency
// costs a caller at most this long even before its breaker opens.
const DefaultClientTimeout = 30 * time.Second

// minBudget is the deadline budget below which a timed-out call is the
// caller's fault: see RoundTrip.
const minBudget = 50 * time.Millisecond

// Transport is an http.RoundTripper that sends each request through the
// circuit breaker of its key (see WithKeyFunc) and on to the next
// RoundTripper. Breakers are made on first use, one per key, up to
// WithMaxBreakers. A Transport starts no goroutine and needs no Close:
// state is computed from the clock when it is needed.
//
// Transport is safe for concurrent use by multiple goroutines. Its
// configuration cannot change after New. The zero Transport is not
// usable: its RoundTrip returns an error, and it has no breakers.
type Transport struct {
	// The request path reads the fields up to cfg's first ones: they are
	// ordered to take few cache lines, which a request after a network
	// round trip finds cold.
	next     http.RoundTripper
	breakers breakerTable   // written with mu held
	routes   *routeBreakers // breakers by pattern and host, under WithRoutes
	epoch    time.Time      // clock zero: breakers keep time as nanoseconds since epoch
	cfg      config

	mu sync.Mutex // guards creation and eviction of breakers
	// nextEvict is the clock time before which no breaker can be evicted:
	// set, under mu, when the cap is reached and none is idle. Until then
	// there is no room for a new breaker, which create learns without mu.
	nextEvict atomic.Int64
}

var _ http.RoundTripper = (*Transport)(nil)

// errNotNew is RoundTrip's error on a Transport that New did not make.
var errNotNew = errors.New("httpbreaker: Transport used without New: make one with httpbreaker.New")

// New returns a Transport that sends requests through circuit breakers to
// next. A nil next means cleanhttp.DefaultPooledTransport(): a pooled
// transport with sane timeouts of its own, not shared with
// http.DefaultTransport. It keeps GOMAXPROCS+1 idle connections per host;
// a service that calls one dependency with much more concurrency should
// pass its own *http.Transport with a larger MaxIdleConnsPerHost. New
// panics if an option is invalid, naming the option.
func New(next http.RoundTripper, opts ...Option) *Transport {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			cfg.invalid("New", "nil Option")
			continue
		}
		o.apply(&cfg)
	}
	cfg.validate()
	if next == nil {
		next = cleanhttp.DefaultPooledTransport()
	}
	t := &Transport{next: next, cfg: cfg, epoch: time.Now()}
	t.breakers.init()
	if cfg.routes != nil {
		t.routes = newRouteBreakers(len(cfg.routes.patterns))
	}
	if cfg.registerer != nil {
		t.registerMetrics(cfg.registerer)
	}
	if s := t.cfg.store; s != nil {
		t.cfg.member = s.Join(t.applyHint)
		if t.cfg.member == nil {
			panic("httpbreaker: WithStore: Store.Join returned a nil Member")
		}
	}
	return t
}

// NewClient returns an *http.Client whose Transport is New(nil, opts...)
// and whose Timeout is DefaultClientTimeout. Change the Timeout on the
// returned client if the default does not fit.
func NewClient(opts ...Option) *http.Client {
	return &http.Client{Transport: New(nil, opts...), Timeout: DefaultClientTimeout}
}

// now is the Transport's monotonic clock: nanoseconds since New.
func (t *Transport) now() int64 { return int64(time.Since(t.epoch)) }

// RoundTrip implements http.RoundTripper. It keeps the RoundTripper
// contract: it never modifies the request, always closes the request body
// (next closes it when the request goes on; RoundTrip closes it when the
// request is rejected), and returns either a response or an error, never
// both.
//
// When the request's breaker admits it, the request goes to next
// unchanged and the outcome is classified (see WithClassifier) and
// counted, when the headers arrive or, under WithBodyErrors, when the
// body of a successful response ends. When the breaker is open, or
// half-open with every probe slot taken, or the bulkhead is full, the
// request never reaches next: the caller gets the synthetic 503 (see
// IsRejected), or the fallback's answer (WithFallback), or a
// *RejectedError (WithRejectAsError).
//
// Requests no dependency could answer — no URL, no host, a scheme other
// than http or https — go straight to next, which fails them with its own
// error; they touch no breaker.
//
// Deadlines: a call that ends because the request context's deadline
// passed counts as a failure, unless that deadline left less than 50ms
// when the call was admitted: a caller that gives a dependency less than
// that has spent its own budget, and the call is ignored. A request with
// a deadline reads the clock at admission for this; if it succeeds, it
// counts in the window at that time rather than when it ended, so that
// the request path still reads the clock only once.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errors.New("httpbreaker: nil Request")
	}
	if t.cfg.keyFunc == nil {
		closeBody(req)
		return nil, errNotNew
	}
	if !routable(req) {
		return checked(t.next.RoundTrip(req))
	}
	var b *breaker
	switch {
	case t.routes != nil:
		b = t.routeBreaker(req)
	case t.cfg.userKey:
		b = t.keyBreaker(req, t.userKey(req))
	default:
		b = t.keyBreaker(req, HostKey(req))
	}
	if b == nil {
		return checked(t.next.RoundTrip(req))
	}
	w := b.word.Load()
	if stateOf(w) == StateClosed && t.cfg.plain {
		return t.plainCall(req, b, ticket{gen: genOf(w)})
	}
	var tk ticket
	var tr *transition
	if stateOf(w) == StateClosed && t.cfg.maxConcurrent == 0 {
		tk.gen = genOf(w) // admit's closed path, written out: it does not inline
	} else {
		var reason rejectReason
		tk, reason, tr = b.admit(t.now)
		if reason != admitted {
			closeBody(req) // first: a hook that panics must not leak it
			t.notify(tr)
			return t.reject(req, b, reason, tk.start)
		}
	}
	if t.cfg.slowCall > 0 && !tk.is(tkProbe) {
		tk.start, tk.flags = t.now(), tk.flags|tkTimed // a probe's start, read at admission, identifies its slot
	}
	if d, ok := req.Context().Deadline(); ok {
		t.budget(&tk, d)
	}
	return t.call(req, b, tk, tr)
}

// userKey is the key the caller's KeyFunc gives req. If the KeyFunc
// panics, the request body is closed before the panic goes on.
func (t *Transport) userKey(req *http.Request) string {
	done := false
	defer func() {
		if !done {
			closeBody(req)
		}
	}()
	key := t.cfg.keyFunc(req)
	done = true
	return key
}

// closeBody closes the request's body, if it has one.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// budget applies the deadline rule (see RoundTrip) to an admission whose
// request's context has deadline d.
func (t *Transport) budget(tk *ticket, d time.Time) {
	if tk.flags&(tkProbe|tkTimed) == 0 {
		tk.start, tk.flags = t.now(), tk.flags|tkTimed
	}
	if time.Duration(int64(d.Sub(t.epoch))-tk.start) < minBudget {
		tk.flags |= tkShort
	}
}

// plainCall is call for a closed-path admission under a plain config
// (see config.plain). If next panics there is nothing to undo: the call
// holds no probe slot or bulkhead place and counts for nothing. A
// success, the common case, is counted here without a call to the
// classifier; any other outcome goes on to settle.
func (t *Transport) plainCall(req *http.Request, b *breaker, tk ticket) (*http.Response, error) {
	if d, ok := req.Context().Deadline(); ok {
		t.budget(&tk, d)
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp != nil && classifyStatus(resp.StatusCode) == OutcomeSuccess && genOf(b.word.Load()) == tk.gen {
		now := tk.start // as in settle: a success timed at admission counts then
		if !tk.is(tkTimed) {
			now = t.now()
		}
		b.win.add(now, OutcomeSuccess)
		return resp, nil
	}
	return t.settleGuarded(req, b, tk, resp, err)
}

// call reports the admission's transition, sends the admitted request to
// next and settles its outcome. If next, the classifier or a state-change
// hook panics, unwind undoes what the call had done.
func (t *Transport) call(req *http.Request, b *breaker, tk ticket, admission *transition) (resp *http.Response, err error) {
	var stage callStage
	defer t.unwind(req, b, tk, &resp, &stage)
	t.notify(admission)
	stage = stageSent
	resp, err = checked(t.next.RoundTrip(req))
	return t.settle(req, b, tk, resp, err, &stage)
}

// settleGuarded is settle, next's answer checked, for a call that is not
// under call's unwind.
func (t *Transport) settleGuarded(req *http.Request, b *breaker, tk ticket, resp *http.Response, err error) (*http.Response, error) {
	resp, err = checked(resp, err)
	stage := stageSent
	defer t.unwind(req, b, tk, &resp, &stage)
	return t.settle(req, b, tk, resp, err, &stage)
}

// callStage is how far an admitted call got, for unwind.
type callStage uint8

const (
	stageAdmitted callStage = iota // the request is not sent yet: its body is the call's to close
	stageSent                      // next has the request; the outcome is not recorded yet
	stageRecorded                  // its outcome counts
	stageReturned                  // its caller has resp
)

// unwind runs, deferred, when an admitted call ends. If a panic cut the
// call short of returning, the call counts for nothing (unless it was
// already recorded), its probe slot and bulkhead place are freed, the
// request body is closed if next never had it, the response nobody will
// see is closed, and the panic goes on to the caller.
func (t *Transport) unwind(req *http.Request, b *breaker, tk ticket, resp **http.Response, stage *callStage) {
	if *stage == stageReturned {
		return
	}
	if *stage == stageAdmitted {
		closeBody(req)
	}
	if *stage < stageRecorded {
		b.record(tk, OutcomeIgnored, t.now(), nil)
	}
	if r := *resp; r != nil && r.Body != nil {
		r.Body.Close()
	}
}

// checked is next's answer with the RoundTripper contract enforced: a
// response and an error together become the error alone (the response
// closed), and neither becomes an error.
func checked(resp *http.Response, err error) (*http.Response, error) {
	if (resp == nil) == (err == nil) {
		return unpaired(resp, err)
	}
	return resp, err
}

// unpaired is checked for a next that broke the contract.
func unpaired(resp *http.Response, err error) (*http.Response, error) {
	if err == nil {
		return nil, errNilResponse
	}
	if resp.Body != nil {
		resp.Body.Close()
	}
	return nil, err
}

// errNilResponse is the error of a call whose next returned neither a
// response nor an error.
var errNilResponse = errors.New("httpbreaker: next RoundTripper returned a nil response and a nil error")

// settle classifies the outcome of an admitted call that next answered
// with resp and err (checked), records it and reports the transition it
// caused, advancing *stage for unwind.
func (t *Transport) settle(req *http.Request, b *breaker, tk ticket, resp *http.Response, err error, stage *callStage) (*http.Response, error) {
	o := t.classify(req, resp, err)
	// A success that read the clock at admission (for its deadline) counts
	// then: no second read. See window.add for calls that outlive their
	// bucket.
	now := tk.start
	if !tk.is(tkTimed) || o != OutcomeSuccess || t.cfg.slowCall > 0 {
		now = t.now()
	}
	o = t.budgetRule(req, tk, o, err, now)
	if o == OutcomeSuccess && t.cfg.slowCall > 0 && time.Duration(now-tk.start) > t.cfg.slowCall {
		o = OutcomeFailure
	}
	var tr *transition
	switch {
	case o == OutcomeSuccess && t.cfg.bodyErrors && watchable(resp):
		b.release()
		resp.Body = t.watchBody(req, b, tk, resp.Body) // the body's end counts the call
	case b.plainSuccess(tk, o): // record, with its common case inlined
		b.win.add(now, o)
	default:
		tr = b.recordOther(tk, o, now, resp)
	}
	*stage = stageRecorded
	t.notify(tr)
	*stage = stageReturned
	return resp, err
}

// budgetRule applies the deadline rule of RoundTrip to the outcome o of
// a call that ended with err at clock time now: a failure because a
// deadline passed which left less than minBudget at admission is ignored.
func (t *Transport) budgetRule(req *http.Request, tk ticket, o Outcome, err error, now int64) Outcome {
	if o == OutcomeFailure && tk.is(tkShort) && err != nil && callerEnded(req, t.epoch.Add(time.Duration(now))) == endedByDeadline {
		return OutcomeIgnored
	}
	return o
}

// classify is the configured classifier's verdict.
func (t *Transport) classify(req *http.Request, resp *http.Response, err error) Outcome {
	if t.cfg.classifier == nil {
		return DefaultClassifier(req, resp, err)
	}
	return t.cfg.classifier(req, resp, err)
}

// keyBreaker returns the breaker for the request's key, making it if
// needed, or nil when the cap leaves no room even for the host key.
func (t *Transport) keyBreaker(req *http.Request, key string) *breaker {
	if b := t.breakers.get(key); b != nil {
		return b
	}
	b, created := t.create(req, key)
	if created && t.cfg.store != nil {
		if h, ok := t.cfg.store.Lookup(b.key); ok && h.Key == b.key {
			t.notify(b.applyHint(h, t.now(), time.Now()))
		}
	}
	return b
}

// create makes the breaker for key, evicting an idle closed breaker if
// the cap is reached. Past the cap with nothing to evict, it falls back to
// the request's host key, and returns nil when even that has no room.
// It reports whether the breaker is new.
func (t *Transport) create(req *http.Request, key string) (*breaker, bool) {
	if t.cfg.keyFunc == nil {
		return nil, false // not made by New: no breakers
	}
	if k := canonicalKey(key); k != key {
		if b := t.breakers.get(k); b != nil {
			return b, false
		}
		key = k
	}
	if len(key) > maxKeyLen {
		key = HostKey(req)
	}
	if t.now() < t.nextEvict.Load() {
		return t.existing(req, key), false // no room: t.mu would only say so
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.breakers.get(key); b != nil {
		return b, false
	}
	now := t.now()
	if t.breakers.live < t.cfg.maxBreakers || t.evictLocked(now) {
		b := newBreaker(strings.Clone(key), &t.cfg, now) // not the request's memory
		t.breakers.insert(b)
		return b, true
	}
	return t.existing(req, key), false
}

// existing is create when the cap leaves no room for a new breaker: the
// breaker of key, else of the request's host key, if either exists.
func (t *Transport) existing(req *http.Request, key string) *breaker {
	if b := t.breakers.get(key); b != nil || req == nil {
		return b
	}
	if host := HostKey(req); host != key {
		return t.breakers.get(host)
	}
	return nil
}

// evictLocked removes one idle closed breaker, if there is one. When
// none is idle, it waits a bucket width before scanning again, so a flood
// of new keys does not rescan a full map of busy breakers for each one.
// Requires t.mu held.
func (t *Transport) evictLocked(now int64) bool {
	if now < t.nextEvict.Load() {
		return false
	}
	var victim *breaker
	t.breakers.each(func(b *breaker) bool {
		if b.idle(now) {
			victim = b
			return false
		}
		return true
	})
	if victim == nil {
		t.nextEvict.Store(now + int64(t.cfg.window)/bucketCount)
		return false
	}
	t.breakers.remove(victim)
	victim.evicted.Store(true)
	return true
}

// CloseIdleConnections closes idle connections of the next RoundTripper,
// if it has such a method (as *http.Transport does).
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if c, ok := t.next.(closeIdler); ok {
		c.CloseIdleConnections()
	}
}

// State returns the state of key's breaker now, StateClosed for a key
// without a live breaker. An open breaker whose open period has ended
// reports StateHalfOpen: the next request will be a probe.
func (t *Transport) State(key string) State {
	b := t.breakers.get(canonicalKey(key))
	if b == nil {
		return StateClosed
	}
	s, tr := b.current(t.now())
	t.notify(tr)
	return s
}

// Trip opens key's breaker for exactly d — no jitter, no cap — making the
// breaker if needed, for operators who know a dependency is down. After d
// it probes as usual; a d the clock cannot reach (time.Duration(math.MaxInt64))
// keeps it open until Reset. A d of zero or less does nothing; so does a
// key for which the cap (WithMaxBreakers) leaves no room.
func (t *Transport) Trip(key string, d time.Duration) {
	if d <= 0 {
		return
	}
	key = canonicalKey(key)
	b := t.breakers.get(key)
	if b == nil {
		b = t.createKey(key)
		if b == nil {
			if l := t.cfg.logger; l != nil {
				l.Warn("httpbreaker: Trip: no room for breaker", "breaker", key)
			}
			return
		}
	}
	t.notify(b.trip(t.now(), d))
}

// createKey makes a breaker for a key that has no request: no host
// fallback.
func (t *Transport) createKey(key string) *breaker {
	if len(key) > maxKeyLen {
		return nil
	}
	b, _ := t.create(nil, key)
	return b
}

// applyHint takes a hint from the Store for a live breaker. Hints for keys
// without a breaker are learnt through Store.Lookup when one is made.
func (t *Transport) applyHint(h Hint) {
	if b := t.breakers.get(canonicalKey(h.Key)); b != nil {
		t.notify(b.applyHint(h, t.now(), time.Now()))
	}
}

// Reset closes key's breaker and clears its counts and backoff. It does
// nothing for a key without a live breaker.
func (t *Transport) Reset(key string) {
	if b := t.breakers.get(canonicalKey(key)); b != nil {
		t.notify(b.reset(t.now()))
	}
}
