//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// service is the program's service: it calls its two dependencies through
// one Transport, whose settings come from a JSON file that reload applies
// again while the service runs.
type service struct {
	tr     *httpbreaker.Transport
	client *http.Client
	path   string       // the settings file
	log    *slog.Logger // reloads, and the Transport's transitions and changes
	code   []httpbreaker.Option

	mu sync.Mutex // one reload at a time, so that an older file never lands after a newer one
}

// codeOptions are the tunables the code sets and no file can say (a
// fallback is a function). Update builds the settings from the defaults
// and the options it is given, as New does, so every reload passes these
// again; left out, pricing.internal would lose its fallback.
func codeOptions() []httpbreaker.Option {
	return []httpbreaker.Option{
		httpbreaker.WithPolicy(pricingHost, httpbreaker.WithFallback(cachedPrice)),
	}
}

// cachedPrice is pricing.internal's fallback: the last price known, marked
// as such.
func cachedPrice(req *http.Request, _ error) (*http.Response, error) {
	const body = "12.90 (cached)\n"
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// newService reads the settings file at path and returns a service whose
// Transport sends to next under those settings. A bad file here is an
// error: there are no old settings to keep yet.
func newService(path string, next http.RoundTripper, log *slog.Logger) (*service, error) {
	s := &service{path: path, log: log, code: codeOptions()}
	opts, err := s.load()
	if err != nil {
		return nil, err
	}
	s.tr = httpbreaker.New(next, append(opts, httpbreaker.WithLogger(log))...)
	s.client = &http.Client{Transport: s.tr, Timeout: 2 * time.Second}
	return s, nil
}

// close closes the idle connections to the dependencies.
func (s *service) close() { s.tr.CloseIdleConnections() }

// load reads the settings file and returns the options to build the
// Transport's settings from: the code's, then the file's.
func (s *service) load() ([]httpbreaker.Option, error) {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return nil, err
	}
	cfg, err := httpbreaker.ParseConfig(data) // decodes and validates
	if err != nil {
		return nil, err
	}
	opts, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(s.code), opts...), nil
}

// reload reads the settings file again and applies it with
// Transport.Update, which keeps every breaker's state. A file that does
// not read, decode or validate, or that Update refuses, is logged at Error
// and ignored: the settings in force stay. It returns that error.
func (s *service) reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	opts, err := s.load()
	if err == nil {
		err = s.tr.Update(opts...) // all or nothing
	}
	if err != nil {
		s.log.Error("reload: settings file refused; the old settings stay", "file", s.path, "error", err)
		return err
	}
	s.log.Info("reload: settings applied", "file", s.path)
	return nil
}

// reloadOnSIGHUP makes every SIGHUP reload s, and calls reloaded (if not
// nil) with each reload's result, until the returned stop is called. The
// signal is subscribed to before reloadOnSIGHUP returns. stop waits for a
// reload in progress to finish.
func (s *service) reloadOnSIGHUP(reloaded func(error)) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-quit:
				return
			case <-hup:
				err := s.reload()
				if reloaded != nil {
					reloaded(err)
				}
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(quit)
		wg.Wait()
	}
}

// quote asks both dependencies about a widget and says what each answered.
func (s *service) quote(ctx context.Context) string {
	return "stock: " + s.call(ctx, inventoryURL) + "; price: " + s.call(ctx, pricingURL)
}

// call GETs url and describes the answer: the body, a failure, or the
// breaker's refusal with its Retry-After.
func (s *service) call(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "failed (" + err.Error() + ")"
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return "failed (" + err.Error() + ")"
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	switch {
	case httpbreaker.IsRejected(resp):
		return fmt.Sprintf("refused by its breaker (Retry-After: %s)", resp.Header.Get("Retry-After"))
	case resp.StatusCode != http.StatusOK:
		return "failed (" + resp.Status + ")"
	}
	return strings.TrimSpace(string(body))
}
