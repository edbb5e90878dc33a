package httpbreaker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRejectedErrorIsNonRetriableForAzure holds the refusal error to the
// question azcore's retry policy asks, through the *url.Error that
// http.Client wraps it in.
func TestRejectedErrorIsNonRetriableForAzure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := tripped(t, newDep(500), WithRejectAsError())
		_, err := (&http.Client{Transport: tr}).Get(testURL)
		var ue *url.Error
		require.ErrorAs(t, err, &ue)
		var nre interface {
			error
			NonRetriable()
		}
		require.True(t, errors.As(err, &nre), "the error answers azcore's errorinfo.NonRetriable")
		var rej *RejectedError
		require.ErrorAs(t, nre, &rej)
	})
}

// wireForm is a response's status, headers and body as a proxy would
// pass them on.
func wireForm(t *testing.T, resp *http.Response) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, resp.Header.Write(&buf))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, len(b), resp.ContentLength)
	return resp.Status + "\n" + buf.String() + "\n" + string(b)
}

func TestJSONRejectionIsTheSyntheticRejectionInStripesShape(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := tripped(t, newDep(500), WithOpenTimeout(2500*time.Millisecond),
			WithPolicy(testKey, WithFallback(JSONRejection)))
		resp, err := tr.RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "marked as the text one is")
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Equal(t, "503 Service Unavailable", resp.Status)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Equal(t, "3", resp.Header.Get("Retry-After"), "whole seconds to the probe, rounded up")
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
		require.Len(t, resp.Header, 4)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var body struct {
			Error struct{ Type, Code, Message string }
		}
		require.NoError(t, json.Unmarshal(b, &body))
		require.Equal(t, "api_error", body.Error.Type)
		require.Equal(t, JSONRejectionCode, body.Error.Code)
		require.Equal(t, strings.TrimSpace(rejectBody), body.Error.Message)
		for _, leak := range []string{testKey, "open", "circuit", "breaker", "500", "half"} {
			require.NotContains(t, strings.ToLower(string(b)), leak)
		}

		// Without the policy a breaker keeps the text body.
		tr.Trip("other.test", time.Minute)
		other, err := tr.RoundTrip(mustReq(t, "http://other.test/"))
		require.NoError(t, err)
		require.Equal(t, "text/plain; charset=utf-8", other.Header.Get("Content-Type"))
	})
}

// TestJSONRejectionIsIdenticalForEveryBreaker: open or bulkhead, one key
// or another, the JSON refusal reads the same on the wire.
func TestJSONRejectionIsIdenticalForEveryBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
			WithPolicy("*.test", WithFallback(JSONRejection)),
			WithPolicy("full.test", WithMaxConcurrent(1)))
		var forms []string
		for _, u := range []string{"http://a.test/", "http://secret-db.test:5432/x"} {
			_, _ = get(t, tr, u)
			resp, err := tr.RoundTrip(mustReq(t, u))
			require.NoError(t, err)
			forms = append(forms, wireForm(t, resp))
		}
		// A bulkhead refusal: one call holds the only place.
		d.set(200, nil)
		d.block()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = get(t, tr, "http://full.test/")
		}()
		synctest.Wait()
		resp, err := tr.RoundTrip(mustReq(t, "http://full.test/"))
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		forms = append(forms, wireForm(t, resp))
		d.release()
		<-done

		require.Equal(t, forms[0], forms[1])
		require.Equal(t, forms[0], forms[2])
	})
}

func TestJSONRejectionKeepsItsMarkThroughClientTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := tripped(t, newDep(500), WithFallback(JSONRejection))
		resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Get(testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, jsonRejectBody, string(b))
	})
}

func TestJSONRejectionWithoutRejectedError(t *testing.T) {
	resp, err := JSONRejection(mustReq(t, testURL), errors.New("not a refusal"))
	require.NoError(t, err)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.True(t, IsRejected(resp))
}

func TestCheckRetryNeverRetriesARefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		asked := 0
		policy := CheckRetry(func(context.Context, *http.Response, error) (bool, error) {
			asked++
			return true, nil
		})
		ctx := context.Background()

		resp, err := tripped(t, newDep(500)).RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		retry, err := policy(ctx, resp, nil)
		require.False(t, retry)
		require.NoError(t, err, "the caller gets the 503 itself")

		_, rerr := tripped(t, newDep(500), WithRejectAsError()).RoundTrip(mustReq(t, testURL))
		require.ErrorIs(t, rerr, ErrOpen)
		retry, err = policy(ctx, nil, &url.Error{Op: "Get", URL: testURL, Err: rerr})
		require.False(t, retry)
		require.ErrorIs(t, err, ErrOpen)
		require.Zero(t, asked, "a refusal never reaches the wrapped policy")

		// The dependency's own 503 and errors are the policy's to decide.
		retry, err = policy(ctx, &http.Response{StatusCode: http.StatusServiceUnavailable, Request: mustReq(t, testURL)}, nil)
		require.True(t, retry)
		require.NoError(t, err)
		retry, _ = policy(ctx, nil, errors.New("connection reset"))
		require.True(t, retry)
		require.Equal(t, 2, asked)
	})
}

func TestCheckRetryNilPolicyPanics(t *testing.T) {
	require.PanicsWithValue(t, "httpbreaker: CheckRetry: nil policy", func() { CheckRetry(nil) })
}
