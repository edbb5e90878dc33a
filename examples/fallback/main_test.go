package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/httpbreaker/httpbreaker"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixture is the three dependencies on loopback and a storefront calling
// them, with a clock the test moves.
type fixture struct {
	up   *upstream
	shop *storefront

	mu  sync.Mutex
	now time.Time
}

// newFixture starts the dependencies and a storefront; the test's cleanup
// stops both.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	up, err := startUpstream()
	require.NoError(t, err)
	f := &fixture{up: up, shop: newStorefront(up.transport()), now: time.Unix(1_700_000_000, 0)}
	f.shop.cache.now = f.clock
	t.Cleanup(func() {
		up.stop()
		f.shop.close()
	})
	return f
}

// clock is the storefront cache's clock.
func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// advance moves the clock.
func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// do sends a request to the storefront in process and returns the
// recorded answer.
func (f *fixture) do(method, path, body string, header ...string) *httptest.ResponseRecorder {
	return do(f.shop, method, path, body, header...)
}

// do sends a request to shop in process and returns the recorded answer.
func do(shop *storefront, method, path, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	shop.ServeHTTP(rec, req)
	return rec
}

// pay is POST /pay for 129.00 with Idempotency-Key key.
func (f *fixture) pay(key string) *httptest.ResponseRecorder {
	return f.do("POST", "/pay", `{"amount_cents":12900}`, "Content-Type", "application/json", "Idempotency-Key", key)
}

// tripUntilOpen repeats a call until key's breaker is open; the
// dependency is down or hangs, so each call before that is a failure. It
// returns the calls it took.
func (f *fixture) tripUntilOpen(t *testing.T, key string, call func()) int {
	t.Helper()
	for n := 1; n <= 10; n++ {
		call()
		if f.shop.tr.State(key) == httpbreaker.StateOpen {
			return n
		}
	}
	t.Fatalf("breaker for %s still %s after 10 failed calls", key, f.shop.tr.State(key))
	return 0
}

// requireStates checks the state of every dependency's breaker.
func (f *fixture) requireStates(t *testing.T, catalogue, recs, payments httpbreaker.State) {
	t.Helper()
	require.Equal(t, []httpbreaker.State{catalogue, recs, payments},
		[]httpbreaker.State{f.shop.tr.State(catalogueHost), f.shop.tr.State(recsHost), f.shop.tr.State(paymentsHost)},
		"catalogue, recs, payments")
}

// status returns key's Status in tr's Snapshot.
func status(t *testing.T, tr *httpbreaker.Transport, key string) httpbreaker.Status {
	t.Helper()
	for _, s := range tr.Snapshot() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no breaker %q in the Snapshot", key)
	return httpbreaker.Status{}
}

// TestOneTransportAPolicyPerDependency: the storefront has one client and
// one Transport; the three dependencies have a breaker each, keyed by
// host, each with the settings its policy gives it.
func TestOneTransportAPolicyPerDependency(t *testing.T) {
	var clients, transports int
	st := reflect.TypeFor[storefront]()
	for i := range st.NumField() {
		switch st.Field(i).Type {
		case reflect.TypeFor[*http.Client]():
			clients++
		case reflect.TypeFor[*httpbreaker.Transport]():
			transports++
		}
	}
	require.Equal(t, 1, clients, "one *http.Client for every dependency")
	require.Equal(t, 1, transports, "one Transport for every dependency")

	f := newFixture(t)
	require.Same(t, f.shop.tr, f.shop.client.Transport)
	require.Equal(t, http.StatusOK, f.do("GET", "/products/42", "").Code)
	require.Equal(t, http.StatusOK, f.do("GET", "/recommendations/7", "").Code)
	require.Equal(t, http.StatusCreated, f.pay("order-1").Code)

	snap := f.shop.tr.Snapshot()
	keys := make([]string, len(snap))
	for i, s := range snap {
		keys[i] = s.Key
		require.Equal(t, httpbreaker.ModeEnforce, s.Mode, s.Key)
		require.Equal(t, httpbreaker.StateClosed, s.State, s.Key)
		require.EqualValues(t, 1, s.Requests, s.Key)
	}
	require.Equal(t, []string{catalogueHost, paymentsHost, recsHost}, keys, "a breaker per host, in one Transport")

	// Transport-wide: MinRequests 3, OpenTimeout 10s; the rest defaults
	// (every tunable shows, the defaults too), no jitter.
	want := map[string]httpbreaker.Settings{
		catalogueHost: {
			FailureRate: 0.5, MinRequests: 3, Window: 10 * time.Second,
			OpenTimeout: 10 * time.Second, MaxOpenTimeout: time.Minute,
			HalfOpenProbes: 1, ProbesToClose: 3, ThrottleSustain: 10 * time.Second,
			CallTimeout: 2 * time.Second,
		},
		recsHost: {
			FailureRate: 0.5, MinRequests: 3, Window: 10 * time.Second,
			OpenTimeout: 10 * time.Second, MaxOpenTimeout: time.Minute,
			HalfOpenProbes: 1, ProbesToClose: 3, ThrottleSustain: 10 * time.Second,
			CallTimeout: 150 * time.Millisecond, MaxConcurrent: 10,
		},
		paymentsHost: {
			FailureRate: 0.25, MinRequests: 3, Window: 10 * time.Second,
			OpenTimeout: 30 * time.Second, MaxOpenTimeout: time.Minute,
			HalfOpenProbes: 1, ProbesToClose: 3, ThrottleSustain: 10 * time.Second,
			MaxConcurrent: 40,
		},
	}
	for _, s := range snap {
		require.Equal(t, want[s.Key], s.Settings, s.Key)
	}

	// The caching layer under the shared Transport keeps catalogue
	// answers only.
	f.shop.cache.mu.Lock()
	defer f.shop.cache.mu.Unlock()
	require.Len(t, f.shop.cache.entries, 1)
	require.Contains(t, f.shop.cache.entries, "http://catalogue.internal/products/42")
}

// TestPoliciesTripAtTheirOwnRates: after three successes each, one
// failure (a rate of 25%) trips the payments breaker (WithFailureRate
// 0.25) and not the catalogue's (the Transport-wide 0.5).
func TestPoliciesTripAtTheirOwnRates(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		require.Equal(t, http.StatusOK, f.do("GET", "/products/42", "").Code)
		require.Equal(t, http.StatusCreated, f.pay("order-"+strconv.Itoa(i)).Code)
	}
	f.up.down(catalogueHost)
	f.up.down(paymentsHost)

	require.Contains(t, f.do("GET", "/products/42", "").Body.String(), `"stale":true`)
	require.Equal(t, http.StatusBadGateway, f.pay("order-9").Code)
	f.requireStates(t, httpbreaker.StateClosed, httpbreaker.StateClosed, httpbreaker.StateOpen)
	for _, key := range []string{catalogueHost, paymentsHost} {
		s := status(t, f.shop.tr, key)
		require.EqualValues(t, 4, s.Requests, key)
		require.EqualValues(t, 1, s.Failures, key)
	}
}

// TestCatalogueServesStaleCopyMarkedStale: with the catalogue down, a
// product page is the cached copy, unchanged, marked stale with its age;
// the other dependencies, on the same Transport, are untouched.
func TestCatalogueServesStaleCopyMarkedStale(t *testing.T) {
	f := newFixture(t)

	rec := f.do("GET", "/products/42", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var fresh productAnswer
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &fresh))
	require.False(t, fresh.Stale)
	require.Nil(t, fresh.AgeSeconds)
	require.NotContains(t, rec.Body.String(), "age_seconds")

	f.advance(90 * time.Second)
	f.up.down(catalogueHost)
	// Calls that fail before the breaker opens already get the stale
	// copy (the error path).
	n := f.tripUntilOpen(t, catalogueHost, func() {
		rec := f.do("GET", "/products/42", "")
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), `"stale":true`)
	})
	require.Equal(t, 2, n, "1 success and 2 failures: MinRequests 3, rate 2/3 ≥ 0.5")
	before := status(t, f.shop.tr, catalogueHost).Requests

	// Open: the fallback answers without a call.
	rec = f.do("GET", "/products/42", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var stale productAnswer
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &stale))
	require.True(t, stale.Stale)
	require.NotNil(t, stale.AgeSeconds)
	require.EqualValues(t, 90, *stale.AgeSeconds)
	require.Equal(t, fresh.Product, stale.Product, "the cached value, unchanged")
	require.Equal(t, before, status(t, f.shop.tr, catalogueHost).Requests, "served by the fallback: no call")

	// Nothing cached for another product: no fabricated page.
	rec = f.do("GET", "/products/7", "")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.NotContains(t, rec.Body.String(), "product\":")

	// The other dependencies still answer for real.
	rec = f.do("GET", "/recommendations/7", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.NotContains(t, rec.Body.String(), "degraded")
	require.Equal(t, http.StatusCreated, f.pay("order-1").Code)
	f.requireStates(t, httpbreaker.StateOpen, httpbreaker.StateClosed, httpbreaker.StateClosed)
}

// TestStaleCacheFallbackMarksAndDefers checks the WithFallback function
// alone: a marked copy when there is one, the default 503 when not.
func TestStaleCacheFallbackMarksAndDefers(t *testing.T) {
	c := &staleCache{entries: map[string]cached{}, now: func() time.Time { return time.Unix(100, 0) }}
	req := httptest.NewRequest("GET", "http://catalogue.internal/products/1", nil)
	resp, err := c.fallback(req, httpbreaker.ErrOpen)
	require.NoError(t, err)
	require.Nil(t, resp, "nothing cached: (nil, nil) hands back to the default 503")

	c.put("http://catalogue.internal/products/1", "application/json", []byte(`{"id":"1"}`))
	c.now = func() time.Time { return time.Unix(130, 0) }
	resp, err = c.fallback(req, httpbreaker.ErrOpen)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "stale", resp.Header.Get("X-Cache"))
	require.Equal(t, "30", resp.Header.Get("Age"))
	require.Same(t, req, resp.Request)
	require.False(t, httpbreaker.IsRejected(resp))
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	require.JSONEq(t, `{"id":"1"}`, b.String())
}

// A catalogue page longer than maxCached reaches its caller whole, with
// its own length, and is not kept: a cut copy would be served as stale.
// One that fits is kept and still read whole.
func TestCachingTransportKeepsOnlyWholePages(t *testing.T) {
	for _, n := range []int{maxCached + 1, 2 * maxCached, maxCached} {
		page := strings.Repeat("x", n)
		body := &closeCounter{Reader: strings.NewReader(page)}
		next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
				Body: body, ContentLength: int64(n), Request: r}, nil
		})
		cache := &staleCache{entries: map[string]cached{}, now: time.Now}
		ct := &cachingTransport{next: next, host: catalogueHost, cache: cache}
		req := httptest.NewRequest(http.MethodGet, "http://"+catalogueHost+"/products/42", nil)
		resp, err := ct.RoundTrip(req)
		require.NoError(t, err)
		var got bytes.Buffer
		_, err = got.ReadFrom(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, n, got.Len(), "%d bytes: read whole", n)
		require.EqualValues(t, n, resp.ContentLength)
		require.Equal(t, 1, body.closes, "%d bytes: the body is closed once", n)
		require.Equal(t, n <= maxCached, cache.response(req) != nil, "%d bytes: kept only if it fits", n)
	}
}

// closeCounter is a body that counts its Close calls.
type closeCounter struct {
	*strings.Reader
	closes int
}

func (c *closeCounter) Close() error { c.closes++; return nil }

// TestRecommendationsDegradeToDefault: with the recommender down, the
// answer is the default list flagged degraded.
func TestRecommendationsDegradeToDefault(t *testing.T) {
	f := newFixture(t)

	rec := f.do("GET", "/recommendations/7", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var live recommendations
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &live))
	require.False(t, live.Degraded)
	require.NotContains(t, rec.Body.String(), "degraded")

	f.up.down(recsHost)
	f.tripUntilOpen(t, recsHost, func() { f.do("GET", "/recommendations/7", "") })
	before := status(t, f.shop.tr, recsHost).Requests

	rec = f.do("GET", "/recommendations/7", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var got recommendations
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.True(t, got.Degraded)
	require.Equal(t, defaultList, got.Items)
	require.Contains(t, rec.Body.String(), `"degraded":true`)
	require.Equal(t, before, status(t, f.shop.tr, recsHost).Requests, "served by the fallback: no call")
	f.requireStates(t, httpbreaker.StateClosed, httpbreaker.StateOpen, httpbreaker.StateClosed)
}

// TestRecommendationsCallTimeoutTripsBreaker: a recommender that hangs,
// over real loopback, costs each call its 150ms call timeout (not the
// client's 5s), and three such timeouts trip its breaker and no other.
func TestRecommendationsCallTimeoutTripsBreaker(t *testing.T) {
	f := newFixture(t)
	f.up.hangRecs()

	n := f.tripUntilOpen(t, recsHost, func() {
		start := time.Now()
		rec := f.do("GET", "/recommendations/7", "")
		took := time.Since(start)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), `"degraded":true`)
		require.GreaterOrEqual(t, took, 150*time.Millisecond, "cut by the call timeout, not before")
		require.Less(t, took, 3*time.Second, "cut by the 150ms call timeout, not the client's 5s")
	})
	require.Equal(t, 3, n, "MinRequests 3, all failures")
	s := status(t, f.shop.tr, recsHost)
	require.EqualValues(t, 3, s.Failures, "each timed-out call is a failure")

	start := time.Now()
	rec := f.do("GET", "/recommendations/7", "")
	require.Contains(t, rec.Body.String(), `"degraded":true`)
	require.Less(t, time.Since(start), 150*time.Millisecond, "refused: no call, no wait")
	require.Equal(t, s.Requests, status(t, f.shop.tr, recsHost).Requests, "served by the fallback: no call")
	f.requireStates(t, httpbreaker.StateClosed, httpbreaker.StateOpen, httpbreaker.StateClosed)
}

// inProcess is a next RoundTripper that serves the dependencies' handlers
// in the calling goroutine, without a network, so that a test under
// synctest controls every clock. It counts the calls that reach it.
type inProcess struct {
	up    *upstream
	calls atomic.Int64
}

// RoundTrip implements http.RoundTripper.
func (p *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	h := p.up.handler(req.URL.Hostname())
	if h == nil {
		return nil, errors.New("no such dependency: " + req.URL.Host)
	}
	p.calls.Add(1)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req.Clone(req.Context())) // the mux writes path values into the request it serves
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// TestRecommendationsBulkheadAndCallTimeout, on synctest's clock: with the
// recommender hung, 10 calls fill its bulkhead, the 11th gets the
// degraded default at once without a call, and the 10 are cut at exactly
// 150ms, which trips the breaker.
func TestRecommendationsBulkheadAndCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream()
		defer up.stop()
		next := &inProcess{up: up}
		shop := newStorefront(next)
		defer shop.close()
		up.hangRecs()

		var wg sync.WaitGroup
		took := make([]time.Duration, 10)
		bodies := make([]string, 10)
		for i := range 10 {
			wg.Go(func() {
				start := time.Now()
				bodies[i] = do(shop, "GET", "/recommendations/7", "").Body.String()
				took[i] = time.Since(start)
			})
			// A millisecond apart, so that their call timeouts end one by
			// one: outcomes that ended at the very instant of the trip
			// could count on either side of it.
			time.Sleep(time.Millisecond)
		}
		synctest.Wait() // all 10 are in the hung recommender
		require.EqualValues(t, 10, next.calls.Load())

		start := time.Now()
		rec := do(shop, "GET", "/recommendations/7", "")
		require.Zero(t, time.Since(start), "refused by the bulkhead at once")
		require.Contains(t, rec.Body.String(), `"degraded":true`)
		require.EqualValues(t, 10, next.calls.Load(), "the 11th never reached the recommender")
		require.Equal(t, httpbreaker.StateClosed, shop.tr.State(recsHost), "a bulkhead refusal, not an open breaker")

		wg.Wait()
		for i := range 10 {
			require.Equal(t, 150*time.Millisecond, took[i], "cut at the call timeout")
			require.Contains(t, bodies[i], `"degraded":true`)
		}
		// The first three timeouts trip the breaker (MinRequests 3); the
		// other seven were admitted before the trip and count for
		// nothing in the open breaker, nor does the bulkhead refusal.
		s := status(t, shop.tr, recsHost)
		require.Equal(t, httpbreaker.StateOpen, s.State)
		require.EqualValues(t, 3, s.Failures)
		require.EqualValues(t, 3, s.Requests)
		require.Equal(t, httpbreaker.StateClosed, shop.tr.State(catalogueHost))
	})
}

// TestPaymentHasNoFallback: with the payment provider down, the customer
// gets 503 with Retry-After and no receipt, and nobody is charged; the
// payments policy trips at 25% and stays open 30s.
func TestPaymentHasNoFallback(t *testing.T) {
	f := newFixture(t)

	for _, key := range []string{"order-1", "order-2", "order-3"} {
		rec := f.pay(key)
		require.Equal(t, http.StatusCreated, rec.Code)
		require.Contains(t, rec.Body.String(), `"receipt"`)
	}
	require.EqualValues(t, 3, f.up.charges.Load())

	f.up.down(paymentsHost)
	n := f.tripUntilOpen(t, paymentsHost, func() {
		rec := f.pay("order-4")
		// Before the trip the outcome is unknown: no receipt, no
		// promise, retry with the same key.
		require.Equal(t, http.StatusBadGateway, rec.Code)
		require.NotContains(t, rec.Body.String(), "receipt")
	})
	require.Equal(t, 1, n, "1 failure in 4: the payments policy's 25%")

	rec := f.pay("order-4")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After is whole seconds")
	require.LessOrEqual(t, ra, 30)
	require.Greater(t, ra, 10, "the payments policy's 30s open period, not the Transport-wide 10s")
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.NotContains(t, body, "receipt", "never a fabricated receipt")
	require.Contains(t, body["error"], "not been charged")
	require.EqualValues(t, ra, body["retry_after_seconds"])
	require.EqualValues(t, 3, f.up.charges.Load(), "no charge but the first three")
	f.requireStates(t, httpbreaker.StateClosed, httpbreaker.StateClosed, httpbreaker.StateOpen)
}

// TestRunPrintsTheThreeAnswers runs the walkthrough end to end.
func TestRunPrintsTheThreeAnswers(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, 0))
	s := out.String()
	require.Contains(t, s, `"stale":true`)
	require.Contains(t, s, `"degraded":true`)
	require.Contains(t, s, "→ 503  Retry-After: 30")
	require.Contains(t, s, "breakers: catalogue.internal open, recs.internal closed, payments.internal closed")
	for _, re := range []string{
		`catalogue\.internal +open +50% +10s +2s +none\n`,
		`payments\.internal +open +25% +30s +none +40\n`,
		`recs\.internal +open +50% +10s +150ms +10\n`,
	} {
		require.Regexp(t, regexp.MustCompile(re), s)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
