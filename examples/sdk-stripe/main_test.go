package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v85"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stripeSleeps is the least stripe-go sleeps before its default two
// retries: 500ms, then 750ms (1s less up to 25% jitter).
const stripeSleeps = 1250 * time.Millisecond

// defaultMinRequests is httpbreaker's default WithMinRequests.
const defaultMinRequests = 20

func TestRun(t *testing.T) {
	var out bytes.Buffer
	res, err := run(context.Background(), &out)
	require.NoError(t, err)
	t.Log("\n" + out.String())

	// The broken customer: MinRequests calls reach Stripe and fail, then
	// the breaker rejects, for every customer: one breaker for the host.
	require.Len(t, res.Broken, minRequests+2)
	for i, d := range res.Broken {
		if i < minRequests {
			require.Equal(t, kindStripeError+" 500 api_error", d, "call %d", i+1)
		} else {
			require.Equal(t, kindRejected+" (error)", d, "call %d", i+1)
		}
	}
	require.Equal(t, kindRejected+" (error)", res.OK)
	require.Equal(t, minRequests, res.BrokenHits)
	require.Zero(t, res.OKHits)
	require.Less(t, res.RejectedMax, 50*time.Millisecond)

	// A call on an open breaker: nothing reaches Stripe in any mode.
	require.Len(t, res.Costs, 4)
	for _, c := range res.Costs {
		name := fmt.Sprintf("%s/retries=%d", c.mode(), c.Retries)
		require.Zero(t, c.Reached, name)
		require.Equal(t, c.AsError, c.ErrorsIs, "%s: errors.Is(err, ErrOpen)", name)
		if c.Retries == 0 {
			require.Equal(t, 1, c.Attempts, name)
			require.Less(t, c.Took, 50*time.Millisecond, name)
		} else {
			// stripe-go retries the rejection in both modes: as a
			// transport error, or as a response that is not Stripe's JSON.
			require.Equal(t, 3, c.Attempts, name)
			require.GreaterOrEqual(t, c.Took, stripeSleeps, name)
			require.Less(t, c.Took, 5*time.Second, name)
		}
		if c.AsError {
			require.Equal(t, "*url.Error", c.Type, name)
		} else {
			require.Equal(t, "*errors.errorString", c.Type, name)
			require.Contains(t, c.Text, "Couldn't deserialize JSON (response status: 503", name)
		}
	}
	// In 503 mode a rejection is the same error type as a proxy's HTML
	// 503, which stripe-go retries the same way; Stripe's own JSON 500 is
	// not retried at all.
	require.Equal(t, res.Costs[0].Type, res.Proxy503.Type)
	require.Equal(t, 3, res.Proxy503.Attempts)
	require.Equal(t, 3, res.Proxy503.Reached)
	require.Equal(t, kindStripeError+" 500 api_error", res.Stripe500.Desc)
	require.Equal(t, 1, res.Stripe500.Attempts)
	require.Equal(t, 1, res.Stripe500.Reached)

	// The recipe: one attempt on an open breaker, recognised, in well
	// under stripe-go's first retry sleep; a proxy's 503 still retried.
	t.Logf("refused call through the recipe: %s", res.Recipe.Took)
	require.True(t, res.Recipe.Refused, res.Recipe.Text)
	require.Equal(t, kindRejected+" (Stripe-shaped 503)", res.Recipe.Desc)
	require.Equal(t, 1, res.Recipe.Attempts)
	require.Zero(t, res.Recipe.Reached)
	require.Less(t, res.Recipe.Took, 50*time.Millisecond)
	require.Equal(t, "*stripe.Error", res.Recipe.Type)
	require.False(t, res.RecipeProxy503.Refused)
	require.Equal(t, 3, res.RecipeProxy503.Attempts)
	require.Equal(t, 3, res.RecipeProxy503.Reached)

	// A hang under stripe-go's retries and a client timeout: one call is
	// 3 failures spread over more than 1.25s+3×300ms, so one caller after
	// another adds fewer than 14 outcomes to the default 10s window: never
	// the default MinRequests. With MinRequests 3 it trips.
	require.Equal(t, 1, res.Hang.Calls)
	require.Equal(t, 3, res.Hang.Attempts)
	require.GreaterOrEqual(t, res.Hang.Took, stripeSleeps+3*hangTimeout)
	require.Equal(t, "open", res.Hang.State)
	require.Less(t, res.Hang.perWindow(10*time.Second), float64(defaultMinRequests))
	// A call timeout instead: stripe-go does not retry once the call's
	// context is done, so each call is one failure of 300ms.
	require.Equal(t, 3, res.HangCallTimeout.Calls)
	require.Equal(t, 3, res.HangCallTimeout.Attempts)
	require.GreaterOrEqual(t, res.HangCallTimeout.Took, 3*hangTimeout)
	require.Less(t, res.HangCallTimeout.Took, stripeSleeps, "no stripe-go sleep")
	require.Equal(t, "open", res.HangCallTimeout.State)
	require.Greater(t, res.HangCallTimeout.perWindow(10*time.Second), float64(defaultMinRequests))

	// Retries at the call site: through a proxy's 503 with one
	// Idempotency-Key; never on an open breaker.
	require.Equal(t, CallSiteResult{How: res.CallSite.How, Desc: kindOK, Attempts: 2, Took: res.CallSite.Took, Reached: 2, DistinctKeys: 1}, res.CallSite)
	require.Equal(t, kindRejected+" (error)", res.CallSiteRejected.Desc)
	require.Equal(t, 1, res.CallSiteRejected.Attempts)
	require.Zero(t, res.CallSiteRejected.Reached)
	require.Less(t, res.CallSiteRejected.Took, 50*time.Millisecond)

	text := out.String()
	require.Contains(t, text, "Retrieve(cus_broken) call 5: rejected by breaker (error)\n")
	require.Contains(t, text, "requests that reached Stripe: cus_broken=4 cus_ok=0;")
}

// TestKey checks the key HostKey gives stripe-go's API requests, against
// a RoundTripper that answers in place of api.stripe.com (nothing leaves
// the machine).
func TestKey(t *testing.T) {
	var hosts []string
	stub := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		hosts = append(hosts, httpbreaker.HostKey(req))
		return &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Content-Type": {"application/json"}},
			Body:       io.NopCloser(strings.NewReader(`{"id":"cus_1","object":"customer"}`)),
			Request:    req,
		}, nil
	})
	tr := httpbreaker.New(stub, httpbreaker.WithRejectAsError())
	sc := newStripeClient(apiKey, tr, 0, func(cfg *stripe.BackendConfig) {
		cfg.LeveledLogger = &stripe.LeveledLogger{Level: stripe.LevelNull}
	})
	ctx := context.Background()
	_, err := sc.V1Customers.Retrieve(ctx, "cus_1", nil)
	require.NoError(t, err)
	require.Equal(t, []string{"api.stripe.com"}, hosts)

	tr.Trip("api.stripe.com", time.Minute)
	_, err = sc.V1Customers.Retrieve(ctx, "cus_1", nil)
	require.ErrorIs(t, err, httpbreaker.ErrOpen)
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	require.Len(t, hosts, 1, "the rejected call reached the stub")
}

func TestRetryable(t *testing.T) {
	ctx := context.Background()
	require.False(t, retryable(ctx, &url.Error{Op: "Get", URL: "https://api.stripe.com", Err: httpbreaker.ErrOpen}))
	require.False(t, retryable(ctx, &stripe.Error{HTTPStatusCode: 500, Type: stripe.ErrorTypeAPI}))
	require.False(t, retryable(ctx, &stripe.Error{HTTPStatusCode: 429, Code: stripe.ErrorCodeRateLimit}))
	require.True(t, retryable(ctx, &stripe.Error{HTTPStatusCode: 429, Code: stripe.ErrorCodeLockTimeout}))
	require.True(t, retryable(ctx, errors.New("Couldn't deserialize JSON (response status: 503, ...)")))
	require.True(t, retryable(ctx, &url.Error{Op: "Get", URL: "https://api.stripe.com", Err: errors.New("connection reset")}))

	done, cancel := context.WithCancel(ctx)
	cancel()
	require.False(t, retryable(done, errors.New("connection reset")))
}

func TestCallWithRetriesStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := callWithRetries(ctx, 5, time.Hour, func() error {
		calls++
		cancel()
		return errors.New("connection reset")
	})
	require.EqualError(t, err, "connection reset")
	require.Equal(t, 1, calls)
}

// TestRecipeOnStripesHost runs the recipe as an application would, for
// api.stripe.com, against a RoundTripper that answers in its place
// (nothing leaves the machine): with stripe-go's default retries, a
// refused call is one attempt, recognised; a call to another host keeps
// the text 503.
func TestRecipeOnStripesHost(t *testing.T) {
	var hosts []string
	stub := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		hosts = append(hosts, req.URL.Host)
		return &http.Response{StatusCode: http.StatusInternalServerError, Body: http.NoBody, Request: req}, nil
	})
	tr := httpbreaker.New(stub, httpbreaker.WithPolicy(stripeHost, httpbreaker.WithFallback(httpbreaker.JSONRejection)))
	tr.Trip(stripeHost, time.Minute)
	var attempts attemptCounter
	sc := newStripeClient(apiKey, tr, stripe.DefaultMaxNetworkRetries, attempts.count, func(cfg *stripe.BackendConfig) {
		cfg.LeveledLogger = &stripe.LeveledLogger{Level: stripe.LevelNull}
	})
	// The client's first call pays for stripe-go's one-time set-up (its
	// user agent runs uname): time the second.
	_, err := sc.V1Customers.Retrieve(context.Background(), "cus_1", nil)
	require.True(t, isRefused(err), "%v", err)
	start := time.Now()
	_, err = sc.V1Customers.Retrieve(context.Background(), "cus_1", nil)
	took := time.Since(start)
	t.Logf("refused call to api.stripe.com: %s", took)
	require.True(t, isRefused(err), "%v", err)
	require.EqualValues(t, 2, attempts.n.Load(), "one attempt per call")
	require.Empty(t, hosts)
	require.Less(t, took, 50*time.Millisecond)

	// A call of the v2 API, whose errors stripe-go reads into a
	// *stripe.V2RawError, is one attempt too, and recognised.
	_, err = sc.V2CoreEvents.Retrieve(context.Background(), "evt_1", nil)
	var raw *stripe.V2RawError
	require.ErrorAs(t, err, &raw)
	require.True(t, isRefused(err), "%v", err)
	require.EqualValues(t, 3, attempts.n.Load(), "one attempt")
	require.Empty(t, hosts)

	tr.Trip("example.test", time.Minute)
	resp, err := tr.RoundTrip(httptestRequest(t, "https://example.test/"))
	require.NoError(t, err)
	require.True(t, httpbreaker.IsRejected(resp))
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
}

func httptestRequest(t *testing.T, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	return req
}

func TestIsRefusedIsFalseForStripesOwnErrors(t *testing.T) {
	require.False(t, isRefused(nil))
	require.False(t, isRefused(&stripe.Error{HTTPStatusCode: 503, Type: stripe.ErrorTypeAPI}))
	require.False(t, isRefused(&stripe.V2RawError{HTTPStatusCode: 503, Code: "rate_limited"}))
	require.False(t, isRefused(errors.New("Couldn't deserialize JSON (response status: 503, ...)")))
}
