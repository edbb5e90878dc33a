package redisstore

// Fleets of httpbreaker Transports on one real redis-server: an
// operator's Trip and Reset on one instance act on all of them, and a
// fleet in a long outage backs off as one breaker does.

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// memDependency answers every request with a 200 from memory and counts
// the requests that reached it.
type memDependency struct{ calls atomic.Int64 }

// RoundTrip answers r with a 200 and counts it.
func (d *memDependency) RoundTrip(r *http.Request) (*http.Response, error) {
	d.calls.Add(1)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// always polls cond every 10ms for d and fails at the first time it does
// not hold.
func always(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if !cond() {
			t.Fatalf("%s: stopped holding %v before the end", what, time.Until(end).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFleetTripAndReset: Trip on one of three Transports opens the key on
// all three, for exactly its time: still open a second past their
// MaxOpenTimeout (2s), and so is a key tripped until Reset; a fourth
// Transport that joins afterwards learns both through Lookup at its first
// request; no request reaches the dependency meanwhile. Reset on another
// instance closes the key on all four.
func TestFleetTripAndReset(t *testing.T) {
	r := startRedis(t)
	so := Options{OpTimeout: time.Second} // generous, as in TestFleetProbesOnce
	dep := &memDependency{}
	const maxOpen = 2 * time.Second
	opts := []httpbreaker.Option{
		httpbreaker.WithOpenTimeout(500 * time.Millisecond),
		httpbreaker.WithMaxOpenTimeout(maxOpen),
	}
	var stores []*Store
	var fleet []*httpbreaker.Transport
	join := func() *httpbreaker.Transport {
		s := newTestStore(t, newClient(t, r.Addr()), so)
		waitHealthy(t, 5*time.Second, s)
		tr := httpbreaker.New(dep, append(opts, httpbreaker.WithStore(s))...)
		stores = append(stores, s)
		fleet = append(fleet, tr)
		return tr
	}
	for range 3 {
		join()
	}
	const timed, forever = "timed.internal", "forever.internal"
	// reached sends a request for key through tr and reports whether it
	// reached the dependency.
	reached := func(tr *httpbreaker.Transport, key string) bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+key+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return !httpbreaker.IsRejected(resp)
	}
	state := func(key string, want httpbreaker.State) func() bool {
		return func() bool {
			for _, tr := range fleet {
				if tr.State(key) != want {
					return false
				}
			}
			return true
		}
	}
	for _, tr := range fleet {
		for _, key := range []string{timed, forever} {
			if !reached(tr, key) {
				t.Fatal("a request refused before any trip")
			}
		}
	}

	fleet[0].Trip(timed, time.Hour)
	fleet[2].Trip(forever, time.Duration(math.MaxInt64))
	tripped := time.Now()
	lat := eventually(t, time.Second, "all three open", func() bool {
		return state(timed, httpbreaker.StateOpen)() && state(forever, httpbreaker.StateOpen)()
	})
	t.Logf("Trip on one instance: all three open within %v", lat)
	rdb := r.Client(t)
	if ttl := rdb.PTTL(ctxT(t), "test:trip:"+timed).Val(); ttl < time.Hour-time.Minute || ttl > time.Hour+retrySlack {
		t.Errorf("trip key TTL %v, want an hour: neither the Store's MaxOpen nor the Transports' cap it", ttl)
	}
	if ttl := rdb.PTTL(ctxT(t), "test:trip:"+forever).Val(); ttl != -1 {
		t.Errorf("trip key until Reset: TTL %v, want none (-1)", ttl)
	}

	// A fourth instance joins: its Store has read the trip keys, and its
	// breakers open as they are made.
	late := join()
	if h, ok := stores[3].Lookup(forever); !ok || !h.Operator || !h.RetryAt.IsZero() {
		t.Errorf("the fourth Store's Lookup(%s) = %+v %v, want an operator's trip until Reset", forever, h, ok)
	}
	if h, ok := stores[3].Lookup(timed); !ok || !h.Operator || h.RetryAt.Sub(tripped.Add(time.Hour)).Abs() > time.Second {
		t.Errorf("the fourth Store's Lookup(%s) = %+v %v, want an operator's trip for an hour", timed, h, ok)
	}
	before := dep.calls.Load()
	for _, key := range []string{timed, forever} {
		if reached(late, key) {
			t.Errorf("the fourth instance's first request for %s reached the dependency", key)
		}
		if s := late.State(key); s != httpbreaker.StateOpen {
			t.Errorf("the fourth instance: %s %v", key, s)
		}
	}

	// Past every Transport's MaxOpenTimeout, all four stay open and
	// refuse every request.
	always(t, time.Until(tripped.Add(maxOpen+time.Second)), "all four open, every request refused", func() bool {
		for _, tr := range fleet {
			for _, key := range []string{timed, forever} {
				if reached(tr, key) || tr.State(key) != httpbreaker.StateOpen {
					return false
				}
			}
		}
		return true
	})
	t.Logf("all four still open %v after the trip (MaxOpenTimeout %v)", time.Since(tripped).Round(time.Millisecond), maxOpen)
	if n := dep.calls.Load() - before; n != 0 {
		t.Errorf("%d requests reached the dependency while it was tripped", n)
	}

	// Reset on other instances than those that tripped.
	fleet[1].Reset(timed)
	fleet[3].Reset(forever)
	lat = eventually(t, time.Second, "all four closed", func() bool {
		return state(timed, httpbreaker.StateClosed)() && state(forever, httpbreaker.StateClosed)()
	})
	t.Logf("Reset on another instance: all four closed within %v", lat)
	if n := rdb.Exists(ctxT(t), "test:trip:"+timed, "test:trip:"+forever).Val(); n != 0 {
		t.Errorf("%d trip keys left after Reset", n)
	}
	for i, tr := range fleet {
		for _, key := range []string{timed, forever} {
			if !reached(tr, key) {
				t.Errorf("instance %d: a request for %s refused after Reset", i, key)
			}
		}
	}
	for i, s := range stores {
		if _, ok := s.Lookup(forever); ok {
			t.Errorf("Store %d still looks up the trip", i)
		}
		if e := s.Errors(); e != 0 {
			t.Errorf("Store %d: %d errors", i, e)
		}
	}
}

// oneBreakerProbes returns when one breaker sends its probes, from when
// it opened, in an outage that lasts d: one at the end of each open
// period, which starts at base and doubles per failed probe cycle up to
// maxOpen (no jitter, and probes answered at once).
func oneBreakerProbes(base, maxOpen, d time.Duration) []time.Duration {
	var at []time.Duration
	var sum time.Duration
	for open := base; sum+open <= d; open = min(2*open, maxOpen) {
		sum += open
		at = append(at, sum)
	}
	return at
}

// TestOneBreakerProbes pins the schedule the fleet test compares with.
func TestOneBreakerProbes(t *testing.T) {
	ms := time.Millisecond
	got := oneBreakerProbes(100*ms, 2*time.Second, 6*time.Second)
	want := []time.Duration{100 * ms, 300 * ms, 700 * ms, 1500 * ms, 3100 * ms, 5100 * ms}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestFleetBacksOffAsOneBreaker: five instances, each with its own Store,
// and two more that join during the outage, all sending traffic every
// 5ms to a dependency that stays down for 6s. The fleet probes within one
// breaker's count over that time (from the doubling schedule: 100ms base,
// 2s maximum, no jitter) plus one per instance that joins, and the gaps
// between its probes grow to the maximum open time, as one breaker's do,
// whichever instance holds the lease: no instance probes early when the
// lease changes hands. A breaker without a Store, sending the same traffic
// at the same time, is the control.
func TestFleetBacksOffAsOneBreaker(t *testing.T) {
	r := startRedis(t)
	const (
		base    = 100 * time.Millisecond
		maxOpen = 2 * time.Second
		outage  = 6 * time.Second
		loneID  = 99
	)
	backoff := []httpbreaker.Option{
		httpbreaker.WithOpenTimeout(base),
		httpbreaker.WithMaxOpenTimeout(maxOpen),
		httpbreaker.WithJitter(0),
	}
	so := Options{OpTimeout: time.Second} // generous, as in TestFleetProbesOnce
	fleet := newFleet(t, r, so, backoff...)
	ht := &http.Transport{}
	t.Cleanup(ht.CloseIdleConnections)
	loneTr := httpbreaker.New(tagged{id: loneID, next: ht}, append(fleetOptions(), backoff...)...)
	lone := &instance{id: loneID, tr: loneTr, client: &http.Client{Transport: loneTr, Timeout: 5 * time.Second}}
	dep := newDependency(t)
	key := keyOf(dep.srv.URL)
	for _, in := range append(fleet, lone) {
		in.get(t, dep.srv.URL)
	}

	dep.fail.Store(true)
	tripped := trip(t, fleet[0], dep)
	for _, in := range fleet[1:] {
		eventually(t, time.Second, "fleet open", func() bool { return in.tr.State(key) == httpbreaker.StateOpen })
	}
	loneTripped := trip(t, lone, dep)
	stop := callEvery(t, append(slices.Clone(fleet), lone), dep.srv.URL, 5*time.Millisecond, nil)
	defer func() {
		if stop != nil {
			stop()
		}
	}()

	// Two instances join, 2s and 4s into the outage; the fleet never
	// closes meanwhile.
	open := func(in *instance) func() bool {
		return func() bool { return in.tr.State(key) != httpbreaker.StateClosed }
	}
	var joined []*instance
	for j := range 2 {
		always(t, time.Until(tripped.Add(time.Duration(j+1)*2*time.Second)), "the fleet open", open(fleet[0]))
		in := newInstance(t, fleetSize+j, r.Addr(), so, backoff...)
		waitHealthy(t, 5*time.Second, in.store)
		// Its first request makes its breaker, which learns the outage
		// through Lookup.
		if reached, _ := in.get(t, dep.srv.URL); reached {
			t.Errorf("instance %d, joining, called the dependency the fleet knows is down", in.id)
		}
		joined = append(joined, in)
		defer callEvery(t, []*instance{in}, dep.srv.URL, 5*time.Millisecond, nil)()
	}
	end := loneTripped.Add(outage) // the later of the two
	always(t, time.Until(end), "the fleet open", func() bool {
		for _, in := range append(slices.Clone(fleet), joined...) {
			if !open(in)() {
				return false
			}
		}
		return true
	})
	stop()
	stop = nil

	var probes, loneProbes []time.Duration
	byInstance := map[int]int{}
	for _, c := range dep.since(tripped) { // the earlier of the two
		switch {
		case c.instance == loneID && c.at.After(loneTripped) && c.at.Sub(loneTripped) <= outage:
			loneProbes = append(loneProbes, c.at.Sub(loneTripped))
		case c.instance != loneID && !c.at.Before(tripped) && c.at.Sub(tripped) <= outage:
			probes = append(probes, c.at.Sub(tripped))
			byInstance[c.instance]++
		}
	}
	want := oneBreakerProbes(base, maxOpen, outage)
	allowed := len(want) + len(joined)
	var gaps []time.Duration
	for i := 1; i < len(probes); i++ {
		gaps = append(gaps, (probes[i] - probes[i-1]).Round(time.Millisecond))
	}
	round := func(ds []time.Duration) []string {
		out := make([]string, len(ds))
		for i, d := range ds {
			out[i] = d.Round(time.Millisecond).String()
		}
		return out
	}
	t.Logf("one breaker's schedule over %v: %d probes at %v", outage, len(want), round(want))
	t.Logf("the breaker without a Store: %d probes at %v", len(loneProbes), round(loneProbes))
	t.Logf("the fleet (%d instances, %d of them joining): %d probes at %v; gaps %v; probes per instance %v",
		len(fleet)+len(joined), len(joined), len(probes), round(probes), gaps, byInstance)
	if len(probes) > allowed {
		t.Errorf("the fleet sent %d probes in %v, want at most %d (one breaker's %d, plus one per instance that joined)",
			len(probes), outage, allowed, len(want))
	}
	// Within one breaker's count, the gaps are one breaker's open
	// periods: no instance probes early when the lease changes hands.
	if len(probes) <= len(want) {
		for j, g := range gaps {
			if period := min(base<<(j+1), maxOpen); g < period*9/10 {
				t.Errorf("gap %d between the fleet's probes %v, shorter than one breaker's open period then (%v)", j, g, period)
			}
		}
	}
	if len(gaps) == 0 || slices.Max(gaps) < maxOpen*9/10 {
		t.Errorf("the gaps between the fleet's probes never reached the maximum open time %v: %v", maxOpen, gaps)
	}
	if len(loneProbes) > len(want) {
		t.Errorf("the breaker without a Store sent %d probes, more than the schedule's %d", len(loneProbes), len(want))
	}
	for _, in := range append(fleet, joined...) {
		if e := in.store.Errors(); e != 0 {
			t.Errorf("instance %s: %d store errors", strconv.Itoa(in.id), e)
		}
	}
}

// TestBreakerMadeWhileUnhealthyLearnsATripOnRecovery: a breaker made
// while its Store is unhealthy (Redis stalled) decides locally, since
// Lookup cannot answer; once the Store has synchronised again, it learns
// the trip the fleet still holds (here until Reset).
func TestBreakerMadeWhileUnhealthyLearnsATripOnRecovery(t *testing.T) {
	r := startRedis(t)
	so := Options{ResyncInterval: 200 * time.Millisecond}
	sa := newTestStore(t, newClient(t, r.Addr()), so)
	sb := newTestStore(t, newClient(t, r.Addr()), so)
	waitHealthy(t, 5*time.Second, sa, sb)
	dep := &memDependency{}
	a := httpbreaker.New(dep, httpbreaker.WithStore(sa))
	b := httpbreaker.New(dep, httpbreaker.WithStore(sb))
	const key = "api.test"
	const url = "http://api.test/x"

	a.Trip(key, time.Duration(math.MaxInt64)) // until Reset, on every instance
	eventually(t, 2*time.Second, "B's Store learns the trip", func() bool {
		h, ok := sb.Lookup(key)
		return ok && h.Operator
	})

	// Redis stalls: B's Store notices and falls back.
	r.Freeze()
	eventually(t, 5*time.Second, "B's Store unhealthy", func() bool { return !sb.healthy.Load() })
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if resp, err := b.RoundTrip(req); err == nil {
		resp.Body.Close() // B decides locally while Redis is out: documented
	}
	r.Thaw()
	waitHealthy(t, 5*time.Second, sb)
	if h, ok := sb.Lookup(key); !ok || !h.Operator {
		t.Fatalf("the trip no longer in B's Store: %+v %v", h, ok)
	}
	eventually(t, 3*time.Second, "B's breaker tripped after B resynchronised", func() bool {
		return b.State(key) == httpbreaker.StateOpen
	})
}
