package httpbreaker

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDefaultClassifierErrors(t *testing.T) {
	req := func() *http.Request {
		r, err := http.NewRequest(http.MethodGet, "https://api.test/x", nil)
		require.NoError(t, err)
		return r
	}
	opErr := func(e error) error {
		return &url.Error{Op: "Get", URL: "https://api.test/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: e}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"connection refused", opErr(syscall.ECONNREFUSED), OutcomeFailure},
		{"connection reset", opErr(syscall.ECONNRESET), OutcomeFailure},
		{"EOF", &url.Error{Op: "Get", URL: "u", Err: io.EOF}, OutcomeFailure},
		{"unexpected EOF", io.ErrUnexpectedEOF, OutcomeFailure},
		{"DNS", &net.DNSError{Err: "no such host", Name: "api.test", IsNotFound: true}, OutcomeFailure},
		{"TLS unknown authority", &url.Error{Op: "Get", URL: "u", Err: x509.UnknownAuthorityError{}}, OutcomeFailure},
		{"timeout", &url.Error{Op: "Get", URL: "u", Err: os.ErrDeadlineExceeded}, OutcomeFailure},
		// An error that merely says "canceled" is not a cancellation:
		// only the context decides.
		{"context.Canceled text without a cancelled context", context.Canceled, OutcomeFailure},
		{"some error", errors.New("boom"), OutcomeFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, DefaultClassifier(req(), nil, tc.err))
		})
	}
}

func TestDefaultClassifierReadsTheContext(t *testing.T) {
	boom := errors.New("boom")

	// Cancelled with a custom cause: the error does not even mention it.
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("user went away"))
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/", nil)
	require.Equal(t, OutcomeIgnored, DefaultClassifier(r, nil, boom))

	// A deadline that passed while the call ran is the dependency's.
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	r, _ = http.NewRequestWithContext(dctx, http.MethodGet, "http://api.test/", nil)
	require.Equal(t, OutcomeFailure, DefaultClassifier(r, nil, errors.New("net/http: request canceled")))

	// A deadline with a cause is still a deadline.
	cctx, ccancel := context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), errors.New("budget"))
	defer ccancel()
	r, _ = http.NewRequestWithContext(cctx, http.MethodGet, "http://api.test/", nil)
	require.Equal(t, OutcomeFailure, DefaultClassifier(r, nil, boom))

	// The deprecated Cancel channel, closed by the caller.
	r, _ = http.NewRequest(http.MethodGet, "http://api.test/", nil)
	c := make(chan struct{})
	close(c)
	r.Cancel = c //lint:ignore SA1019 the deprecated channel is still honoured
	require.Equal(t, OutcomeIgnored, DefaultClassifier(r, nil, boom))

	// A live context leaves the error to speak.
	r, _ = http.NewRequest(http.MethodGet, "http://api.test/", nil)
	require.Equal(t, OutcomeFailure, DefaultClassifier(r, nil, boom))
}

func TestDefaultClassifierMalformedRequests(t *testing.T) {
	boom := errors.New("boom")
	mk := func(f func(*http.Request)) *http.Request {
		r, err := http.NewRequest(http.MethodGet, "http://api.test/", nil)
		require.NoError(t, err)
		f(r)
		return r
	}
	for name, r := range map[string]*http.Request{
		"nil URL":            mk(func(r *http.Request) { r.URL = nil }),
		"no host":            mk(func(r *http.Request) { r.URL.Host = "" }),
		"unsupported scheme": mk(func(r *http.Request) { r.URL.Scheme = "ftp" }),
		"bad method":         mk(func(r *http.Request) { r.Method = "GE T" }),
		"bad header name":    mk(func(r *http.Request) { r.Header["Bad Name"] = []string{"x"} }),
		"bad header value":   mk(func(r *http.Request) { r.Header.Set("X", "a\nb") }),
		"nil body with length": mk(func(r *http.Request) {
			r.Body = nil
			r.ContentLength = 5
		}),
		"nil body with unknown length": mk(func(r *http.Request) { r.ContentLength = -1 }),
		"nil Header":                   mk(func(r *http.Request) { r.Header = nil }),
		"bad trailer name":             mk(func(r *http.Request) { r.Trailer = http.Header{"Bad Name": {"x"}} }),
		"bad trailer value":            mk(func(r *http.Request) { r.Trailer = http.Header{"X-T": {"a\r\nInjected: 1"}} }),
		"control character in query":   mk(func(r *http.Request) { r.URL.RawQuery = "q=a\x01b" }),
		"bad Host header":              mk(func(r *http.Request) { r.Host = "api.test/x y" }),
		"upper-case scheme":            mk(func(r *http.Request) { r.URL.Scheme = "HTTP" }),
	} {
		require.Equal(t, OutcomeIgnored, DefaultClassifier(r, nil, boom), name)
	}
	for name, r := range map[string]*http.Request{
		"punycode host":             mk(func(r *http.Request) { r.Host = "bücher.example" }), // net/http converts it
		"IPv6 host":                 mk(func(r *http.Request) { r.Host = "[fe80::1%25eth0]:8080" }),
		"tab in header":             mk(func(r *http.Request) { r.Header.Set("X", "a\tb") }),
		"escaped query":             mk(func(r *http.Request) { r.URL.RawQuery = "q=a%01b" }),
		"control character in path": mk(func(r *http.Request) { r.URL.Path = "/a\x7fb" }), // net/http escapes it
	} {
		require.Equal(t, OutcomeFailure, DefaultClassifier(r, nil, boom), name)
	}
}

// TestZeroPaddedPortIsAPort: net/http dials a port written with leading
// zeros as the number it is, and HostKey reads it so; a connection error
// to it is the dependency's failure, and only a port out of range is our
// own malformed request.
func TestZeroPaddedPortIsAPort(t *testing.T) {
	for _, raw := range []string{"http://api.test:8080/", "http://api.test:008080/", "http://api.test:0000000008080/"} {
		req := mustReq(t, raw)
		require.Equal(t, "api.test:8080", HostKey(req), raw)
		require.Equal(t, OutcomeFailure, DefaultClassifier(req, nil, errConnRefused), raw)
	}
	for _, raw := range []string{"http://api.test:65536/", "http://api.test:0065536/", "http://api.test:1000000/"} {
		require.Equal(t, OutcomeIgnored, DefaultClassifier(mustReq(t, raw), nil, errConnRefused), raw)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	next := &http.Transport{}
	defer next.CloseIdleConnections()
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	resp, err := New(next).RoundTrip(mustReq(t, "http://"+host+":000"+port+"/"))
	require.NoError(t, err, "net/http dials the padded port")
	resp.Body.Close()

	d := newDep(http.StatusOK)
	d.set(0, errConnRefused)
	tr := New(d, WithMinRequests(4), WithJitter(0))
	for range 4 {
		_, err := get(t, tr, "http://api.test:0008080/")
		require.Error(t, err)
	}
	require.Equal(t, StateOpen, tr.State("api.test:8080"), "four refused connections of four")
}

// TestMalformedRequestsAsHTTPTransportRefusesThem: each request that
// http.Transport refuses before it sends a byte — before it dials, or as
// it writes the request line (a control character in the URL, an invalid
// Host header through a proxy) — is one DefaultClassifier ignores, so
// that our own bad requests never trip a breaker, however often they are
// sent. An upper-case scheme, which http.Transport does not take, touches
// no breaker at all.
func TestMalformedRequestsAsHTTPTransportRefusesThem(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	defer srv.Close()
	direct := &http.Transport{}
	defer direct.CloseIdleConnections()
	proxy, err := url.Parse(srv.URL)
	require.NoError(t, err)
	proxied := &http.Transport{Proxy: http.ProxyURL(proxy)} // the server is the proxy: it must see nothing either
	defer proxied.CloseIdleConnections()
	for name, tc := range map[string]struct {
		next http.RoundTripper
		mod  func(*http.Request)
	}{
		"bad trailer name":             {direct, func(r *http.Request) { r.Trailer = http.Header{"Bad Name": {"x"}} }},
		"bad trailer value":            {direct, func(r *http.Request) { r.Trailer = http.Header{"X-T": {"a\r\nInjected: 1"}} }},
		"control character in query":   {direct, func(r *http.Request) { r.URL.RawQuery = "q=a\x01b" }},
		"bad Host through a proxy":     {proxied, func(r *http.Request) { r.Host = "api.test/x y" }},
		"nil Header":                   {direct, func(r *http.Request) { r.Header = nil }},
		"nil body with unknown length": {direct, func(r *http.Request) { r.ContentLength = -1 }},
		"upper-case scheme":            {direct, func(r *http.Request) { r.URL.Scheme = "HTTP" }},
	} {
		t.Run(name, func(t *testing.T) {
			tr := New(tc.next, WithMinRequests(1))
			for range 3 {
				r, err := http.NewRequest(http.MethodGet, srv.URL, nil)
				require.NoError(t, err)
				tc.mod(r)
				resp, err := tr.RoundTrip(r)
				require.False(t, IsRejected(resp), "refused as if the dependency were down")
				require.Nil(t, resp)
				require.Error(t, err, "http.Transport refuses it")
			}
			for _, s := range tr.Snapshot() {
				require.Zero(t, s.Requests, "%s counts nothing", s.Key)
			}
			require.Equal(t, StateClosed, tr.State(srv.Listener.Addr().String()))
		})
	}
	require.Zero(t, served.Load(), "no malformed request reached the server")
}

func TestDefaultClassifierStatuses(t *testing.T) {
	r, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	want := map[int]Outcome{
		100: OutcomeSuccess, 200: OutcomeSuccess, 204: OutcomeSuccess, 301: OutcomeSuccess, 304: OutcomeSuccess,
		400: OutcomeSuccess, 401: OutcomeSuccess, 403: OutcomeSuccess, 404: OutcomeSuccess, 499: OutcomeSuccess,
		429: OutcomeThrottled,
		500: OutcomeFailure, 502: OutcomeFailure, 503: OutcomeFailure, 504: OutcomeFailure, 599: OutcomeFailure,
		501: OutcomeIgnored, 505: OutcomeIgnored,
	}
	for code, o := range want {
		require.Equal(t, o, DefaultClassifier(r, &http.Response{StatusCode: code}, nil), "status %d", code)
	}
	require.Equal(t, OutcomeIgnored, DefaultClassifier(r, nil, nil), "neither response nor error")
}

func TestOutcomeString(t *testing.T) {
	require.Equal(t, "success", OutcomeSuccess.String())
	require.Equal(t, "failure", OutcomeFailure.String())
	require.Equal(t, "throttled", OutcomeThrottled.String())
	require.Equal(t, "ignored", OutcomeIgnored.String())
	require.Equal(t, "Outcome(9)", Outcome(9).String())
	require.Equal(t, "closed", StateClosed.String())
	require.Equal(t, "half-open", StateHalfOpen.String())
	require.Equal(t, "open", StateOpen.String())
	require.Equal(t, "State(7)", State(7).String())
}

// TestPlainPathClassifiesAsDefaultClassifier checks that a Transport with
// the defaults counts every status as DefaultClassifier does: the same
// statuses through a Transport given DefaultClassifier explicitly give the
// same counts, with and without a context deadline.
func TestPlainPathClassifiesAsDefaultClassifier(t *testing.T) {
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		code, err := strconv.Atoi(strings.TrimPrefix(req.URL.Hostname(), "s"))
		if err != nil {
			return nil, err
		}
		return response(req, code, nil), nil
	})
	plain := New(next)
	called := New(next, WithClassifier(DefaultClassifier))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for code := 100; code < 600; code++ {
		url := fmt.Sprintf("http://s%d/", code)
		for _, rt := range []*Transport{plain, called} {
			resp, err := get(t, rt, url)
			require.NoError(t, err)
			require.Equal(t, code, resp.StatusCode)
			resp, err = getCtx(t, ctx, rt, url)
			require.NoError(t, err)
			require.Equal(t, code, resp.StatusCode)
		}
	}
	got, want := plain.Snapshot(), called.Snapshot()
	require.Len(t, got, 500)
	byKey := func(a, b Status) int { return cmp.Compare(a.Key, b.Key) }
	slices.SortFunc(got, byKey)
	slices.SortFunc(want, byKey)
	for i := range got {
		got[i].Since, want[i].Since = time.Time{}, time.Time{}
	}
	require.Equal(t, want, got)
	var failures, throttled int64
	for _, s := range got {
		failures += s.Failures
		throttled += s.Throttled
	}
	require.EqualValues(t, 2*(100-2), failures, "500–599 but 501 and 505, twice each")
	require.EqualValues(t, 2, throttled)
}
