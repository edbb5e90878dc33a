package httpbreaker_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// One Transport serves every dependency of a client, each tuned apart:
// payments trips early and stays open long, recommendations is watched in
// shadow mode before it may refuse anything, and search keeps the
// Transport-wide settings.
func ExampleWithPolicy() {
	// Every dependency is down; a dialer sends each name to it on loopback.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer down.Close()
	next := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, down.Listener.Addr().String())
	}}
	defer next.CloseIdleConnections()

	tr := httpbreaker.New(next,
		httpbreaker.WithMinRequests(20),
		httpbreaker.WithPolicy("payments.internal",
			httpbreaker.WithMinRequests(3), httpbreaker.WithFailureRate(0.25),
			httpbreaker.WithOpenTimeout(30*time.Second), httpbreaker.WithMaxConcurrent(40)),
		httpbreaker.WithPolicy("recs.internal",
			httpbreaker.WithMode(httpbreaker.ModeShadow), httpbreaker.WithMinRequests(3),
			httpbreaker.WithCallTimeout(150*time.Millisecond), httpbreaker.WithMaxConcurrent(10)),
	)
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for range 5 {
		for _, host := range []string{"payments.internal", "recs.internal", "search.internal"} {
			resp, err := client.Get("http://" + host + "/")
			if err != nil {
				fmt.Println("error:", err)
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	for _, s := range tr.Snapshot() {
		fmt.Printf("%-17s %-7s %-6s min=%-2d rate=%.2f open=%-3v call=%-5v bulkhead=%d\n", s.Key, s.Mode, s.State,
			s.Settings.MinRequests, s.Settings.FailureRate, s.Settings.OpenTimeout, s.Settings.CallTimeout, s.Settings.MaxConcurrent)
	}
	// Output:
	// payments.internal enforce open   min=3  rate=0.25 open=30s call=0s    bulkhead=40
	// recs.internal     shadow  open   min=3  rate=0.50 open=5s  call=150ms bulkhead=10
	// search.internal   enforce closed min=20 rate=0.50 open=5s  call=0s    bulkhead=0
}
