package httpbreaker

import (
	"cmp"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// policy is everything the calls of one breaker run under: the breaker's
// settings, and what the Transport does around the breaker — how it
// judges an answer and how it refuses a call. It is resolved when the
// breaker is made and never changes under a call.
type policy struct {
	settings
	maxOpenSet    bool // WithMaxOpenTimeout was given
	mode          Mode // see WithMode
	callTimeout   time.Duration
	queue         int64         // waiting places beside the bulkhead (WithQueue)
	queueWait     time.Duration // how long a waiter waits
	classifier    Classifier    // nil: DefaultClassifier
	fallback      func(*http.Request, error) (*http.Response, error)
	rejectAsError bool
	bodyErrors    bool // see WithBodyErrors
}

// finish completes a policy once every option and layer is applied: an
// unset maximum open timeout is the longer of the default and the open
// timeout. It returns the error of a relation that does not hold (see
// relations).
func (p *policy) finish() error {
	if !p.maxOpenSet {
		p.maxOpenTimeout = max(defaultMaxOpenTimeout, p.openTimeout)
	}
	return checkRelations(p)
}

// classify is the policy's classifier's verdict.
func (p *policy) classify(req *http.Request, resp *http.Response, err error) Outcome {
	if p.classifier == nil {
		return DefaultClassifier(req, resp, err)
	}
	return p.classifier(req, resp, err)
}

// judge is what a call admitted at clock time start, classified as o,
// says about the dependency when it ended with err at clock time end:
// o, except that a call that failed while its upload up failed to read
// is ignored (the caller's own body: see watchUpload), a failure because
// a deadline passed which left less than minBudget at admission is
// ignored (see Transport.RoundTrip), and a success slower than the
// slow-call threshold is a failure. An enforcing breaker counts what it
// says; a shadow breaker's pass tells its observers.
func (p *policy) judge(req *http.Request, o Outcome, err error, up *upload, start, end int64, epoch time.Time) Outcome {
	if err != nil && up.failed() {
		return OutcomeIgnored
	}
	if o == OutcomeFailure && err != nil || o == OutcomeSuccess && p.slowCall > 0 {
		return p.rejudge(req, o, err, start, end, epoch)
	}
	return o
}

// rejudge is judge for the outcomes its rules may change.
func (p *policy) rejudge(req *http.Request, o Outcome, err error, start, end int64, epoch time.Time) Outcome {
	switch {
	case o == OutcomeFailure && err != nil && spentBudget(req, wall(epoch, start)) && callerEnded(req, wall(epoch, end)) == endedByDeadline:
		return OutcomeIgnored
	case o == OutcomeSuccess && p.slowCall > 0 && time.Duration(end-start) > p.slowCall:
		return OutcomeFailure
	}
	return o
}

// spentBudget reports whether the request's deadline left less than
// minBudget at wall time at, its admission: a caller that gives a
// dependency less than that has spent its own budget, and the deadline's
// passing is its own doing (see Transport.RoundTrip). A zero or far-past
// deadline left none (Sub saturates).
func spentBudget(req *http.Request, at time.Time) bool {
	d, ok := req.Context().Deadline()
	return ok && d.Sub(at) < minBudget
}

// WithPolicy applies opts to the breakers whose keys selector names, over
// the Transport-wide options, so that one Transport can tune each
// dependency apart:
//
//	httpbreaker.New(nil,
//		httpbreaker.WithPolicy("payments.internal",
//			httpbreaker.WithFailureRate(0.25), httpbreaker.WithOpenTimeout(30*time.Second),
//			httpbreaker.WithMaxConcurrent(40)),
//		httpbreaker.WithPolicy("recs.internal",
//			httpbreaker.WithCallTimeout(150*time.Millisecond), httpbreaker.WithMaxConcurrent(10)),
//		httpbreaker.WithPolicy("api.github.com GET /search/issues", httpbreaker.WithMinRequests(5)),
//	)
//
// A selector is one of:
//
//   - a host, "payments.internal": its host key and every route key of
//     that host, on any port;
//   - a host and port, "payments.internal:8443": that host on that port
//     (an IPv6 host in brackets, as in a URL: "[fd00::1]:8443");
//   - a wildcard, "*.internal": every host ending in ".internal", on any
//     port, but not "internal" itself;
//   - a whole key, "api.github.com GET /search/issues" (a selector with a
//     space), or any key a custom KeyFunc returns.
//
// A selector that starts or ends with a space (a tab or any white space,
// also once its trailing dots are read off) is an error: no key does.
//
// A key's host is the key up to its first space, and its port what
// follows the host's last colon when that is all digits. Hosts in
// selectors are read exactly as HostKey reads keys: lower-cased, without
// a trailing dot — on a wildcard too, so "*.internal." is "*.internal" —,
// with an empty port read as none and without leading zeros in a port.
// Keys are read the same way before they are matched. A key has no port
// when the port is its scheme's default, so "payments.internal:443"
// names only plain-http calls to port 443: https://payments.internal:443
// is keyed "payments.internal", which the selector "payments.internal"
// names.
//
// A breaker's settings are the defaults, then the Transport-wide options,
// then every selector that names its key, from the widest to the
// narrowest — wildcards (shorter suffix first), host on any port, host
// with port, whole key — each applying only the options it names. The
// same selector given twice applies both, in order. A breaker's policy is
// resolved when the breaker is made, never per request: policies cost the
// request path nothing.
//
// A policy may set every option about one breaker's behaviour. New panics,
// naming WithPolicy, for an empty selector, "*", "*." or a "*" anywhere
// but a leading "*.", and for an option that shapes the Transport as a
// whole (WithKeyFunc, WithRoutes, WithMaxBreakers, WithMetrics,
// WithLogger, WithOnTransition, WithObserver, WithStore, WithPolicy). Relations between
// options (a maximum open timeout not shorter than the open timeout) are
// checked at New on the settings every selector resolves to.
func WithPolicy(selector string, opts ...Option) Option {
	sel, err := parseSelector(selector)
	return structural("WithPolicy", func(c *config) {
		if err != nil {
			c.invalid("WithPolicy", "%v", err)
			return
		}
		for _, o := range opts {
			switch o := o.(type) {
			case nil:
				c.invalid("WithPolicy", "selector %q: nil Option", selector)
				return
			case option:
				if o.transport {
					c.invalid("WithPolicy", "selector %q: %s shapes the whole Transport and cannot be set per policy", selector, o.name)
					return
				}
			}
		}
		c.rules = append(c.rules, rule{sel: sel, opts: opts})
	})
}

// selectorKind is the breadth of a selector, from the widest.
type selectorKind int

const (
	selWildcard selectorKind = iota // "*.suffix"
	selHost                         // "host"
	selHostPort                     // "host:port"
	selKey                          // a whole key
)

// selector names breakers by their keys (see WithPolicy).
type selector struct {
	text string       // as given
	kind selectorKind //
	host string       // selWildcard: ".suffix"; selHost: host; selHostPort: "host:port"; selKey: the key
}

// parseSelector parses a WithPolicy selector. Its host is read as every
// key's host is (see readHost): "*.Internal." is "*.internal", and
// "Pay.Internal.:08443" is "pay.internal:8443".
func parseSelector(s string) (selector, error) {
	sel := selector{text: s}
	host, _, isKey := strings.Cut(s, " ")
	noHost := func() error {
		return fmt.Errorf("selector %q names no host: give a host, host:port, *.suffix or a whole key", s)
	}
	switch {
	case strings.TrimSpace(s) != s:
		// No key starts or ends with a space: such a selector, a typo in
		// a file most likely, would apply to nothing.
		return sel, fmt.Errorf("selector %q starts or ends with a space: it would name no breaker", s)
	case host == "", host == "*", host == "*.":
		return sel, noHost()
	case strings.Contains(strings.TrimPrefix(s, "*."), "*"):
		return sel, fmt.Errorf("selector %q: a \"*\" may only lead, as in \"*.example.com\"", s)
	case isKey && strings.HasPrefix(host, "*."):
		return sel, fmt.Errorf("selector %q: a whole key has no wildcard", s)
	case isKey:
		sel.kind, sel.host = selKey, canonicalHostKey(s)
	case strings.HasPrefix(s, "*."):
		sel.kind, sel.host = selWildcard, readHost(s[1:], "")
		switch _, port := splitKeyPort(sel.host); {
		case sel.host == ".": // "*..", "*.:": no suffix once read
			return sel, noHost()
		case port != "":
			return sel, fmt.Errorf("selector %q: a wildcard names hosts on any port, as in \"*.example.com\"", s)
		case strings.HasPrefix(sel.host, ".."):
			return sel, fmt.Errorf("selector %q: a wildcard is \"*.\" and a suffix, as in \"*.example.com\"", s)
		case len(sel.host) >= maxKeyLen: // a host under it is longer still
			return sel, fmt.Errorf("selector %q: its suffix leaves no room for a host in the %d bytes a key keeps", s, maxKeyLen)
		}
	default:
		sel.kind, sel.host = selHost, readHost(s, "")
		switch h, port := splitKeyPort(sel.host); {
		case h == "" && port == "": // ":" names the local host on no port
			return sel, noHost()
		case isIPv6(sel.host):
			// HostKey writes an IPv6 host in brackets, as URLs do: this
			// selector would name no request's breaker.
			return sel, fmt.Errorf("selector %q: write an IPv6 address in brackets, as in \"[::1]\" or \"[::1]:8080\"", s)
		case port != "":
			sel.kind = selHostPort
		}
	}
	if strings.TrimSpace(sel.host) != sel.host {
		// "a\f." reads as "a\f": refused as "a\f" is, so that every
		// selector accepted reads back as itself.
		return sel, fmt.Errorf("selector %q reads as %q, which ends with a space: it would name no breaker", s, sel.host)
	}
	return sel, nil
}

// isIPv6 reports whether s is an IPv6 address without brackets.
func isIPv6(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6()
}

// matches reports whether the selector names key, read as the Transport
// reads every key (see canonicalHostKey).
func (s *selector) matches(key string) bool {
	key = canonicalHostKey(key)
	if s.kind == selKey {
		return key == s.host
	}
	hostPort, _, _ := strings.Cut(key, " ")
	if s.kind == selHostPort {
		return hostPort == s.host
	}
	host, _ := splitKeyPort(hostPort)
	if s.kind == selHost {
		return host == s.host
	}
	return len(host) > len(s.host) && strings.HasSuffix(host, s.host)
}

// example is a key the selector names, for checking what it resolves to.
// A wildcard's is "*" and its suffix, which no host, host:port or
// whole-key selector can name (none may hold a "*"): it resolves through
// exactly the wildcards every other host under the suffix does.
func (s *selector) example() string {
	if s.kind == selWildcard {
		return "*" + s.host
	}
	return s.host
}

// rule is one WithPolicy: a selector and its options.
type rule struct {
	sel      selector
	opts     []Option
	mode     Mode // the mode it sets, if setsMode
	setsMode bool
}

// setsMode reports whether opts include WithMode.
func setsMode(opts []Option) bool {
	for _, o := range opts {
		if o, ok := o.(option); ok && o.name == "WithMode" {
			return true
		}
	}
	return false
}

// off reports whether key's breaker would be in ModeOff, without
// resolving its policy (and so without allocating): for requests that
// find no room for a breaker.
func (ps *policies) off(key string) bool {
	m := ps.base.mode
	for i := range ps.rules {
		if r := &ps.rules[i]; r.setsMode && r.sel.matches(key) {
			m = r.mode
		}
	}
	return m == ModeOff
}

// policies is a Transport's policies: the Transport-wide one, and the
// rules over it from the widest to the narrowest. It is immutable.
type policies struct {
	raw   policy  // the Transport-wide options, before finish
	base  *policy // raw finished: the policy of keys no rule names
	rules []rule  // by breadth, then as given
}

// newPolicies orders c's rules and checks what each selector resolves to.
// It returns the first error.
func newPolicies(c *config) (*policies, error) {
	ps := &policies{raw: c.policy, rules: slices.Clone(c.rules)}
	slices.SortStableFunc(ps.rules, func(a, b rule) int {
		if a.sel.kind != b.sel.kind {
			return cmp.Compare(a.sel.kind, b.sel.kind)
		}
		if a.sel.kind == selWildcard {
			return cmp.Compare(len(a.sel.host), len(b.sel.host))
		}
		return 0
	})
	base := ps.raw
	if err := base.finish(); err != nil {
		return nil, err
	}
	ps.base = &base
	for i, r := range ps.rules {
		if !r.sel.matches(r.sel.example()) {
			return nil, fmt.Errorf("httpbreaker: WithPolicy: selector %q names no key", r.sel.text)
		}
		if _, err := ps.resolve(r.sel.example()); err != nil {
			return nil, inPolicy(err, r.sel.text)
		}
		scratch := config{policy: ps.raw}
		scratch.applyAll("WithPolicy", r.opts)
		ps.rules[i].mode = scratch.mode // the last mode it sets wins; the raw mode if none
		ps.rules[i].setsMode = setsMode(r.opts)
	}
	return ps, nil
}

// of returns the policy of key. It cannot fail: New and Update check
// what every selector resolves to.
func (ps *policies) of(key string) *policy {
	p, err := ps.resolve(key)
	if err != nil {
		return ps.base
	}
	return p
}

// resolve returns the policy of key: the Transport-wide policy with every
// rule that names key applied over it, from the widest.
func (ps *policies) resolve(key string) (*policy, error) {
	if !slices.ContainsFunc(ps.rules, func(r rule) bool { return r.sel.matches(key) }) {
		return ps.base, nil // shared: no copy to make
	}
	c := config{policy: ps.raw}
	for _, r := range ps.rules {
		if r.sel.matches(key) {
			c.applyAll("WithPolicy", r.opts)
		}
	}
	if len(c.errs) > 0 {
		return nil, c.errs[0]
	}
	if err := c.policy.finish(); err != nil {
		return nil, err
	}
	return &c.policy, nil
}
