package httpbreaker

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// An Option configures a Transport. Options are applied in order by New;
// a later option overrides an earlier one of the same kind. Invalid values
// make New panic with a message that names the option, so a
// misconfiguration is found at start-up and never at request time.
type Option interface {
	apply(*config)
}

// option is every Option of this package: a named change to a config.
type option struct {
	name      string // the option's function, as errors name it
	transport bool   // it shapes the Transport: no policy or Update may set it
	set       func(*config)
}

func (o option) apply(c *config) { o.set(c) }

// tunableOption is an option about one breaker's behaviour, which a
// policy may set (see WithPolicy).
func tunableOption(name string, set func(*config)) option { return option{name: name, set: set} }

// structural is an option that shapes the Transport as a whole.
func structural(name string, set func(*config)) option {
	return option{name: name, transport: true, set: set}
}

// config is what the options make: the Transport-wide policy every
// breaker starts from, and the settings that shape the Transport itself.
// New resolves it once; it never changes after.
type config struct {
	policy
	rules []rule // WithPolicy's, in the order given

	keys         keying
	maxBreakers  int
	onTransition func(Transition)
	observers    []Observer
	logger       *slog.Logger
	registerer   prometheus.Registerer
	store        Store

	// errs collects invalid option values; New panics with the first.
	errs []error
}

// defaultConfig returns the defaults: the tunables' from their table
// (settings.go; each option's doc gives its default in brackets), and for
// the rest:
//
//	key function            HostKey
//	classifier              DefaultClassifier
//	max breakers            1000
//	rejection               synthetic 503, no fallback
//	transition hook         none
//	observers               none
//	logger                  none
//	metrics                 none
func defaultConfig() config {
	c := config{maxBreakers: 1000}
	setDefaults(&c.policy)
	return c
}

func (c *config) invalid(option, format string, args ...any) {
	c.errs = append(c.errs, errors.New("httpbreaker: "+option+": "+fmt.Sprintf(format, args...)))
}

// newConfig applies opts to the defaults, for caller ("New"), and checks
// the relations between them once all are applied. It panics with the
// first invalid value.
func newConfig(caller string, opts []Option) config {
	c := defaultConfig()
	c.applyAll(caller, opts)
	if len(c.errs) > 0 {
		panic(c.errs[0].Error())
	}
	return c
}

// applyAll applies opts to c, in order, for caller.
func (c *config) applyAll(caller string, opts []Option) {
	for _, o := range opts {
		if o == nil {
			c.invalid(caller, "nil Option")
			continue
		}
		o.apply(c)
	}
}

// maxHalfOpenProbes bounds WithHalfOpenProbes: more probes at once than
// this are no longer probes but traffic.
const maxHalfOpenProbes = 10000

// WithKeyFunc sets how a request picks its breaker. The default is HostKey.
// The function must be fast, must not modify the request, and must return
// a key from a bounded set: use RouteKey (or WithRoutes) to key by
// operation, never the raw path. A nil f panics.
func WithKeyFunc(f KeyFunc) Option {
	return structural("WithKeyFunc", func(c *config) {
		if f == nil {
			c.invalid("WithKeyFunc", "nil KeyFunc")
			return
		}
		c.keys = keying{user: f}
	})
}

// WithRoutes keys requests by host and net/http.ServeMux pattern: the
// breakers are those of WithKeyFunc(RouteKey(patterns...)), but found
// faster, because the Transport remembers each host's route breakers
// instead of building and looking up their keys on every request. Invalid
// or conflicting patterns panic, as RouteKey does. A later WithKeyFunc
// replaces it.
func WithRoutes(patterns ...string) Option {
	k := routeKeying(patterns)
	return structural("WithRoutes", func(c *config) { c.keys = k })
}

// WithClassifier sets what counts as success, failure, throttling or
// nothing. The default is DefaultClassifier; a custom classifier can
// delegate to it for the cases it does not handle. A nil c panics.
func WithClassifier(f Classifier) Option {
	return tunableOption("WithClassifier", func(c *config) {
		if f == nil {
			c.invalid("WithClassifier", "nil Classifier")
			return
		}
		c.classifier = f
	})
}

// WithWindow sets the length of the rolling window over which the failure
// rate is computed [10s]. The window is divided into 10 buckets; whole
// buckets expire as time passes. d must be at least 10ms. An outcome
// counts at the time its call ended, except a success that can decide
// nothing, which counts at the time it was admitted (see
// Transport.RoundTrip).
//
// When a dependency hangs, successes stop at once but timeouts arrive a
// whole client timeout later: a window much longer than the timeout keeps
// the last healthy seconds in the rate and trips late. A window of one to
// two client timeouts reacts fastest to hangs.
func WithWindow(d time.Duration) Option { return windowRow.with(d) }

// WithMinRequests sets the minimum number of outcomes (successes,
// failures and 429s) in the window before the breaker may trip [20].
// n must be at least 1.
func WithMinRequests(n int) Option {
	return minRequestsRow.with(int64(n))
}

// WithFailureRate sets the failure rate at which the breaker trips: it
// opens when failures/requests ≥ r over the window [0.5]. r must be in
// (0, 1].
func WithFailureRate(r float64) Option {
	return failureRateRow.with(r)
}

// WithSlowCallThreshold makes a call that takes longer than d a failure,
// even when it succeeds [0: off]. A call takes until its response's
// headers arrive, or, under WithBodyErrors, until its body ends. Zero
// turns the check off; a negative d panics. Setting it costs one more
// clock read per request.
func WithSlowCallThreshold(d time.Duration) Option {
	return slowCallRow.with(d)
}

// WithBodyErrors judges a successful call when its response body ends,
// not when its headers arrive [off]. Without it a dependency that sends a
// 200 and then cuts the body short, resets the stream or stalls until the
// client's Timeout passes counts as a success.
//
// With it, a response the classifier counts as a success, with a body
// (not http.NoBody) and a status other than 101 Switching Protocols,
// comes back with its Body wrapped, and the call counts once, when the
// body ends:
//
//   - a Read that returns io.EOF, or a Close, counts a success (a failure
//     if the call, to then, outlived WithSlowCallThreshold): a caller that
//     stops reading early has the answer it wanted;
//   - a Read that returns another error is classified again, with a nil
//     response and that error, under the deadline rule of
//     Transport.RoundTrip: a cut body or a reset is a failure, a deadline
//     that passed while reading is a failure, a caller that cancelled is
//     ignored;
//   - a body that is neither read to its end nor closed counts for
//     nothing, as a call whose caller leaked it must not decide anything.
//
// A half-open probe keeps its slot until its body ends (or until the
// probe bound, see WithMaxOpenTimeout, frees it), so a probe closes the
// breaker only once its body has been read. A bulkhead place
// (WithMaxConcurrent) is given back when the headers arrive, as without
// this option. Responses the classifier counts as anything but a success
// are counted at once, as without it.
//
// It costs one allocation per successful response, a second clock read,
// and the short request path of the defaults (see the Performance section
// of the README). WithoutBodyErrors turns it off again, for example in a
// policy under a Transport-wide WithBodyErrors.
func WithBodyErrors() Option { return bodyErrorsRow.with(true) }

// WithoutBodyErrors judges every call when its headers arrive, as the
// default does: it turns off a WithBodyErrors given before it or at a
// wider level, as in WithPolicy("uploads.internal", WithoutBodyErrors()).
func WithoutBodyErrors() Option { return bodyErrorsRow.with(false) }

// WithOpenTimeout sets the base open duration [5s]: how long a breaker
// stays open after it trips before it lets a probe through. It doubles for
// each consecutive failed probe cycle, up to WithMaxOpenTimeout. d must be
// positive.
func WithOpenTimeout(d time.Duration) Option {
	return openTimeoutRow.with(d)
}

// WithMaxOpenTimeout caps the open duration after backoff and after an
// upstream Retry-After [60s, or the open timeout when that is longer and
// no maximum is set]; jitter is added after the cap. It is also the probe
// bound: a half-open probe that has not finished after d frees its slot
// and counts as failed, from the moment the bound passed. d must be
// positive and not shorter than the open timeout.
func WithMaxOpenTimeout(d time.Duration) Option {
	return maxOpenTimeoutRow.with(d)
}

// WithJitter spreads open durations: each is drawn uniformly from
// [d, d·(1+f)] [0.2], so breakers that tripped together do not probe
// together. Zero turns jitter off; f must be in [0, 1].
func WithJitter(f float64) Option {
	return jitterRow.with(f)
}

// WithHalfOpenProbes sets how many probes may be in flight at once while a
// breaker is half-open [1]; every other request is rejected at once. n must
// be in [1, 10000]. A breaker keeps a slot for each probe in flight only,
// so a large n costs no memory until that many probes are sent.
func WithHalfOpenProbes(n int) Option {
	return halfOpenProbesRow.with(int64(n))
}

// WithProbesToClose sets how many consecutive successful probes close a
// half-open breaker [3]. n must be at least 1.
func WithProbesToClose(n int) Option {
	return probesToCloseRow.with(int64(n))
}

// WithThrottleSustain sets how long 429 responses must persist before they
// count as failures [10s]: 429s count toward the failure rate only once
// they alone have made up at least the failure rate of at least
// MinRequests outcomes in the window for d without interruption. The
// condition is checked, against the window as it is then, at every 429,
// every failure and, while a streak runs, every success: the streak
// starts at the first 429 that finds it holding and ends at the first
// check that finds it not holding. Quiet gaps between 429s do not end it
// while the window still shows them making up the rate, so 429s that
// arrive in batches count as a steady stream does; successes that dilute
// them below the rate end it, so bursts apart do not add up to a
// sustained run. Zero makes such 429s count at once; a negative d panics.
//
// The failure rate itself is checked when a failure or a 429 is counted,
// and on a success only while a streak of 429s runs or as the first
// success after an Update (new settings may find the window at the rate
// already): 10 failures then 10 successes leave a breaker at exactly the
// rate closed until the next failure or 429.
func WithThrottleSustain(d time.Duration) Option {
	return throttleSustainRow.with(d)
}

// WithMaxConcurrent sets a bulkhead: at most n calls in flight per key;
// further calls are rejected at once with an error wrapping
// ErrBulkheadFull (and ErrOpen) [0: unlimited]. Zero means unlimited; a
// negative n panics.
func WithMaxConcurrent(n int) Option {
	return maxConcurrentRow.with(int64(n))
}

// WithQueue lets calls beyond the bulkhead (WithMaxConcurrent) wait for a
// place instead of being refused at once [0: refuse at once]: at most n
// wait, in arrival order, each for at most maxWait; the (n+1)th is
// refused at once. A waiter that gets no place within maxWait is refused
// (wrapping ErrBulkheadFull, Retry-After: 1); a waiter whose context ends
// leaves the line at once with the context's error and counts for
// nothing; if the breaker opens while calls wait, they are refused as
// open. A call timeout (WithCallTimeout) starts when the call leaves the
// line. A waiter holds no lock and starts no goroutine. Without
// WithMaxConcurrent there is no bulkhead and the queue does nothing. n
// must not be negative, and maxWait must be positive when n is (checked on
// each breaker's resolved settings, as the declarative form sets the two
// apart: "queue" and "queue_wait"). WithQueue(0, 0) turns the queue off.
func WithQueue(n int, maxWait time.Duration) Option {
	length, wait := queueRow.with(int64(n)), queueWaitRow.with(maxWait)
	return tunableOption("WithQueue", func(c *config) {
		length.apply(c)
		wait.apply(c)
	})
}

// WithCallTimeout gives each admitted call a deadline d after its
// admission [0: none]: the request goes to next as req.WithContext with
// that deadline, unless its own deadline is earlier (the caller's request
// is never modified). The deadline's context is released when the
// response body is closed or read to its end, or at once when next
// returns an error: read or close every body (a 101 Switching Protocols
// response's body, the new protocol's connection, stays an
// io.ReadWriteCloser, and releases it when closed). A call that ends because
// its call timeout passed is a failure, however short d is; its error
// satisfies errors.Is(err, context.DeadlineExceeded) and, through
// http.Client, net.Error's Timeout. Set it per dependency with WithPolicy.
// Zero means none, and turns off a call timeout set before it or at a
// wider level. A negative d panics.
func WithCallTimeout(d time.Duration) Option { return callTimeoutRow.with(d) }

// WithMaxBreakers caps the number of live breakers in a Transport [1000].
// Past the cap, an idle closed breaker is evicted to make room; if none is
// idle, a new key falls back to its host key, and if even that has no room
// the request goes through unprotected. Open and half-open breakers are
// never evicted. While the cap is reached and nothing can be evicted, a
// flood of new keys costs no lock: the Transport looks for idle breakers
// again once per window bucket. n must be at least 1.
func WithMaxBreakers(n int) Option {
	return structural("WithMaxBreakers", func(c *config) {
		if msg := between(1, maxInt)(int64(n)); msg != "" {
			c.invalid("WithMaxBreakers", "%s", msg)
			return
		}
		c.maxBreakers = n
	})
}

// WithFallback sets a function called instead of the synthetic 503 when a
// breaker or bulkhead rejects a request. It receives the request (whose
// body has already been closed; do not modify it) and the rejection error
// (a *RejectedError wrapping ErrOpen). It is never called for the
// dependency's own errors or responses. If it returns both a response and
// an error, the response body is closed and the error returned; if it
// returns neither, the default rejection is used. A nil f means no
// fallback: it turns off a fallback set before it or at a wider level, as
// in WithPolicy("payments.internal", WithFallback(nil)).
func WithFallback(f func(*http.Request, error) (*http.Response, error)) Option {
	return tunableOption("WithFallback", func(c *config) { c.fallback = f })
}

// WithRejectAsError makes rejections return (nil, err), where err is a
// *RejectedError and errors.Is(err, ErrOpen) holds, instead of the
// synthetic 503 [off]. Through http.Client the error arrives
// wrapped in a *url.Error; errors.Is still works. WithoutRejectAsError
// turns it off again.
func WithRejectAsError() Option { return rejectAsErrorRow.with(true) }

// WithoutRejectAsError makes rejections the synthetic 503 (or the
// fallback's answer), as the default does: it turns off a
// WithRejectAsError given before it or at a wider level, as in
// WithPolicy("web.internal", WithoutRejectAsError()).
func WithoutRejectAsError() Option { return rejectAsErrorRow.with(false) }

// WithLogger logs transitions through l: opening at Warn, half-open and
// closing at Info [none]. Each record carries the reason and the window's
// counts it was decided on (requests, failures, throttled), and opening
// also the open period chosen (open_for). Like the hook of
// WithOnTransition it runs with no lock held, on the goroutine that
// caused the transition or found it due; nothing is logged per request. A
// nil l turns logging off.
func WithLogger(l *slog.Logger) Option {
	return structural("WithLogger", func(c *config) { c.logger = l })
}

// WithMetrics registers the Transport's Prometheus collector with reg when
// New runs [none; the global registry is never used implicitly]. New panics
// if registration fails, for example because another collector already
// exports the same series. To put several Transports on one registry,
// wrap the registry for every one of them with prometheus.WrapRegistererWith
// and the same label name with a different value, e.g.
// prometheus.Labels{"client": "payments"} and {"client": "search"}: an
// unwrapped Transport beside wrapped ones is refused. A nil reg panics.
func WithMetrics(reg prometheus.Registerer) Option {
	return structural("WithMetrics", func(c *config) {
		if reg == nil {
			c.invalid("WithMetrics", "nil Registerer")
			return
		}
		c.registerer = reg
	})
}
