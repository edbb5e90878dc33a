package httpbreaker

import (
	"encoding/json"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHealthNoBreakers(t *testing.T) {
	h := New(newDep(200)).Health("db.test")
	require.Equal(t, Health{Ready: true}, h)
	require.NoError(t, h.Err())
}

func TestHealthNonCriticalOpenStaysReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithMinRequests(2), WithJitter(0), WithOpenTimeout(time.Second), WithProbesToClose(1))
		_, _ = get(t, tr, "http://db.test/")
		d.set(500, nil)
		for range 2 {
			_, _ = get(t, tr, "http://recs.test/")
			_, _ = get(t, tr, "http://ads.test/")
		}
		require.Equal(t, StateOpen, tr.State("recs.test"))

		h := tr.Health("db.test")
		require.Equal(t, Health{Ready: true, Open: []string{"ads.test", "recs.test"}}, h)
		require.NoError(t, h.Err())
		h = tr.Health()
		require.True(t, h.Ready, "no critical keys: never unready")
		require.Equal(t, []string{"ads.test", "recs.test"}, h.Open)

		// Due for half-open still counts as open; a probe that closes it
		// takes it off the list.
		time.Sleep(time.Second)
		require.Equal(t, StateHalfOpen, tr.State("recs.test"))
		require.Equal(t, []string{"ads.test", "recs.test"}, tr.Health().Open)
		d.set(200, nil)
		_, _ = get(t, tr, "http://recs.test/")
		require.Equal(t, Health{Ready: true, Open: []string{"ads.test"}}, tr.Health("db.test"))
	})
}

func TestHealthCriticalOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMinRequests(2), WithJitter(0), WithOpenTimeout(time.Second), WithProbesToClose(1))
		for range 2 {
			_, _ = get(t, tr, "http://db.test/")
			_, _ = get(t, tr, "http://recs.test/")
		}

		h := tr.Health("db.test", "cache.test")
		require.False(t, h.Ready)
		require.Equal(t, []string{"db.test", "recs.test"}, h.Open)
		require.Equal(t, []string{"db.test"}, h.CriticalOpen)
		require.EqualError(t, h.Err(), "httpbreaker: not ready: circuit open for critical db.test")

		// Half-open is not yet recovered: still not ready.
		time.Sleep(time.Second)
		require.Equal(t, StateHalfOpen, tr.State("db.test"))
		require.False(t, tr.Health("db.test").Ready)

		d.set(200, nil)
		_, _ = get(t, tr, "http://db.test/")
		h = tr.Health("db.test")
		require.True(t, h.Ready)
		require.Empty(t, h.CriticalOpen)
		require.NoError(t, h.Err())
	})
}

// TestHealthCriticalKeysAreWhole: a critical key is read as Trip and
// State read keys, and matched whole, never as a prefix.
func TestHealthCriticalKeysAreWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newDep(200), WithRoutes("GET /v1/users/{id}"))
		tr.Trip("db.test GET /v1/users/{id}", time.Minute)
		tr.Trip("db.test", time.Minute)
		tr.Trip("db.test:8443", time.Minute)

		h := tr.Health("db.tes", "db.test GET", "db.test:84")
		require.True(t, h.Ready, "no prefix")
		require.Len(t, h.Open, 3)
		critical := []string{"DB.Test.", "db.test:8443"}
		h = tr.Health(critical...)
		require.Equal(t, []string{"db.test", "db.test:8443"}, h.CriticalOpen, "read as Trip and State read keys")
		require.Equal(t, []string{"DB.Test.", "db.test:8443"}, critical, "the caller's slice is left alone")

		h = tr.Health("db.test GET /v1/users/{id}")
		require.Equal(t, []string{"db.test GET /v1/users/{id}"}, h.CriticalOpen)
		h = tr.Health("db.test", "db.test:8443", "db.test")
		require.Equal(t, []string{"db.test", "db.test:8443"}, h.CriticalOpen, "sorted, no duplicates")
	})
}

func TestHealthJSON(t *testing.T) {
	tr := New(newDep(200))
	b, err := json.Marshal(tr.Health())
	require.NoError(t, err)
	require.JSONEq(t, `{"ready":true}`, string(b))

	tr.Trip("db.test", time.Minute)
	tr.Trip("recs.test", time.Minute)
	b, err = json.Marshal(tr.Health("db.test"))
	require.NoError(t, err)
	require.JSONEq(t, `{"ready":false,"open":["db.test","recs.test"],"critical_open":["db.test"]}`, string(b))
}

// TestHealthIgnoresShadowBreakers: a breaker in ModeShadow that would be
// open (or half-open) refuses nothing, so Health leaves it out of Open
// and CriticalOpen and stays ready when it is critical; an enforcing
// breaker that is open still counts.
func TestHealthIgnoresShadowBreakers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(http.StatusInternalServerError)
		tr := New(d, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second),
			WithPolicy("shadow.test", WithMode(ModeShadow)))
		for _, u := range []string{"http://shadow.test/", "http://enforce.test/"} {
			_, _ = get(t, tr, u)
		}
		require.Equal(t, StateOpen, tr.State("shadow.test"), "the shadow breaker would be open")
		require.Equal(t, StateOpen, tr.State("enforce.test"))

		h := tr.Health("shadow.test")
		require.True(t, h.Ready, "a shadow breaker never makes a service unready")
		require.NoError(t, h.Err())
		require.Equal(t, []string{"enforce.test"}, h.Open, "only the enforcing breaker refuses")
		require.Empty(t, h.CriticalOpen)

		h = tr.Health("shadow.test", "enforce.test")
		require.False(t, h.Ready)
		require.Error(t, h.Err())
		require.Equal(t, []string{"enforce.test"}, h.Open)
		require.Equal(t, []string{"enforce.test"}, h.CriticalOpen)

		time.Sleep(time.Second)
		require.Equal(t, StateHalfOpen, tr.State("shadow.test"))
		h = tr.Health("shadow.test")
		require.True(t, h.Ready, "half-open in shadow: still ready")
		require.NotContains(t, h.Open, "shadow.test")
	})
	synctest.Test(t, func(t *testing.T) {
		// A Transport all in shadow: ready, nothing listed.
		d := newDep(http.StatusInternalServerError)
		tr := New(d, WithMinRequests(1), WithMode(ModeShadow))
		_, _ = get(t, tr, testURL)
		require.Equal(t, StateOpen, tr.State(testKey))
		h := tr.Health(testKey)
		require.True(t, h.Ready)
		require.Empty(t, h.Open)
		require.Empty(t, h.CriticalOpen)
		require.NoError(t, h.Err())
	})
}
