package httpbreaker

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/httpbreaker/httpbreaker/internal/route/routetest"
	"github.com/stretchr/testify/require"
)

// routeAPIPatterns is a realistic API pattern set, also used by the
// benchmarks.
var routeAPIPatterns = routetest.APIPatterns

// routeRequest returns a request for target, as parsed from a request
// line.
var routeRequest = routetest.Request

// TestRoutesEvictedBreakerNotReused: under WithRoutes the Transport keeps
// a route's breaker at hand; once the cap evicts it, requests on that
// route must reach the route's new breaker, not the dropped one.
func TestRoutesEvictedBreakerNotReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusOK)
		tr := New(d, WithRoutes("GET /v1/users/{id}"), WithMaxBreakers(1))
		const route = "api.test GET /v1/users/{id}"
		_, err := get(t, tr, "http://api.test/v1/users/1")
		require.NoError(t, err)
		require.Equal(t, []string{route}, keys(tr))

		// The route's breaker goes idle and another host's takes its place.
		time.Sleep(11 * time.Second)
		_, err = get(t, tr, "http://other.test/")
		require.NoError(t, err)
		require.Equal(t, []string{"other.test"}, keys(tr))

		// And back: the route gets a new breaker, which an operator trips.
		time.Sleep(11 * time.Second)
		_, err = get(t, tr, "http://api.test/v1/users/2")
		require.NoError(t, err)
		require.Equal(t, []string{route}, keys(tr))
		tr.Trip(route, time.Hour)
		calls := d.calls.Load()
		resp, err := get(t, tr, "http://api.test/v1/users/3")
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "a request went through the evicted breaker")
		require.Equal(t, calls, d.calls.Load())
	})
}

// TestRoutesHostFallbackNotKept: when the cap leaves a route no room, its
// requests share the host's breaker only until there is room.
func TestRoutesHostFallbackNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newDep(http.StatusOK), WithRoutes("GET /v1/users/{id}"), WithMaxBreakers(1))
		_, err := get(t, tr, "http://api.test/unrouted")
		require.NoError(t, err)
		_, err = get(t, tr, "http://api.test/v1/users/1")
		require.NoError(t, err)
		require.Equal(t, []string{"api.test"}, keys(tr), "no room: the host's breaker")

		time.Sleep(11 * time.Second) // the host's breaker goes idle
		_, err = get(t, tr, "http://api.test/v1/users/1")
		require.NoError(t, err)
		require.Equal(t, []string{"api.test GET /v1/users/{id}"}, keys(tr))
	})
}

// TestRoutesSameKeysAsRouteKey: WithRoutes picks the same breaker as
// WithKeyFunc(RouteKey(...)) for matched, unmatched and uncacheable
// hosts, and a later WithKeyFunc replaces it.
func TestRoutesSameKeysAsRouteKey(t *testing.T) {
	patterns := []string{"GET /v1/users/{id}", "/files/{path...}"}
	urls := []string{
		"http://api.test/v1/users/1", "http://API.test:8443/files/a/b", "http://api.test/nothing",
		"http://xn--bcher-kva.test/v1/users/9",
	}
	for i := range 2 * routeHostsMax { // more hosts than a pattern keeps
		urls = append(urls, "http://shard"+strconv.Itoa(i)+".test/v1/users/1")
	}
	byRoutes := New(newDep(http.StatusOK), WithRoutes(patterns...))
	byKeyFunc := New(newDep(http.StatusOK), WithKeyFunc(RouteKey(patterns...)))
	for range 2 { // first make, then find, the breakers
		for _, u := range urls {
			for _, tr := range []*Transport{byRoutes, byKeyFunc} {
				_, err := get(t, tr, u)
				require.NoError(t, err)
			}
		}
	}
	require.Equal(t, keys(byKeyFunc), keys(byRoutes))
	require.Len(t, keys(byRoutes), 4+2*routeHostsMax)
	for _, s := range byRoutes.Snapshot() {
		require.Equal(t, int64(2), s.Requests, s.Key)
	}

	replaced := New(newDep(http.StatusOK), WithRoutes(patterns...), WithKeyFunc(HostKey))
	_, err := get(t, replaced, urls[0])
	require.NoError(t, err)
	require.Equal(t, []string{"api.test"}, keys(replaced))
}

// TestRoutesFullPatternTakesNoLock: past routeHostsMax hosts on one
// pattern, requests find their breaker by key without taking the route
// cache's lock.
func TestRoutesFullPatternTakesNoLock(t *testing.T) {
	tr := New(newDep(http.StatusOK), WithRoutes("GET /v1/users/{id}"))
	for i := range routeHostsMax + 1 {
		_, err := get(t, tr, "http://shard"+strconv.Itoa(i)+".test/v1/users/1")
		require.NoError(t, err)
	}
	requireNoLock(t, &tr.routes.mu, "a request past the bound", func() error {
		_, err := get(t, tr, "http://shard"+strconv.Itoa(routeHostsMax)+".test/v1/users/2")
		return err
	})
}

// TestRoutesPastTheBoundDoNotAllocate: a host past routeHostsMax on a
// pattern finds its breaker by key, and the key comes from the key cache:
// no allocation per request.
func TestRoutesPastTheBoundDoNotAllocate(t *testing.T) {
	tr := New(newStub(), WithRoutes("GET /v1/users/{id}"))
	var last *http.Request
	for i := range routeHostsMax + 1 {
		last = mustReq(t, "http://shard"+strconv.Itoa(i)+".test/v1/users/1")
		_, err := tr.RoundTrip(last)
		require.NoError(t, err)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = tr.RoundTrip(last) }))
}

func TestRouteKeyNeverPerRawPath(t *testing.T) {
	k := RouteKey("GET /users/{id}", "POST /v1/charges", "/files/{path...}")
	require.Equal(t, "api.test GET /users/{id}", k(mustReq(t, "http://api.test/users/1")))
	require.Equal(t, "api.test GET /users/{id}", k(mustReq(t, "http://API.test/users/2")))
	require.Equal(t, "api.test /files/{path...}", k(mustReq(t, "http://api.test/files/a/b/c.txt")))
	require.Equal(t, "api.test", k(mustReq(t, "http://api.test/unknown/path")), "unmatched → host key")
	post, _ := http.NewRequest(http.MethodPost, "http://api.test/v1/charges", nil)
	require.Equal(t, "api.test POST /v1/charges", k(post))
	require.Equal(t, "api.test", k(mustReq(t, "http://api.test/v1/charges")), "GET does not match a POST pattern")
}

func TestWithRoutesGivesEachOperationItsOwnBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithRoutes("GET /users/{id}", "GET /orders/{id}"), WithMinRequests(2))
		for i := range 2 {
			_, _ = get(t, tr, "http://api.test/users/"+itoaTest(i))
		}
		require.Equal(t, StateOpen, tr.State("api.test GET /users/{id}"))
		require.Equal(t, StateClosed, tr.State("api.test GET /orders/{id}"))
		d.set(200, nil)
		resp, err := get(t, tr, "http://api.test/orders/7")
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode, "another route keeps working")
	})
}

// TestRouteKeyNeverCutsInsideARune: RouteKey cuts the host key so that
// host + " " + pattern fits in 512 bytes; cutting at a byte count can
// split a multi-byte rune and leave invalid UTF-8 in the key, which
// becomes a Prometheus label value.
func TestRouteKeyNeverCutsInsideARune(t *testing.T) {
	k := RouteKey("GET /users/{id}")
	// 501 bytes of host: cut to 496 for "GET /users/{id}", inside an 'é'.
	u, err := url.Parse("http://a" + strings.Repeat("é", 250) + "/users/1")
	require.NoError(t, err)
	requireKey(t, "RouteKey", k(&http.Request{Method: http.MethodGet, URL: u}))
}

// TestRouteKeyOfACutHostReadsBackAsItself: a host cut to make room for
// the pattern can end in a dot or a colon; the key's host part is then
// read as every key's is, so that Trip, State and Reset given the key
// reach its breaker, and WithRoutes keeps that breaker at hand.
func TestRouteKeyOfACutHostReadsBackAsItself(t *testing.T) {
	const pattern = "GET /users/{id}" // leaves 496 bytes for the host
	a := strings.Repeat("a", 494)
	for host, want := range map[string]string{
		a + "a.bbbb": a + "a",  // cut after the dot
		a + "a:8443": a + "a",  // after the colon: an empty port
		a + ".:8443": a + ":8", // inside the port, after a dot
	} {
		k := RouteKey(pattern)(routeRequest("GET", host, "/users/1"))
		requireKey(t, "RouteKey", k)
		require.Equal(t, k, canonicalHostKey(k), "%q", host)
		require.Equal(t, want+" "+pattern, k)

		tr := New(newDep(http.StatusOK), WithRoutes(pattern))
		for range 2 {
			_, err := get(t, tr, "http://"+host+"/users/1")
			require.NoError(t, err)
		}
		require.Equal(t, []string{k}, keys(tr))
		require.NotNil(t, tr.routes.get(0, HostKey(routeRequest("GET", host, "/"))), "kept at hand")
	}
}

func TestRouteKeyPanics(t *testing.T) {
	require.PanicsWithError(t, "httpbreaker: RouteKey: no patterns", func() { RouteKey() })

	muxPanic := func(patterns ...string) (msg string) {
		defer func() {
			if v := recover(); v != nil {
				msg = fmt.Sprint(v)
			}
		}()
		mux := http.NewServeMux()
		for _, p := range patterns {
			mux.Handle(p, http.NotFoundHandler())
		}
		return ""
	}
	ourPanic := func(patterns ...string) (msg string) {
		defer func() {
			v := recover()
			err, ok := v.(error)
			require.True(t, ok, "panic value %v (%T) is not an error", v, v)
			msg = err.Error()
		}()
		RouteKey(patterns...)
		return ""
	}
	for _, p := range []string{
		"", "GET", "x", "GET x", "/{a", "/{a}/{a}", "/{$}/x", "/{x...}/y", "/a{x}",
		"/{}", "/{1x}", "G(T /x", "GET /a/../b", "GET //x", "example.com{x}/",
	} {
		want := muxPanic(p)
		require.NotEmpty(t, want, p)
		require.Equal(t, "httpbreaker: RouteKey: "+want, ourPanic("/ok", p), p)
	}
	for _, ps := range [][]string{
		{"/a/{x}", "/a/{y}"},
		{"GET /x", "GET /x"},
		{"/a/{x}/c", "/a/b/{r...}"},
		{"GET /{a}", "/x"},
		{"/a/", "/a/{rest...}"},
		{"/a/{$}", "/a/%2F"},
		{"h.com/x", "GET h.com/{y}"},
	} {
		require.Contains(t, muxPanic(ps...), "conflicts with", ps)
		msg := ourPanic(ps...)
		require.True(t, strings.HasPrefix(msg, "httpbreaker: RouteKey: pattern "), msg)
		require.Contains(t, msg, "conflicts with", ps)
	}
	// ServeMux's tree itself refuses this pair.
	msg := ourPanic("/a//b", "/a/{x}/b")
	require.True(t, strings.HasPrefix(msg, "httpbreaker: RouteKey: "), msg)
	// Hosts are compared regardless of case, unlike in ServeMux.
	require.Empty(t, muxPanic("Example.com/x", "example.com/x"))
	msg = ourPanic("Example.com/x", "example.com/x")
	require.True(t, strings.HasPrefix(msg, "httpbreaker: RouteKey: with hosts compared regardless of case: "), msg)
	require.Contains(t, msg, "conflicts with")
	// A valid set is accepted (internal/route checks every set of its
	// tests).
	require.NotPanics(t, func() { RouteKey(routeAPIPatterns...) })
}

func TestRouteKey(t *testing.T) {
	key := RouteKey(routeAPIPatterns...)
	require.Equal(t, "api.test GET /v1/users/{id}", key(routeRequest("GET", "api.test", "/v1/users/42")))
	require.Equal(t, "api.test:8443 GET /v1/users/{id}", key(routeRequest("HEAD", "API.Test:8443", "/v1/users/42")))
	require.Equal(t, "api.test /files/{path...}", key(routeRequest("PUT", "api.test", "/files/a/b")))
	require.Equal(t, "api.test", key(routeRequest("GET", "api.test", "/nope")))
	require.Equal(t, "api.test", key(routeRequest("GET", "api.test", "/files"))) // redirect
	require.Equal(t, "api.test", key(routeRequest("PATCH", "api.test", "/v1/users/1")))
	require.Equal(t, "", key(&http.Request{Method: "GET"}))
	// Repeated calls return the cached key.
	for range 3 {
		require.Equal(t, "other.test POST /v1/charges", key(routeRequest("POST", "other.test", "/v1/charges")))
	}

	// Keys stay within maxKeyLen: a long host is cut.
	long := strings.Repeat("h", 600)
	k := key(routeRequest("GET", long, "/v1/users/1"))
	require.Len(t, k, maxKeyLen)
	require.True(t, strings.HasSuffix(k, " GET /v1/users/{id}"), k)
	longPattern := "/" + strings.Repeat("p", 600)
	k = RouteKey(longPattern)(routeRequest("GET", "h.test", longPattern))
	require.Len(t, k, maxKeyLen)
	require.True(t, strings.HasPrefix(k, " /ppp"), k)
}

func TestRouteKeyCacheBound(t *testing.T) {
	key := RouteKey(routeAPIPatterns...)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range routeKeyCacheHosts + 200 {
				host := fmt.Sprintf("h%d.test", (i*7+g)%(routeKeyCacheHosts+200))
				for _, c := range []struct{ method, path, want string }{
					{"GET", "/v1/users/9/orders", host + " GET /v1/users/{id}/orders"},
					{"POST", "/v1/charges", host + " POST /v1/charges"},
					{"GET", "/none", host},
				} {
					if got := key(routeRequest(c.method, host, c.path)); got != c.want {
						t.Errorf("key(%s %s%s) = %q, want %q", c.method, host, c.path, got, c.want)
					}
				}
			}
		})
	}
	wg.Wait()
	// Past the bound, keys are still right, just built on each call.
	k := key(routeRequest("GET", "late.test", "/healthz"))
	require.Equal(t, "late.test GET /healthz", k)
}

// TestRouteKeyDoesNotAllocate: matching and building the key of a cached
// host allocate nothing, nor does a request no pattern matches.
func TestRouteKeyDoesNotAllocate(t *testing.T) {
	key := RouteKey(routeAPIPatterns...)
	r := routeRequest("GET", "api.test", "/v1/users/42/orders")
	require.Equal(t, "api.test GET /v1/users/{id}/orders", key(r))
	require.Zero(t, testing.AllocsPerRun(100, func() { key(r) }))
	r = routeRequest("GET", "api.test", "/nothing")
	require.Zero(t, testing.AllocsPerRun(100, func() { key(r) }))
}

func BenchmarkRouteKey(b *testing.B) {
	key := RouteKey(routeAPIPatterns...)
	r := routeRequest("GET", "api.test", "/v1/users/42/orders")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key(r)
		}
	})
}

// A client request may carry its path in URL.Opaque ("//host/path", the
// way net/url gives to send a path exactly as written); the
// dependency's ServeMux routes it by that path, and so does RouteKey,
// through a Transport with WithRoutes too.
func TestRouteKeyOfAnOpaqueURL(t *testing.T) {
	const pattern = "GET /v1/users/{id}"
	mux := http.NewServeMux()
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Pattern) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "/") })
	srv := httptest.NewServer(mux) // 127.0.0.1
	defer srv.Close()
	host := srv.Listener.Addr().String()
	opaque := func() *http.Request {
		r, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		r.URL = &url.URL{Scheme: "http", Host: host, Opaque: "//" + host + "/v1/users/42"}
		return r
	}

	tr := New(srv.Client().Transport, WithRoutes(pattern, "/"))
	resp, err := (&http.Client{Transport: tr}).Do(opaque())
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, pattern, string(body), "the dependency's ServeMux serves it with the pattern")

	r := opaque()
	require.Equal(t, HostKey(r)+" "+pattern, RouteKey(pattern, "/")(r))
	require.Equal(t, []string{HostKey(r) + " " + pattern}, keys(tr), "the Transport's breaker is the pattern's")
}

// A pattern that is not valid UTF-8 (ServeMux takes its bytes as they
// are) appears in its key as every key is read, with U+FFFD for each
// invalid byte: the key reads back as itself, and the Transport keeps
// the circuit with the pattern.
func TestRouteKeyOfAPatternThatIsNotUTF8(t *testing.T) {
	const pattern = "GET /caf\xe9/{id}"
	r := mustReq(t, "http://api.test/caf%E9/1")
	key := RouteKey(pattern)(r)
	require.Equal(t, "api.test GET /caf\uFFFD/{id}", key)
	require.Equal(t, key, canonicalHostKey(key))
	tr := New(newDep(200), WithRoutes(pattern))
	_, _ = get(t, tr, "http://api.test/caf%E9/1")
	require.Equal(t, []string{key}, keys(tr))
	require.NotNil(t, tr.routes.get(0, "api.test"), "kept with its pattern")
}
