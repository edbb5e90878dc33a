package redisstore

// A fleet of five httpbreaker Transports in one process, each with its own
// Store and its own Redis client, sharing one redis-server, calling one
// loopback dependency that counts the calls of each instance; and a fleet
// in which two Transports share one Store.

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

const fleetSize = 5

// dependency is a loopback HTTP server that fails or succeeds on demand
// and records every call with the instance that made it.
type dependency struct {
	srv  *httptest.Server
	fail atomic.Bool

	mu    sync.Mutex
	calls []call
}

type call struct {
	instance int
	at       time.Time
	status   int
}

func newDependency(t *testing.T) *dependency {
	d := &dependency{}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.Header.Get("X-Instance"))
		status := http.StatusOK
		if d.fail.Load() {
			status = http.StatusInternalServerError
		}
		d.mu.Lock()
		d.calls = append(d.calls, call{instance: i, at: time.Now(), status: status})
		d.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

// since returns the calls made at or after t.
func (d *dependency) since(t time.Time) []call {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []call
	for _, c := range d.calls {
		if !c.at.Before(t) {
			out = append(out, c)
		}
	}
	return out
}

// tagged adds the X-Instance header naming the instance, so the
// dependency can count each instance's calls.
type tagged struct {
	id   int
	next *http.Transport
}

func (t tagged) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Instance", strconv.Itoa(t.id))
	return t.next.RoundTrip(r)
}

// timedStore is the Store as a Transport sees it, timing every call the
// Transport makes into it and into its member: that is what would make a
// request wait on Redis.
type timedStore struct {
	*Store
	slowest atomic.Int64 // nanoseconds
}

// timedMember is a member of a timedStore.
type timedMember struct {
	s *timedStore
	m httpbreaker.Member
}

func (s *timedStore) time(start time.Time) {
	d := int64(time.Since(start))
	for {
		old := s.slowest.Load()
		if d <= old || s.slowest.CompareAndSwap(old, d) {
			return
		}
	}
}

func (s *timedStore) Join(f func(httpbreaker.Hint)) httpbreaker.Member {
	return timedMember{s: s, m: s.Store.Join(f)}
}

func (s *timedStore) Lookup(key string) (httpbreaker.Hint, bool) {
	defer s.time(time.Now())
	return s.Store.Lookup(key)
}

func (m timedMember) Publish(h httpbreaker.Hint) {
	defer m.s.time(time.Now())
	m.m.Publish(h)
}

func (m timedMember) ProbeLease(key string, ttl time.Duration) httpbreaker.Lease {
	defer m.s.time(time.Now())
	return m.m.ProbeLease(key, ttl)
}

// instance is one member of the fleet.
type instance struct {
	id     int
	store  *Store
	timed  *timedStore
	tr     *httpbreaker.Transport
	client *http.Client
}

// fleetOptions are the breaker settings of every instance: quick to trip
// for the tests (a short window, so that each phase of a test starts
// afresh), and with a fixed open period (no jitter).
func fleetOptions() []httpbreaker.Option {
	return []httpbreaker.Option{
		httpbreaker.WithWindow(400 * time.Millisecond),
		httpbreaker.WithMinRequests(5),
		httpbreaker.WithFailureRate(0.5),
		httpbreaker.WithOpenTimeout(300 * time.Millisecond),
		httpbreaker.WithMaxOpenTimeout(3 * time.Second),
		httpbreaker.WithJitter(0),
		httpbreaker.WithHalfOpenProbes(1),
		httpbreaker.WithProbesToClose(3),
	}
}

// newInstance makes instance id, with a Store of its own, on the Redis at
// addr.
func newInstance(t *testing.T, id int, addr string, so Options, extra ...httpbreaker.Option) *instance {
	return attach(t, id, &timedStore{Store: newTestStore(t, newClient(t, addr), so)}, extra...)
}

// attach makes instance id, a Transport on the Store ts, which it may
// share with other instances.
func attach(t *testing.T, id int, ts *timedStore, extra ...httpbreaker.Option) *instance {
	s := ts.Store
	ht := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(ht.CloseIdleConnections)
	opts := append(fleetOptions(), httpbreaker.WithStore(ts))
	if os.Getenv("FLEET_DEBUG") != "" {
		opts = append(opts, httpbreaker.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)).With("instance", id)))
	}
	tr := httpbreaker.New(tagged{id: id, next: ht}, append(opts, extra...)...)
	return &instance{id: id, store: s, timed: ts, tr: tr, client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// newFleet makes fleetSize instances on r, with Store options so and
// breaker options extra on top of fleetOptions.
func newFleet(t *testing.T, r *redisServer, so Options, extra ...httpbreaker.Option) []*instance {
	fleet := make([]*instance, fleetSize)
	stores := make([]*Store, fleetSize)
	for i := range fleet {
		fleet[i] = newInstance(t, i, r.Addr(), so, extra...)
		stores[i] = fleet[i].store
	}
	waitHealthy(t, 5*time.Second, stores...)
	return fleet
}

// get makes one request and reports whether it reached the dependency
// (false: rejected by the breaker) and how long it took.
func (in *instance) get(t *testing.T, url string) (reached bool, took time.Duration) {
	start := time.Now()
	resp, err := in.client.Get(url)
	took = time.Since(start)
	if err != nil {
		t.Errorf("instance %d: %v", in.id, err)
		return false, took
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return !httpbreaker.IsRejected(resp), took
}

func keyOf(url string) string { return url[len("http://"):] }

// trip makes in's breaker for dep open through real failures and returns
// when it did.
func trip(t *testing.T, in *instance, dep *dependency) time.Time {
	key := keyOf(dep.srv.URL)
	for range 100 {
		in.get(t, dep.srv.URL)
		if in.tr.State(key) == httpbreaker.StateOpen {
			return time.Now()
		}
	}
	t.Fatalf("instance %d did not trip", in.id)
	return time.Time{}
}

// callEvery has each instance of fleet send a GET for url every interval,
// then call after (if not nil) with it, until the returned stop is
// called; stop returns once they all have.
func callEvery(t *testing.T, fleet []*instance, url string, interval time.Duration, after func(*instance)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, in := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(interval):
					in.get(t, url)
					if after != nil {
						after(in)
					}
				}
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// recoverFleet has every instance of an open fleet send a request every
// 5ms until each has seen its breaker for dep closed. The first probe
// cycle (after the 300ms open period, plus a lease recheck) fails; dep
// recovers at 900ms, before the second (backed off to ~600ms more).
func recoverFleet(t *testing.T, fleet []*instance, dep *dependency) {
	t.Helper()
	key := keyOf(dep.srv.URL)
	var closed sync.Map // instance id → seen closed
	stop := callEvery(t, fleet, dep.srv.URL, 5*time.Millisecond, func(in *instance) {
		if in.tr.State(key) == httpbreaker.StateClosed {
			closed.Store(in.id, true)
		}
	})
	defer stop()
	time.Sleep(900 * time.Millisecond)
	dep.fail.Store(false)
	eventually(t, 5*time.Second, "fleet closed", func() bool {
		n := 0
		closed.Range(func(any, any) bool { n++; return true })
		return n == len(fleet)
	})
}

// TestFleetLearnsAnOutageOnce: while every instance sends traffic, the
// first to trip tells the others, which open within 100ms and make no
// further call to the failing dependency; an instance started afterwards
// learns it at its first request.
func TestFleetLearnsAnOutageOnce(t *testing.T) {
	r := startRedis(t)
	// A long open period, so that the hint is still current when the
	// sixth instance starts, however slow the machine.
	open := httpbreaker.WithOpenTimeout(3 * time.Second)
	fleet := newFleet(t, r, Options{}, open)
	dep := newDependency(t)
	key := keyOf(dep.srv.URL)
	for _, in := range fleet {
		in.get(t, dep.srv.URL) // every instance has a (closed) breaker
	}
	dep.fail.Store(true)

	// The others keep sending a request every 10ms, as a service under
	// load would; at that pace they would need 50ms of failures to trip on
	// their own, while instance 0 trips in a burst.
	stop := callEvery(t, fleet[1:], dep.srv.URL, 10*time.Millisecond, nil)
	tripped := trip(t, fleet[0], dep)
	var lat []time.Duration
	for _, in := range fleet[1:] {
		lat = append(lat, eventually(t, time.Second, "instance "+strconv.Itoa(in.id)+" open", func() bool {
			return in.tr.State(key) == httpbreaker.StateOpen
		}))
	}
	time.Sleep(200 * time.Millisecond)
	stop()

	t.Logf("others open %v after the first trip", lat)
	first := tripped
	late := dep.since(first.Add(100 * time.Millisecond))
	if len(late) != 0 {
		t.Errorf("%d calls reached the failing dependency more than 100ms after the first trip: %+v", len(late), late)
	}
	perInstance := make([]int, fleetSize)
	for _, c := range dep.since(first) {
		perInstance[c.instance]++
	}
	t.Logf("calls per instance after the first trip: %v", perInstance)

	// A sixth instance, started now, is open from its first request.
	in := newInstance(t, fleetSize, r.Addr(), Options{}, open)
	waitHealthy(t, 5*time.Second, in.store)
	before := len(dep.since(time.Time{}))
	for range 5 {
		if reached, _ := in.get(t, dep.srv.URL); reached {
			t.Error("a new instance called a dependency the fleet knows is down")
		}
	}
	if n := len(dep.since(time.Time{})); n != before {
		t.Errorf("%d calls from the new instance", n-before)
	}
	for _, in := range fleet {
		if e := in.store.Errors(); e != 0 {
			t.Errorf("instance %d: %d store errors", in.id, e)
		}
	}
}

// TestFleetProbesOnce: at the end of the open period exactly one instance
// probes, through a failed probe cycle and a successful one, while every
// instance keeps sending traffic; its success closes the whole fleet.
func TestFleetProbesOnce(t *testing.T) {
	r := startRedis(t)
	// A generous OpTimeout: on a loaded machine a 50ms Redis call can time
	// out, and a Store that sees Redis as slow rightly lets its instance
	// probe on its own, which is not what this test is about.
	fleet := newFleet(t, r, Options{OpTimeout: time.Second})
	dep := newDependency(t)
	key := keyOf(dep.srv.URL)
	for _, in := range fleet {
		in.get(t, dep.srv.URL)
	}
	dep.fail.Store(true)
	tripped := trip(t, fleet[0], dep)
	for _, in := range fleet[1:] {
		eventually(t, time.Second, "fleet open", func() bool { return in.tr.State(key) == httpbreaker.StateOpen })
	}

	recoverFleet(t, fleet, dep)

	oneProber(t, dep.since(tripped), tripped)
	if n := r.Client(t).Exists(ctxT(t), "test:lease:"+key).Val(); n != 0 {
		t.Error("probe lease still held after the fleet closed")
	}
}

// oneProber checks that a single instance called the dependency after
// the fleet opened (at since) and until its probes closed it: the prober
// is whoever made the first of calls, and its third success closes it; only
// then does it publish the close that lets the others call again, so
// every call up to that one must be its own.
func oneProber(t *testing.T, calls []call, since time.Time) {
	t.Helper()
	if len(calls) == 0 {
		t.Fatal("no probe at all")
	}
	prober := calls[0].instance
	probers := map[int]int{}
	failed, succeeded, end := 0, 0, len(calls)
	for i, c := range calls {
		probers[c.instance]++
		if c.instance != prober {
			continue
		}
		if c.status != http.StatusOK {
			failed++
			succeeded = 0
			continue
		}
		if succeeded++; succeeded == 3 {
			end = i + 1
			break
		}
	}
	if end == len(calls) && succeeded < 3 {
		t.Fatalf("the prober never made 3 successful probes: %+v", calls)
	}
	window := calls[end-1].at.Sub(since)
	t.Logf("half-open window %v: probes per instance %v (%d failed cycle(s), 3 successes)", window.Round(time.Millisecond), probers, failed)
	if len(probers) != 1 {
		t.Errorf("%d instances probed before the fleet closed, want exactly 1: %v", len(probers), probers)
	}
	if failed < 1 {
		t.Logf("no failed probe cycle (the first probe came after the recovery)")
	}
}

// TestTransportsSharingAStore: instances 0 and 1 are two Transports of one
// process sharing one Store; instance 2 has a Store of its own. A trip in
// instance 0 opens instance 1 within 100ms (in process) and instance 2
// (through Redis); at the end of the open period exactly one of them
// probes, since the lease is held by one member, not by a Store; and its
// close closes the others.
func TestTransportsSharingAStore(t *testing.T) {
	r := startRedis(t)
	// A generous OpTimeout, as in TestFleetProbesOnce.
	so := Options{OpTimeout: time.Second}
	shared := &timedStore{Store: newTestStore(t, newClient(t, r.Addr()), so)}
	fleet := []*instance{attach(t, 0, shared), attach(t, 1, shared), newInstance(t, 2, r.Addr(), so)}
	waitHealthy(t, 5*time.Second, shared.Store, fleet[2].store)
	if n := len(shared.members); n != 2 {
		t.Fatalf("the shared Store has %d members, want 2", n)
	}
	dep := newDependency(t)
	key := keyOf(dep.srv.URL)
	for _, in := range fleet {
		in.get(t, dep.srv.URL)
	}
	dep.fail.Store(true)

	// The others send a request every 10ms while instance 0 trips.
	stop := callEvery(t, fleet[1:], dep.srv.URL, 10*time.Millisecond, nil)
	tripped := trip(t, fleet[0], dep)
	lat := make([]time.Duration, len(fleet))
	for _, in := range fleet[1:] {
		eventually(t, time.Second, "instance "+strconv.Itoa(in.id)+" open", func() bool {
			if in.tr.State(key) != httpbreaker.StateOpen {
				return false
			}
			lat[in.id] = time.Since(tripped) // an upper bound: polled every ms
			return true
		})
	}
	stop()
	t.Logf("open after the first trip: instance 1 (same Store) %v, instance 2 (through Redis) %v", lat[1], lat[2])
	for _, in := range fleet[1:] {
		if lat[in.id] > 100*time.Millisecond {
			t.Errorf("instance %d open %v after the trip, want < 100ms", in.id, lat[in.id])
		}
	}
	// Nothing reaches the dependency once the fleet knows, until the open
	// period (300ms) ends.
	for _, c := range dep.since(tripped.Add(100 * time.Millisecond)) {
		if c.at.Before(tripped.Add(250 * time.Millisecond)) {
			t.Errorf("instance %d called the failing dependency %v after the trip", c.instance, c.at.Sub(tripped))
		}
	}

	since := time.Now()
	recoverFleet(t, fleet, dep)
	oneProber(t, dep.since(since), tripped)
	if n := r.Client(t).Exists(ctxT(t), "test:lease:"+key).Val(); n != 0 {
		t.Error("probe lease still held after the fleet closed")
	}
	if slow := time.Duration(shared.slowest.Load()); slow > 20*time.Millisecond {
		t.Errorf("a call into the shared Store took %v", slow)
	}
	for _, in := range fleet {
		if e := in.store.Errors(); e != 0 {
			t.Errorf("instance %d: %d store errors", in.id, e)
		}
	}
}

// TestFleetSurvivesRedisOutage: a frozen redis-server (SIGSTOP: nothing
// answers) and then a killed one leave every Transport working on its own
// breakers — tripping, probing and closing locally — with no request
// slower than before; when Redis is back on the same port, hints
// propagate again.
func TestFleetSurvivesRedisOutage(t *testing.T) {
	r := startRedis(t)
	fleet := newFleet(t, r, Options{})
	stores := make([]*Store, fleetSize)
	for i, in := range fleet {
		stores[i] = in.store
	}
	dep := newDependency(t)
	key := keyOf(dep.srv.URL)

	// run sends requests from every instance for d and returns the
	// latencies of all requests, sorted. opened and reclosed record which
	// instances went through a whole breaker cycle.
	var opened, reclosed [fleetSize]atomic.Bool
	run := func(d time.Duration) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for _, in := range fleet {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					_, took := in.get(t, dep.srv.URL)
					mu.Lock()
					lat = append(lat, took)
					mu.Unlock()
					switch in.tr.State(key) {
					case httpbreaker.StateOpen:
						opened[in.id].Store(true)
					case httpbreaker.StateClosed:
						if opened[in.id].Load() {
							reclosed[in.id].Store(true)
						}
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		slices.Sort(lat)
		return lat
	}
	p99 := func(lat []time.Duration) time.Duration { return lat[len(lat)*99/100] }
	// outage runs a failure and a recovery of the dependency while Redis
	// is out, and checks that each instance handled both on its own, that
	// no call into the Store took long (a request waiting on Redis would
	// take OpTimeout at least while Redis is frozen), and that requests
	// were as quick as with Redis up (p99: the slowest single request on a
	// shared two-core machine is scheduling noise, and is only logged).
	outage := func(what string, limit time.Duration) {
		t.Helper()
		for i := range fleetSize {
			opened[i].Store(false)
			reclosed[i].Store(false)
		}
		for _, in := range fleet {
			in.timed.slowest.Store(0)
		}
		dep.fail.Store(true)
		lat := run(500 * time.Millisecond)
		dep.fail.Store(false)
		lat = append(lat, run(1500*time.Millisecond)...)
		slices.Sort(lat)
		var slowCall time.Duration
		for _, in := range fleet {
			slowCall = max(slowCall, time.Duration(in.timed.slowest.Load()))
		}
		t.Logf("Redis %s: %d requests, p50 %v, p99 %v, max %v; slowest Store call %v",
			what, len(lat), lat[len(lat)/2], p99(lat), lat[len(lat)-1], slowCall)
		if p99(lat) > limit {
			t.Errorf("Redis %s: p99 request latency %v, want < %v", what, p99(lat), limit)
		}
		if slowCall > 20*time.Millisecond {
			t.Errorf("Redis %s: a Store call took %v: a request waited on Redis", what, slowCall)
		}
		for i := range fleetSize {
			if !opened[i].Load() || !reclosed[i].Load() {
				t.Errorf("Redis %s: instance %d opened %v, closed again %v: not working on its own", what, i, opened[i].Load(), reclosed[i].Load())
			}
		}
		var errs uint64
		for _, s := range stores {
			errs += s.Errors()
		}
		t.Logf("Redis %s: store errors so far: %d", what, errs)
	}

	base := run(300 * time.Millisecond)
	// "No slower than before": 50ms, or twice the p99 with Redis up if
	// the machine is slower than that.
	limit := max(50*time.Millisecond, 2*p99(base))
	t.Logf("Redis up: %d requests, p50 %v, p99 %v, max %v; limit while it is out: p99 < %v",
		len(base), base[len(base)/2], p99(base), base[len(base)-1], limit)

	r.Freeze()
	outage("frozen", limit)
	r.Thaw()
	start := time.Now()
	waitHealthy(t, 5*time.Second, stores...)
	t.Logf("fleet healthy %v after Redis thawed", time.Since(start))

	if os.Getenv("FLEET_DEBUG") != "" {
		for _, in := range fleet {
			t.Logf("before kill: instance %d state %v", in.id, in.tr.State(key))
		}
	}
	r.Stop()
	for _, in := range fleet {
		eventually(t, 2*time.Second, "outage noticed", func() bool { return !in.store.healthy.Load() })
	}
	outage("killed", limit)

	// Redis comes back, empty, on the same port: the fleet resynchronises
	// and a new outage propagates again.
	r.Start()
	start = time.Now()
	waitHealthy(t, 5*time.Second, stores...)
	t.Logf("fleet resynchronised %v after the restart", time.Since(start))
	dep2 := newDependency(t)
	key2 := keyOf(dep2.srv.URL)
	for _, in := range fleet {
		in.get(t, dep2.srv.URL)
	}
	dep2.fail.Store(true)
	tripped := trip(t, fleet[0], dep2)
	var lat []time.Duration
	for _, in := range fleet[1:] {
		lat = append(lat, eventually(t, time.Second, "open after restart", func() bool {
			return in.tr.State(key2) == httpbreaker.StateOpen
		}))
	}
	slices.Sort(lat)
	t.Logf("after the restart, others open %v after the trip", lat)
	if lat[len(lat)-1] > 100*time.Millisecond {
		t.Errorf("propagation after restart took %v", lat[len(lat)-1])
	}
	if late := dep2.since(tripped.Add(100 * time.Millisecond)); len(late) != 0 {
		t.Errorf("%d calls to the second failing dependency after the fleet knew", len(late))
	}
}
