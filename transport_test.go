package httpbreaker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

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

func TestSyntheticRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d, WithOpenTimeout(2500*time.Millisecond))
		req, _ := http.NewRequest(http.MethodGet, testURL, nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Equal(t, "503 Service Unavailable", resp.Status)
		require.Equal(t, "3", resp.Header.Get("Retry-After"), "whole seconds, rounded up")
		require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "Stainless SDKs must not retry a refusal inside the call")
		body, _ := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, rejectBody, string(body))
		require.EqualValues(t, len(body), resp.ContentLength)
		require.NotNil(t, resp.Request)
		for _, leak := range []string{testKey, "api", "open", "circuit", "breaker", "500"} {
			require.NotContains(t, strings.ToLower(string(body)), leak)
		}
		// Retry-After is at least 1 even in the last instant.
		time.Sleep(2499 * time.Millisecond)
		resp, _ = get(t, tr, testURL)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
	})
}

func TestRejectionIsIdenticalForEveryBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newDep(500), WithMinRequests(1), WithJitter(0))
		var bodies []string
		for _, u := range []string{"http://a.test/", "http://secret-db.internal:5432/x", "https://b.test/y"} {
			_, _ = get(t, tr, u)
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, resp.Header.Write(&buf))
			b, _ := io.ReadAll(resp.Body)
			bodies = append(bodies, resp.Status+buf.String()+string(b))
		}
		require.Equal(t, bodies[0], bodies[1])
		require.Equal(t, bodies[0], bodies[2])
	})
}

func TestIsRejected(t *testing.T) {
	require.False(t, IsRejected(nil))
	req, _ := http.NewRequest(http.MethodGet, testURL, nil)
	require.False(t, IsRejected(&http.Response{StatusCode: 503, Request: req}), "a real 503")
	require.False(t, IsRejected(&http.Response{StatusCode: 503}))
	synthetic := rejection(req, time.Second)
	require.True(t, IsRejected(synthetic))
	synthetic.StatusCode = 200
	require.False(t, IsRejected(synthetic))
}

// TestIsRejectedNotForARetryOfARejection: a retry that builds its request
// from the refused one's context (resp.Request.Context()) and then gets a
// real 503 from the dependency must not read as refused.
func TestIsRejectedNotForARetryOfARejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newDep(http.StatusServiceUnavailable), WithMinRequests(100))
		tr.Trip(testKey, time.Minute)
		rejected, err := tr.RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		require.True(t, IsRejected(rejected))
		tr.Reset(testKey)
		ctx, cancel := context.WithTimeout(rejected.Request.Context(), time.Second)
		defer cancel()
		resp, err := getCtx(t, ctx, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.False(t, IsRejected(resp), "the dependency's own 503")
		copied := *rejected
		require.False(t, IsRejected(&copied), "a copy is not the response RoundTrip returned")
	})
}

func TestIsRejectedThroughClientWithTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d)
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := c.Get(testURL)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.True(t, IsRejected(resp))
		_, isNop := resp.Body.(interface {
			WriteTo(io.Writer) (int64, error)
		})
		_ = isNop // the client may have swapped the body; the mark survives
		// A real upstream 503 through the same client is not a rejection.
		tr2 := New(newDep(503), WithMinRequests(100))
		c2 := &http.Client{Transport: tr2, Timeout: 5 * time.Second}
		resp2, err := c2.Get(testURL)
		require.NoError(t, err)
		resp2.Body.Close()
		require.Equal(t, 503, resp2.StatusCode)
		require.False(t, IsRejected(resp2))
	})
}

func TestRejectAsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d, WithRejectAsError())
		resp, err := tr.RoundTrip(mustReq(t, testURL))
		require.Nil(t, resp)
		require.ErrorIs(t, err, ErrOpen)
		require.NotErrorIs(t, err, ErrBulkheadFull)
		var re *RejectedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, testKey, re.Key)
		require.Equal(t, StateOpen, re.State)
		require.Equal(t, time.Second, re.RetryAfter())
		require.Equal(t, time.Now().Add(time.Second), re.RetryAt)
		// The rejections of one open period share one error: no allocation.
		_, err2 := tr.RoundTrip(mustReq(t, testURL))
		require.Same(t, re, err2)
		time.Sleep(400 * time.Millisecond)
		require.Equal(t, 600*time.Millisecond, re.RetryAfter())
		require.Contains(t, re.Error(), "retry after 600ms")
		require.Contains(t, err.Error(), "circuit open")

		// Through http.Client the error is wrapped in *url.Error.
		_, err = (&http.Client{Transport: tr}).Get(testURL)
		require.ErrorIs(t, err, ErrOpen)
	})
}

func TestFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		var got error
		tr := tripped(t, d, WithFallback(func(r *http.Request, err error) (*http.Response, error) {
			got = err
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("cached")), Request: r}, nil
		}))
		before := d.calls.Load()
		resp, err := tr.RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		require.ErrorIs(t, got, ErrOpen)
		require.Equal(t, before, d.calls.Load())
		// The fallback is never called for the dependency's own answers.
		time.Sleep(time.Second)
		got = nil
		resp, err = tr.RoundTrip(mustReq(t, testURL)) // the probe fails: a real 500
		require.NoError(t, err)
		require.Equal(t, 500, resp.StatusCode)
		require.Nil(t, got)
	})
	synctest.Test(t, func(t *testing.T) {
		// A fallback that returns both: the response is closed, the error wins.
		body := newBody("x")
		tr := tripped(t, newDep(500), WithFallback(func(r *http.Request, err error) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: body}, errors.New("fallback failed")
		}))
		resp, err := tr.RoundTrip(mustReq(t, testURL))
		require.Nil(t, resp)
		require.EqualError(t, err, "fallback failed")
		require.True(t, body.closed.Load())
	})
	synctest.Test(t, func(t *testing.T) {
		// A fallback that returns neither: the default rejection.
		tr := tripped(t, newDep(500), WithFallback(func(*http.Request, error) (*http.Response, error) { return nil, nil }))
		resp, err := tr.RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
	})
}

func TestBulkhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.block()
		tr := New(d, WithMaxConcurrent(3), WithRejectAsError())
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, err := get(t, tr, testURL)
				require.NoError(t, err)
			})
		}
		synctest.Wait()
		_, err := get(t, tr, testURL)
		require.ErrorIs(t, err, ErrBulkheadFull)
		require.ErrorIs(t, err, ErrOpen)
		var re *RejectedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, StateClosed, re.State)
		// Another key has its own bulkhead.
		d2 := newDep(200)
		_, err = get(t, New(d2, WithMaxConcurrent(3)), "http://other.test/")
		require.NoError(t, err)
		d.release()
		wg.Wait()
		_, err = get(t, tr, testURL)
		require.NoError(t, err, "places are freed when calls finish")
		require.EqualValues(t, 4, d.calls.Load())
		require.Equal(t, StateClosed, tr.State(testKey), "bulkhead rejections do not count as failures")
	})
}

// fullBulkhead returns a Transport with a bulkhead of one, held by a call
// that d keeps in flight until d.release. Call it in a synctest bubble.
func fullBulkhead(t *testing.T) (*dep, *Transport) {
	d := newDep(200)
	d.block()
	tr := New(d, WithMaxConcurrent(1))
	go func() { _, _ = get(t, tr, testURL) }()
	synctest.Wait()
	return d, tr
}

func TestBulkheadRejectionLooksLikeAnyRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tr := fullBulkhead(t)
		resp, err := tr.RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, rejectBody, string(b))
		d.release()
	})
}

// TestOpenWithFullBulkheadTellsWhenItOpens: calls admitted before the
// breaker opened still fill its bulkhead; a caller refused then is told
// the open period, not to come back in a second.
func TestOpenWithFullBulkheadTellsWhenItOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tr := fullBulkhead(t)
		tr.Trip(testKey, time.Minute)
		resp, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		require.Equal(t, "60", resp.Header.Get("Retry-After"))
		tr.Reset(testKey)
		resp, err = get(t, tr, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "closed: the bulkhead refuses")
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		d.release()
	})
}

func TestDeadlineBudgetRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.hangUntilDone()
		tr := New(d, WithMinRequests(1))
		// 10ms left at admission: the caller's own budget ran out.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err := getCtx(t, ctx, tr, testURL)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, StateClosed, tr.State(testKey))
		require.Zero(t, tr.Snapshot()[0].Requests)
		// A full second: the dependency's fault.
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		_, err = getCtx(t, ctx, tr, testURL)
		cancel()
		require.Error(t, err)
		require.Equal(t, StateOpen, tr.State(testKey))
	})
}

// TestDeadlineSuccessCountsAtAdmission: a success through a request with
// a deadline counts at the time it was admitted (so the request path reads
// the clock once). One that outlived its bucket's turn in the window
// counts in the totals only, not in the bucket that took its place.
func TestDeadlineSuccessCountsAtAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			if d, err := time.ParseDuration(strings.TrimPrefix(r.URL.Path, "/v1/things/sleep/")); err == nil {
				time.Sleep(d)
			}
			return response(r, http.StatusOK, nil), nil
		})
		tr := New(next, WithWindow(10*time.Second)) // 1s buckets
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		call := func(path string) {
			_, err := getCtx(t, ctx, tr, testURL+path)
			require.NoError(t, err)
		}
		call("/") // t=0: bucket 0
		b := &tr.breakers.get(testKey).b

		time.Sleep(1500 * time.Millisecond)
		call("/sleep/700ms") // admitted at 1.5s, ends at 2.2s
		require.Equal(t, uint32(1), b.window().buckets[1].counts[OutcomeSuccess].Load())
		require.Zero(t, b.window().buckets[2].counts[OutcomeSuccess].Load())

		done := make(chan struct{})
		go func() { call("/sleep/15s"); close(done) }() // bucket 2, ends at 17.2s
		time.Sleep(10300 * time.Millisecond)
		call("/") // 12.5s: bucket 12 takes bucket 2's place
		<-done
		require.Equal(t, uint32(1), b.window().buckets[2].counts[OutcomeSuccess].Load(), "bucket 12 holds its own call only")
		require.Equal(t, int64(1), tr.Snapshot()[0].Requests, "in the window at 17.2s: the call at 12.5s")
		require.Equal(t, int64(4), b.window().totals()[OutcomeSuccess])
	})
}

func TestClientTimeoutIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.hangUntilDone()
		tr := New(d, WithMinRequests(2))
		c := &http.Client{Transport: tr, Timeout: 500 * time.Millisecond}
		for range 2 {
			_, err := c.Get(testURL)
			require.Error(t, err)
		}
		require.Equal(t, StateOpen, tr.State(testKey))
	})
}

func TestCallerCancellationIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.hangUntilDone()
		tr := New(d, WithMinRequests(1))
		for range 5 {
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() {
				time.Sleep(100 * time.Millisecond)
				cancel(errors.New("client hung up"))
			}()
			_, err := getCtx(t, ctx, tr, testURL)
			require.Error(t, err)
		}
		require.Equal(t, StateClosed, tr.State(testKey))
		require.Zero(t, tr.Snapshot()[0].Requests)
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

func TestTripAndReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		log := &transitionLog{}
		tr := New(d, onStateChange(log.hook), WithJitter(0.5), WithMaxOpenTimeout(10*time.Second))
		require.Equal(t, StateClosed, tr.State("never.test"), "unknown key")
		tr.Trip(testKey, time.Hour) // exactly d: no jitter, no cap
		require.Equal(t, StateOpen, tr.State(testKey))
		require.Equal(t, time.Hour, time.Until(tr.Snapshot()[0].RetryAt))
		resp, _ := get(t, tr, testURL)
		require.True(t, IsRejected(resp))
		require.Zero(t, d.calls.Load())
		tr.Reset(testKey)
		require.Equal(t, StateClosed, tr.State(testKey))
		_, _ = get(t, tr, testURL)
		require.EqualValues(t, 1, d.calls.Load())
		tr.Trip(testKey, 0)      // no-op
		tr.Reset("unknown.test") // no-op
		require.Equal(t, StateClosed, tr.State(testKey))
		require.Equal(t, []string{testKey + ": closed→open", testKey + ": open→closed"}, log.list())
	})
}

func TestOnStateChangeMayCallBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr *Transport
		var states []State
		var snaps int
		tr = New(newDep(500), WithMinRequests(1), onStateChange(func(key string, from, to State) {
			states = append(states, tr.State(key)) // would deadlock under a lock
			snaps += len(tr.Snapshot())
			if to == StateOpen {
				tr.Reset(key)
			}
		}))
		_, _ = get(t, tr, testURL)
		require.Equal(t, []State{StateOpen, StateClosed}, states)
		require.Equal(t, 2, snaps)
		require.Equal(t, StateClosed, tr.State(testKey))
	})
}

func TestLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
		d := newDep(500)
		tr := tripped(t, d, WithLogger(l), WithProbesToClose(1))
		time.Sleep(time.Second)
		d.set(200, nil)
		_, _ = get(t, tr, testURL)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 3)
		require.Contains(t, lines[0], "level=WARN")
		require.Contains(t, lines[0], "breaker=api.test")
		require.Contains(t, lines[0], "reason=failure_rate requests=1 failures=1 throttled=0")
		require.Contains(t, lines[1], "level=INFO")
		require.Contains(t, lines[1], "to=half-open")
		require.Contains(t, lines[1], "reason=open_elapsed")
		require.Contains(t, lines[2], "level=INFO")
		require.Contains(t, lines[2], "to=closed")
		require.Contains(t, lines[2], "reason=probes_succeeded requests=2 failures=1 throttled=0")
	})
}

func TestRejectedErrorWhenHalfOpenAndBulkhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d, WithRejectAsError(), WithMaxConcurrent(5))
		time.Sleep(time.Second)
		d.set(200, nil)
		d.block()
		go func() { _, _ = get(t, tr, testURL) }() // the probe hangs
		synctest.Wait()
		_, err := tr.RoundTrip(mustReq(t, testURL))
		var re *RejectedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, StateHalfOpen, re.State)
		require.Equal(t, time.Second, re.RetryAfter())
		require.Contains(t, re.Error(), "circuit half-open for api.test")
		d.release()
	})
}

// TestBreakerKeyDoesNotPinTheRequest: a breaker outlives the request that
// made it, so its key must not be a substring of that request's URL,
// which would keep the whole URL (query string included) in memory.
func TestBreakerKeyDoesNotPinTheRequest(t *testing.T) {
	raw := "http://api.test/v1/users?token=" + strings.Repeat("s", 4096)
	req, err := http.NewRequest(http.MethodGet, raw, nil)
	require.NoError(t, err)
	tr := New(newDep(http.StatusOK))
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	c := tr.breakers.get("api.test")
	require.NotNil(t, c)
	key := uintptr(unsafe.Pointer(unsafe.StringData(c.key())))
	url := uintptr(unsafe.Pointer(unsafe.StringData(raw)))
	host := uintptr(unsafe.Pointer(unsafe.StringData(req.URL.Host)))
	require.NotEqual(t, host, key)
	require.False(t, key >= url && key < url+uintptr(len(raw)), "the key points into the request's URL")
}

// TestEvictedWithCallsInFlightStillTrips: under cap pressure a closed
// breaker whose calls all hang has nothing in its window and is evicted
// for other hosts. When the hung calls time out, their failures must
// still count for their key: the key's breaker opens, and the next call
// to the hung dependency is refused.
func TestEvictedWithCallsInFlightStillTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hung atomic.Int64
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Host == "hung.test" {
				hung.Add(1)
				<-req.Context().Done()
				return nil, req.Context().Err()
			}
			return response(req, http.StatusOK, nil), nil
		})
		log := &transitionLog{}
		tr := New(next, WithMaxBreakers(2), WithMinRequests(20), WithJitter(0), onStateChange(log.hook))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { _, _ = getCtx(t, ctx, tr, "http://hung.test/") })
		}
		synctest.Wait()
		time.Sleep(11 * time.Second) // hung.test's breaker: older than a window, nothing counted
		for _, h := range []string{"a.test", "b.test"} {
			_, err := get(t, tr, "http://"+h+"/")
			require.NoError(t, err)
		}
		require.NotContains(t, keys(tr), "hung.test", "evicted with its calls in flight")
		wg.Wait() // the 20 calls time out
		require.Equal(t, StateOpen, tr.State("hung.test"))
		require.Equal(t, []string{"hung.test: closed→open"}, log.list())
		resp, err := get(t, tr, "http://hung.test/")
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "the hung dependency is protected")
		require.EqualValues(t, 20, hung.Load())
	})
}
