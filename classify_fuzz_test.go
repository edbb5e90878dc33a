package httpbreaker

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	tokenTest       = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")
	headerValueTest = regexp.MustCompile(`^[^\x00-\x08\x0a-\x1f\x7f]*$`)
)

// wellFormedTest is an independent statement of which requests a
// dependency could be blamed for failing: an http or https URL with a
// host, a token method (or none), no Body missing for a ContentLength,
// token header names and header values without control characters other
// than tab.
func wellFormedTest(r *http.Request) bool {
	if r.URL == nil || r.URL.Host == "" {
		return false
	}
	if s := strings.ToLower(r.URL.Scheme); s != "http" && s != "https" {
		return false
	}
	if r.Method != "" && !tokenTest.MatchString(r.Method) {
		return false
	}
	if r.Body == nil && r.ContentLength > 0 {
		return false
	}
	for k, vs := range r.Header {
		if !tokenTest.MatchString(k) {
			return false
		}
		for _, v := range vs {
			if !headerValueTest.MatchString(v) {
				return false
			}
		}
	}
	return true
}

// statusOutcomeTest is the specification of DefaultClassifier for a
// response.
func statusOutcomeTest(code int) Outcome {
	switch {
	case code == 429:
		return OutcomeThrottled
	case code == 501 || code == 505:
		return OutcomeIgnored
	case code >= 500 && code <= 599:
		return OutcomeFailure
	}
	return OutcomeSuccess
}

// Context states of FuzzDefaultClassifier.
const (
	ctxAlive = iota
	ctxCancelled
	ctxCancelledWithCause
	ctxDeadlinePassed
	ctxDeadlineAhead
	ctxDeadlinePassedWithCause
	ctxCancelChannelClosed
	numCtxKinds
)

// Malformations of FuzzDefaultClassifier's request.
const (
	reqWellFormed = iota
	reqNilURL
	reqNoHost
	reqSchemeFTP
	reqFuzzMethod
	reqFuzzHeaderName
	reqFuzzHeaderValue
	reqNilBodyWithLength
	reqNil
	numReqKinds
)

// fuzzErrs are the transport errors FuzzDefaultClassifier draws from;
// index 0 is no error.
var fuzzErrs = []error{
	nil,
	&url.Error{Op: "Get", URL: "http://api.test/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}},
	&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET},
	io.EOF,
	io.ErrUnexpectedEOF,
	&net.DNSError{Err: "no such host", Name: "api.test", IsNotFound: true},
	&url.Error{Op: "Get", URL: "https://api.test/", Err: x509.UnknownAuthorityError{}},
	os.ErrDeadlineExceeded,
	context.Canceled,
	context.DeadlineExceeded,
	errors.New("boom"),
	&url.Error{Op: "Get", URL: "http://api.test/", Err: errors.New("net/http: request canceled")},
}

// FuzzDefaultClassifier: for generated status codes, error kinds,
// context states and (mal)formed requests, DefaultClassifier never panics,
// returns one of the four outcomes, and returns the one the
// specification gives: for a response, 429 → throttled, 501 and 505 →
// ignored, other 5xx → failure, anything else → success; for an error,
// a cancelled caller → ignored, a passed deadline → failure, a malformed
// request → ignored, otherwise → failure.
func FuzzDefaultClassifier(f *testing.F) {
	f.Add(500, true, uint8(0), uint8(ctxAlive), uint8(reqWellFormed), "GET", "X-Test", "v")
	f.Add(0, false, uint8(1), uint8(ctxCancelledWithCause), uint8(reqWellFormed), "GET", "X-Test", "v")
	f.Add(429, true, uint8(0), uint8(ctxAlive), uint8(reqFuzzMethod), "GE T", "X-Test", "v")
	f.Add(0, false, uint8(10), uint8(ctxDeadlinePassed), uint8(reqFuzzHeaderValue), "GET", "X-Test", "a\nb")
	f.Fuzz(func(t *testing.T, code int, hasResp bool, errKind, ctxKind, reqKind uint8, method, hdrName, hdrValue string) {
		ctxKind %= numCtxKinds
		reqKind %= numReqKinds
		err := fuzzErrs[int(errKind)%len(fuzzErrs)]

		ctx := context.Background()
		switch ctxKind {
		case ctxCancelled:
			c, cancel := context.WithCancel(ctx)
			cancel()
			ctx = c
		case ctxCancelledWithCause:
			c, cancel := context.WithCancelCause(ctx)
			cancel(errors.New("client went away"))
			ctx = c
		case ctxDeadlinePassed:
			c, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
			defer cancel()
			ctx = c
		case ctxDeadlineAhead:
			c, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			ctx = c
		case ctxDeadlinePassedWithCause:
			c, cancel := context.WithDeadlineCause(ctx, time.Now().Add(-time.Second), errors.New("budget"))
			defer cancel()
			ctx = c
		}
		req, rerr := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/x", nil)
		require.NoError(t, rerr)
		switch reqKind {
		case reqNilURL:
			req.URL = nil
		case reqNoHost:
			req.URL.Host = ""
		case reqSchemeFTP:
			req.URL.Scheme = "ftp"
		case reqFuzzMethod:
			req.Method = method
		case reqFuzzHeaderName:
			req.Header[hdrName] = []string{"v"}
		case reqFuzzHeaderValue:
			req.Header["X-Fuzz"] = []string{hdrValue}
		case reqNilBodyWithLength:
			req.ContentLength = 5
		}
		if ctxKind == ctxCancelChannelClosed {
			c := make(chan struct{})
			close(c)
			//lint:ignore SA1019 the deprecated channel is still honoured, and must be classified
			req.Cancel = c
		}
		if reqKind == reqNil {
			req = nil
		}
		var resp *http.Response
		if hasResp {
			resp = &http.Response{StatusCode: code, Header: http.Header{}, Body: http.NoBody}
		}

		got := DefaultClassifier(req, resp, err)
		require.Contains(t, []Outcome{OutcomeSuccess, OutcomeFailure, OutcomeThrottled, OutcomeIgnored}, got)

		var want Outcome
		switch {
		case err == nil && resp == nil:
			want = OutcomeIgnored
		case err == nil:
			want = statusOutcomeTest(code)
		case req == nil:
			return // unspecified; it must only not panic
		case ctxKind == ctxCancelled || ctxKind == ctxCancelledWithCause || ctxKind == ctxCancelChannelClosed:
			want = OutcomeIgnored
		case ctxKind == ctxDeadlinePassed || ctxKind == ctxDeadlinePassedWithCause:
			want = OutcomeFailure
		case !wellFormedTest(req):
			want = OutcomeIgnored
		default:
			want = OutcomeFailure
		}
		require.Equal(t, want, got, "code %d resp %v err %v ctx %d req %d", code, hasResp, err, ctxKind, reqKind)
	})
}
