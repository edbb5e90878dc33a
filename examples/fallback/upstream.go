package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
)

// upstream plays the storefront's three dependencies on one loopback
// port: the catalogue, the recommender and the payment provider. In
// production they would be three services with three hosts; each gets its
// own client and its own breaker in the storefront either way.
type upstream struct {
	*server

	payments atomic.Int64 // payments captured
}

// startUpstream serves the three dependencies on 127.0.0.1.
func startUpstream() (*upstream, error) {
	u := &upstream{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /products/{id}", u.product)
	mux.HandleFunc("GET /recommendations/{user}", u.recommendations)
	mux.HandleFunc("POST /payments", u.pay)
	s, err := serve(mux)
	if err != nil {
		return nil, err
	}
	u.server = s
	return u, nil
}

// stop takes the dependencies down: the port closes and every new
// connection is refused, as when the process has died.
func (u *upstream) stop() {
	u.srv.Close()
	<-u.done
}

// product is the catalogue: GET /products/{id}.
func (u *upstream) product(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	writeJSON(w, http.StatusOK, product{ID: id, Name: "Burr grinder " + id, PriceCents: 12900})
}

// recommendations is the recommender: GET /recommendations/{user}.
func (u *upstream) recommendations(w http.ResponseWriter, r *http.Request) {
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
	n := u.payments.Add(1)
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
