package httpbreaker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRejectedErrorIsNotRetryable holds the refusal error to the question
// aws-sdk-go-v2's default retryer asks first: a refused call is final.
func TestRejectedErrorIsNotRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := tripped(t, newDep(500), WithRejectAsError())
		req, _ := http.NewRequest(http.MethodGet, testURL, nil)
		resp, err := tr.RoundTrip(req)
		require.Nil(t, resp)
		var rej *RejectedError
		require.ErrorAs(t, err, &rej)
		var retryable interface{ RetryableError() bool }
		require.True(t, errors.As(err, &retryable), "the error answers RetryableError")
		require.False(t, retryable.RetryableError())
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
		require.Equal(t, time.Second, time.Until(re.RetryAt))
		require.Equal(t, time.Now().Add(time.Second), re.RetryAt)
		// The rejections of one open period share one error: no allocation.
		_, err2 := tr.RoundTrip(mustReq(t, testURL))
		require.Same(t, re, err2)
		time.Sleep(400 * time.Millisecond)
		require.Equal(t, 600*time.Millisecond, time.Until(re.RetryAt))
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
		require.Equal(t, time.Second, time.Until(re.RetryAt))
		require.Contains(t, re.Error(), "circuit half-open for api.test")
		d.release()
	})
}
