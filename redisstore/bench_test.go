package redisstore

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// okTransport answers every request with a 200 from memory: the benchmark
// measures the breaker, not the network.
type okTransport struct{}

func (okTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// BenchmarkClosedPathWithStore compares a request through a closed breaker
// with and without a Store attached. They cost the same: the closed path
// does not touch the Store at all (Lookup runs once, when a breaker is
// made; Publish and ProbeLease only on transitions and in the open state).
func BenchmarkClosedPathWithStore(b *testing.B) {
	r := startRedis(b)
	s := newTestStore(b, r.Client(b), Options{})
	waitHealthy(b, 5*time.Second, s)
	req, err := http.NewRequest(http.MethodGet, "http://dependency.internal/v1/items", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts []httpbreaker.Option
	}{
		{"without", nil},
		{"with", []httpbreaker.Option{httpbreaker.WithStore(s)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			tr := httpbreaker.New(okTransport{}, c.opts...)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatal(resp, err)
				}
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			tr := httpbreaker.New(okTransport{}, c.opts...)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := tr.RoundTrip(req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLookup is the cost a Transport pays when it makes a breaker.
func BenchmarkLookup(b *testing.B) {
	s, _ := offlineStore(b, Options{})
	s.join(nil).Publish(httpbreaker.Hint{Key: "dependency.internal", State: httpbreaker.StateOpen, RetryAt: s.now().Add(time.Minute)})
	b.ReportAllocs()
	for b.Loop() {
		s.Lookup("dependency.internal")
	}
}

// countingStore counts the calls a Transport makes into its Store and
// its member, once it has joined.
type countingStore struct {
	*Store
	calls atomic.Int64
}

type countingMember struct {
	s *countingStore
	m httpbreaker.Member
}

func (s *countingStore) Join(f func(httpbreaker.Hint)) httpbreaker.Member {
	return countingMember{s: s, m: s.Store.Join(f)}
}
func (s *countingStore) Lookup(k string) (httpbreaker.Hint, bool) {
	s.calls.Add(1)
	return s.Store.Lookup(k)
}
func (m countingMember) Publish(h httpbreaker.Hint) { m.s.calls.Add(1); m.m.Publish(h) }
func (m countingMember) ProbeLease(k string, ttl time.Duration) httpbreaker.Lease {
	m.s.calls.Add(1)
	return m.m.ProbeLease(k, ttl)
}

// TestClosedPathDoesNotTouchStore is the deterministic half of the
// benchmark: after the breaker is made, requests through a closed breaker
// make no call into the Store, whatever they return.
func TestClosedPathDoesNotTouchStore(t *testing.T) {
	s, _ := offlineStore(t, Options{})
	cs := &countingStore{Store: s}
	tr := httpbreaker.New(okTransport{}, httpbreaker.WithStore(cs))
	req, _ := http.NewRequest(http.MethodGet, "http://dependency.internal/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if n := cs.calls.Load(); n != 1 {
		t.Fatalf("%d Store calls making the breaker, want 1 (Lookup)", n)
	}
	for range 1000 {
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.calls.Load(); n != 1 {
		t.Errorf("%d Store calls on the closed path", n-1)
	}
}
