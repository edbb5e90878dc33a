package harness

import (
	"net/http"
	"sync"
)

// HostMap is how peers without per-dependency breakers get one: a
// sync.Map from r.URL.Host (as is: no lower-casing, no cap on the number
// of hosts) to a RoundTripper holding that host's breaker, made on first
// use. sync.Map suits the read-mostly load: it is what a user of a
// single-breaker library would reach for (httpbreaker keeps its breakers
// in a table of its own, see docs/performance.md).
type HostMap struct {
	m    sync.Map // host string → http.RoundTripper
	make func() http.RoundTripper
}

// NewHostMap returns a HostMap that makes each host's RoundTripper with mk.
func NewHostMap(mk func() http.RoundTripper) *HostMap { return &HostMap{make: mk} }

// RoundTrip implements http.RoundTripper.
func (h *HostMap) RoundTrip(r *http.Request) (*http.Response, error) {
	host := r.URL.Host
	v, ok := h.m.Load(host)
	if !ok {
		v, _ = h.m.LoadOrStore(host, h.make())
	}
	return v.(http.RoundTripper).RoundTrip(r)
}
