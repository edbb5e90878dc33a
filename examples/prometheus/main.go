// Command prometheus shows a service that exports its breakers to
// Prometheus: it serves /metrics with promhttp from its own registry (never
// the global one) and calls two loopback dependencies, one healthy and one
// failing, each through its own client and httpbreaker Transport.
//
// Two Transports cannot register their collectors on one registry as they
// are: both export breaker_state, breaker_requests_total, … with the same
// labels, and the second WithMetrics would panic. Give each its own
// constant label with prometheus.WrapRegistererWith, as newClient does:
//
//	reg := prometheus.NewRegistry()
//	tr := httpbreaker.New(nil, httpbreaker.WithMetrics(
//		prometheus.WrapRegistererWith(prometheus.Labels{"client": "pricing"}, reg)))
//
// Wrap every one of them, with the same label name: Prometheus wants one
// set of label names per metric, so an unwrapped Transport beside wrapped
// ones is refused as well. A single Transport shared by every client needs
// no wrapping: its breakers are told apart by their breaker label already.
//
// The alert to go with it, breaker_state{state="open"} == 1, and others are
// in examples/alerts/breaker.rules.yml. An extra label such as client does
// not stop that expression from matching; it only shows up in the alert.
//
// Run it with: go run ./examples/prometheus (from the repository root). It
// prints the breaker series of one scrape and exits.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
}

// Breaker settings, small so that the failing dependency trips within the
// example's few requests.
const (
	minRequests = 5
	openTimeout = 30 * time.Second
	// requests is how many requests the example sends to the service.
	requests = 8
)

// Result is what run observed.
type Result struct {
	// Scrape is the whole /metrics response body.
	Scrape string
	// Healthy and Failing are the breaker keys (host:port) of the two
	// dependencies.
	Healthy, Failing string
	// Answers are the service's answers to its requests, in order.
	Answers []string
}

// newClient returns an *http.Client whose breakers report to reg under the
// constant label client=name.
func newClient(reg prometheus.Registerer, name string) (*http.Client, *httpbreaker.Transport) {
	tr := httpbreaker.New(nil,
		httpbreaker.WithMinRequests(minRequests),
		httpbreaker.WithOpenTimeout(openTimeout),
		httpbreaker.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"client": name}, reg)),
	)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, tr
}

// run starts the dependencies and the service on 127.0.0.1, sends the
// service some requests, scrapes its /metrics and prints the breaker
// series to w.
func run(ctx context.Context, w io.Writer) (*Result, error) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "42 in stock")
	}))
	defer healthy.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "pricing is down", http.StatusInternalServerError)
	}))
	defer failing.Close()

	// The service's own registry: /metrics shows exactly what is
	// registered here.
	reg := prometheus.NewRegistry()
	inventory, invTr := newClient(reg, "inventory")
	defer invTr.CloseIdleConnections()
	pricing, priceTr := newClient(reg, "pricing")
	defer priceTr.CloseIdleConnections()

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /quote", func(w http.ResponseWriter, r *http.Request) {
		stock := fetch(r.Context(), inventory, healthy.URL+"/stock/widget")
		price := fetch(r.Context(), pricing, failing.URL+"/price/widget")
		fmt.Fprintf(w, "stock: %s; price: %s\n", stock, price)
	})
	svc := httptest.NewServer(mux)
	defer svc.Close()

	callers := &http.Transport{}
	defer callers.CloseIdleConnections()
	caller := &http.Client{Transport: callers, Timeout: 5 * time.Second}

	res := &Result{
		Healthy: healthy.Listener.Addr().String(),
		Failing: failing.Listener.Addr().String(),
	}
	for i := 1; i <= requests; i++ {
		body, err := get(ctx, caller, svc.URL+"/quote")
		if err != nil {
			return nil, err
		}
		res.Answers = append(res.Answers, strings.TrimSpace(body))
		fmt.Fprintf(w, "GET /quote #%d: %s\n", i, strings.TrimSpace(body))
	}

	scrape, err := get(ctx, caller, svc.URL+"/metrics")
	if err != nil {
		return nil, err
	}
	res.Scrape = scrape

	fmt.Fprintf(w, "\nhealthy dependency: %s, failing dependency: %s\n", res.Healthy, res.Failing)
	fmt.Fprintln(w, "breaker series in GET /metrics:")
	sc := bufio.NewScanner(strings.NewReader(scrape))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "breaker_state{") ||
			(strings.HasPrefix(l, "breaker_requests_total{") && !strings.HasSuffix(l, " 0")) ||
			(strings.HasPrefix(l, "breaker_rejections_total{") && !strings.HasSuffix(l, " 0")) {
			fmt.Fprintln(w, l)
		}
	}
	return res, sc.Err()
}

// fetch calls a dependency and says what it got, telling a breaker
// rejection from the dependency's own failure.
func fetch(ctx context.Context, c *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "error: " + err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch {
	case httpbreaker.IsRejected(resp):
		return "unavailable (breaker open)"
	case resp.StatusCode != http.StatusOK:
		return "failed (" + resp.Status + ")"
	}
	return strings.TrimSpace(string(body))
}

// get returns the body of a GET.
func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}
