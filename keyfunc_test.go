package httpbreaker

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHostKey(t *testing.T) {
	for u, want := range map[string]string{
		"http://API.Example.com/x":      "api.example.com",
		"https://api.example.com:8443/": "api.example.com:8443",
		"http://127.0.0.1:9000/a?b=c":   "127.0.0.1:9000",
		"https://[::1]:80/":             "[::1]:80",
		"http://[::1]:80/":              "[::1]",
		"https://example.com:443/":      "example.com",
		"https://example.com/":          "example.com",
		"http://example.com.:80/":       "example.com",
		"http://example.com./":          "example.com",
		"http://example.com:0080/":      "example.com",
		"http://example.com:08080/":     "example.com:8080",
		"http://example.com:443/":       "example.com:443",
		"https://Example.COM.:0443/":    "example.com",
		"http://127.0.0.1:00/":          "127.0.0.1:0",
	} {
		require.Equal(t, want, HostKey(mustReq(t, u)), u)
	}
	require.Equal(t, "", HostKey(nil))
	require.Equal(t, "", HostKey(&http.Request{}))
	long := &http.Request{URL: mustReq(t, "http://x.test/").URL}
	long.URL.Host = strings.Repeat("a", 5000)
	require.Len(t, HostKey(long), maxKeyLen)
	r := mustReq(t, "http://api.example.com/")
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = HostKey(r) }))
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

func keys(tr *Transport) []string {
	var out []string
	for _, s := range tr.Snapshot() {
		out = append(out, s.Key)
	}
	return out
}

func TestMaxBreakersFallsBackToTheHostKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithRoutes("/a/{id}", "/b/{id}", "/c/{id}"), WithMaxBreakers(2))
		_, _ = get(t, tr, "http://api.test/other")
		_, _ = get(t, tr, "http://api.test/a/1")
		require.Equal(t, []string{"api.test", "api.test /a/{id}"}, keys(tr))
		// Past the cap, a new route key falls back to its host key.
		d.set(500, nil)
		for range 25 {
			_, _ = get(t, tr, "http://api.test/b/1")
		}
		require.Equal(t, []string{"api.test", "api.test /a/{id}"}, keys(tr))
		require.Equal(t, StateOpen, tr.State("api.test"), "its failures count on the host breaker")
		// A new host with no room at all goes through unprotected.
		before := d.calls.Load()
		for range 30 {
			_, _ = get(t, tr, "http://new.test/c/1")
		}
		require.Equal(t, before+30, d.calls.Load())
		require.Len(t, tr.Snapshot(), 2)
	})
}

func TestEvictionTakesIdleClosedBreakersOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMaxBreakers(2), WithMinRequests(1), WithOpenTimeout(time.Hour), WithMaxOpenTimeout(time.Hour))
		_, _ = get(t, tr, "http://down.test/") // opens
		d.set(200, nil)
		_, _ = get(t, tr, "http://idle.test/")
		require.Equal(t, []string{"down.test", "idle.test"}, keys(tr))
		// Within a window nothing is idle: the new key goes unprotected.
		_, _ = get(t, tr, "http://new.test/")
		require.Equal(t, []string{"down.test", "idle.test"}, keys(tr))
		// After a quiet window the idle closed breaker makes room; the
		// open one never does.
		time.Sleep(11 * time.Second)
		_, _ = get(t, tr, "http://new.test/")
		require.Equal(t, []string{"down.test", "new.test"}, keys(tr))
		time.Sleep(11 * time.Second)
		for i := range 10 {
			_, _ = get(t, tr, "http://more"+itoaTest(i)+".test/")
		}
		ks := keys(tr)
		require.Len(t, ks, 2)
		require.Equal(t, "down.test", ks[0])
		require.Equal(t, StateOpen, tr.State("down.test"))
	})
}

func TestEvictionNeverTakesAHalfOpenBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		gate := make(chan struct{})
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "probing.test" && d.calls.Load() > 0 {
				<-gate // the probe hangs
			}
			return d.RoundTrip(r)
		})
		tr := New(next, WithMaxBreakers(1), WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second))
		_, _ = get(t, tr, "http://probing.test/") // opens
		time.Sleep(time.Second)
		done := make(chan struct{})
		go func() { _, _ = get(t, tr, "http://probing.test/"); close(done) }()
		synctest.Wait()
		time.Sleep(11 * time.Second) // a quiet window: only its probe is in flight
		require.Equal(t, StateHalfOpen, tr.State("probing.test"))
		_, _ = get(t, tr, "http://newcomer.test/")
		require.Equal(t, []string{"probing.test"}, keys(tr), "the half-open breaker keeps its place")
		close(gate)
		<-done
	})
}

// TestFullCapTakesNoLock: once the cap is reached with nothing to evict, a
// flood of new keys finds its way (the host's breaker, or none) without
// taking the Transport's lock, until a breaker could be evicted.
func TestFullCapTakesNoLock(t *testing.T) {
	d := newDep(200)
	tr := New(d, WithRoutes("/a/{id}"), WithMaxBreakers(1))
	_, err := get(t, tr, "http://api.test/other") // the host's breaker: the cap is reached
	require.NoError(t, err)
	_, err = get(t, tr, "http://api.test/a/1") // no room for the route: the host's breaker
	require.NoError(t, err)
	_, err = get(t, tr, "http://new.test/") // no room at all: unprotected
	require.NoError(t, err)

	requireNoLock(t, &tr.mu, "a request at the full cap", func() error {
		if _, err := get(t, tr, "http://api.test/a/2"); err != nil {
			return err
		}
		_, err := get(t, tr, "http://another.test/")
		return err
	})
	require.Equal(t, int64(5), d.calls.Load(), "every request reached the dependency")
	require.Equal(t, int64(3), tr.breakers.get("api.test").b.window().totals().requests())
}

// TestOperatorKeysReadAsHostKeyDoes: Trip, State and Reset read a key's
// host part as HostKey does, so an operator's spelling reaches the
// breaker requests use.
func TestOperatorKeysReadAsHostKeyDoes(t *testing.T) {
	tr := New(newDep(200))
	for _, spelling := range []string{"API.Example.com", "api.example.com.", "Api.Example.Com.", "api.example.com:0443 GET /x"} {
		tr.Trip(spelling, time.Hour)
	}
	for _, u := range []string{"https://api.example.com/", "https://API.EXAMPLE.COM.:443/v1"} {
		resp, err := get(t, tr, u)
		require.NoError(t, err)
		require.True(t, IsRejected(resp), u)
	}
	require.Equal(t, StateOpen, tr.State("API.example.com."))
	require.Equal(t, StateOpen, tr.State("api.example.com:443 GET /x"), "a route key's host part too")
	tr.Reset("Api.Example.Com")
	require.Equal(t, StateClosed, tr.State("api.example.com"))
	require.ElementsMatch(t, []string{"api.example.com", "api.example.com:443 GET /x"}, keys(tr))
}

// BenchmarkHostKey measures HostKey on the request path: a host already
// in its key's form (the common case, which must not allocate), one with
// a port, and one it has to lower-case.
func BenchmarkHostKey(b *testing.B) {
	for _, c := range []struct{ name, url string }{
		{"canonical", "https://api.example.com/v1/users"},
		{"port", "https://api.example.com:8443/v1/users"},
		{"default-port", "https://api.example.com:443/v1/users"},
		{"upper", "https://API.Example.com/v1/users"},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := mustReq(b, c.url)
			b.ReportAllocs()
			for b.Loop() {
				_ = HostKey(r)
			}
		})
	}
}
