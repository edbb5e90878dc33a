package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/httpbreaker/httpbreaker"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The bounds below hold for sequential logical calls against a dependency
// that fails every request, with MinRequests ≤ 1+RetryMax as here:
//
//   - (a) inside: the breaker sees one failure per logical call, so it
//     trips after exactly MinRequests logical calls, each of which cost
//     the dependency 1+RetryMax requests: MinRequests×(1+RetryMax) in all.
//     (With c concurrent callers, up to (MinRequests+c−1)×(1+RetryMax).)
//   - (b), (c) outside: the breaker sees every attempt and trips at the
//     MinRequests-th, which is the last attempt of the first logical call:
//     the dependency gets exactly MinRequests requests. (With c concurrent
//     callers, up to MinRequests+c−1.)
//   - After the trip nothing reaches the dependency in any placement; what
//     differs is what the callers go through.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	results, err := run(context.Background(), &out)
	require.NoError(t, err)
	require.Len(t, results, 3)
	a, b, c := results[0], results[1], results[2]
	attemptsPerCall := int64(1 + retryMax)

	// (a) retries inside the breaker.
	require.Equal(t, int64(minRequests)*attemptsPerCall, a.DependencyCalls)
	require.Equal(t, a.DependencyCalls, a.Attempts, "every attempt below the breaker reaches the dependency")
	require.Equal(t, minRequests, a.TrippedAfter)
	require.Zero(t, a.AttemptsAfterTrip, "a rejected call never reaches the retrying RoundTripper")
	require.Equal(t, logicalCalls-minRequests, a.Rejected)
	require.Equal(t, "rejected by breaker: synthetic 503, Retry-After: 30", a.Last)
	require.Less(t, a.MaxWaitAfterTrip, naiveBudget/2, "rejections are immediate")

	// (b) retries outside, breaker-aware policy.
	require.Equal(t, int64(minRequests), b.DependencyCalls)
	require.Equal(t, 1, b.TrippedAfter)
	require.Equal(t, int64(logicalCalls-1), b.AttemptsAfterTrip, "one attempt per call after the trip")
	require.Zero(t, b.RetriesAfterTrip, "the policy never retries a rejection")
	require.Equal(t, attemptsPerCall+int64(logicalCalls-1), b.Attempts)
	require.Equal(t, logicalCalls-1, b.Rejected)
	require.Equal(t, "rejected by breaker: synthetic 503, Retry-After: 30", b.Last)
	require.Less(t, b.MaxWaitAfterTrip, naiveBudget/2, "rejections are immediate")
	require.Equal(t, retryWaitMax, b.LongestBackoff, "only the dependency's own 503s were backed off")

	// (c) retries outside, retryablehttp's defaults: the dependency is
	// just as protected, but every caller after the trip sleeps on the
	// breaker's Retry-After until its deadline and never sees the
	// rejection.
	require.Equal(t, int64(minRequests), c.DependencyCalls)
	require.Equal(t, 1, c.TrippedAfter)
	require.Zero(t, c.Rejected)
	require.Equal(t, "error: context deadline exceeded", c.Last)
	require.GreaterOrEqual(t, c.WaitAfterTrip, time.Duration(logicalCalls-1)*naiveBudget)
	require.GreaterOrEqual(t, c.LongestBackoff, openTimeout-time.Second)
	require.LessOrEqual(t, c.LongestBackoff, openTimeout)

	// The printed table carries the same numbers.
	lines := strings.Split(out.String(), "\n")
	requireRow(t, lines, "(a) retries inside the breaker", "16", "16", "4", "0 (0)", "6")
	requireRow(t, lines, "(b) retries outside, breaker-aware", "4", "13", "1", "9 (0)", "9")
	requireRow(t, lines, "(c) retries outside, default policy", "4", "13", "1", "9 (0)", "0")
	require.Contains(t, out.String(), "(c) retries outside, default policy: last call: error: context deadline exceeded; longest backoff asked for: 30s")
}

// requireRow finds the table row starting with name and checks its first
// numeric columns.
func requireRow(t *testing.T, lines []string, name string, cols ...string) {
	t.Helper()
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, name); ok && !strings.Contains(rest, ":") {
			fields := strings.Fields(rest)
			// "0 (0)" is two fields.
			joined := strings.Join(fields, " ")
			require.True(t, strings.HasPrefix(joined, strings.Join(cols, " ")), "row %q: got %q", name, joined)
			return
		}
	}
	t.Fatalf("no row %q in output", name)
}

// tripped returns a Transport whose breaker for rejected.invalid is open:
// requests there are rejected without touching the network.
func tripped(opts ...httpbreaker.Option) *httpbreaker.Transport {
	tr := httpbreaker.New(http.NewFileTransport(http.Dir(".")), opts...)
	tr.Trip("rejected.invalid", time.Minute)
	return tr
}

func TestBreakerAwarePolicy(t *testing.T) {
	ctx := context.Background()
	rc := retryablehttp.NewClient()
	rc.RetryWaitMin, rc.RetryWaitMax = retryWaitMin, retryWaitMax
	breakerAware(rc)

	// The synthetic 503.
	req, err := http.NewRequest(http.MethodGet, "http://rejected.invalid/x", nil)
	require.NoError(t, err)
	resp, err := tripped().RoundTrip(req)
	require.NoError(t, err)
	require.True(t, httpbreaker.IsRejected(resp))
	retry, err := rc.CheckRetry(ctx, resp, nil)
	require.False(t, retry)
	require.NoError(t, err)

	// WithRejectAsError.
	_, rerr := tripped(httpbreaker.WithRejectAsError()).RoundTrip(req)
	require.ErrorIs(t, rerr, httpbreaker.ErrOpen)
	retry, err = rc.CheckRetry(ctx, nil, rerr)
	require.False(t, retry)
	require.ErrorIs(t, err, httpbreaker.ErrOpen)

	// A real 503 without Retry-After is retried, with exponential backoff.
	real503 := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}}
	retry, err = rc.CheckRetry(ctx, real503, nil)
	require.True(t, retry)
	require.NoError(t, err)
	require.Equal(t, 2*retryWaitMin, rc.Backoff(retryWaitMin, retryWaitMax, 1, real503))

	// One that asks for a wait within RetryWaitMax gets exactly that.
	real503.Header.Set("Retry-After", "0")
	retry, _ = rc.CheckRetry(ctx, real503, nil)
	require.True(t, retry)
	require.Zero(t, rc.Backoff(retryWaitMin, retryWaitMax, 1, real503))

	// One that asks for longer than the caller will wait is not retried.
	real503.Header.Set("Retry-After", "2")
	retry, err = rc.CheckRetry(ctx, real503, nil)
	require.False(t, retry)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, rc.Backoff(retryWaitMin, retryWaitMax, 1, real503), "Backoff honours Retry-After as given")

	// A cancelled caller is not retried either (DefaultRetryPolicy).
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	retry, err = rc.CheckRetry(cctx, nil, errors.New("boom"))
	require.False(t, retry)
	require.ErrorIs(t, err, context.Canceled)
}

// TestBreakerAwareClient runs a tripped breaker under a breaker-aware
// retryablehttp.Client in both rejection forms: one attempt, no retry,
// and the caller can tell it was the breaker.
func TestBreakerAwareClient(t *testing.T) {
	for _, asError := range []bool{false, true} {
		var opts []httpbreaker.Option
		if asError {
			opts = append(opts, httpbreaker.WithRejectAsError())
		}
		rc, attempts := countingClient(tripped(opts...))
		breakerAware(rc)

		resp, err := rc.Get("http://rejected.invalid/x")
		desc, rejected := describe(resp, err)
		require.True(t, rejected, desc)
		require.Equal(t, 1, *attempts, desc)
		if asError {
			require.ErrorIs(t, err, httpbreaker.ErrOpen)
			require.Contains(t, desc, "giving up after 1 attempt(s)")
		} else {
			require.NoError(t, err)
			require.Equal(t, "rejected by breaker: synthetic 503, Retry-After: 60", desc)
		}
	}
}

// TestCheckRetryOneLiner is the README's recipe, on a client at
// retryablehttp's default retry settings (RetryMax 4; only the waits are
// shortened): a refusal is one attempt in both rejection forms, and a
// real 503 keeps all five.
func TestCheckRetryOneLiner(t *testing.T) {
	for _, asError := range []bool{false, true} {
		var opts []httpbreaker.Option
		if asError {
			opts = append(opts, httpbreaker.WithRejectAsError())
		}
		rc, attempts := countingClient(tripped(opts...))
		rc.CheckRetry = httpbreaker.CheckRetry(retryablehttp.DefaultRetryPolicy)

		resp, err := rc.Get("http://rejected.invalid/x")
		desc, rejected := describe(resp, err)
		require.True(t, rejected, desc)
		require.Equal(t, 1, *attempts, desc)
	}

	dep := newDeadDependency()
	defer dep.Close()
	tr := httpbreaker.New(nil, httpbreaker.WithMinRequests(100))
	defer tr.CloseIdleConnections()
	rc, attempts := countingClient(tr)
	rc.CheckRetry = httpbreaker.CheckRetry(retryablehttp.DefaultRetryPolicy)
	_, err := rc.Get(dep.URL + "/v1/thing")
	require.Error(t, err, "giving up after the retries")
	require.Equal(t, 1+4, *attempts, "retryablehttp's default RetryMax kept")
}

// countingClient returns a quiet retryablehttp client at its default
// RetryMax, with the scenario's short waits, sending through tr, and the
// count of its attempts.
func countingClient(tr http.RoundTripper) (*retryablehttp.Client, *int) {
	attempts := new(int)
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.RetryWaitMin, rc.RetryWaitMax = retryWaitMin, retryWaitMax
	rc.HTTPClient = &http.Client{Transport: tr}
	rc.RequestLogHook = func(retryablehttp.Logger, *http.Request, int) { *attempts++ }
	return rc, attempts
}
