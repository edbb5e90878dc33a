// Package harness holds the scenarios that every library package under
// bench/ runs, so that each library is measured by the same code in its own
// process (hystrix-go leaves global goroutines behind that would slow
// whatever ran after it in the same process).
//
// Every library package declares the same benchmarks:
//
//	BenchmarkClosed/{bare,host,route,hostmap}   one request, closed breaker
//	BenchmarkParallel/{bare,wrapped}            one hot key from every P (run with -cpu 1,2,8)
//	BenchmarkManyHosts/{bare,wrapped}           1,000 hosts round-robin
//	BenchmarkOpen/{error,503}                   the open path (peers' 503: As503)
//	BenchmarkLoopback                           real loopback server, paired bare/wrapped
//
// The difference wrapped − bare, measured in the same process, is the
// wrapper's overhead.
package harness

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Config is what a scenario asks of a library's breaker.
type Config struct {
	// OpenTimeout is how long the breaker stays open after it trips.
	OpenTimeout time.Duration
}

// DefaultConfig matches httpbreaker's defaults where a peer has the knob:
// 10s window, 20 requests minimum, 50% failure rate, 5s open.
var DefaultConfig = Config{OpenTimeout: 5 * time.Second}

// A Wrap puts a library's breaker(s) in front of next.
type Wrap func(next http.RoundTripper, cfg Config) http.RoundTripper

// Lib describes how one library wraps a RoundTripper.
type Lib struct {
	Name string
	// One wraps next with a single breaker: every request shares it.
	One Wrap
	// PerHost wraps next with one breaker per request host.
	PerHost Wrap
	// Route wraps next with one breaker per route pattern. Nil for
	// libraries without routing: the scenario then uses One.
	Route func(next http.RoundTripper, cfg Config, patterns []string) http.RoundTripper
	// Open lists the open-path modes: name → wrapper and a predicate that
	// tells a rejection. Peers have one mode, "error".
	Open map[string]OpenMode
}

// OpenMode is one way a library answers a request its open breaker refuses.
type OpenMode struct {
	Wrap     Wrap
	Rejected func(resp *http.Response, err error) bool
}

// IsErr returns a Rejected predicate: err is target (errors.Is).
func IsErr(target error) func(*http.Response, error) bool {
	return func(_ *http.Response, err error) bool { return errors.Is(err, target) }
}

// ErrServer is what wrappers hand their breaker when the response was a
// 5xx, for libraries that count only errors. The wrapper returns the
// response itself to its caller, not this error.
var ErrServer = errors.New("bench: 5xx response")

// Call sends req to next for a library that counts only errors: a 5xx
// response comes back beside ErrServer, for the breaker to count.
func Call(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := next.RoundTrip(req)
	if err == nil && resp.StatusCode >= 500 {
		return resp, ErrServer
	}
	return resp, err
}

// Result is what a wrapper built on Call returns once its breaker has
// run the call: the 5xx response itself for ErrServer, else the response
// or the error, never both.
func Result(resp *http.Response, err error) (*http.Response, error) {
	switch {
	case err == ErrServer:
		return resp, nil
	case err != nil:
		return nil, err
	}
	return resp, nil
}

// ErrorLib describes a library without routing whose wrap puts one
// breaker in front of next and whose open breaker fails with openErr;
// per host, it gets a HostMap of such wrappers.
func ErrorLib(name string, wrap Wrap, openErr error) Lib {
	return Lib{
		Name: name,
		One:  wrap,
		PerHost: func(next http.RoundTripper, cfg Config) http.RoundTripper {
			return NewHostMap(func() http.RoundTripper { return wrap(next, cfg) })
		},
		Open: map[string]OpenMode{
			"error": {Wrap: wrap, Rejected: IsErr(openErr)},
			"503":   As503(wrap, openErr),
		},
	}
}

// IsFailure is the classification every peer wrapper uses: a transport
// error or a 5xx response. (httpbreaker uses its DefaultClassifier.)
func IsFailure(resp *http.Response, err error) bool {
	return err != nil || (resp != nil && resp.StatusCode >= 500)
}

// Stub is the cheapest realistic next: it returns a fresh 200 response
// with an empty body, as a real transport returns a fresh response per
// call (failsafehttp replaces resp.Body, so a shared response would grow a
// chain of wrappers). When Fail is set it returns a fresh 500 instead.
// Calls counts every call.
type Stub struct {
	Fail  atomic.Bool
	Calls atomic.Int64
}

// RoundTrip implements http.RoundTripper.
func (s *Stub) RoundTrip(req *http.Request) (*http.Response, error) {
	s.Calls.Add(1)
	code := http.StatusOK
	if s.Fail.Load() {
		code = http.StatusInternalServerError
	}
	return &http.Response{StatusCode: code, Body: http.NoBody, Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
}

// Req returns a GET request for url, failing tb if url is invalid.
func Req(tb testing.TB, url string) *http.Request {
	tb.Helper()
	r, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// RouteURL is the request of the closed-path scenarios: a 4-segment path
// that one of Patterns matches ("GET /v1/users/{id}/orders").
const RouteURL = "http://api.example.com/v1/users/42/orders"

// Patterns are 20 API-like routes.
var Patterns = []string{
	"GET /v1/users/{id}", "POST /v1/users", "GET /v1/users/{id}/orders", "PUT /v1/users/{id}",
	"DELETE /v1/users/{id}", "GET /v1/orders/{id}", "POST /v1/orders", "GET /v1/orders/{id}/items",
	"POST /v1/charges", "GET /v1/charges/{id}", "POST /v1/refunds", "GET /v1/refunds/{id}",
	"GET /v1/products", "GET /v1/products/{sku}", "GET /v1/search", "GET /v2/users/{id}",
	"GET /files/{path...}", "GET /healthz", "POST /v1/webhooks/{provider}", "GET /v1/invoices/{id}/pdf",
}

// warm sends req through rt once, untimed, so that a breaker made on
// first use exists before timing starts.
func warm(tb testing.TB, rt http.RoundTripper, req *http.Request) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
}

// loop runs rt on req b.N times, closing each response body as a client
// would.
func loop(b *testing.B, rt http.RoundTripper, req *http.Request) {
	warm(b, rt, req)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// Closed is BenchmarkClosed: bare stub; one breaker keyed by host; keyed
// by route (peers: their single breaker again); a per-host map of
// breakers on one hot key.
func Closed(b *testing.B, lib Lib) {
	req := Req(b, RouteURL)
	b.Run("bare", func(b *testing.B) { loop(b, &Stub{}, req) })
	b.Run("host", func(b *testing.B) { loop(b, lib.One(&Stub{}, DefaultConfig), req) })
	b.Run("route", func(b *testing.B) {
		var rt http.RoundTripper
		if lib.Route != nil {
			rt = lib.Route(&Stub{}, DefaultConfig, Patterns)
		} else {
			rt = lib.One(&Stub{}, DefaultConfig)
		}
		loop(b, rt, req)
	})
	b.Run("hostmap", func(b *testing.B) { loop(b, lib.PerHost(&Stub{}, DefaultConfig), req) })
}

// Parallel is BenchmarkParallel: one hot key hit from every P.
func Parallel(b *testing.B, lib Lib) {
	run := func(b *testing.B, rt http.RoundTripper) {
		warm(b, rt, Req(b, RouteURL))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := Req(b, RouteURL)
			for pb.Next() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
			}
		})
	}
	b.Run("bare", func(b *testing.B) { run(b, &Stub{}) })
	b.Run("wrapped", func(b *testing.B) { run(b, lib.One(&Stub{}, DefaultConfig)) })
}

// ManyHosts is BenchmarkManyHosts: 1,000 hosts round-robin through a
// per-host wrapper. Every host's breaker exists before timing starts.
func ManyHosts(b *testing.B, lib Lib) {
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = Req(b, "http://host"+strconv.Itoa(i)+".example.com/v1/users/42/orders")
	}
	run := func(b *testing.B, rt http.RoundTripper) {
		for _, r := range reqs { // create every breaker
			warm(b, rt, r)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			resp, err := rt.RoundTrip(reqs[i])
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if i++; i == len(reqs) {
				i = 0
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, &Stub{}) })
	b.Run("wrapped", func(b *testing.B) { run(b, lib.PerHost(&Stub{}, DefaultConfig)) })
}

// Trip drives rt's breaker open through its own trip logic: the stub
// fails until rt rejects a request (some libraries, hystrix-go, update
// their health asynchronously, hence the pauses). It fails tb if the
// breaker does not open within 10s.
func Trip(tb testing.TB, rt http.RoundTripper, stub *Stub, req *http.Request, rejected func(*http.Response, error) bool) {
	tb.Helper()
	stub.Fail.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		if rejected(resp, err) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("breaker did not open after %d failing requests (last: %v, %v)", i+1, resp, err)
		}
		if i >= 100 {
			time.Sleep(time.Millisecond)
		}
	}
}

// Open is BenchmarkOpen: each open-path mode of the library, on a breaker
// tripped by failures and held open for an hour.
func Open(b *testing.B, lib Lib) {
	cfg := Config{OpenTimeout: time.Hour}
	for _, name := range []string{"error", "503"} {
		m, ok := lib.Open[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			stub := &Stub{}
			rt := m.Wrap(stub, cfg)
			req := Req(b, RouteURL)
			Trip(b, rt, stub, req, m.Rejected)
			before := stub.Calls.Load()
			b.ReportAllocs()
			for b.Loop() {
				resp, _ := rt.RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
			}
			if n := stub.Calls.Load() - before; n != 0 {
				b.Fatalf("%d requests reached next while the breaker was open", n)
			}
		})
	}
}

// Loopback is BenchmarkLoopback: a real round trip to an httptest server
// through a pooled transport, bare and wrapped in alternating order in the
// same loop, sharing one connection pool. ns/op is the time of the pair.
// It reports medians, which a stall of the loaded machine does not move
// as it moves a mean: bare-ns/op and wrapped-ns/op (of each side's
// round trips), overhead-ns/op (of the per-pair differences wrapped −
// bare) and ratio (median wrapped / median bare).
func Loopback(b *testing.B, lib Lib) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	wrapped := lib.One(tr, DefaultConfig)
	req := Req(b, srv.URL+"/v1/users/42/orders")
	once := func(rt http.RoundTripper) time.Duration {
		t0 := time.Now()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	for range 100 { // warm the pool
		once(tr)
		once(wrapped)
	}
	bare := make([]time.Duration, 0, 1<<16)
	wrap := make([]time.Duration, 0, 1<<16)
	diff := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		var db, dw time.Duration
		if len(bare)%2 == 0 {
			db = once(tr)
			dw = once(wrapped)
		} else {
			dw = once(wrapped)
			db = once(tr)
		}
		bare, wrap, diff = append(bare, db), append(wrap, dw), append(diff, dw-db)
	}
	mb, mw := medianDur(bare), medianDur(wrap)
	b.ReportMetric(float64(mb.Nanoseconds()), "bare-ns/op")
	b.ReportMetric(float64(mw.Nanoseconds()), "wrapped-ns/op")
	b.ReportMetric(float64(medianDur(diff).Nanoseconds()), "overhead-ns/op")
	b.ReportMetric(float64(mw)/float64(mb), "ratio")
}

func medianDur(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
