package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// The storefront's three dependencies, by host name. These are the
// storefront's breaker keys (HostKey of their URLs) and the selectors of
// its policies. No DNS knows them: the storefront's own dialer (see
// upstream.transport) sends them to loopback listeners.
const (
	catalogueHost = "catalogue.internal"
	recsHost      = "recs.internal"
	paymentsHost  = "payments.internal"
)

// hosts are the dependencies' host names, in the order the walkthrough
// prints them.
var hosts = []string{catalogueHost, recsHost, paymentsHost}

// upstream plays the storefront's three dependencies, each on its own
// loopback port, as three services on three hosts would be: the
// catalogue, the recommender and the payment provider. Each can go down on
// its own (down), and the recommender can hang (hangRecs).
type upstream struct {
	deps map[string]*server // by host name

	charges  atomic.Int64  // payments captured
	hang     atomic.Bool   // the recommender takes calls and never answers
	quit     chan struct{} // closed by stop: hanging handlers return
	quitOnce sync.Once
}

// startUpstream serves the three dependencies on 127.0.0.1, one port
// each.
func startUpstream() (*upstream, error) {
	u := newUpstream()
	for _, host := range hosts {
		s, err := serve(u.handler(host))
		if err != nil {
			u.stop()
			return nil, err
		}
		u.deps[host] = s
	}
	return u, nil
}

// newUpstream returns the dependencies, not yet serving.
func newUpstream() *upstream {
	return &upstream{deps: map[string]*server{}, quit: make(chan struct{})}
}

// handler is the API of the dependency at host, or nil for a host that is
// none of them.
func (u *upstream) handler(host string) http.Handler {
	mux := http.NewServeMux()
	switch host {
	case catalogueHost:
		mux.HandleFunc("GET /products/{id}", u.product)
	case recsHost:
		mux.HandleFunc("GET /recommendations/{user}", u.recommendations)
	case paymentsHost:
		mux.HandleFunc("POST /payments", u.pay)
	default:
		return nil
	}
	return mux
}

// transport is the storefront's next RoundTripper: a pooled
// *http.Transport whose dialer sends each dependency's host name, on any
// port, to that dependency's loopback listener, and refuses every other
// name. Nothing is looked up in DNS.
func (u *upstream) transport() *http.Transport {
	addrs := make(map[string]string, len(u.deps))
	for host, s := range u.deps {
		addrs[host] = s.addr
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	tr := cleanhttp.DefaultPooledTransport()
	tr.Proxy = nil // never send the example's traffic to an HTTP_PROXY
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		to, ok := addrs[host]
		if !ok {
			return nil, &net.DNSError{Err: "not one of the example's dependencies", Name: host, IsNotFound: true}
		}
		return d.DialContext(ctx, network, to)
	}
	return tr
}

// down takes the dependency at host down: its port closes and every new
// connection is refused, as when the process has died.
func (u *upstream) down(host string) {
	if s := u.deps[host]; s != nil {
		s.kill()
	}
}

// hangRecs makes the recommender hang: it accepts calls and never
// answers, until the caller gives up or stop runs.
func (u *upstream) hangRecs() { u.hang.Store(true) }

// stop takes every dependency down.
func (u *upstream) stop() {
	u.quitOnce.Do(func() { close(u.quit) })
	for _, host := range hosts {
		u.down(host)
	}
}

// product is the catalogue: GET /products/{id}.
func (u *upstream) product(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	writeJSON(w, http.StatusOK, product{ID: id, Name: "Burr grinder " + id, PriceCents: 12900})
}

// recommendations is the recommender: GET /recommendations/{user}. While
// it hangs, it answers nothing until the caller goes away.
func (u *upstream) recommendations(w http.ResponseWriter, r *http.Request) {
	if u.hang.Load() {
		select {
		case <-r.Context().Done():
		case <-u.quit:
		}
		return
	}
	writeJSON(w, http.StatusOK, recommendations{Items: []string{"p-17", "p-23", "p-5"}})
}

// pay is the payment provider: POST /payments with an Idempotency-Key
// and a JSON {"amount_cents": n}. It answers 201 with the payment.
func (u *upstream) pay(w http.ResponseWriter, r *http.Request) {
	var in struct {
		AmountCents int64 `json:"amount_cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.AmountCents <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad amount"})
		return
	}
	n := u.charges.Add(1)
	writeJSON(w, http.StatusCreated, receipt{
		PaymentID:   fmt.Sprintf("pay_%04d", n),
		AmountCents: in.AmountCents,
		Status:      "captured",
	})
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
