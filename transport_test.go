package httpbreaker

import (
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/jarcoal/httpmock"
	"github.com/stretchr/testify/require"
)

func TestNewDefaults(t *testing.T) {
	tr := New(nil)
	next, ok := tr.next.(*http.Transport)
	require.True(t, ok, "nil next is a pooled *http.Transport")
	require.NotSame(t, http.DefaultTransport, next)
	require.Equal(t, cleanhttp.DefaultPooledTransport().MaxIdleConnsPerHost, next.MaxIdleConnsPerHost)

	c := NewClient(WithMinRequests(3))
	require.Equal(t, DefaultClientTimeout, c.Timeout)
	require.IsType(t, &Transport{}, c.Transport)
	require.EqualValues(t, 3, c.Transport.(*Transport).policies.Load().base.minRequests)
}

type idleCounter struct {
	http.RoundTripper
	n int
}

func (c *idleCounter) CloseIdleConnections() { c.n++ }

func TestCloseIdleConnectionsIsForwarded(t *testing.T) {
	next := &idleCounter{RoundTripper: newDep(200)}
	New(next).CloseIdleConnections()
	require.Equal(t, 1, next.n)
	New(newDep(200)).CloseIdleConnections() // next without the method: no panic
}

func TestWorksWithHTTPMock(t *testing.T) {
	mock := httpmock.NewMockTransport()
	mock.RegisterResponder(http.MethodGet, "http://api.test/x", httpmock.NewStringResponder(502, "bad gateway"))
	tr := New(mock, WithMinRequests(3))
	c := &http.Client{Transport: tr}
	for range 3 {
		resp, err := c.Get("http://api.test/x")
		require.NoError(t, err)
		require.Equal(t, 502, resp.StatusCode)
		resp.Body.Close()
	}
	resp, err := c.Get("http://api.test/x")
	require.NoError(t, err)
	resp.Body.Close()
	require.True(t, IsRejected(resp))
	require.Equal(t, 3, mock.GetTotalCallCount())
}

func TestRequestIsNeverModifiedAndBodyClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMinRequests(1))
		mk := func() (*http.Request, *trackedBody) {
			body := newBody("payload")
			r, err := http.NewRequest(http.MethodPost, testURL, body)
			require.NoError(t, err)
			r.Header.Set("X-Trace", "1")
			return r, body
		}
		// Admitted: next sees the same request — a shallow copy whose
		// Body wraps the caller's, to tell the caller's upload errors from
		// the dependency's (see upload.go) — and closes its body.
		r, body := mk()
		seen := make(chan *http.Request, 1)
		tr.next = rtFunc(func(in *http.Request) (*http.Response, error) {
			seen <- in
			return d.RoundTrip(in)
		})
		resp, err := tr.RoundTrip(r)
		require.NoError(t, err)
		resp.Body.Close()
		in := <-seen
		require.Same(t, r.URL, in.URL)
		require.Equal(t, r.Header, in.Header)
		require.Equal(t, r.Context(), in.Context())
		require.Equal(t, r.Method, in.Method)
		require.Same(t, body, r.Body, "the caller's request keeps its own body")
		require.True(t, body.closed.Load())
		// Without a body, next sees the very same request.
		noBody, err := http.NewRequest(http.MethodGet, testURL, nil)
		require.NoError(t, err)
		resp, err = New(rtFunc(func(in *http.Request) (*http.Response, error) {
			seen <- in
			return response(in, http.StatusOK, nil), nil
		})).RoundTrip(noBody)
		require.NoError(t, err)
		resp.Body.Close()
		require.Same(t, noBody, <-seen)

		// Rejected: the body is closed by us and the request is unchanged.
		r, body = mk()
		ctx := r.Context()
		hdr := r.Header.Clone()
		resp, err = tr.RoundTrip(r)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		require.True(t, body.closed.Load())
		require.Equal(t, hdr, r.Header)
		require.Equal(t, ctx, r.Context())
		require.Equal(t, testURL, r.URL.String())
		require.Same(t, r.URL, resp.Request.URL, "the response's Request is a copy with a marked context")
	})
}

func TestMalformedRequestsTouchNoBreaker(t *testing.T) {
	tr := New(nil, WithMinRequests(1))
	for _, u := range []string{"ftp://api.test/x", "file:///etc/passwd", "/relative"} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.Nil(t, resp)
		require.Error(t, err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	req.Header["Bad Header"] = []string{"x"}
	tr.next = rtFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("invalid header") })
	for range 5 {
		_, err := tr.RoundTrip(req)
		require.Error(t, err)
	}
	require.Equal(t, StateClosed, tr.State("api.test"))
	_, err := tr.RoundTrip(nil)
	require.Error(t, err)
}

func TestNextBreakingTheContract(t *testing.T) {
	for name, url := range map[string]string{
		"through a breaker": testURL,
		"unroutable":        "ftp://api.test/file", // straight to next
	} {
		body := newBody("x")
		tr := New(rtFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: body}, errors.New("both")
		}))
		resp, err := tr.RoundTrip(mustReq(t, url))
		require.Nil(t, resp, name)
		require.Error(t, err, name)
		require.True(t, body.closed.Load(), name)
	}
	full := New(rtFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody}, errors.New("both")
	}), WithMaxBreakers(1))
	full.Trip("other.test", time.Minute) // the only breaker: none is made for api.test
	resp, err := full.RoundTrip(mustReq(t, testURL))
	require.Nil(t, resp, "no room for a breaker: straight to next")
	require.Error(t, err)

	tr := New(rtFunc(func(*http.Request) (*http.Response, error) { return nil, nil }))
	resp, err = tr.RoundTrip(mustReq(t, testURL))
	require.Nil(t, resp)
	require.ErrorContains(t, err, "nil response and a nil error")
}
