// Command sdk-stripe puts an httpbreaker Transport under an unmodified
// stripe-go client and measures what a caller sees: how a rejection
// surfaces, what stripe-go's own retries make of it and of a hung Stripe,
// and how to retry at the call site instead.
//
// It talks only to a fake Stripe API on 127.0.0.1 (an httptest server).
// The program:
//
//  1. calls a customer that Stripe fails (500, Stripe's JSON) until the
//     breaker trips, with stripe-go's retries off and WithRejectAsError;
//  2. measures a call on an open breaker, in both rejection modes, with
//     stripe-go's default 2 retries and with none, next to a proxy's HTML
//     503 and Stripe's own JSON 500;
//  3. calls a Stripe that hangs, with stripe-go's retries and a client
//     timeout, and with a call timeout instead;
//  4. retries at the call site with callWithRetries (recipe.go), the
//     older way;
//  5. measures the recipe (newTransport in recipe.go): a refusal shaped
//     as Stripe's error for Stripe's host, under stripe-go's default
//     retries, which it does not retry, while it still retries a proxy's
//     503.
//
// Run it with: go run . (from examples/sdk-stripe).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/stripe/stripe-go/v85"
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sdk-stripe:", err)
		os.Exit(1)
	}
}

// Breaker settings, small so that the example trips fast.
const (
	minRequests = 4
	openTimeout = 30 * time.Second
)

// apiKey is the fake's secret key.
const apiKey = "sk_test_fake"

// Customers of the fake Stripe.
const (
	cusOK     = "cus_ok"     // 200
	cusBroken = "cus_broken" // 500, Stripe's JSON api_error
	cusProxy  = "cus_proxy"  // 503 with an HTML body, as a proxy in front of Stripe sends
	cusHang   = "cus_hang"   // never answers
	opCreate  = "create"     // POST /v1/customers, for Hits
)

// Kinds of outcome that describe reports, as prefixes of its text.
const (
	kindOK          = "ok"
	kindRejected    = "rejected by breaker"
	kindStripeError = "Stripe error"
	kindOther       = "other error"
)

// describe tells what a stripe-go call returned, in the order a caller
// should check: a rejection (WithRejectAsError's error, or the recipe's
// Stripe-shaped 503: the text 503 is one of the "other" errors, like a
// proxy's 503), Stripe's own error, anything else.
func describe(err error) string {
	if err == nil {
		return kindOK
	}
	if errors.Is(err, httpbreaker.ErrOpen) {
		return kindRejected + " (error)"
	}
	if isRefused(err) {
		return kindRejected + " (Stripe-shaped 503)"
	}
	var se *stripe.Error
	if errors.As(err, &se) {
		return fmt.Sprintf("%s %d %s", kindStripeError, se.HTTPStatusCode, se.Type)
	}
	return fmt.Sprintf("%s (%T)", kindOther, err)
}

// Result is what one run observed; the test asserts on it.
type Result struct {
	// Broken describes each call to the broken customer, in order; OK is
	// the call to a healthy customer after the trip.
	Broken []string
	OK     string
	// BrokenHits counts the requests for the broken customer that
	// reached Stripe; OKHits those for the healthy one.
	BrokenHits, OKHits int
	// RejectedMax is the longest of the rejected calls.
	RejectedMax time.Duration
	// Costs are the rows of the rejected-call table.
	Costs []Cost
	// Proxy503 and Stripe500 are a proxy's HTML 503 and Stripe's own
	// JSON 500, each under stripe-go's default retries, for comparison.
	Proxy503, Stripe500 Cost
	// Hang and HangCallTimeout are calls to a hung Stripe: with
	// stripe-go's retries and a 300ms client timeout, and with a 300ms
	// call timeout instead.
	Hang, HangCallTimeout HangResult
	// Recipe is a call on an open breaker through newTransport (the
	// recipe: JSONRejection for Stripe's host) with stripe-go's default
	// retries; RecipeProxy503 a proxy's HTML 503 through the same, breaker
	// closed, which stripe-go still retries.
	Recipe, RecipeProxy503 Cost
	// CallSite is callWithRetries creating a customer through one
	// proxy 503; CallSiteRejected is callWithRetries on an open breaker.
	CallSite, CallSiteRejected CallSiteResult
}

// run runs the whole scenario, printing what happens to w. Each part has
// a fake Stripe of its own; parts 2 to 4 run concurrently, as they mostly
// wait (for stripe-go's retry sleeps and for timeouts).
func run(ctx context.Context, w io.Writer) (*Result, error) {
	res := &Result{}
	if err := tripBroken(ctx, res); err != nil {
		return nil, err
	}

	modes := []struct {
		asError bool
		retries int64
	}{{false, stripe.DefaultMaxNetworkRetries}, {false, 0}, {true, stripe.DefaultMaxNetworkRetries}, {true, 0}}
	res.Costs = make([]Cost, len(modes))
	var parts []func() error
	for i, m := range modes {
		parts = append(parts, func() (err error) {
			res.Costs[i], err = measure(ctx, m.asError, m.retries, cusOK, true)
			return err
		})
	}
	parts = append(parts,
		func() (err error) {
			res.Proxy503, err = measure(ctx, false, stripe.DefaultMaxNetworkRetries, cusProxy, false)
			return err
		},
		func() (err error) {
			res.Stripe500, err = measure(ctx, false, stripe.DefaultMaxNetworkRetries, cusBroken, false)
			return err
		},
		func() (err error) {
			res.Recipe, err = measureRecipe(ctx, cusOK, true)
			return err
		},
		func() (err error) {
			res.RecipeProxy503, err = measureRecipe(ctx, cusProxy, false)
			return err
		},
		func() (err error) {
			res.Hang, err = hang(ctx, false, 1)
			return err
		},
		func() (err error) {
			res.HangCallTimeout, err = hang(ctx, true, 3)
			return err
		},
		func() (err error) {
			if res.CallSite, err = callSite(ctx, false); err != nil {
				return err
			}
			res.CallSiteRejected, err = callSite(ctx, true)
			return err
		},
	)
	if err := parallel(parts...); err != nil {
		return nil, err
	}

	fmt.Fprintln(w, "== stripe-go through httpbreaker (WithRejectAsError, MaxNetworkRetries 0)")
	for i, d := range res.Broken {
		fmt.Fprintf(w, "Retrieve(%s) call %d: %s\n", cusBroken, i+1, d)
	}
	fmt.Fprintf(w, "Retrieve(%s): %s (one breaker for all of Stripe's API host)\n", cusOK, res.OK)
	fmt.Fprintf(w, "requests that reached Stripe: %s=%d %s=%d; longest rejected call: %s\n",
		cusBroken, res.BrokenHits, cusOK, res.OKHits, round(res.RejectedMax))

	fmt.Fprintln(w, "\n== one call on an open breaker")
	fmt.Fprintf(w, "%-17s  %-7s  %-8s  %-9s  %-9s  %s\n", "mode", "retries", "attempts", "took", "errors.Is", "error")
	for _, c := range res.Costs {
		fmt.Fprintf(w, "%-17s  %-7d  %-8d  %-9s  %-9t  %s\n", c.mode(), c.Retries, c.Attempts, round(c.Took), c.ErrorsIs, c.Desc)
	}
	fmt.Fprintf(w, "the synthetic 503's error: %s\n", res.Costs[0].Text)
	for _, c := range []Cost{res.Proxy503, res.Stripe500} {
		fmt.Fprintf(w, "for comparison, breaker closed, %s with %d retries: %s, %s, %s\n",
			c.Customer, c.Retries, plural(c.Attempts, "attempt"), round(c.Took), c.Desc)
	}

	fmt.Fprintln(w, "\n== the recipe: JSONRejection for Stripe's host, stripe-go's default retries")
	fmt.Fprintf(w, "a call on an open breaker: %s, %s, refused: %t, %s\n",
		plural(res.Recipe.Attempts, "attempt"), round(res.Recipe.Took), res.Recipe.Refused, res.Recipe.Desc)
	fmt.Fprintf(w, "breaker closed, %s: %s, %s (stripe-go's retries of real failures kept)\n",
		res.RecipeProxy503.Customer, plural(res.RecipeProxy503.Attempts, "attempt"), res.RecipeProxy503.Desc)

	fmt.Fprintln(w, "\n== Stripe hangs (WithRejectAsError, MinRequests 3)")
	for _, h := range []HangResult{res.Hang, res.HangCallTimeout} {
		fmt.Fprintf(w, "%s: %s, %s, %s (each a failure); breaker %s; one caller after another adds %.1f outcomes to a 10s window\n",
			h.How, plural(h.Calls, "call"), round(h.Took), plural(h.Attempts, "attempt"), h.State, h.perWindow(10*time.Second))
	}

	fmt.Fprintln(w, "\n== retries at the call site (callWithRetries, MaxNetworkRetries 0)")
	for _, c := range []CallSiteResult{res.CallSite, res.CallSiteRejected} {
		fmt.Fprintf(w, "%s: %s after %s, %s; requests that reached Stripe: %d, with %d distinct Idempotency-Keys\n",
			c.How, c.Desc, plural(c.Attempts, "attempt"), round(c.Took), c.Reached, c.DistinctKeys)
	}
	fmt.Fprintln(w)
	return res, nil
}

// tripBroken calls a customer that Stripe fails until the breaker trips,
// then once more, then a healthy customer, with WithRejectAsError and no
// stripe-go retries.
func tripBroken(ctx context.Context, res *Result) error {
	fake := newFakeStripe()
	defer fake.Close()
	tr := httpbreaker.New(nil,
		httpbreaker.WithRejectAsError(),
		httpbreaker.WithMinRequests(minRequests),
		httpbreaker.WithOpenTimeout(openTimeout),
	)
	defer tr.CloseIdleConnections()
	sc := newStripeClient(apiKey, tr, 0, fake.backend)
	for i := 1; i <= minRequests+2; i++ {
		start := time.Now()
		_, err := sc.V1Customers.Retrieve(ctx, cusBroken, nil)
		if i > minRequests {
			res.RejectedMax = max(res.RejectedMax, time.Since(start))
		}
		res.Broken = append(res.Broken, describe(err))
	}
	_, err := sc.V1Customers.Retrieve(ctx, cusOK, nil)
	res.OK = describe(err)
	hits := fake.counts()
	res.BrokenHits, res.OKHits = hits[cusBroken], hits[cusOK]
	return nil
}

// parallel runs fs concurrently and returns the first error.
func parallel(fs ...func() error) error {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Cost is what one call cost.
type Cost struct {
	Customer string
	AsError  bool // WithRejectAsError
	Retries  int64
	// Attempts counts the requests stripe-go sent to the breaker; Reached
	// those that reached the fake Stripe.
	Attempts, Reached int
	Took              time.Duration
	// ErrorsIs is errors.Is(err, httpbreaker.ErrOpen); Refused is
	// isRefused(err), the recipe's test.
	ErrorsIs, Refused bool
	// Type is the error's Go type, Desc describes it, Text is its message.
	Type, Desc, Text string
}

func (c Cost) mode() string {
	if c.AsError {
		return "WithRejectAsError"
	}
	return "synthetic 503"
}

// measure makes one call to customer of a fresh fake Stripe through a
// fresh Transport (whose breaker is open first if trip) and stripe-go
// client, and measures it.
func measure(ctx context.Context, asError bool, retries int64, customer string, trip bool) (Cost, error) {
	return measureWith(ctx, Cost{Customer: customer, AsError: asError, Retries: retries}, trip,
		func(_ string, opts ...httpbreaker.Option) *httpbreaker.Transport {
			if asError {
				opts = append(opts, httpbreaker.WithRejectAsError())
			}
			return httpbreaker.New(nil, opts...)
		})
}

// measureRecipe is measure through the recipe's Transport, with
// stripe-go's default retries.
func measureRecipe(ctx context.Context, customer string, trip bool) (Cost, error) {
	return measureWith(ctx, Cost{Customer: customer, Retries: stripe.DefaultMaxNetworkRetries}, trip, newTransport)
}

// measureWith is measure with the Transport newTr makes for the fake's
// host, filling in c.
func measureWith(ctx context.Context, c Cost, trip bool, newTr func(host string, opts ...httpbreaker.Option) *httpbreaker.Transport) (Cost, error) {
	fake := newFakeStripe()
	defer fake.Close()
	tr := newTr(fake.key(), httpbreaker.WithMinRequests(100), httpbreaker.WithOpenTimeout(openTimeout))
	defer tr.CloseIdleConnections()
	if trip {
		tr.Trip(fake.key(), openTimeout)
	}
	var attempts attemptCounter
	sc := newStripeClient(apiKey, tr, c.Retries, fake.backend, attempts.count)
	before := fake.counts()[c.Customer]
	start := time.Now()
	_, err := sc.V1Customers.Retrieve(ctx, c.Customer, nil)
	c.Took = time.Since(start)
	if err == nil {
		return c, fmt.Errorf("Retrieve(%s): no error", c.Customer)
	}
	c.Attempts = int(attempts.n.Load())
	c.Reached = fake.counts()[c.Customer] - before
	c.ErrorsIs, c.Refused = errors.Is(err, httpbreaker.ErrOpen), isRefused(err)
	c.Type, c.Desc, c.Text = fmt.Sprintf("%T", err), describe(err), err.Error()
	return c, nil
}

// HangResult is what calls to a hung Stripe, one after another, did.
type HangResult struct {
	How string
	// Calls and Attempts count the calls and the requests stripe-go sent
	// for them; Took is the time they took in all.
	Calls, Attempts int
	Took            time.Duration
	// State is the breaker's state after the calls.
	State string
}

// perWindow is how many outcomes a caller that makes such calls one
// after another adds to a window of length d.
func (h HangResult) perWindow(d time.Duration) float64 {
	return float64(h.Attempts) * d.Seconds() / h.Took.Seconds()
}

// hangTimeout is the timeout of a call to a hung Stripe.
const hangTimeout = 300 * time.Millisecond

// hang makes calls calls, one after another, to a hung Stripe, under
// WithMinRequests(3) and stripe-go's default retries: with an http.Client
// timeout, or, with callTimeout, with a context timeout on each call
// instead.
func hang(ctx context.Context, callTimeout bool, calls int) (HangResult, error) {
	h := HangResult{How: "http.Client Timeout " + hangTimeout.String(), Calls: calls}
	fake := newFakeStripe()
	defer fake.Close()
	tr := httpbreaker.New(nil, httpbreaker.WithRejectAsError(), httpbreaker.WithMinRequests(3), httpbreaker.WithOpenTimeout(openTimeout))
	defer tr.CloseIdleConnections()
	var attempts attemptCounter
	more := []func(*stripe.BackendConfig){fake.backend, attempts.count}
	if callTimeout {
		h.How = "call context timeout " + hangTimeout.String()
	} else {
		more = append(more, func(cfg *stripe.BackendConfig) { cfg.HTTPClient.Timeout = hangTimeout })
	}
	sc := newStripeClient(apiKey, tr, stripe.DefaultMaxNetworkRetries, more...)
	start := time.Now()
	for range calls {
		callCtx, cancel := ctx, context.CancelFunc(func() {})
		if callTimeout {
			callCtx, cancel = context.WithTimeout(ctx, hangTimeout)
		}
		_, err := sc.V1Customers.Retrieve(callCtx, cusHang, nil)
		cancel()
		if err == nil || errors.Is(err, httpbreaker.ErrOpen) {
			return h, fmt.Errorf("hung call: want a timeout, got %v", err)
		}
	}
	h.Took = time.Since(start)
	h.Attempts = int(attempts.n.Load())
	h.State = tr.State(fake.key()).String()
	return h, nil
}

// CallSiteResult is what one callWithRetries did.
type CallSiteResult struct {
	How      string
	Desc     string
	Attempts int
	Took     time.Duration
	// Reached counts the requests that reached Stripe, DistinctKeys the
	// Idempotency-Keys among them.
	Reached, DistinctKeys int
}

// callSite creates a customer of a fresh fake Stripe with callWithRetries
// (3 attempts, 50ms first wait) and stripe-go's retries off: through a
// proxy 503 on the first attempt, or, with open, on an open breaker.
func callSite(ctx context.Context, open bool) (CallSiteResult, error) {
	r := CallSiteResult{How: "a proxy answers the first POST with 503"}
	fake := newFakeStripe()
	defer fake.Close()
	tr := httpbreaker.New(nil, httpbreaker.WithRejectAsError(), httpbreaker.WithOpenTimeout(openTimeout))
	defer tr.CloseIdleConnections()
	if open {
		r.How = "breaker open"
		tr.Trip(fake.key(), openTimeout)
	} else {
		fake.failCreates(1)
	}
	var attempts attemptCounter
	sc := newStripeClient(apiKey, tr, 0, fake.backend, attempts.count)
	before := fake.createKeys()

	start := time.Now()
	params := &stripe.CustomerCreateParams{Email: stripe.String("jenny@example.com")}
	params.IdempotencyKey = stripe.String(stripe.NewIdempotencyKey()) // the same for every attempt
	err := callWithRetries(ctx, 3, 50*time.Millisecond, func() error {
		_, err := sc.V1Customers.Create(ctx, params)
		return err
	})
	r.Took = time.Since(start)
	r.Desc = describe(err)
	r.Attempts = int(attempts.n.Load())
	keys := fake.createKeys()[len(before):]
	r.Reached = len(keys)
	distinct := map[string]bool{}
	for _, k := range keys {
		distinct[k] = true
	}
	r.DistinctKeys = len(distinct)
	return r, nil
}

// attemptCounter counts the requests a stripe-go backend sends, before
// they reach the breaker.
type attemptCounter struct{ n atomic.Int64 }

// count is a BackendConfig option: it puts the counter in front of the
// config's HTTP client's Transport.
func (c *attemptCounter) count(cfg *stripe.BackendConfig) {
	next := cfg.HTTPClient.Transport
	cfg.HTTPClient.Transport = roundTripFunc(func(req *http.Request) (*http.Response, error) {
		c.n.Add(1)
		return next.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// fakeStripe is a tiny stand-in for the Stripe API: GET and POST
// /v1/customers.
type fakeStripe struct {
	srv *httptest.Server

	mu          sync.Mutex
	hits        map[string]int // requests received, by customer (or opCreate)
	keys        []string       // the Idempotency-Key of each POST
	createFails int            // POSTs still to fail with a proxy's 503
}

func newFakeStripe() *fakeStripe {
	f := &fakeStripe{hits: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/customers/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.mu.Lock()
		f.hits[id]++
		f.mu.Unlock()
		switch id {
		case cusBroken:
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]any{
				"type": "api_error", "message": "An unknown error occurred",
			}})
		case cusProxy:
			proxy503(w)
		case cusHang:
			<-r.Context().Done()
		default:
			writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "customer"})
		}
	})
	mux.HandleFunc("POST /v1/customers", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.hits[opCreate]++
		f.keys = append(f.keys, r.Header.Get("Idempotency-Key"))
		fail := f.createFails > 0
		if fail {
			f.createFails--
		}
		f.mu.Unlock()
		if fail {
			proxy503(w)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": "cus_new", "object": "customer", "email": r.FormValue("email")})
	})
	f.srv = httptest.NewServer(mux)
	return f
}

// Close shuts the fake down.
func (f *fakeStripe) Close() { f.srv.Close() }

// key is the breaker key HostKey gives the fake's requests.
func (f *fakeStripe) key() string { return f.srv.Listener.Addr().String() }

// backend is a BackendConfig option that sends to the fake and logs
// nothing.
func (f *fakeStripe) backend(cfg *stripe.BackendConfig) {
	cfg.URL = stripe.String(f.srv.URL)
	cfg.LeveledLogger = &stripe.LeveledLogger{Level: stripe.LevelNull}
}

// failCreates makes the next n POSTs fail with a proxy's 503.
func (f *fakeStripe) failCreates(n int) {
	f.mu.Lock()
	f.createFails = n
	f.mu.Unlock()
}

func (f *fakeStripe) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]int, len(f.hits))
	for k, v := range f.hits {
		m[k] = v
	}
	return m
}

func (f *fakeStripe) createKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

// proxy503 answers as a load balancer in front of Stripe might.
func proxy503(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprint(w, "<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>\n")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_fake")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func round(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
