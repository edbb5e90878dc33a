// Command retry compares where retries go relative to the breaker, using
// hashicorp/go-retryablehttp against a dead dependency on 127.0.0.1 that
// answers every request with 503:
//
//	(a) retries inside the breaker:  httpbreaker.New(&retryablehttp.RoundTripper{...})
//	    The breaker sees one outcome per logical call, after all its
//	    retries. Every call made before the breaker trips costs the
//	    dependency 1+RetryMax requests.
//	(b) retries outside the breaker: retryablehttp.Client{HTTPClient: {Transport: breaker}}
//	    with a breaker-aware CheckRetry and Backoff (see breakerAware). The
//	    breaker sees every attempt, trips after MinRequests of them, and the
//	    policy stops at the first rejection instead of retrying it.
//	(c) retries outside with retryablehttp's defaults: the trap. The
//	    default policy retries the synthetic 503 like any other 503, and
//	    DefaultBackoff sleeps for its Retry-After (the rest of the open
//	    period, here 30s; RetryWaitMax does not cap it), so every caller
//	    after the trip waits out its whole deadline for nothing.
//
// Each placement makes the same logical calls, one after another, and the
// program prints how many requests reached the dependency and how long
// the callers waited. Run it with: go run . (from examples/retry).
//
// Which to choose: see the README's "With retries".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/httpbreaker/httpbreaker"
)

// The scenario. Waits are kept to a few milliseconds so that the program
// (and its test) run in about a second.
const (
	logicalCalls = 10
	minRequests  = 4 // breaker: WithMinRequests
	openTimeout  = 30 * time.Second
	retryMax     = 3 // retryablehttp: 1+3 attempts per logical call
	retryWaitMin = 1 * time.Millisecond
	retryWaitMax = 4 * time.Millisecond
	// naiveBudget is the deadline of each logical call in placement (c),
	// without which its callers would sleep 30s per retry.
	naiveBudget = 100 * time.Millisecond
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "retry:", err)
		os.Exit(1)
	}
}

// Result is what one placement observed.
type Result struct {
	Name string
	// DependencyCalls is the number of requests that reached the dead
	// dependency.
	DependencyCalls int64
	// Attempts is the number of attempts retryablehttp made (for (a),
	// below the breaker: the same as DependencyCalls).
	Attempts int64
	// TrippedAfter is the number of logical calls that had started before
	// the breaker was first seen open.
	TrippedAfter int
	// AttemptsAfterTrip is the number of attempts made by logical calls
	// that started with the breaker open, and RetriesAfterTrip those of
	// them beyond each call's first.
	AttemptsAfterTrip, RetriesAfterTrip int64
	// Rejected counts logical calls that ended in a breaker rejection the
	// caller could recognise (IsRejected or ErrOpen).
	Rejected int
	// Wait is the total time callers waited; WaitAfterTrip the part of it
	// spent in calls that started with the breaker open, and
	// MaxWaitAfterTrip the longest such call.
	Wait, WaitAfterTrip, MaxWaitAfterTrip time.Duration
	// LongestBackoff is the longest wait the Backoff asked for.
	LongestBackoff time.Duration
	// Last describes what the last logical call returned.
	Last string
}

// run runs the three placements against one dead dependency and prints
// a table to w.
func run(ctx context.Context, w io.Writer) ([]Result, error) {
	dep := newDeadDependency()
	defer dep.Close()

	fmt.Fprintf(w, "dead dependency: every request gets 503; %d logical calls per placement\n", logicalCalls)
	fmt.Fprintf(w, "breaker: MinRequests=%d, open %v; retryablehttp: RetryMax=%d, waits %v..%v\n\n",
		minRequests, openTimeout, retryMax, retryWaitMin, retryWaitMax)

	results := []Result{
		inside(ctx, dep),
		outside(ctx, dep, true),
		outside(ctx, dep, false),
	}

	fmt.Fprintf(w, "%-36s %10s %8s %8s %15s %8s %11s %21s\n",
		"placement", "dependency", "attempts", "tripped", "attempts after", "rejected", "caller wait", "wait after trip")
	fmt.Fprintf(w, "%-36s %10s %8s %8s %15s %8s %11s %21s\n",
		"", "calls", "", "after", "trip (retries)", "calls", "(total)", "(total / longest)")
	for _, r := range results {
		fmt.Fprintf(w, "%-36s %10d %8d %8d %15s %8d %11s %21s\n",
			r.Name, r.DependencyCalls, r.Attempts, r.TrippedAfter,
			fmt.Sprintf("%d (%d)", r.AttemptsAfterTrip, r.RetriesAfterTrip),
			r.Rejected, roundDuration(r.Wait),
			roundDuration(r.WaitAfterTrip)+" / "+roundDuration(r.MaxWaitAfterTrip))
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%s: last call: %s; longest backoff asked for: %v\n", r.Name, r.Last, r.LongestBackoff)
	}
	return results, nil
}

// roundDuration rounds d for the table: to 1ms from 10ms up, else to 10µs.
func roundDuration(d time.Duration) string {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Microsecond).String()
}

// breakerOptions are the same for every placement; each gets its own
// Transport, so each starts closed.
func breakerOptions() []httpbreaker.Option {
	return []httpbreaker.Option{
		httpbreaker.WithMinRequests(minRequests),
		httpbreaker.WithOpenTimeout(openTimeout),
		httpbreaker.WithJitter(0),
	}
}

// newRetryClient returns a quiet retryablehttp client with the scenario's
// retry settings, counting its attempts.
func newRetryClient(attempts *atomic.Int64) *retryablehttp.Client {
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.RetryMax = retryMax
	rc.RetryWaitMin = retryWaitMin
	rc.RetryWaitMax = retryWaitMax
	rc.RequestLogHook = func(retryablehttp.Logger, *http.Request, int) { attempts.Add(1) }
	return rc
}

// recordBackoff wraps b to remember the longest wait it returns.
func recordBackoff(b retryablehttp.Backoff, longest *atomic.Int64) retryablehttp.Backoff {
	return func(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
		d := b(minWait, maxWait, attempt, resp)
		for {
			old := longest.Load()
			if int64(d) <= old || longest.CompareAndSwap(old, int64(d)) {
				return d
			}
		}
	}
}

// inside is placement (a): breaker(retries(network)).
func inside(ctx context.Context, dep *deadDependency) Result {
	var attempts, longest atomic.Int64
	rc := newRetryClient(&attempts)
	rc.Backoff = recordBackoff(rc.Backoff, &longest)
	// retryablehttp's own pooled client does the network calls.
	defer rc.HTTPClient.CloseIdleConnections()

	tr := httpbreaker.New(&retryablehttp.RoundTripper{Client: rc}, breakerOptions()...)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	call := func(ctx context.Context) (string, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, dep.URL+"/v1/thing", nil)
		if err != nil {
			return err.Error(), false
		}
		resp, err := client.Do(req)
		return describe(resp, err)
	}
	r := measure(ctx, "(a) retries inside the breaker", dep, tr, &attempts, call)
	r.LongestBackoff = time.Duration(longest.Load())
	return r
}

// outside is placement (b) with aware set, (c) without:
// retries(breaker(network)).
func outside(ctx context.Context, dep *deadDependency, aware bool) Result {
	var attempts, longest atomic.Int64
	tr := httpbreaker.New(nil, breakerOptions()...)
	defer tr.CloseIdleConnections()

	rc := newRetryClient(&attempts)
	rc.HTTPClient = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	name := "(c) retries outside, default policy"
	budget := naiveBudget
	if aware {
		breakerAware(rc)
		name = "(b) retries outside, breaker-aware"
		budget = 10 * time.Second
	}
	rc.Backoff = recordBackoff(rc.Backoff, &longest)

	call := func(ctx context.Context) (string, bool) {
		ctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, dep.URL+"/v1/thing", nil)
		if err != nil {
			return err.Error(), false
		}
		resp, err := rc.Do(req)
		return describe(resp, err)
	}
	r := measure(ctx, name, dep, tr, &attempts, call)
	r.LongestBackoff = time.Duration(longest.Load())
	return r
}

// breakerAware makes a retryablehttp.Client that sits outside a breaker
// (its HTTPClient's Transport is an httpbreaker Transport) respect it:
//
//   - CheckRetry stops at once on a breaker rejection, whether it arrives
//     as the synthetic 503 (httpbreaker.IsRejected) or as an error
//     (WithRejectAsError: errors.Is(err, httpbreaker.ErrOpen)). Retrying
//     it would only be refused again until the open period ends; the
//     caller gets the rejection, Retry-After included, to handle as it
//     sees fit. It also stops when a 429 or 503 asks for a longer wait
//     than RetryWaitMax: a caller that will not wait that long should
//     hear no now, not sleep. Everything else follows
//     retryablehttp.DefaultRetryPolicy.
//   - Backoff honours Retry-After on a 429 or 503, parsed by
//     httpbreaker.ParseRetryAfter (RFC 9110, never negative); the policy
//     keeps it within RetryWaitMax. Without one it backs off
//     exponentially like retryablehttp.DefaultBackoff. Should a rejection
//     ever be retried (a policy of your own), this Backoff waits out the
//     breaker's Retry-After rather than burning the retries in
//     microseconds.
func breakerAware(rc *retryablehttp.Client) {
	// httpbreaker.CheckRetry(retryablehttp.DefaultRetryPolicy) alone is
	// the recipe for refusals; the policy it wraps here adds the stop on
	// a long Retry-After.
	rc.CheckRetry = httpbreaker.CheckRetry(func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if d, ok := retryAfter(resp); ok && d > rc.RetryWaitMax {
			return false, nil
		}
		return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	})
	rc.Backoff = func(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
		if d, ok := retryAfter(resp); ok {
			return d
		}
		return retryablehttp.DefaultBackoff(minWait, maxWait, attempt, nil)
	}
}

// retryAfter returns the Retry-After of a 429 or 503 response.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp == nil || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) {
		return 0, false
	}
	return httpbreaker.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
}

// describe says what a logical call returned and whether the caller can
// tell it was a breaker rejection. It closes the response body.
func describe(resp *http.Response, err error) (string, bool) {
	if err != nil {
		if errors.Is(err, httpbreaker.ErrOpen) {
			return "rejected by breaker: " + err.Error(), true
		}
		return "error: " + err.Error(), false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if httpbreaker.IsRejected(resp) {
		return "rejected by breaker: synthetic 503, Retry-After: " + resp.Header.Get("Retry-After"), true
	}
	return resp.Status + " from the dependency", false
}

// measure makes the logical calls one after another and tallies them.
func measure(ctx context.Context, name string, dep *deadDependency, tr *httpbreaker.Transport,
	attempts *atomic.Int64, call func(context.Context) (string, bool)) Result {
	r := Result{Name: name, TrippedAfter: -1}
	depBefore := dep.calls.Load()
	for i := 0; i < logicalCalls; i++ {
		open := tr.State(dep.key) == httpbreaker.StateOpen
		if open && r.TrippedAfter < 0 {
			r.TrippedAfter = i
		}
		a0 := attempts.Load()
		start := time.Now()
		last, rejected := call(ctx)
		took := time.Since(start)
		n := attempts.Load() - a0

		r.Wait += took
		r.Last = last
		if rejected {
			r.Rejected++
		}
		if open {
			r.WaitAfterTrip += took
			r.MaxWaitAfterTrip = max(r.MaxWaitAfterTrip, took)
			r.AttemptsAfterTrip += n
			if n > 1 {
				r.RetriesAfterTrip += n - 1
			}
		}
	}
	r.Attempts = attempts.Load()
	r.DependencyCalls = dep.calls.Load() - depBefore
	if r.TrippedAfter < 0 {
		r.TrippedAfter = logicalCalls
	}
	// Shorten the error text for the table: retryablehttp repeats the URL.
	r.Last = strings.ReplaceAll(r.Last, dep.URL, "http://dependency")
	return r
}

// deadDependency is a loopback server that answers 503 to everything
// (no Retry-After: it does not know when it will be back) and counts the
// requests it got.
type deadDependency struct {
	*httptest.Server
	key   string // its breaker key: HostKey of its URL
	calls atomic.Int64
}

func newDeadDependency() *deadDependency {
	d := &deadDependency{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.calls.Add(1)
		http.Error(w, "dependency down", http.StatusServiceUnavailable)
	}))
	d.key = d.Listener.Addr().String()
	return d
}
