// Command fallback shows the three honest answers a service can give when
// a dependency is down, with httpbreaker.
//
// A loopback "storefront" has three dependencies: a catalogue
// (catalogue.internal), a recommender (recs.internal) and a payment
// provider (payments.internal). It calls all three through one
// *http.Client and one httpbreaker Transport, with a breaker per host and
// a policy per dependency (WithPolicy): the catalogue has a stale-copy
// fallback, the recommender a 150ms call timeout, a bulkhead of 10 and a
// degraded default, the payment provider a 25% failure rate, a 30s open
// period, a bulkhead of 40 and no fallback. The storefront's own dialer
// sends the three names to three 127.0.0.1 listeners; nothing is looked
// up in DNS. The program calls the storefront while they are up, takes
// the catalogue and the payment provider down (their ports refuse
// connections), makes the recommender hang, and calls again:
//
//   - a product page falls back to the last good copy, marked stale
//     ("stale": true, "age_seconds"), through the catalogue's WithFallback;
//   - recommendations are cut at their call timeout and fall back to a
//     default list marked "degraded": true, through the recommender's
//     WithFallback;
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
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/httpbreaker/httpbreaker"
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
// what the storefront answers before and after the dependencies fail,
// age after the first answers (so that the cached copy has an age to
// show).
func run(ctx context.Context, w io.Writer, age time.Duration) error {
	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.stop()
	shop := newStorefront(up.transport())
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
	repeat := func(n int, method, path, body string, header ...string) error {
		for range n {
			if err := show(method, path, body, header...); err != nil {
				return err
			}
		}
		return nil
	}
	states := func() {
		parts := make([]string, len(hosts))
		for i, h := range hosts {
			parts[i] = h + " " + shop.tr.State(h).String()
		}
		fmt.Fprintf(w, "  breakers: %s\n", strings.Join(parts, ", "))
	}

	fmt.Fprintln(w, "Dependencies up:")
	if err := repeat(1, "GET", "/products/42", ""); err != nil {
		return err
	}
	if err := repeat(1, "GET", "/recommendations/7", ""); err != nil {
		return err
	}
	if err := repeat(1, "POST", "/pay", `{"amount_cents":12900}`, "Idempotency-Key", "order-1001"); err != nil {
		return err
	}

	select {
	case <-time.After(age):
	case <-ctx.Done():
		return ctx.Err()
	}
	up.down(catalogueHost)
	up.down(paymentsHost)
	up.hangRecs()
	fmt.Fprintf(w, "\n%v later the catalogue and the payment provider go down (their ports refuse connections), and\n", age)
	fmt.Fprintln(w, "the recommender hangs (it takes calls and never answers; its 150ms call timeout cuts each one).")
	fmt.Fprintln(w, "The first calls fail and trip the breakers; the storefront answers the same before and after the")
	fmt.Fprintln(w, "trip, but after it costs no call:")
	if err := repeat(3, "GET", "/products/42", ""); err != nil {
		return err
	}
	states()
	fmt.Fprintln(w)
	if err := repeat(3, "GET", "/recommendations/7", ""); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := repeat(3, "POST", "/pay", `{"amount_cents":12900}`, "Idempotency-Key", "order-1002"); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n  One client, one Transport, a breaker per host, each under its own policy (Transport.Snapshot):")
	printSnapshot(w, shop.tr.Snapshot())
	fmt.Fprintln(w, `
  Product pages: last good copy, marked "stale" with its age (the catalogue's WithFallback; the error path serves it too).
  Recommendations: the bestseller list, marked "degraded" (the recommender's WithFallback).
  Payments: no fallback. 502 while the outcome is unknown (retry with the same Idempotency-Key);
  503 + Retry-After once the breaker refuses, because a refused call was never sent: not charged, safe to retry.`)
	return nil
}

// printSnapshot prints each breaker's state and the settings its policy
// gave it.
func printSnapshot(w io.Writer, snap []httpbreaker.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    breaker\tstate\tfailure rate\topen for\tcall timeout\tbulkhead")
	for _, s := range snap {
		fmt.Fprintf(tw, "    %s\t%s\t%g%%\t%v\t%s\t%s\n", s.Key, s.State,
			s.Settings.FailureRate*100, s.Settings.OpenTimeout,
			orNone(s.Settings.CallTimeout, s.Settings.CallTimeout.String()),
			orNone(s.Settings.MaxConcurrent, strconv.FormatInt(s.Settings.MaxConcurrent, 10)))
	}
	tw.Flush()
}

// orNone is text, or "none" when v is zero.
func orNone[T comparable](v T, text string) string {
	var zero T
	if v == zero {
		return "none"
	}
	return text
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
	addr string // host:port
	url  string // http://addr
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
		addr: l.Addr().String(),
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

// kill closes the server at once: its port closes, open connections are
// cut, and every new connection is refused, as when the process has died.
func (s *server) kill() {
	s.srv.Close()
	<-s.done
}
