package httpbreaker

import (
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

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
