package httpbreaker

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

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
	require.Equal(t, int64(3), tr.breakers.get("api.test").b.win.totals().requests())
}

// TestMaxBreakersOffRouteFallsBackToTheEnforcingHost: past the cap, a
// ModeOff route stays off, even though its host's breaker, which it
// would fall back to, enforces and is open: its requests go to next.
func TestMaxBreakersOffRouteFallsBackToTheEnforcingHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithRoutes("/off"), WithMaxBreakers(1), WithMinRequests(5),
			WithPolicy("api.test /off", WithMode(ModeOff)))
		for range 5 {
			_, _ = get(t, tr, "http://api.test/other") // the host key: trips
		}
		require.Equal(t, StateOpen, tr.State("api.test"))
		d.set(200, nil)
		resp, err := get(t, tr, "http://api.test/off")
		require.NoError(t, err)
		require.False(t, IsRejected(resp), "ModeOff: requests go straight to next")
	})
}

// TestEvictionRescanFollowsUpdatedWindow: past the cap, the Transport
// looks for an idle breaker again once per bucket of the window. When no
// breaker was idle under WithWindow(math.MaxInt64), the next look is a
// tenth of that away (about 29 years), and an Update to a 10s window
// does not bring it closer: the old breaker, idle under the new window,
// keeps its place and a new key gets no breaker (its calls go through
// unprotected) for decades. A Transport made with the new window gives
// the new key the place.
func TestEvictionRescanFollowsUpdatedWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		update bool
	}{
		{"made with a 10s window", false},
		{"updated to a 10s window", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(http.StatusOK)
				window := 10 * time.Second
				if tc.update {
					window = longest
				}
				tr := New(d, WithMaxBreakers(1), WithWindow(window))
				time.Sleep(time.Second)
				_, _ = get(t, tr, "http://a.test/")
				_, _ = get(t, tr, "http://b.test/") // no room: a is not idle yet
				require.Equal(t, []string{"a.test"}, keys(tr))
				if tc.update {
					require.NoError(t, tr.Update(WithWindow(10*time.Second)))
				}
				time.Sleep(time.Minute) // a is idle: closed, older than the window, nothing in it
				_, _ = get(t, tr, "http://b.test/")
				require.Equal(t, []string{"b.test"}, keys(tr), "b takes the place of a, idle under the window it has")
			})
		})
	}
}

// An Update that takes breakers away (keys switched to ModeOff) makes
// room at once: a new key that found the cap full of busy breakers a
// moment before gets a breaker on its next request, not only once the
// wait between two scans for an idle one is over.
func TestAnUpdateThatDropsBreakersMakesRoomAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newDep(http.StatusOK), WithMaxBreakers(2))
		_, _ = get(t, tr, "http://a.test/")
		_, _ = get(t, tr, "http://b.test/")
		_, _ = get(t, tr, "http://c.test/") // no room: a and b are busy
		require.Equal(t, []string{"a.test", "b.test"}, keys(tr))
		require.NoError(t, tr.Update(WithPolicy("a.test", WithMode(ModeOff))))
		_, _ = get(t, tr, "http://c.test/")
		require.Equal(t, []string{"b.test", "c.test"}, keys(tr))
	})
}

// TestBreakerKeyDoesNotPinTheRequest: a breaker outlives the request that
// made it, so its key must not be a substring of that request's URL,
// which would keep the whole URL (query string included) in memory.
func TestBreakerKeyDoesNotPinTheRequest(t *testing.T) {
	raw := "http://api.test/v1/users?token=" + strings.Repeat("s", 4096)
	req, err := http.NewRequest(http.MethodGet, raw, nil)
	require.NoError(t, err)
	tr := New(newDep(http.StatusOK))
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	c := tr.breakers.get("api.test")
	require.NotNil(t, c)
	key := uintptr(unsafe.Pointer(unsafe.StringData(c.key())))
	url := uintptr(unsafe.Pointer(unsafe.StringData(raw)))
	host := uintptr(unsafe.Pointer(unsafe.StringData(req.URL.Host)))
	require.NotEqual(t, host, key)
	require.False(t, key >= url && key < url+uintptr(len(raw)), "the key points into the request's URL")
}

// TestEvictedCallsLateOutcomeDoesNotDecideANewerState: a call admitted
// in a breaker that was then evicted ends after the key's new breaker
// has opened, probed and closed again. Its outcome belongs to a state
// that is over: it must not count in the new closed one (here, its
// failure would trip it again).
func TestEvictedCallsLateOutcomeDoesNotDecideANewerState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var code atomic.Int64
		code.Store(http.StatusOK)
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			if req.Header.Get("X-Hold") != "" {
				<-gate
				return response(req, http.StatusInternalServerError, nil), nil
			}
			return response(req, int(code.Load()), nil), nil
		})
		log := &transitionLog{}
		tr := New(next, WithMaxBreakers(1), WithMinRequests(1), WithWindow(10*time.Second),
			WithJitter(0), WithOpenTimeout(5*time.Second), WithProbesToClose(1), WithOnTransition(log.record))
		send := func(url string) {
			t.Helper()
			resp, err := get(t, tr, url)
			require.NoError(t, err)
			resp.Body.Close()
		}

		done := make(chan struct{})
		go func() { // admitted at 0 s in the key's first breaker
			defer close(done)
			req := mustReq(t, testURL)
			req.Header.Set("X-Hold", "1")
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
		synctest.Wait()
		time.Sleep(11 * time.Second)
		send("http://other.test/") // evicts the key's breaker, its call in flight
		require.Equal(t, []string{"other.test"}, keys(tr))
		time.Sleep(11 * time.Second)
		code.Store(http.StatusInternalServerError)
		send(testURL) // a new breaker for the key; its failure trips it
		require.Equal(t, StateOpen, tr.State(testKey))
		time.Sleep(5 * time.Second)
		code.Store(http.StatusOK)
		send(testURL) // the probe succeeds: closed again
		require.Equal(t, StateClosed, tr.State(testKey))

		close(gate) // the call admitted three states ago fails now
		<-done
		require.Equal(t, StateClosed, tr.State(testKey), "transitions: %v", log.list())
		require.Zero(t, tr.Snapshot()[0].Requests, "it counts for nothing")
	})
}

// TestEvictedWithCallsInFlightStillTrips: under cap pressure a closed
// breaker whose calls all hang has nothing in its window and is evicted
// for other hosts. When the hung calls time out, their failures must
// still count for their key: the key's breaker opens, and the next call
// to the hung dependency is refused.
func TestEvictedWithCallsInFlightStillTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hung atomic.Int64
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Host == "hung.test" {
				hung.Add(1)
				<-req.Context().Done()
				return nil, req.Context().Err()
			}
			return response(req, http.StatusOK, nil), nil
		})
		log := &transitionLog{}
		tr := New(next, WithMaxBreakers(2), WithMinRequests(20), WithJitter(0), onStateChange(log.hook))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { _, _ = getCtx(t, ctx, tr, "http://hung.test/") })
		}
		synctest.Wait()
		time.Sleep(11 * time.Second) // hung.test's breaker: older than a window, nothing counted
		for _, h := range []string{"a.test", "b.test"} {
			_, err := get(t, tr, "http://"+h+"/")
			require.NoError(t, err)
		}
		require.NotContains(t, keys(tr), "hung.test", "evicted with its calls in flight")
		wg.Wait() // the 20 calls time out
		require.Equal(t, StateOpen, tr.State("hung.test"))
		require.Equal(t, []string{"hung.test: closed→open"}, log.list())
		resp, err := get(t, tr, "http://hung.test/")
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "the hung dependency is protected")
		require.EqualValues(t, 20, hung.Load())
	})
}

// TestTripRacingEvictionIsNeverLost: a Trip of a closed, idle breaker
// that eviction removes at the same moment trips the key's live breaker,
// never the removed one: the key is open after every Trip that reported
// its transition, and each key's transitions form one path. Real time
// and real contention: eviction churns all along.
func TestTripRacingEvictionIsNeverLost(t *testing.T) {
	const window = 10 * time.Millisecond
	var mu sync.Mutex
	last := map[string]State{}
	trips := map[string]int{}
	var broken atomic.Value
	tr := New(rtFunc(func(r *http.Request) (*http.Response, error) { return response(r, http.StatusOK, nil), nil }),
		WithMaxBreakers(4), WithWindow(window), WithMinRequests(1000), WithJitter(0),
		WithOnTransition(func(x Transition) {
			mu.Lock()
			defer mu.Unlock()
			if last[x.Key] != x.From {
				broken.CompareAndSwap(nil, fmt.Sprintf("%s: %s→%s after %s", x.Key, x.From, x.To, last[x.Key]))
			}
			last[x.Key] = x.To
			if x.Reason == ReasonTrip {
				trips[x.Key]++
			}
		}))
	tripsOf := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return trips[key]
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	var seq atomic.Int64
	for range 2 { // new keys that want a place, evicting idle breakers
		churn.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := get(t, tr, "http://churn"+strconv.FormatInt(seq.Add(1), 10)+".test/")
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	var held, lost atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	var ops sync.WaitGroup
	for g := range 3 {
		ops.Go(func() {
			key := "op" + strconv.Itoa(g) + ".test"
			for time.Now().Before(deadline) {
				tr.Trip(key, time.Hour)
				if tr.State(key) != StateOpen {
					continue // no room
				}
				time.Sleep(window + time.Millisecond) // older than a window: idle once closed
				for i := 0; i < 50 && time.Now().Before(deadline); i++ {
					tr.Reset(key) // closed and idle
					before := tripsOf(key)
					tr.Trip(key, time.Hour)
					if tripsOf(key) == before {
						break // no room: Trip made no breaker
					}
					if tr.State(key) != StateOpen {
						lost.Add(1)
						break
					}
					held.Add(1)
				}
				tr.Reset(key)
			}
		})
	}
	ops.Wait()
	close(stop)
	churn.Wait()
	require.Positive(t, held.Load())
	require.Zero(t, lost.Load(), "Trips reported that did not leave their key open")
	require.Nil(t, broken.Load(), "a key's transitions are one path")
}
