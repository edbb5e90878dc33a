package httpbreaker

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// An Outcome is what one call tells a breaker about its dependency.
type Outcome int

const (
	// OutcomeSuccess: the dependency answered. 4xx responses are successes:
	// a 404 proves the dependency is up.
	OutcomeSuccess Outcome = iota
	// OutcomeFailure: the dependency failed (connection error, timeout,
	// 5xx, slow call). Failures count toward the failure rate.
	OutcomeFailure
	// OutcomeThrottled: the dependency asked us to slow down (429). 429s
	// count toward the failure rate only when sustained; see
	// WithThrottleSustain.
	OutcomeThrottled
	// OutcomeIgnored: the call says nothing about the dependency (the
	// caller cancelled, the request was malformed). It leaves the window
	// untouched and frees a half-open probe slot without deciding anything.
	OutcomeIgnored
)

// String returns "success", "failure", "throttled" or "ignored"; these
// are also the values of the outcome label in metrics.
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeFailure:
		return "failure"
	case OutcomeThrottled:
		return "throttled"
	case OutcomeIgnored:
		return "ignored"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// A Classifier decides what a finished call says about the dependency.
// It is called once per admitted call with the request as the caller sent
// it and exactly one of resp and err non-nil (both nil only if the next
// RoundTripper broke its contract). Under WithBodyErrors it is called a
// second time for a call it judged a success whose body then fails to
// read, with a nil resp and the body's error. It must not read or close
// resp.Body, must not modify anything, and must be safe for concurrent
// use. An unknown Outcome value counts as OutcomeIgnored.
type Classifier func(req *http.Request, resp *http.Response, err error) Outcome

// DefaultClassifier counts only the dependency's own faults:
//
//   - Failure: a transport error of the dependency's (connection refused
//     or reset, EOF, DNS, TLS handshake, timeouts), a request context
//     whose deadline passed while the call ran, and a 5xx response other
//     than 501 and 505.
//   - Throttled: 429 Too Many Requests.
//   - Ignored: the caller cancelled — the request's context was cancelled
//     (whatever its cause) before any deadline passed, or its deprecated
//     Cancel channel was closed; a malformed request (no URL, no host, a
//     scheme other than http and https, a port out of range, an invalid
//     method, an invalid header or trailer name or value, a control
//     character in the URL's query or opaque part, a Host header net/http
//     would not write, a nil Header, a nil Body with a ContentLength other
//     than 0: what http.Transport refuses to send); 501 Not Implemented
//     and 505 HTTP Version Not Supported, which describe our request, not
//     the dependency's health.
//   - Success: everything else, 1xx–4xx included.
//
// Cancellation is read from req.Context(), never from the error text: a
// cancel cause can hide context.Canceled, and http.Client's Timeout can
// surface as "net/http: request canceled" while the context says
// DeadlineExceeded.
//
// The Transport applies two more rules after any classifier: a call that
// ended because a deadline passed which left less than 50ms at admission
// is Ignored (see Transport.RoundTrip), and so is a call that failed while
// reading the caller's own request body (a file that cannot be read, a
// client that sent a malformed chunk through a proxy, an
// http.MaxBytesReader's limit, a body shorter or longer than the
// request's ContentLength): the Transport watches the body it sends,
// through a shallow copy of the request, and never reads the error text.
// DefaultClassifier alone knows neither and counts such calls as
// failures.
func DefaultClassifier(req *http.Request, resp *http.Response, err error) Outcome {
	if err != nil {
		if req == nil {
			return OutcomeFailure
		}
		switch callerEnded(req, time.Now()) {
		case endedByDeadline:
			return OutcomeFailure
		case endedByCaller:
			return OutcomeIgnored
		}
		if !validRequest(req) {
			return OutcomeIgnored
		}
		return OutcomeFailure
	}
	if resp == nil {
		return OutcomeIgnored
	}
	return classifyStatus(resp.StatusCode)
}

func classifyStatus(code int) Outcome {
	switch {
	case code == http.StatusTooManyRequests:
		return OutcomeThrottled
	case code == http.StatusNotImplemented, code == http.StatusHTTPVersionNotSupported:
		return OutcomeIgnored
	case code >= 500 && code <= 599:
		return OutcomeFailure
	}
	return OutcomeSuccess
}

type ending int

const (
	endedNot ending = iota
	endedByDeadline
	endedByCaller
)

// callerEnded reports whether the request's context (or its deprecated
// Cancel channel) ended the call, and how.
func callerEnded(req *http.Request, now time.Time) ending {
	ctx := req.Context()
	switch ctx.Err() {
	case context.DeadlineExceeded:
		return endedByDeadline
	case context.Canceled:
		return endedByCaller
	}
	// http.Client's Timeout fires its own timer, which can close
	// req.Cancel an instant before the context's deadline timer runs.
	if d, ok := ctx.Deadline(); ok && !now.Before(d) {
		return endedByDeadline
	}
	//lint:ignore SA1019 http.Client still sets Cancel for RoundTrippers it does not know
	if cancel := req.Cancel; cancel != nil {
		select {
		case <-cancel:
			return endedByCaller
		default:
		}
	}
	return endedNot
}

// routable reports whether the request can go to a dependency at all; the
// Transport sends requests that cannot straight to next, where they fail
// with next's own error without touching any breaker.
func routable(req *http.Request) bool {
	if req.URL == nil || req.URL.Host == "" {
		return false
	}
	// Exactly, as http.Transport takes them: it refuses "HTTP".
	s := req.URL.Scheme
	return s == "https" || s == "http"
}

// validRequest reports whether the request is well-formed enough that an
// error for it can be the dependency's fault.
func validRequest(req *http.Request) bool {
	if !routable(req) {
		return false
	}
	if req.Method != "" && !isToken(req.Method) {
		return false
	}
	if req.Body == nil && req.ContentLength != 0 || req.Header == nil {
		return false
	}
	if !validPort(req.URL.Port()) || !validFields(req.Header) || !validFields(req.Trailer) {
		return false
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	return validHost(host) && every(req.URL.RequestURI(), func(c byte) bool { return !isCTL(c) })
}

// validFields reports whether every name of h is a token and every value
// a valid field value, as http.Transport checks headers and trailers
// before it sends anything.
func validFields(h http.Header) bool {
	for k, vs := range h {
		if !isToken(k) {
			return false
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return false
			}
		}
	}
	return true
}

// validHost reports whether host, the request's Host header, holds only
// the bytes net/http writes in one (httpguts.ValidHostHeader); through a
// proxy it refuses the request otherwise. Bytes that are not ASCII pass:
// net/http converts such a host to punycode first, which this does not
// repeat.
func validHost(host string) bool {
	return every(host, func(c byte) bool { return c >= utf8.RuneSelf || alnumOr(c, "!$%&'()*+,-.:;=[]_~") })
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	return s != "" && every(s, func(c byte) bool { return alnumOr(c, "!#$%&'*+-.^_`|~") })
}

// validHeaderValue reports whether v has no control characters other than
// horizontal tab.
func validHeaderValue(v string) bool {
	return every(v, func(c byte) bool { return c == '\t' || !isCTL(c) })
}

// every reports whether ok holds for each byte of s.
func every(s string, ok func(c byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// alnumOr reports whether c is an ASCII letter or digit, or one of extra.
func alnumOr(c byte, extra string) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(extra, c) >= 0
}

// isCTL reports whether c is a control character: net/http writes none
// in a request's URL, and none but tab in a header value.
func isCTL(c byte) bool { return c < ' ' || c == 0x7f }

// validPort reports whether p is empty or a port number in [0, 65535],
// leading zeros allowed, as net/http dials it (and as HostKey reads it).
func validPort(p string) bool {
	p = strings.TrimLeft(p, "0")
	if len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}
