package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/httpbreaker/httpbreaker"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixture is an upstream on loopback and a storefront calling it, with a
// clock the test moves.
type fixture struct {
	up   *upstream
	shop *storefront
	key  string // the breakers' key: the upstream's host

	mu  sync.Mutex
	now time.Time
}

// newFixture starts an upstream and a storefront; the test's cleanup
// stops both.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	up, err := startUpstream()
	require.NoError(t, err)
	f := &fixture{up: up, shop: newStorefront(up.url), key: keyOf(up.url), now: time.Unix(1_700_000_000, 0)}
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
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.shop.ServeHTTP(rec, req)
	return rec
}

// tripUntilOpen repeats a call until tr's breaker is open; the upstream
// is down, so each call before that is a failure. It returns the calls
// it took.
func (f *fixture) tripUntilOpen(t *testing.T, tr *httpbreaker.Transport, call func()) int {
	t.Helper()
	for n := 1; n <= 10; n++ {
		call()
		if tr.State(f.key) == httpbreaker.StateOpen {
			return n
		}
	}
	t.Fatalf("breaker for %s still %s after 10 failed calls", f.key, tr.State(f.key))
	return 0
}

// TestCatalogueServesStaleCopyMarkedStale: with the catalogue down, a
// product page is the cached copy, unchanged, marked stale with its age.
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
	f.up.stop()
	// Calls that fail before the breaker opens already get the stale
	// copy (the error path).
	f.tripUntilOpen(t, f.shop.catTr, func() {
		rec := f.do("GET", "/products/42", "")
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), `"stale":true`)
	})
	before := f.shop.catTr.Snapshot()[0].Requests

	// Open: the fallback answers without a call.
	rec = f.do("GET", "/products/42", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var stale productAnswer
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &stale))
	require.True(t, stale.Stale)
	require.NotNil(t, stale.AgeSeconds)
	require.EqualValues(t, 90, *stale.AgeSeconds)
	require.Equal(t, fresh.Product, stale.Product, "the cached value, unchanged")
	require.Equal(t, before, f.shop.catTr.Snapshot()[0].Requests, "served by the fallback: no call")

	// Nothing cached for another product: no fabricated page.
	rec = f.do("GET", "/products/7", "")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.NotContains(t, rec.Body.String(), "product\":")
}

// TestStaleCacheFallbackMarksAndDefers checks the WithFallback function
// alone: a marked copy when there is one, the default 503 when not.
func TestStaleCacheFallbackMarksAndDefers(t *testing.T) {
	c := &staleCache{entries: map[string]cached{}, now: func() time.Time { return time.Unix(100, 0) }}
	req := httptest.NewRequest("GET", "http://catalogue/products/1", nil)
	resp, err := c.fallback(req, httpbreaker.ErrOpen)
	require.NoError(t, err)
	require.Nil(t, resp, "nothing cached: (nil, nil) hands back to the default 503")

	c.put("http://catalogue/products/1", "application/json", []byte(`{"id":"1"}`))
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

	f.up.stop()
	f.tripUntilOpen(t, f.shop.recTr, func() { f.do("GET", "/recommendations/7", "") })
	before := f.shop.recTr.Snapshot()[0].Requests

	rec = f.do("GET", "/recommendations/7", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var got recommendations
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.True(t, got.Degraded)
	require.Equal(t, defaultList, got.Items)
	require.Contains(t, rec.Body.String(), `"degraded":true`)
	require.Equal(t, before, f.shop.recTr.Snapshot()[0].Requests, "served by the fallback: no call")
}

// TestPaymentHasNoFallback: with the payment provider down, the customer
// gets 503 with Retry-After and no receipt, and nobody is charged.
func TestPaymentHasNoFallback(t *testing.T) {
	f := newFixture(t)
	pay := func(key string) *httptest.ResponseRecorder {
		return f.do("POST", "/pay", `{"amount_cents":12900}`, "Content-Type", "application/json", "Idempotency-Key", key)
	}

	rec := pay("order-1")
	require.Equal(t, http.StatusCreated, rec.Code)
	require.Contains(t, rec.Body.String(), `"receipt"`)
	require.EqualValues(t, 1, f.up.payments.Load())

	f.up.stop()
	f.tripUntilOpen(t, f.shop.payTr, func() {
		rec := pay("order-2")
		// Before the trip the outcome is unknown: no receipt, no
		// promise, retry with the same key.
		require.Equal(t, http.StatusBadGateway, rec.Code)
		require.NotContains(t, rec.Body.String(), "receipt")
	})

	rec = pay("order-2")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After is whole seconds")
	require.GreaterOrEqual(t, ra, 1)
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.NotContains(t, body, "receipt", "never a fabricated receipt")
	require.Contains(t, body["error"], "not been charged")
	require.EqualValues(t, ra, body["retry_after_seconds"])
	require.EqualValues(t, 1, f.up.payments.Load(), "no charge but the first")
}

// TestRunPrintsTheThreeAnswers runs the walkthrough end to end.
func TestRunPrintsTheThreeAnswers(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, 0))
	s := out.String()
	require.Contains(t, s, `"stale":true`)
	require.Contains(t, s, `"degraded":true`)
	require.Contains(t, s, "→ 503  Retry-After:")
	require.Contains(t, s, "catalogue open, recommender open, payments open")
}
