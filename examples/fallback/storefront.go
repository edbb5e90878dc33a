package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// product is a catalogue entry.
type product struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	PriceCents int64  `json:"price_cents"`
}

// recommendations is a list of product IDs for a user.
type recommendations struct {
	Items []string `json:"items"`
	// Degraded is true when the list is not personalised: the
	// recommender was unavailable and this is the default.
	Degraded bool `json:"degraded,omitempty"`
}

// receipt is a captured payment.
type receipt struct {
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	Status      string `json:"status"`
}

// productAnswer is the storefront's answer to GET /products/{id}.
type productAnswer struct {
	Product product `json:"product"`
	// Stale is true when the product comes from the cache because the
	// catalogue is unavailable; AgeSeconds then says how old it is.
	Stale      bool   `json:"stale"`
	AgeSeconds *int64 `json:"age_seconds,omitempty"`
}

// payAnswer is the storefront's answer to POST /pay: a receipt, or an
// error and nothing else.
type payAnswer struct {
	Receipt           *receipt `json:"receipt,omitempty"`
	Error             string   `json:"error,omitempty"`
	RetryAfterSeconds int      `json:"retry_after_seconds,omitempty"`
}

// storefront is a service with three dependencies that fail in three
// different ways, on purpose: each answer is the honest one for what the
// dependency does for the user.
//
//   - Catalogue (product pages): the data changes slowly and a slightly
//     old price is better than no page, so the answer is the last good
//     copy, marked stale with its age. Serving it unmarked would trade an
//     error for a silently wrong number.
//   - Recommendations: they enrich the page, they do not enable it, so the
//     answer is a default list (bestsellers), marked degraded so that the
//     page can say "popular now" instead of "picked for you" and analytics
//     do not count it as personalised.
//   - Payments: required, and there is nothing true to say instead. No
//     fallback: the customer gets 503 with Retry-After and "you have not
//     been charged", never a fabricated receipt.
//
// All three go through one client and one Transport; a policy per host
// (WithPolicy) gives each dependency its answer and its limits.
type storefront struct {
	client *http.Client           // the only one, for all three dependencies
	tr     *httpbreaker.Transport // client.Transport
	cache  *staleCache

	mux *http.ServeMux
}

// newStorefront returns a storefront that reaches its dependencies
// through next, which knows where catalogue.internal, recs.internal and
// payments.internal are.
func newStorefront(next http.RoundTripper) *storefront {
	s := &storefront{cache: &staleCache{entries: map[string]cached{}}}
	s.tr = httpbreaker.New(
		// Below the breakers, keep a copy of every good product page.
		&cachingTransport{next: next, host: catalogueHost, cache: s.cache},

		// Transport-wide, under every policy. Small numbers so that the
		// demo trips after a few calls; the long open timeouts keep the
		// breakers open for the whole demo, so what it shows does not
		// depend on timing.
		httpbreaker.WithMinRequests(3),
		httpbreaker.WithOpenTimeout(10*time.Second),
		httpbreaker.WithJitter(0),

		// Catalogue: WithFallback serves the kept copy, marked stale,
		// when the breaker refuses a call.
		httpbreaker.WithPolicy(catalogueHost,
			httpbreaker.WithCallTimeout(2*time.Second),
			httpbreaker.WithFallback(s.cache.fallback)),

		// Recommendations: a short call timeout, so that a hung
		// recommender costs a page 150ms and trips its breaker; a small
		// bulkhead; the default list when the breaker or the bulkhead
		// refuses.
		httpbreaker.WithPolicy(recsHost,
			httpbreaker.WithCallTimeout(150*time.Millisecond),
			httpbreaker.WithMaxConcurrent(10),
			httpbreaker.WithFallback(defaultRecommendations)),

		// Payments: trips early and stays open long, at most 40 calls
		// in flight, and no WithFallback: the caller (pay) sees the
		// synthetic 503 through IsRejected and decides; see pay for why.
		httpbreaker.WithPolicy(paymentsHost,
			httpbreaker.WithFailureRate(0.25),
			httpbreaker.WithOpenTimeout(30*time.Second),
			httpbreaker.WithMaxConcurrent(40)),
	)
	// The client's Timeout bounds every call; the policies' call timeouts
	// are the shorter budgets of the catalogue and the recommender.
	s.client = &http.Client{Transport: s.tr, Timeout: 5 * time.Second}

	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /products/{id}", s.product)
	s.mux.HandleFunc("GET /recommendations/{user}", s.recommendations)
	s.mux.HandleFunc("POST /pay", s.pay)
	return s
}

// ServeHTTP serves the storefront's API.
func (s *storefront) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// close closes the client's idle connections.
func (s *storefront) close() { s.client.CloseIdleConnections() }

// product serves GET /products/{id}: fresh from the catalogue, or the
// last good copy marked stale.
func (s *storefront) product(w http.ResponseWriter, r *http.Request) {
	p, age, stale, err := s.getProduct(r.Context(), r.PathValue("id"))
	if err != nil {
		// Nothing cached either: say so, briefly; the error names
		// internals and stays in our logs.
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "product temporarily unavailable"})
		return
	}
	ans := productAnswer{Product: p, Stale: stale}
	if stale {
		secs := int64(age / time.Second)
		ans.AgeSeconds = &secs
	}
	writeJSON(w, http.StatusOK, ans)
}

// getProduct reads product id from the catalogue. stale reports that it
// came from the cache, age how old the copy is.
func (s *storefront) getProduct(ctx context.Context, id string) (p product, age time.Duration, stale bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+catalogueHost+"/products/"+id, nil)
	if err != nil {
		return p, 0, false, err
	}
	resp, err := s.client.Do(req)
	if err == nil && resp.StatusCode >= 500 {
		resp.Body.Close()
		err = errors.New("catalogue: " + resp.Status)
	}
	if err != nil {
		// WithFallback covers refused calls only. The calls that fail
		// before the breaker opens (the ones that open it) get the same
		// stale copy here, when there is one.
		resp = s.cache.response(req)
		if resp == nil {
			return p, 0, false, err
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return p, 0, false, errors.New("catalogue: " + resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return p, 0, false, err
	}
	if resp.Header.Get("X-Cache") == "stale" {
		secs, _ := strconv.ParseInt(resp.Header.Get("Age"), 10, 64)
		return p, time.Duration(secs) * time.Second, true, nil
	}
	return p, 0, false, nil
}

// recommendations serves GET /recommendations/{user}: personalised, or
// the default list marked degraded.
func (s *storefront) recommendations(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+recsHost+"/recommendations/"+r.PathValue("user"), nil)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad user"})
		return
	}
	resp, err := s.client.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err = errors.New("recommender: " + resp.Status)
	}
	if err != nil {
		// As for the catalogue: failures before the breaker opens get
		// the same default as refusals.
		resp, _ = defaultRecommendations(req, err)
	}
	defer resp.Body.Close()
	var recs recommendations
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		recs = recommendations{Items: defaultList, Degraded: true}
	}
	writeJSON(w, http.StatusOK, recs)
}

// pay serves POST /pay: it charges the customer through the payment
// provider and answers with the receipt.
//
// There is no fallback, on purpose. A fallback here could only fabricate a
// receipt (the customer thinks they paid; the shop ships unpaid goods) or
// quietly queue the charge for later (a charge the customer did not agree
// to, at a time they do not expect, that may fail when the goods are gone).
// Neither is a degraded answer; both are wrong ones. The honest answer is
// "not now": 503 with Retry-After. A refusal by the breaker is also the
// one failure after which a retry is certainly safe: the request never
// left this process, so nobody was charged.
func (s *storefront) pay(w http.ResponseWriter, r *http.Request) {
	var in struct {
		AmountCents int64 `json:"amount_cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.AmountCents <= 0 {
		writeJSON(w, http.StatusBadRequest, payAnswer{Error: "amount_cents must be positive"})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		writeJSON(w, http.StatusBadRequest, payAnswer{Error: "Idempotency-Key is required"})
		return
	}
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://"+paymentsHost+"/payments", bytes.NewReader(body))
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, payAnswer{Error: "internal error"})
		return
	}
	req.Header.Set("Content-Type", "application/json")
	// The provider deduplicates on this key: a retry after an unknown
	// outcome cannot charge twice.
	req.Header.Set("Idempotency-Key", key)

	resp, err := s.client.Do(req) // req carries the customer's Idempotency-Key
	switch {
	case err == nil && httpbreaker.IsRejected(resp):
		// Never sent: not charged, safe to retry after the breaker's
		// Retry-After (whole seconds until its next probe).
		resp.Body.Close()
		retry := resp.Header.Get("Retry-After")
		secs, _ := strconv.Atoi(retry)
		w.Header().Set("Retry-After", retry)
		writeJSON(w, http.StatusServiceUnavailable, payAnswer{
			Error:             "payments are unavailable right now; you have not been charged",
			RetryAfterSeconds: secs,
		})
	case err != nil:
		// Sent, or maybe sent: the outcome is unknown. Say so; the
		// client retries with the same Idempotency-Key.
		writeJSON(w, http.StatusBadGateway, payAnswer{
			Error: "payment not confirmed; retry with the same Idempotency-Key",
		})
	default:
		defer resp.Body.Close()
		var rc receipt
		if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&rc) != nil {
			writeJSON(w, http.StatusBadGateway, payAnswer{
				Error: "payment not confirmed; retry with the same Idempotency-Key",
			})
			return
		}
		writeJSON(w, http.StatusCreated, payAnswer{Receipt: &rc})
	}
}

// defaultList is the degraded recommendation: bestsellers, the same for
// everyone.
var defaultList = []string{"p-1", "p-2", "p-3"}

// defaultRecommendations is the recommender's fallback (WithFallback): a
// 200 with the default list, flagged degraded in the body and in an
// X-Degraded header.
func defaultRecommendations(req *http.Request, _ error) (*http.Response, error) {
	body, _ := json.Marshal(recommendations{Items: defaultList, Degraded: true})
	return ok200(req, http.Header{
		"Content-Type":  {"application/json"},
		"Cache-Control": {"no-store"},
		"X-Degraded":    {"true"},
	}, body), nil
}

// ok200 is a fallback's own 200 response for req.
func ok200(req *http.Request, h http.Header, body []byte) *http.Response {
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// cached is a good response kept for when the dependency is down.
type cached struct {
	body   []byte
	ctype  string
	stored time.Time
}

// staleCache keeps the last good body of every catalogue GET, by URL. It
// never serves while the catalogue is up: only the fallback and the error
// path read it. (A real one would bound its size.)
type staleCache struct {
	mu      sync.Mutex
	entries map[string]cached // guarded by mu
	now     func() time.Time  // nil: time.Now
}

// clock returns the cache's time.
func (c *staleCache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// put keeps body as the last good answer to url.
func (c *staleCache) put(url, ctype string, body []byte) {
	c.mu.Lock()
	c.entries[url] = cached{body: body, ctype: ctype, stored: c.clock()}
	c.mu.Unlock()
}

// response returns the cached answer to req as a 200 marked stale
// (X-Cache: stale, and Age in seconds), or nil when there is none.
func (c *staleCache) response(req *http.Request) *http.Response {
	if req.Method != http.MethodGet {
		return nil
	}
	c.mu.Lock()
	e, ok := c.entries[req.URL.String()]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	age := max(c.clock().Sub(e.stored), 0)
	return ok200(req, http.Header{
		"Content-Type":  {e.ctype},
		"Age":           {strconv.FormatInt(int64(age/time.Second), 10)},
		"X-Cache":       {"stale"},
		"Cache-Control": {"no-store"},
	}, e.body)
}

// fallback is the catalogue's WithFallback: the stale copy, or, with
// nothing cached, (nil, nil), which tells the Transport to answer with its
// usual 503.
func (c *staleCache) fallback(req *http.Request, _ error) (*http.Response, error) {
	if resp := c.response(req); resp != nil { // 200, X-Cache: stale, Age: <seconds>
		return resp, nil
	}
	return nil, nil
}

// cachingTransport is the Transport's next RoundTripper: it passes every
// request on, and keeps the body of every 200 answer to a GET to host (the
// catalogue) for the catalogue's fallback, up to maxCached bytes: a
// longer page goes to its caller whole, and is not kept.
type cachingTransport struct {
	next  http.RoundTripper
	host  string // whose answers are kept
	cache *staleCache
}

// maxCached bounds the bytes cachingTransport keeps of one page.
const maxCached = 1 << 20

// RoundTrip implements http.RoundTripper.
func (t *cachingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || req.URL.Hostname() != t.host || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCached+1))
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	if len(body) > maxCached { // too long to keep: the caller reads it all, from where we stopped
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return resp, nil
	}
	resp.Body.Close()
	t.cache.put(req.URL.String(), resp.Header.Get("Content-Type"), body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// CloseIdleConnections forwards to the next RoundTripper, so that the
// client's CloseIdleConnections reaches the pool through the breaker.
func (t *cachingTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
