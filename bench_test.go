package httpbreaker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func benchRoundTrip(b *testing.B, rt http.RoundTripper, req *http.Request) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.RoundTrip(req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClosed compares a bare stub with the breaker in front of it:
// the difference is the breaker's overhead on the closed path.
func BenchmarkClosed(b *testing.B) {
	req := mustReq(b, "http://api.example.com/v1/users/42/orders")
	b.Run("bare", func(b *testing.B) { benchRoundTrip(b, newStub(), req) })
	b.Run("host-key", func(b *testing.B) { benchRoundTrip(b, New(newStub()), req) })
	b.Run("route-key", func(b *testing.B) {
		benchRoundTrip(b, New(newStub(), WithRoutes(benchPatterns...)), req)
	})
	b.Run("host-key-deadline", func(b *testing.B) {
		// As through an http.Client with a Timeout, which gives every
		// request a context deadline.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		benchRoundTrip(b, New(newStub()), req.WithContext(ctx))
	})
	b.Run("observer", func(b *testing.B) {
		// An observer that does nothing: the seam's own cost.
		benchRoundTrip(b, New(newStub(), WithObserver(nopObserver{})), req)
	})
	b.Run("retry-budget", func(b *testing.B) {
		// A first attempt under a budget: three header reads and one count.
		benchRoundTrip(b, New(newStub(), WithRetryBudget(0.2, 10)), req)
	})
	b.Run("slow-call-threshold", func(b *testing.B) {
		benchRoundTrip(b, New(newStub(), WithSlowCallThreshold(time.Second)), req)
	})
	b.Run("bulkhead", func(b *testing.B) {
		benchRoundTrip(b, New(newStub(), WithMaxConcurrent(100)), req)
	})
	b.Run("bulkhead-queue", func(b *testing.B) {
		// Uncontended: the queue is never entered.
		benchRoundTrip(b, New(newStub(), WithMaxConcurrent(100), WithQueue(64, time.Second)), req)
	})
	b.Run("50-policies", func(b *testing.B) {
		var opts []Option
		for i := range 49 {
			opts = append(opts, WithPolicy("h"+strconv.Itoa(i)+".example.com", WithMinRequests(5)))
		}
		opts = append(opts, WithPolicy("api.example.com", WithMinRequests(5)))
		benchRoundTrip(b, New(newStub(), opts...), req)
	})
	b.Run("call-timeout", func(b *testing.B) {
		tr := New(bodyStub{}, WithCallTimeout(time.Second))
		b.ReportAllocs()
		for b.Loop() {
			resp, err := tr.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close() // releases the call's context
		}
	})
	b.Run("call-timeout-bare", func(b *testing.B) {
		// The same stub without the option: call-timeout's baseline.
		tr := New(bodyStub{})
		b.ReportAllocs()
		for b.Loop() {
			resp, err := tr.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
	})
}

// BenchmarkQueueContended: 64 callers through a bulkhead of 8 with a line
// of 64, next yielding once per call. Every call is admitted (the line
// never overflows) and no place is lost.
func BenchmarkQueueContended(b *testing.B) {
	next := rtFunc(func(*http.Request) (*http.Response, error) {
		runtime.Gosched()
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})
	tr := New(next, WithMaxConcurrent(8), WithQueue(64, time.Minute))
	req := mustReq(b, "http://api.example.com/")
	b.SetParallelism(64 / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := tr.RoundTrip(req)
			if err != nil || IsRejected(resp) {
				b.Error("refused", err)
				return
			}
		}
	})
	if c := tr.breakers.get("api.example.com"); c.bulk.inflight.Load() != 0 || c.bulk.waiting.Load() != 0 {
		b.Fatalf("places lost: %d in flight, %d waiting", c.bulk.inflight.Load(), c.bulk.waiting.Load())
	}
}

// BenchmarkUpload is the closed path for a request with a body, which
// the Transport watches for the caller's own read errors (a shallow copy
// of the request, a wrapper around its body and one around its GetBody,
// which http.NewRequest sets for a bytes or strings reader), against the
// same request through the bare stub.
func BenchmarkUpload(b *testing.B) {
	body := &rewinder{}
	req := mustReq(b, "http://api.example.com/v1/upload")
	req.Method = http.MethodPost
	req.Body = body
	req.GetBody = func() (io.ReadCloser, error) { return body, nil }
	for _, c := range bareAndHostKey(func() http.RoundTripper { return newStub() }) {
		b.Run(c.name, func(b *testing.B) { benchRoundTrip(b, c.rt, req) })
	}
}

// rewinder is a request body that is never used up: a benchmark's
// request can be sent again without a new body.
type rewinder struct{}

func (*rewinder) Read([]byte) (int, error) { return 0, io.EOF }
func (*rewinder) Close() error             { return nil }

// BenchmarkUpdate is Update with 1,000 live breakers and 10 policies.
func BenchmarkUpdate(b *testing.B) {
	var opts []Option
	for i := range 10 {
		opts = append(opts, WithPolicy("h"+strconv.Itoa(i)+".example.com", WithMinRequests(5)))
	}
	tr := New(newStub(), opts...)
	for i := range 1000 {
		_, _ = tr.RoundTrip(mustReq(b, "http://h"+strconv.Itoa(i)+".example.com/"))
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.Update(append(opts, WithFailureRate(0.6))...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClosedDuringUpdate is the closed path while another goroutine
// calls Update every 100µs: the request path takes no lock and waits for
// nothing. (The allocations reported are Update's, in the other
// goroutine.)
func BenchmarkClosedDuringUpdate(b *testing.B) {
	tr := New(newStub())
	req := mustReq(b, "http://api.example.com/v1/users/42/orders")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
			_ = tr.Update(WithMinRequests(20 + i%2))
		}
	}()
	benchRoundTrip(b, tr, req)
	close(stop)
	<-done
}

// bodyStub answers each call with a new 200 whose body is one byte.
type bodyStub struct{}

func (bodyStub) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("."))}, nil
}

// BenchmarkBodyErrors is the closed path when the response body is read
// to its end and closed, as callers do, without and with WithBodyErrors:
// what counting at the body's end costs over counting at the headers.
func BenchmarkBodyErrors(b *testing.B) {
	req := mustReq(b, "http://api.example.com/v1/users/42/orders")
	buf := make([]byte, 8)
	for _, c := range []rtCase{
		{"bare", bodyStub{}},
		{"host-key", New(bodyStub{})},
		{"body-errors", New(bodyStub{}, WithBodyErrors())},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				for err == nil {
					_, err = resp.Body.Read(buf)
				}
				resp.Body.Close()
			}
		})
	}
}

// rtCase is a RoundTripper to benchmark, by name.
type rtCase struct {
	name string
	rt   http.RoundTripper
}

// bareAndHostKey are the two sides of an overhead: a stub alone and a
// Transport with its defaults in front of another.
func bareAndHostKey(stub func() http.RoundTripper) []rtCase {
	return []rtCase{{"bare", stub()}, {"host-key", New(stub())}}
}

// readingStub is a stub that reads the request as any real transport
// does, so that a cold request costs bare and wrapped calls alike.
type readingStub struct{ stub }

func (s *readingStub) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == "" || r.URL.Scheme == "" || r.Method == "" || r.Context() == nil {
		return nil, errors.New("unroutable")
	}
	return s.resp, nil
}

// BenchmarkClosedCold is BenchmarkClosed with cold CPU caches, as a
// request finds them after a real network round trip: before each call it
// writes 8 MiB elsewhere. ns/op is mostly that; call-ns/op is the call
// alone (timed around it, clock read included), to compare between bare
// and host-key. On a loopback round trip the difference is the overhead
// that bench/ measures.
func BenchmarkClosedCold(b *testing.B) {
	req := mustReq(b, "http://api.example.com/v1/users/42/orders")
	evict := make([]byte, 8<<20)
	stub := func() http.RoundTripper { return &readingStub{*newStub()} }
	cases := append(bareAndHostKey(stub), rtCase{"route-key", New(stub(), WithRoutes(benchPatterns...))})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				for i := 0; i < len(evict); i += 64 {
					evict[i]++
				}
				t0 := time.Now()
				if _, err := c.rt.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
				total += time.Since(t0)
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "call-ns/op")
		})
	}
}

// benchPatterns are 20 API-like routes; /v1/users/42/orders matches one.
var benchPatterns = []string{
	"GET /v1/users/{id}", "POST /v1/users", "GET /v1/users/{id}/orders", "PUT /v1/users/{id}",
	"DELETE /v1/users/{id}", "GET /v1/orders/{id}", "POST /v1/orders", "GET /v1/orders/{id}/items",
	"POST /v1/charges", "GET /v1/charges/{id}", "POST /v1/refunds", "GET /v1/refunds/{id}",
	"GET /v1/products", "GET /v1/products/{sku}", "GET /v1/search", "GET /v2/users/{id}",
	"GET /files/{path...}", "GET /healthz", "POST /v1/webhooks/{provider}", "GET /v1/invoices/{id}/pdf",
}

// BenchmarkClosedParallel runs one hot key from every P; compare with
// -cpu 1,2,8.
func BenchmarkClosedParallel(b *testing.B) {
	for _, c := range bareAndHostKey(func() http.RoundTripper { return newStub() }) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := mustReq(b, "http://api.example.com/v1/users/42")
				for pb.Next() {
					if _, err := c.rt.RoundTrip(req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkManyHosts round-robins over 1,000 hosts.
func BenchmarkManyHosts(b *testing.B) {
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = mustReq(b, "http://host"+strconv.Itoa(i)+".example.com/")
	}
	for _, c := range bareAndHostKey(func() http.RoundTripper { return newStub() }) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := c.rt.RoundTrip(reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkRejection measures the open path.
func BenchmarkRejection(b *testing.B) {
	req := mustReq(b, "http://api.example.com/")
	b.Run("error", func(b *testing.B) {
		tr := New(newStub(), WithRejectAsError())
		tr.Trip("api.example.com", time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tr.RoundTrip(req); err == nil {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("503", func(b *testing.B) {
		tr := New(newStub())
		tr.Trip("api.example.com", time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			if resp, _ := tr.RoundTrip(req); !IsRejected(resp) {
				b.Fatal("admitted")
			}
		}
	})
}

// BenchmarkBreakerFootprint reports the heap bytes of one live breaker
// with the default window.
func BenchmarkBreakerFootprint(b *testing.B) {
	const n = 1000
	var per float64
	for b.Loop() {
		tr := New(newStub(), WithMaxBreakers(n))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			_, _ = tr.RoundTrip(mustReq(b, "http://h"+strconv.Itoa(i)+".example.com/"))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(tr)
	}
	b.ReportMetric(per, "bytes/breaker")
	b.ReportMetric(per*n/(1<<20), "MiB/1000-breakers")
}
