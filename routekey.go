package httpbreaker

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/httpbreaker/httpbreaker/internal/route"
)

// RouteKey returns a KeyFunc that keys a request by its host and the
// net/http.ServeMux pattern it matches: HostKey(r) + " " + pattern, where
// pattern is the matching pattern exactly as given (for example
// "api.example.com GET /repos/{owner}/{repo}/issues"; a byte that is not
// valid UTF-8 reads as U+FFFD, as in every key). A request that no
// pattern matches is keyed by HostKey(r) alone, so it shares the host's
// breaker. Keys are at most 512 bytes long: a host that would make the key
// longer is cut.
//
// Patterns use the syntax and precedence of net/http.ServeMux (Go 1.22+):
// an optional method ("GET /x" also matches HEAD, "POST /x" only POST, no
// method matches any), an optional host ("api.example.com/x"), and a path
// of literal segments, "{name}" wildcards that match one segment,
// a final "{name...}" that matches the rest of the path, a final "{$}"
// that matches only the path ending in a slash, and a final "/" that
// matches the whole subtree. When several patterns match, the most
// specific one wins, exactly as ServeMux decides. The host matched is
// r.Host if set, else r.URL.Host, without its port and compared without
// regard to ASCII case (ServeMux compares hosts exactly). As for an
// http.Client request, an empty r.Method means GET and an empty path "/",
// and a URL with Opaque is matched by the path the client sends from it
// ("//host/v1/users/42" by "/v1/users/42").
//
// Where ServeMux would answer with a redirect rather than a handler (a
// path missing the trailing slash of a subtree pattern, or an unclean
// path such as "/a/../b" or "//x") or with 405 Method Not Allowed, the
// request matches no pattern and gets the host key.
//
// CONNECT requests follow ServeMux too: their paths are not cleaned (but
// an empty one or one that does not start with "/" matches nothing),
// and their host is matched like any other.
//
// RouteKey panics, when called, if a pattern is invalid, if two patterns
// conflict (both as http.ServeMux.Handle would panic), or if no pattern is
// given. Matching does not allocate; nor does building the key when
// HostKey(r) returns r.URL.Host unchanged, for the first 1024 hosts seen.
// The returned KeyFunc is safe for concurrent use.
func RouteKey(patterns ...string) KeyFunc {
	return routeKeying(patterns).routeKey
}

// routeKeying is the keying of WithRoutes(patterns...) and
// RouteKey(patterns...). It panics as RouteKey does.
func routeKeying(patterns []string) keying {
	m, err := route.New(patterns)
	if err != nil {
		panic(fmt.Errorf("httpbreaker: RouteKey: %w", err))
	}
	texts := make([]string, len(patterns))
	for i, p := range patterns {
		texts[i] = canonicalKey(p) // a key reads as valid UTF-8: so must the pattern in it
	}
	return keying{routes: m, routeKeys: newRouteKeyCache(texts)}
}

// routeKey is the key RouteKey gives r under k's patterns.
func (k keying) routeKey(r *http.Request) string {
	host := HostKey(r)
	i := k.routes.Match(r)
	if i < 0 {
		return host
	}
	return k.routeKeys.key(host, i)
}

// routeCircuit is keyCircuit under WithRoutes. The circuits of each
// pattern are kept with their hosts (see routeBreakers), so that the
// request path neither builds nor hashes the route key, which is longer
// than the host. The key and the circuit are those of keyCircuit with
// RouteKey.
func (t *Transport) routeCircuit(req *http.Request) *circuit {
	host := HostKey(req)
	i := t.keys.routes.Match(req)
	if i < 0 {
		return t.keyCircuit(req, host)
	}
	if c := t.routes.get(i, host); c != nil {
		return c
	}
	key := t.keys.routeKeys.key(host, i)
	c := t.keyCircuit(req, key)
	if c != nil && c.key() == key {
		t.routes.put(i, host, c)
	}
	return c
}

// routeHostsMax bounds the hosts whose breakers routeBreakers keeps for
// one pattern. Most patterns are served by one host, or a few; past the
// bound, requests find their breaker by key.
const routeHostsMax = 8

// routeBreakers holds, per pattern, the breakers of the hosts that
// requests matching it went to. Readers load an immutable list through an
// atomic pointer; writers copy it under mu.
type routeBreakers struct {
	pats []atomic.Pointer[[]hostBreaker]
	mu   sync.Mutex // serializes writers
}

// hostBreaker is the circuit of one host and pattern.
type hostBreaker struct {
	host string
	b    *circuit
}

func newRouteBreakers(patterns int) *routeBreakers {
	return &routeBreakers{pats: make([]atomic.Pointer[[]hostBreaker], patterns)}
}

// get returns the live breaker of pattern i and host, if kept.
func (r *routeBreakers) get(i int, host string) *circuit {
	if l := r.pats[i].Load(); l != nil {
		for _, e := range *l {
			if e.host == host {
				if e.b.b.evicted.Load() {
					return nil
				}
				return e.b
			}
		}
	}
	return nil
}

// put keeps b as the breaker of pattern i and host, in place of an
// evicted one, if there is room. A pattern with no room costs the hosts
// past the bound no lock: put returns before taking it.
func (r *routeBreakers) put(i int, host string, b *circuit) {
	if !r.room(i) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var old []hostBreaker
	if l := r.pats[i].Load(); l != nil {
		old = *l
	}
	l := make([]hostBreaker, 0, len(old)+1)
	for _, e := range old {
		if e.host != host && !e.b.b.evicted.Load() {
			l = append(l, e)
		}
	}
	if len(l) == routeHostsMax {
		return
	}
	l = append(l, hostBreaker{host: strings.Clone(host), b: b})
	r.pats[i].Store(&l)
}

// room reports whether pattern i keeps fewer than routeHostsMax live
// breakers.
func (r *routeBreakers) room(i int) bool {
	l := r.pats[i].Load()
	if l == nil || len(*l) < routeHostsMax {
		return true
	}
	for _, e := range *l {
		if e.b.b.evicted.Load() {
			return true
		}
	}
	return false
}

// routeKeyCacheHosts bounds the number of hosts a routeKeyCache holds.
// Past it, keys are built, and breakers looked up by key, on each call.
const routeKeyCacheHosts = 1024

// routeKeyCache holds, per host key, the strings host + " " + pattern, so
// that building a key on the request path does not allocate. Readers load
// an immutable map through an atomic pointer; writers copy it under mu.
type routeKeyCache struct {
	patterns []string
	hosts    atomic.Pointer[map[string]*hostRoutes]
	mu       sync.Mutex // serializes writers of hosts
}

// hostRoutes holds the keys of one host, one per pattern, each filled
// the first time it is needed.
type hostRoutes struct {
	keys []atomic.Pointer[string]
}

func newRouteKeyCache(patterns []string) *routeKeyCache {
	return &routeKeyCache{patterns: patterns}
}

// host returns host's entry, making it if there is room, or nil.
func (c *routeKeyCache) host(host string) *hostRoutes {
	if hp := c.hosts.Load(); hp != nil {
		if hk := (*hp)[host]; hk != nil {
			return hk
		}
		if len(*hp) >= routeKeyCacheHosts {
			return nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[string]*hostRoutes
	if hp := c.hosts.Load(); hp != nil {
		old = *hp
	}
	if hk := old[host]; hk != nil || len(old) >= routeKeyCacheHosts {
		return hk
	}
	hk := &hostRoutes{keys: make([]atomic.Pointer[string], len(c.patterns))}
	m := make(map[string]*hostRoutes, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[strings.Clone(host)] = hk
	c.hosts.Store(&m)
	return hk
}

// key returns the key of host and pattern i, from the cache if the host
// has room in it.
func (c *routeKeyCache) key(host string, i int) string {
	if hk := c.host(host); hk != nil {
		return hk.key(host, c.patterns[i], i)
	}
	return routeKeyString(host, c.patterns[i])
}

// key returns the key of host and pattern i.
func (hk *hostRoutes) key(host, pattern string, i int) string {
	if s := hk.keys[i].Load(); s != nil {
		return *s
	}
	s := routeKeyString(host, pattern)
	hk.keys[i].Store(&s)
	return s
}

// routeKeyString returns host + " " + pattern, cutting the host so that
// the key is at most maxKeyLen bytes long (and the end of the key if the
// pattern alone is too long for that). A cut host is read again, as every
// key's host part is (it may end in a dot or a colon now), so that the
// key reads back as itself.
func routeKeyString(host, pattern string) string {
	if len(host)+1+len(pattern) <= maxKeyLen {
		return host + " " + pattern
	}
	n := max(maxKeyLen-1-len(pattern), 0)
	return truncateUTF8(readHost(truncateUTF8(host, n), "")+" "+pattern, maxKeyLen)
}
