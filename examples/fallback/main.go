// Command fallback shows the three honest answers a service can give when
// a dependency is down, with httpbreaker.
//
// A loopback "storefront" has three dependencies: a catalogue, a
// recommender and a payment provider, each behind its own client and
// breaker. The program calls the storefront while they are up, takes them
// down (their port refuses connections), and calls again:
//
//   - a product page falls back to the last good copy, marked stale
//     ("stale": true, "age_seconds"), through WithFallback;
//   - recommendations fall back to a default list marked
//     "degraded": true, through WithFallback;
//   - a payment gets no fallback: the storefront sees the breaker's refusal
//     with IsRejected and answers 503 with Retry-After and "you have not
//     been charged", never a fabricated receipt.
//
// Usage:
//
//	go run ./examples/fallback
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"
)

// main runs the walkthrough.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "fallback:", err)
		os.Exit(1)
	}
}

// run starts the dependencies and the storefront on loopback and prints
// what the storefront answers before and after the dependencies go down,
// age after the first answers (so that the cached copy has an age to
// show).
func run(ctx context.Context, w io.Writer, age time.Duration) error {
	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.stop()
	shop := newStorefront(up.url)
	defer shop.close()
	srv, err := serve(shop)
	if err != nil {
		return err
	}
	defer srv.close()

	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	show := func(method, path, body string, header ...string) error {
		status, h, b, err := call(ctx, c, method, srv.url+path, body, header...)
		if err != nil {
			return err
		}
		extra := ""
		if ra := h.Get("Retry-After"); ra != "" {
			extra = "  Retry-After: " + ra
		}
		fmt.Fprintf(w, "  %-4s %-20s → %d%s  %s\n", method, path, status, extra, strings.TrimSpace(b))
		return nil
	}
	states := func() {
		fmt.Fprintf(w, "  breakers: catalogue %s, recommender %s, payments %s\n",
			shop.catTr.State(keyOf(up.url)), shop.recTr.State(keyOf(up.url)), shop.payTr.State(keyOf(up.url)))
	}

	fmt.Fprintln(w, "Dependencies up:")
	steps := []func() error{
		func() error { return show("GET", "/products/42", "") },
		func() error { return show("GET", "/recommendations/7", "") },
		func() error { return show("POST", "/pay", `{"amount_cents":12900}`, "Idempotency-Key", "order-1001") },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}

	select {
	case <-time.After(age):
	case <-ctx.Done():
		return ctx.Err()
	}
	up.stop()
	fmt.Fprintf(w, "\n%v later the dependencies go down (their port refuses connections). The first calls fail and trip\n", age)
	fmt.Fprintln(w, "the breakers; the storefront answers the same before and after the trip, but after it costs no call:")
	for i := range 3 {
		if err := show("GET", "/products/42", ""); err != nil {
			return err
		}
		if i == 2 {
			states()
		}
	}
	fmt.Fprintln(w)
	for range 3 {
		if err := show("GET", "/recommendations/7", ""); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	for range 3 {
		if err := show("POST", "/pay", `{"amount_cents":12900}`, "Idempotency-Key", "order-1002"); err != nil {
			return err
		}
	}
	states()
	fmt.Fprintln(w, `
  Product pages: last good copy, marked "stale" with its age (WithFallback; the error path serves it too).
  Recommendations: the bestseller list, marked "degraded" (WithFallback).
  Payments: no fallback. 502 while the outcome is unknown (retry with the same Idempotency-Key);
  503 + Retry-After once the breaker refuses, because a refused call was never sent: not charged, safe to retry.`)
	return nil
}

// call sends one request to the storefront and returns the status, the
// headers and the body. header holds name, value pairs.
func call(ctx context.Context, c *http.Client, method, url, body string, header ...string) (int, http.Header, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), err
}

// server is an HTTP server on a loopback port: the storefront, or the
// upstream.
type server struct {
	url  string
	srv  *http.Server
	done chan struct{} // closed when Serve returns
}

// serve serves h on 127.0.0.1 on a free port.
func serve(h http.Handler) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{
		url:  "http://" + l.Addr().String(),
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("fallback: server: %v", err)
		}
	}()
	return s, nil
}

// close shuts the server down.
func (s *server) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
}
