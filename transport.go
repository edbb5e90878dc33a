package httpbreaker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
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
// tunable settings change at run time through Update; the options that
// shape it (the key function, the cap, metrics, logger, hook and Store)
// stay as New set them. The zero Transport is not usable: its RoundTrip
// returns an error, and it has no breakers.
type Transport struct {
	next     http.RoundTripper
	keys     keying                   // how a request picks its breaker
	policies atomic.Pointer[policies] // what each breaker runs under; nil: not made by New
	breakers breakerTable             // written with mu held
	routes   *routeBreakers           // breakers by pattern and host, under WithRoutes
	epoch    time.Time                // clock zero: breakers keep time as nanoseconds since epoch

	maxBreakers  int
	onTransition func(Transition)
	observers    []Observer
	logger       *slog.Logger
	store        Store
	member       Member // this Transport's place in store

	updates, updateErrors atomic.Int64 // Update calls, by result

	mu sync.Mutex // guards creation and eviction of breakers, and Update
	// nextEvict is the clock time before which no breaker can be evicted:
	// set, under mu, when the cap is reached and none is idle, and cleared
	// by Update, which may drop breakers or make them idle. Until then
	// there is no room for a new breaker, which create learns without mu.
	nextEvict atomic.Int64
	// telling is, by key, the outbox of a breaker an Update dropped while
	// its transitions were still being told: the key's next breaker
	// shares it (see Transport.update). Guarded by mu.
	telling map[string]*outbox

	// beforeReset, when a test sets it, is called by Reset with the
	// circuit it found, before it resets it: there the test drops the
	// circuit, as an Update or an eviction may at that moment.
	beforeReset func(*circuit)
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
	cfg := newConfig("New", opts)
	ps, err := newPolicies(&cfg)
	if err != nil {
		panic(err.Error())
	}
	if next == nil {
		next = cleanhttp.DefaultPooledTransport()
	}
	t := &Transport{
		next:         next,
		keys:         cfg.keys,
		epoch:        time.Now(),
		maxBreakers:  cfg.maxBreakers,
		onTransition: cfg.onTransition,
		observers:    cfg.observers,
		logger:       cfg.logger,
		store:        cfg.store,
	}
	t.policies.Store(ps)
	t.breakers.init()
	if k := cfg.keys.routeKeys; k != nil {
		t.routes = newRouteBreakers(len(k.patterns))
	}
	if cfg.registerer != nil {
		t.registerMetrics(cfg.registerer)
	}
	for _, o := range t.observers {
		if a, ok := o.(Attacher); ok {
			a.Attach(t)
		}
	}
	if s := t.store; s != nil {
		t.member = s.Join(t.applyHint)
		if t.member == nil {
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
// When the request's breaker admits it, the request goes to next — the
// caller's own, or a shallow copy when it has a body (to tell the
// caller's upload errors from the dependency's) or a call timeout (see
// WithCallTimeout) — and the outcome is classified (see WithClassifier)
// and counted, when the headers arrive or, under WithBodyErrors, when the
// body of a successful response ends. When the breaker is open, or
// half-open with every probe slot taken, or the bulkhead is full (and its
// queue, see WithQueue, full or too slow), the request never reaches
// next: the caller gets the synthetic 503 (see IsRejected), or the
// fallback's answer (WithFallback), or a *RejectedError
// (WithRejectAsError). A breaker in ModeShadow refuses nothing, and one in
// ModeOff is not there (see WithMode).
//
// Requests no dependency could answer — no URL, no host, a scheme other
// than http or https — go straight to next, which fails them with its own
// error; they touch no breaker.
//
// Deadlines: a call that ends because the request context's deadline
// passed counts as a failure, unless that deadline left less than 50ms
// when the call was admitted: a caller that gives a dependency less than
// that has spent its own budget, and the call is ignored.
//
// Time: the request path reads the clock once, at admission. A success
// counts in the window at that time; any other outcome, a half-open
// probe, every call under a slow-call threshold, and a success that may
// trip the breaker (after an Update, or while 429s make up the rate)
// read the clock again and count when the call ended.
func (t *Transport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	if req == nil {
		return nil, errors.New("httpbreaker: nil Request")
	}
	if t.policies.Load() == nil {
		closeBody(req)
		return nil, errNotNew
	}
	g := guard{t: t, req: req, unsent: true}
	defer g.unwind()

	c := t.circuit(req) // the key's breaker; a KeyFunc that panics leaves the body to the guard
	var p *policy
	if c != nil {
		p = c.pol.Load() // one policy for the whole call, whatever Update does
	}
	if c == nil || p.mode == ModeOff {
		// Unroutable, no room for a breaker, or no breaker wanted: next
		// answers alone.
		g.unsent = false
		return checked(t.next.RoundTrip(req))
	}
	b, now := &c.b, t.now()
	var queued time.Duration // in the bulkhead's waiting line
	var tk ticket
	var tr *transition
	reason := admitted
	shadow := p.mode == ModeShadow // or a waiter sent on by an Update to ModeShadow
	retry := p.budgeted() && isRetry(req)
	switch {
	case retry && stateOf(b.word.Load()) == StateClosed && !b.takeRetry(now, &p.settings):
		reason = rejectRetryBudget // an open or half-open breaker refuses as it always does
	case p.maxConcurrent != 0:
		tk, reason, tr = c.admitBulkhead(now, p) // the bulkhead first, then the state
	default:
		tk, reason, tr = b.admit(now, &p.settings)
	}
	if reason == rejectBulkhead && !shadow {
		tk, reason, tr, shadow, err = t.wait(req, c)
		joined := now
		now = t.now() // a call timeout starts when the call leaves the line
		queued = time.Duration(now - joined)
		if err != nil {
			if len(t.observers) > 0 {
				t.observe(req.Context(), Call{Key: c.key(), State: stateOf(b.word.Load()), Outcome: OutcomeIgnored, QueueWait: queued})
			}
			return nil, err // the caller's context ended while it waited; g closes the body
		}
	}
	if reason == admitted {
		g.b, g.tk = c, tk
		if p.budgeted() && tk.probe == 0 && !retry {
			b.earn(now) // only admitted first attempts earn allowance
		}
		t.notify(tr)
	} else {
		t.notify(tr)
		if !shadow {
			c.rejected[reason].Add(1)
			if len(t.observers) > 0 {
				t.observe(req.Context(), Call{Key: c.key(), State: c.refusedState(reason, now), Outcome: OutcomeIgnored,
					Rejected: reason.String(), QueueWait: queued, RetryAfter: c.retryIn(reason, now)})
			}
			closeBody(req) // first: a fallback that panics must not leak it
			g.unsent = false
			return t.reject(req, c, p, reason, now)
		}
		c.shadowed[reason].Add(1) // it goes through as if admitted, and counts for nothing
	}
	sent, upload := watchUpload(req)
	if p.callTimeout > 0 {
		sent, g.cancel = t.withCallTimeout(sent, now, p.callTimeout)
	}

	g.unsent = false
	resp, err = checked(t.next.RoundTrip(sent))
	g.resp = resp
	if g.cancel != nil {
		resp, err = g.endCallTimeout(sent, resp, err)
	}
	if reason != admitted { // a shadow breaker's pass: observed, never counted
		if len(t.observers) > 0 {
			end := t.now()
			o := p.judge(req, p.classify(req, resp, err), err, upload, now, end, t.epoch)
			if o == OutcomeSuccess && p.bodyErrors && watchable(resp) {
				resp.Body = t.watchBody(req, c, p, ticket{start: now}, reason, queued, resp.Body) // observed at the body's end
			} else {
				t.observeShadow(req.Context(), c, reason, o, now, end, queued)
			}
		}
		g.resp = nil // after the classifier and observers: if they panic, g closes it
		return resp, err
	}

	o := p.classify(req, resp, err)
	end := now
	if o != OutcomeSuccess || p.slowCall > 0 || tk.probe != 0 || len(t.observers) > 0 || b.successDecides() {
		end = t.now() // a probe's end decides whether it outlived the probe bound; a trip happens when the call ended
	}
	o = p.judge(req, o, err, upload, now, end, t.epoch)

	g.b = nil
	if o == OutcomeSuccess && p.bodyErrors && watchable(resp) {
		c.release(tk)
		resp.Body = t.watchBody(req, c, p, tk, admitted, queued, resp.Body) // the body's end counts the call
		tr = nil
	} else {
		tr = t.settle(c, tk, o, end, retryAfter(resp, o))
		c.release(tk) // after the count: a waiter must not take a place the count closed
		if len(t.observers) > 0 {
			g.tr = tr // an observer that panics must not hold it back
			t.observeCall(req.Context(), c, tk, o, end, queued, tr)
			g.tr = nil
		}
	}
	t.notify(tr)
	g.resp = nil
	return resp, err
}

// guard is what a call holds that a panic must not leak: RoundTrip's one
// deferred cleanup. Each step of the request path hands over what it
// held by clearing its field.
type guard struct {
	t      *Transport
	req    *http.Request
	unsent bool               // the request body is still RoundTrip's to close
	b      *circuit           // an admitted call not yet counted, with tk
	tk     ticket             //
	cancel context.CancelFunc // the call timeout's, until the body has it
	resp   *http.Response     // a response its caller has not received
	tr     *transition        // the call's transition, until it is delivered
}

// unwind runs when RoundTrip ends. After a panic it closes the request
// body if next never had it, frees the call's bulkhead place and probe
// slot (the call counts for nothing), closes the response nobody will
// see, and delivers the transition the call caused if an observer
// panicked before it was; the panic goes on to the caller. After a return
// there is nothing left to do.
func (g *guard) unwind() {
	if g.unsent {
		closeBody(g.req)
	}
	if g.b != nil {
		g.b.release(g.tk)
		g.t.notify(g.b.b.count(g.tk, OutcomeIgnored, g.t.now(), 0)) // a probe past its bound reopens it
	}
	if g.cancel != nil {
		g.cancel()
	}
	if g.resp != nil && g.resp.Body != nil {
		g.resp.Body.Close()
	}
	g.t.notify(g.tr)
}

// closeBody closes the request's body, if it has one.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
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
	c := t.breakers.get(canonicalHostKey(key))
	if c == nil {
		return StateClosed
	}
	s, tr := c.b.current(t.now())
	t.notify(tr)
	return s
}

// Trip opens key's breaker for exactly d — no jitter, no cap — making the
// breaker if needed, for operators who know a dependency is down. After d
// it probes as usual; a d the clock cannot reach (time.Duration(math.MaxInt64))
// keeps it open until Reset, and its refusals say Retry-After: 3600 (see
// IsRejected). A d of zero or less does nothing. A key for which the cap
// (WithMaxBreakers) leaves no room, or whose mode is off, gets no breaker
// here (Trip logs so), but the fleet is still told. A Trip of an open
// breaker is no transition: its open period starts again, for d, its
// Status.Since stays, and its Status.Reason becomes ReasonTrip. With a Store
// (WithStore), it opens key on every instance for exactly d.
func (t *Transport) Trip(key string, d time.Duration) {
	if d <= 0 {
		return
	}
	key = canonicalHostKey(key)
	for {
		if t.tripOnce(key, d) {
			return
		}
	}
}

// tripOnce is Trip, and reports false when the breaker it found was
// evicted before it could trip it: then Trip tries the key's next one
// (made just now, so younger than a window and not idle).
func (t *Transport) tripOnce(key string, d time.Duration) bool {
	c := t.breakers.get(key)
	if c == nil && len(key) <= maxKeyLen {
		c = t.create(nil, key) // none for a key whose mode is off
	}
	now := t.now()
	if c == nil || c.pol.Load().mode == ModeOff {
		if l := t.logger; l != nil {
			why := "no room for breaker"
			if ps := t.policies.Load(); ps != nil && ps.off(key) {
				why = "the key's mode is off: no breaker"
			}
			l.Warn("httpbreaker: Trip: "+why, "breaker", key)
		}
		if t.member != nil { // other instances may have one
			t.member.Publish(Hint{Key: key, State: StateOpen, Operator: true, RetryAt: t.until(now, d)})
		}
		return true
	}
	tr, ok := c.b.trip(now, d, false, 0)
	t.notify(tr)
	return ok
}

// until is the wall time d after clock time now, or the zero time for a
// d the clock cannot reach ("until Reset", as the breaker reads it).
func (t *Transport) until(now int64, d time.Duration) time.Time {
	at := later(now, d)
	if at == never {
		return time.Time{}
	}
	return wall(t.epoch, at)
}

// Reset closes key's breaker and clears its counts and backoff. A Reset
// of a closed breaker is no transition: its Status.Since and Reason
// stay. A Reset racing an Update or an eviction that drops key's breaker
// closes the key's next one, if one was made meanwhile. With a Store
// (WithStore), it closes key's breaker on every instance.
func (t *Transport) Reset(key string) {
	key = canonicalHostKey(key)
	for {
		if t.resetOnce(key) {
			return
		}
	}
}

// resetOnce is Reset, and reports false when the breaker it found was
// evicted before it could reset it: then Reset tries the key's next one
// (made since by a request or a Trip), or finds none.
func (t *Transport) resetOnce(key string) bool {
	c := t.breakers.get(key)
	if c == nil {
		if t.member != nil { // other instances may have one
			t.member.Publish(Hint{Key: key, State: StateClosed, Operator: true})
		}
		return true
	}
	if f := t.beforeReset; f != nil {
		f(c)
	}
	tr, ok := c.b.reset(t.now(), false) // with a Store, tr carries the fleet's hint (see breaker.operatorHint)
	t.notify(tr)
	return ok
}
