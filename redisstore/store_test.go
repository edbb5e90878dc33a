package redisstore

// Tests of the Store against a real redis-server on loopback.

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// join makes a member of s whose hints go to the returned channel.
func join(s *Store) (*member, <-chan httpbreaker.Hint) {
	ch := make(chan httpbreaker.Hint, 1024)
	m := s.join(func(h httpbreaker.Hint) { ch <- h })
	return m, ch
}

// hintWaiter makes a member of s that only listens, and returns the
// channel its hints go to.
func hintWaiter(s *Store) <-chan httpbreaker.Hint {
	_, ch := join(s)
	return ch
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestPropagationLatency measures how long an open hint takes from Publish
// on one instance to delivery on another, through pub/sub. This is the
// number that justifies pub/sub over polling (see the package doc).
func TestPropagationLatency(t *testing.T) {
	_, a, b := twoStores(t)
	got := hintWaiter(b)
	pa, own := join(a)

	const n = 200
	lat := make([]time.Duration, 0, n)
	for i := range n {
		key := "dep-" + string(rune('a'+i%26)) + time.Duration(i).String()
		start := time.Now()
		pa.Publish(httpbreaker.Hint{Key: key, State: httpbreaker.StateOpen, RetryAt: start.Add(10 * time.Second)})
		select {
		case h := <-got:
			lat = append(lat, time.Since(start))
			if h.Key != key || h.State != httpbreaker.StateOpen {
				t.Fatalf("got %+v, want open %q", h, key)
			}
		case <-time.After(time.Second):
			t.Fatalf("hint %d not delivered within 1s", i)
		}
	}
	slices.Sort(lat)
	p50, p99, worst := lat[n/2], lat[n*99/100], lat[n-1]
	t.Logf("pub/sub propagation over %d hints: p50 %v, p99 %v, max %v", n, p50, p99, worst)
	if worst > 100*time.Millisecond {
		t.Errorf("slowest propagation %v, want < 100ms", worst)
	}
	select {
	case h := <-own:
		t.Errorf("own hint delivered back: %+v", h)
	default:
	}
	if e := a.Errors() + b.Errors(); e != 0 {
		t.Errorf("errors: %d", e)
	}
}

// TestCloseHintPropagates: a closed hint is delivered, forgotten by
// Lookup, and deletes the open key.
func TestCloseHintPropagates(t *testing.T) {
	r := startRedis(t)
	rdb := r.Client(t)
	a := newTestStore(t, rdb, Options{})
	b := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, a, b)
	got := hintWaiter(b)
	pa := a.join(nil)
	pa.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: time.Now().Add(10 * time.Second)})
	<-got
	if _, ok := b.Lookup("k"); !ok {
		t.Fatal("b does not know the open hint")
	}
	if n, _ := rdb.Exists(ctxT(t), "test:open:k").Result(); n != 1 {
		t.Fatal("open key not written")
	}
	ttl, _ := rdb.PTTL(ctxT(t), "test:open:k").Result()
	if ttl <= 9*time.Second || ttl > 11*time.Second+retrySlack {
		t.Errorf("open key TTL %v, want retry-at + slack", ttl)
	}
	pa.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed})
	select {
	case h := <-got:
		if h != (httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed}) {
			t.Fatalf("got %+v", h)
		}
	case <-time.After(time.Second):
		t.Fatal("closed hint not delivered")
	}
	if _, ok := b.Lookup("k"); ok {
		t.Error("b still looks up a closed key")
	}
	if n, _ := rdb.Exists(ctxT(t), "test:open:k").Result(); n != 0 {
		t.Error("open key not deleted")
	}
}

// TestResyncRepairsMissedHints: an open key written without a message (a
// message missed while disconnected) is learnt by the periodic resync; a
// key that vanishes is forgotten without being taken for a close. The
// time it takes is what polling alone would cost.
func TestResyncRepairsMissedHints(t *testing.T) {
	r := startRedis(t)
	rdb := r.Client(t)
	s := newTestStore(t, r.Client(t), Options{ResyncInterval: 200 * time.Millisecond})
	waitHealthy(t, 5*time.Second, s)
	got := hintWaiter(s)

	v := wireHint{open: true, openFor: 30000, sender: "fedcba9876543210", key: "missed key"}.encode()
	start := time.Now()
	// As a Store writes it: expiring a second (retrySlack) after retry-at.
	if err := rdb.Set(ctxT(t), "test:open:missed key", v, 31*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	retry := start.Add(30 * time.Second)
	select {
	case h := <-got:
		t.Logf("learnt through resync after %v (ResyncInterval 200ms)", time.Since(start))
		// Its retry-at comes from the key's time to live in Redis.
		if h.Key != "missed key" || h.RetryAt.Sub(retry).Abs() > 500*time.Millisecond {
			t.Fatalf("got %+v", h)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("not learnt by resync")
	}
	if _, ok := s.Lookup("missed key"); !ok {
		t.Fatal("Lookup misses it")
	}
	// A second resync does not deliver it again.
	time.Sleep(500 * time.Millisecond)
	if len(got) != 0 {
		t.Errorf("delivered again: %+v", <-got)
	}
	rdb.Del(ctxT(t), "test:open:missed key")
	eventually(t, 2*time.Second, "forgotten", func() bool { _, ok := s.Lookup("missed key"); return !ok })
	if len(got) != 0 {
		t.Errorf("a vanished key was delivered as %+v", <-got)
	}

	// A new Store learns what is open when it connects.
	s2 := newTestStore(t, r.Client(t), Options{})
	v = wireHint{open: true, openFor: 30000, sender: "fedcba9876543210", key: "k2"}.encode()
	rdb.Set(ctxT(t), "test:open:k2", v, time.Minute)
	s3 := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, s2, s3)
	if _, ok := s3.Lookup("k2"); !ok {
		t.Error("a new Store does not know what was open before it started")
	}
}

// TestGarbageIgnoredAndCounted writes nonsense under the prefix: it is
// ignored and counted, the Store stays healthy, an absurd retry-at is cut
// to MaxOpen, and a broken lease key makes the lease unavailable (local
// probing) rather than denied for ever.
func TestGarbageIgnoredAndCounted(t *testing.T) {
	r := startRedis(t)
	rdb := r.Client(t)
	ctx := ctxT(t)
	other := "fedcba9876543210"
	year := time.Duration(365 * 24 * time.Hour)
	aeon := int64(999_999_999_999_999) // ms: the largest open time the wire allows
	rdb.Set(ctx, "test:open:bad", "garbage", 0)
	rdb.Set(ctx, "test:open:binary", "\x00\xff\x01 o 5", 0)
	rdb.Set(ctx, "test:open:huge", strings.Repeat("1 o 5 ", 100000), 0)
	rdb.Set(ctx, "test:open:mismatch", wireHint{open: true, openFor: 5000, sender: other, key: "someone-else"}.encode(), time.Minute)
	rdb.Set(ctx, "test:open:closed", wireHint{sender: other, key: "closed"}.encode(), 0)
	rdb.HSet(ctx, "test:open:hash", "f", "v")
	rdb.Set(ctx, "test:open:far", wireHint{open: true, openFor: aeon, sender: other, key: "far"}.encode(), year)
	rdb.Set(ctx, "test:open:forever", wireHint{open: true, openFor: 5000, sender: other, key: "forever"}.encode(), 0)
	rdb.Set(ctx, "test:open:past", wireHint{open: true, openFor: 5000, sender: other, key: "past"}.encode(), 500*time.Millisecond)
	rdb.Set(ctx, "test:open:ok", wireHint{open: true, openFor: 20000, sender: other, key: "ok"}.encode(), 21*time.Second)
	rdb.HSet(ctx, "test:lease:hashlease", "f", "v")
	rdb.Set(ctx, "test:lease:forever", other, 0) // a lease without a TTL

	var logs countingHandler
	s := newTestStore(t, r.Client(t), Options{MaxOpen: 10 * time.Second, Logger: slog.New(&logs)})
	waitHealthy(t, 5*time.Second, s)
	got := hintWaiter(s)
	if e := s.Errors(); e < 7 {
		t.Errorf("errors after reading garbage: %d, want ≥ 7", e)
	}
	if _, ok := s.Lookup("ok"); !ok {
		t.Error("the valid key among the garbage was not learnt")
	}
	for _, k := range []string{"bad", "binary", "huge", "mismatch", "someone-else", "closed", "hash", "forever", "past"} {
		if _, ok := s.Lookup(k); ok {
			t.Errorf("garbage %q looked up", k)
		}
	}
	h, ok := s.Lookup("far")
	if !ok || h.RetryAt.After(time.Now().Add(10*time.Second)) {
		t.Errorf("a year-long open key: %+v %v, want cut to MaxOpen (10s)", h, ok)
	}

	// Garbage messages: ignored and counted, the valid one delivered.
	e := s.Errors()
	for _, m := range []string{"", "garbage", "1 o 99999999999999999999 " + other + " k", "\xff\xfe", strings.Repeat("z", 1<<16)} {
		rdb.Publish(ctx, "test:hints", m)
	}
	rdb.Publish(ctx, "test:hints", wireHint{open: true, openFor: aeon, sender: other, key: "msg-far"}.encode())
	select {
	case h := <-got:
		if h.Key != "msg-far" || h.RetryAt.After(time.Now().Add(10*time.Second)) {
			t.Errorf("got %+v, want msg-far cut to MaxOpen", h)
		}
	case <-time.After(time.Second):
		t.Fatal("valid message after the garbage not delivered")
	}
	if d := s.Errors() - e; d != 5 {
		t.Errorf("%d garbage messages counted, want 5", d)
	}

	// A lease key of the wrong type: Unavailable, not Denied.
	m := s.join(nil)
	m.ProbeLease("hashlease", time.Second)
	eventually(t, time.Second, "broken lease answered", func() bool {
		return m.ProbeLease("hashlease", time.Second) == httpbreaker.LeaseUnavailable
	})
	// A lease without a TTL gets one: it cannot block probing for ever.
	m.ProbeLease("forever", 2*time.Second)
	eventually(t, time.Second, "lease answered", func() bool {
		return m.ProbeLease("forever", 2*time.Second) == httpbreaker.LeaseDenied && s.leaseKind("forever") == leaseOther
	})
	if ttl := rdb.PTTL(ctx, "test:lease:forever").Val(); ttl <= 0 || ttl > 2*time.Second {
		t.Errorf("lease TTL %v, want repaired to ≤ 2s", ttl)
	}

	if !s.healthy.Load() {
		t.Error("garbage made the Store unhealthy")
	}
	if n := logs.count(slog.LevelWarn); n != 1 {
		t.Errorf("%d warnings logged for garbage, want 1 (rate-limited)", n)
	}
}

// TestProbeLeaseAcrossInstances: one instance gets the lease, the other
// is denied; closing the breaker gives it back; Close gives it back too.
func TestProbeLeaseAcrossInstances(t *testing.T) {
	r, a, b := twoStores(t)
	rdb := r.Client(t)
	ma := a.join(nil)
	mb, got := join(b)
	ttl := 5 * time.Second

	if l := ma.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied {
		t.Fatalf("a first ask: %v, want Denied while pending", l)
	}
	eventually(t, time.Second, "a granted", func() bool { return ma.ProbeLease("k", ttl) == httpbreaker.LeaseGranted })
	mb.ProbeLease("k", ttl)
	time.Sleep(50 * time.Millisecond)
	for range 10 {
		if l := mb.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied {
			t.Fatalf("b: %v while a holds the lease", l)
		}
	}
	if v := rdb.Get(ctxT(t), "test:lease:k").Val(); v != ma.id {
		t.Fatalf("lease holder %q, want a's member (%s)", v, ma.id)
	}

	// a's breaker closes: the lease is given back, b is told, and b can
	// take the lease at the next outage.
	ma.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed})
	<-got
	if n := rdb.Exists(ctxT(t), "test:lease:k").Val(); n != 0 {
		t.Fatal("lease not released on close")
	}
	mb.ProbeLease("k", ttl)
	eventually(t, time.Second, "b granted", func() bool { return mb.ProbeLease("k", ttl) == httpbreaker.LeaseGranted })

	// Close gives it back.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctxT(t), "test:lease:k").Val(); n != 0 {
		t.Error("lease not released on Close")
	}
}

// TestACloseWhileCutOffGivesTheLeaseBackWhenRedisIsBack: a breaker that
// closes while this Store is cut off from Redis (its subscription down)
// gives its probe lease back once Redis is back, so that another
// instance may probe at once rather than when the lease expires.
func TestACloseWhileCutOffGivesTheLeaseBackWhenRedisIsBack(t *testing.T) {
	r, a, b := twoStores(t)
	rdb := r.Client(t)
	ma, mb := a.join(nil), b.join(nil)
	ttl := time.Minute
	ma.ProbeLease("k", ttl)
	eventually(t, time.Second, "a granted", func() bool { return ma.ProbeLease("k", ttl) == httpbreaker.LeaseGranted })

	a.subUp.Store(false) // cut off, as the subscriber finds it
	a.healthy.Store(false)
	errs := a.Errors()
	ma.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed})
	eventually(t, time.Second, "close dropped", func() bool { return a.Errors() > errs })
	if v := rdb.Get(ctxT(t), "test:lease:k").Val(); v != ma.id {
		t.Fatalf("lease holder %q while cut off, want a's member (%s)", v, ma.id)
	}

	a.subUp.Store(true) // back: the resync's recovery replays what is owed
	a.recovered()
	eventually(t, 2*time.Second, "lease given back", func() bool { return rdb.Exists(ctxT(t), "test:lease:k").Val() == 0 })
	mb.ProbeLease("k", ttl)
	eventually(t, time.Second, "b granted", func() bool { return mb.ProbeLease("k", ttl) == httpbreaker.LeaseGranted })
}

// TestAResyncCutShortForgetsNoOpenHint: a resync that finds more open
// keys than it reads (maxScan) forgets none of the open hints it knows:
// the ones it did not read may well be there.
func TestAResyncCutShortForgetsNoOpenHint(t *testing.T) {
	old := maxScan
	t.Cleanup(func() { maxScan = old }) // after the Stores are closed
	maxScan = 2
	_, a, b := twoStores(t)
	mb := b.join(nil)
	keys := []string{"k1", "k2", "k3"}
	for _, k := range keys {
		mb.Publish(httpbreaker.Hint{Key: k, State: httpbreaker.StateOpen, RetryAt: time.Now().Add(time.Minute)})
	}
	known := func() int {
		n := 0
		for _, k := range keys {
			if _, ok := a.Lookup(k); ok {
				n++
			}
		}
		return n
	}
	eventually(t, 2*time.Second, "a learns the three", func() bool { return known() == 3 })
	if err := a.resync(); err != nil {
		t.Fatal(err)
	}
	if n := known(); n != 3 {
		t.Errorf("%d of 3 open hints known after a resync that read 2 keys", n)
	}
}

// TestProbeLeaseSubMillisecondTTL: a positive ttl under a millisecond
// (a Transport's MaxOpenTimeout may be one) takes the lease, as any
// valid ttl does: no error, no broken lease, no LeaseUnavailable with
// Redis up.
func TestProbeLeaseSubMillisecondTTL(t *testing.T) {
	r := startRedis(t)
	a := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, a)
	m := a.join(nil)
	errs := a.Errors()
	if l := m.ProbeLease("k", 900*time.Microsecond); l != httpbreaker.LeaseDenied {
		t.Fatalf("first ask: %v, want Denied while pending", l)
	}
	eventually(t, time.Second, "lease answered", func() bool { return a.leaseKind("k") != leasePending })
	if k := a.leaseKind("k"); k == leaseBroken {
		t.Errorf("lease state %v (broken) after a valid ttl of 900µs", k)
	}
	if n := a.Errors() - errs; n != 0 {
		t.Errorf("Errors() grew by %d for a lease with a positive ttl", n)
	}
	if l := m.ProbeLease("k", 900*time.Microsecond); l == httpbreaker.LeaseUnavailable {
		t.Errorf("ProbeLease = LeaseUnavailable with Redis up and the lease free")
	}
}

// leaseKind returns what s knows of key's lease.
func (s *Store) leaseKind(key string) leaseKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases[key].kind
}

// countingHandler counts log records by level.
type countingHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == l {
			n++
		}
	}
	return n
}

// TestOutageLoggedOnceAndRecovered: a Store started while Redis is down
// answers at once, logs the outage once however many operations fail,
// and synchronises when Redis comes up, re-publishing its open hints.
func TestOutageLoggedOnceAndRecovered(t *testing.T) {
	r := startRedis(t)
	r.Stop()
	var logs countingHandler
	s := newTestStore(t, r.Client(t), Options{Logger: slog.New(&logs)})
	m := s.join(nil)
	retry := time.Now().Add(30 * time.Second)
	var slowest atomic.Int64
	deadline := time.Now().Add(time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		start := time.Now()
		m.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: retry})
		s.Lookup("k")
		if l := m.ProbeLease("k", time.Second); l != httpbreaker.LeaseUnavailable {
			t.Fatalf("ProbeLease while down: %v", l)
		}
		if d := time.Since(start); d > time.Duration(slowest.Load()) {
			slowest.Store(int64(d))
		}
		time.Sleep(time.Millisecond)
	}
	// These calls take microseconds; the bound only leaves room for a
	// loaded machine's scheduling. (A frozen Redis, which would make a
	// waiting call slow, is TestFleetSurvivesRedisOutage's business.)
	if d := time.Duration(slowest.Load()); d > 100*time.Millisecond {
		t.Errorf("slowest call while Redis is down: %v", d)
	}
	if _, ok := s.Lookup("k"); ok {
		t.Error("Lookup answered while Redis is down")
	}
	if s.Errors() == 0 {
		t.Error("no errors counted")
	}
	if w := logs.count(slog.LevelWarn); w != 1 {
		t.Errorf("%d warnings for one outage, want 1", w)
	}

	r.Start()
	waitHealthy(t, 5*time.Second, s)
	if i := logs.count(slog.LevelInfo); i != 1 {
		t.Errorf("%d info lines at recovery, want 1", i)
	}
	// Its own open hint, dropped while down, reaches Redis now.
	rdb := r.Client(t)
	eventually(t, 2*time.Second, "own hint re-published", func() bool { return rdb.Exists(ctxT(t), "test:open:k").Val() == 1 })
	if _, ok := s.Lookup("k"); !ok {
		t.Error("Lookup after recovery")
	}
}

// TestRestartedRedisIsRepaired: Redis restarts empty; the subscribers
// reconnect, the open hints are re-published by their owners, and new
// hints propagate again.
func TestRestartedRedisIsRepaired(t *testing.T) {
	r, a, b := twoStores(t)
	got := hintWaiter(b)
	pa := a.join(nil)
	pa.Publish(httpbreaker.Hint{Key: "before", State: httpbreaker.StateOpen, RetryAt: time.Now().Add(30 * time.Second)})
	<-got

	r.Stop()
	eventually(t, 2*time.Second, "outage noticed", func() bool { return !a.healthy.Load() && !b.healthy.Load() })
	r.Start()
	waitHealthy(t, 5*time.Second, a, b)
	rdb := r.Client(t)
	eventually(t, 2*time.Second, "open key restored", func() bool { return rdb.Exists(ctxT(t), "test:open:before").Val() == 1 })
	c := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, c)
	if _, ok := c.Lookup("before"); !ok {
		t.Error("a Store started after the restart does not learn the hint from before it")
	}
	for len(got) > 0 {
		<-got
	}
	start := time.Now()
	pa.Publish(httpbreaker.Hint{Key: "after", State: httpbreaker.StateOpen, RetryAt: time.Now().Add(30 * time.Second)})
	for {
		select {
		case h := <-got:
			if h.Key != "after" {
				continue
			}
			t.Logf("propagation after the restart: %v", time.Since(start))
		case <-time.After(time.Second):
			t.Fatal("no propagation after the restart")
		}
		break
	}
}

// TestClockSkewIgnored: an instance whose clock is an hour off still
// shares correct open periods, since hints carry durations and keys their
// time to live, never the sender's wall-clock time.
func TestClockSkewIgnored(t *testing.T) {
	r := startRedis(t)
	skewed, err := newStore(r.Client(t), Options{Prefix: "test"})
	if err != nil {
		t.Fatal(err)
	}
	skewed.now = func() time.Time { return time.Now().Add(time.Hour) }
	skewed.start()
	t.Cleanup(func() { skewed.Close() })
	b := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, skewed, b)
	got := hintWaiter(b)

	skewed.join(nil).Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: skewed.now().Add(5 * time.Second)})
	want := time.Now().Add(5 * time.Second)
	select {
	case h := <-got:
		if d := h.RetryAt.Sub(want).Abs(); d > 200*time.Millisecond {
			t.Errorf("retry-at off by %v through pub/sub", d)
		}
	case <-time.After(time.Second):
		t.Fatal("not delivered")
	}
	// And through the key, for a Store that starts later.
	c := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, c)
	h, ok := c.Lookup("k")
	if !ok {
		t.Fatal("not learnt from the key")
	}
	if d := h.RetryAt.Sub(want).Abs(); d > 200*time.Millisecond {
		t.Errorf("retry-at off by %v through the key", d)
	}
}

// recv waits up to d for a hint on ch.
func recv(t *testing.T, ch <-chan httpbreaker.Hint, d time.Duration, what string) httpbreaker.Hint {
	t.Helper()
	select {
	case h := <-ch:
		return h
	case <-time.After(d):
		t.Fatalf("%s: nothing delivered within %v", what, d)
		return httpbreaker.Hint{}
	}
}

// quiet waits d and fails if ch receives anything but hints for which
// ok holds.
func quiet(t *testing.T, ch <-chan httpbreaker.Hint, d time.Duration, what string, ok func(httpbreaker.Hint) bool) {
	t.Helper()
	end := time.After(d)
	for {
		select {
		case h := <-ch:
			if !ok(h) {
				t.Errorf("%s: delivered %+v", what, h)
			}
		case <-end:
			return
		}
	}
}

// TestMembersOfOneStore: two members of one Store (two Transports of one
// process) and a member of another Store. A member's hints reach the
// other member of its Store in process and the other Store through
// Redis, never itself; another instance's hints reach both members; the
// probe lease is one member's: the other member of its Store is denied
// it, and its close or its Store's Close gives it back.
func TestMembersOfOneStore(t *testing.T) {
	r, a, b := twoStores(t)
	rdb := r.Client(t)
	m1, got1 := join(a)
	m2, got2 := join(a)
	mb, gotb := join(b)
	if m1.id == m2.id || m1.id[:instanceIDLen] != a.id || !validSender(m1.id) || !validSender(m2.id) {
		t.Fatalf("member IDs %q %q of instance %q", m1.id, m2.id, a.id)
	}
	open := func(key string) httpbreaker.Hint {
		return httpbreaker.Hint{Key: key, State: httpbreaker.StateOpen, RetryAt: time.Now().Add(10 * time.Second)}
	}

	// m1 → m2 (in process, then once more through Redis) and b; not m1.
	start := time.Now()
	m1.Publish(open("k1"))
	if h := recv(t, got2, time.Second, "m1 → m2"); h.Key != "k1" || h.State != httpbreaker.StateOpen {
		t.Fatalf("m2 got %+v", h)
	}
	t.Logf("m1 → m2 in process: %v", time.Since(start))
	if h := recv(t, gotb, time.Second, "m1 → b"); h.Key != "k1" {
		t.Fatalf("b got %+v", h)
	}
	quiet(t, got1, 100*time.Millisecond, "m1's own hint back to m1", func(httpbreaker.Hint) bool { return false })
	for len(got2) > 0 { // the echo through Redis: the same hint again
		if h := <-got2; h.Key != "k1" {
			t.Errorf("m2 got %+v", h)
		}
	}

	// b → both members of a.
	mb.Publish(open("k2"))
	for i, ch := range []<-chan httpbreaker.Hint{got1, got2} {
		h := recv(t, ch, time.Second, "b → a")
		if i == 1 && h.Key == "k1" && h.State == httpbreaker.StateOpen {
			h = recv(t, ch, time.Second, "b → a") // a late echo of k1
		}
		if h.Key != "k2" {
			t.Fatalf("member %d of a got %+v", i+1, h)
		}
	}
	quiet(t, gotb, 100*time.Millisecond, "b's own hint back to b", func(httpbreaker.Hint) bool { return false })

	// The lease is m1's: m2 is denied it, as is b. (A key without an
	// open hint: while m1's hint for k1 holds, the others are denied the
	// lease without asking Redis; TestProbeLeaseWaitsForTheFleet.)
	ttl := 5 * time.Second
	if l := m1.ProbeLease("lk", ttl); l != httpbreaker.LeaseDenied {
		t.Fatalf("m1 first ask: %v, want Denied while pending", l)
	}
	if l := m2.ProbeLease("lk", ttl); l != httpbreaker.LeaseDenied {
		t.Fatalf("m2 while m1's ask is pending: %v", l)
	}
	eventually(t, time.Second, "m1 granted", func() bool { return m1.ProbeLease("lk", ttl) == httpbreaker.LeaseGranted })
	mb.ProbeLease("lk", ttl)
	time.Sleep(50 * time.Millisecond)
	for range 10 {
		if l := m2.ProbeLease("lk", ttl); l != httpbreaker.LeaseDenied {
			t.Fatalf("m2: %v while m1 holds the lease", l)
		}
		if l := mb.ProbeLease("lk", ttl); l != httpbreaker.LeaseDenied {
			t.Fatalf("b: %v while m1 holds the lease", l)
		}
	}
	if v := rdb.Get(ctxT(t), "test:lease:lk").Val(); v != m1.id {
		t.Fatalf("lease holder %q, want m1 (%s)", v, m1.id)
	}
	// a forgets what it knew (as after an outage) and m2 asks first:
	// Redis says m1 holds it, and a knows m1 is its own.
	a.mu.Lock()
	clear(a.leases)
	a.mu.Unlock()
	m2.ProbeLease("lk", ttl)
	eventually(t, time.Second, "lease answered", func() bool { return a.leaseKind("lk") == leaseMine })
	if l := m2.ProbeLease("lk", ttl); l != httpbreaker.LeaseDenied {
		t.Errorf("m2 after the answer: %v, want Denied", l)
	}
	if l := m1.ProbeLease("lk", ttl); l != httpbreaker.LeaseGranted {
		t.Errorf("m1 after m2's ask: %v, want Granted", l)
	}

	// m1's breaker closes: the lease is given back; m2 and b are told.
	m1.Publish(httpbreaker.Hint{Key: "lk", State: httpbreaker.StateClosed})
	if h := recv(t, got2, time.Second, "close → m2"); h != (httpbreaker.Hint{Key: "lk", State: httpbreaker.StateClosed}) {
		t.Fatalf("m2 got %+v", h)
	}
	for {
		if h := recv(t, gotb, time.Second, "close → b"); h.State == httpbreaker.StateClosed {
			break
		}
	}
	eventually(t, time.Second, "lease released on close", func() bool { return rdb.Exists(ctxT(t), "test:lease:lk").Val() == 0 })

	// The next outage: m2 takes it; a's Close gives it back.
	m2.ProbeLease("lk", ttl)
	eventually(t, time.Second, "m2 granted", func() bool { return m2.ProbeLease("lk", ttl) == httpbreaker.LeaseGranted })
	if l := m1.ProbeLease("lk", ttl); l != httpbreaker.LeaseDenied {
		t.Errorf("m1 while m2 holds the lease: %v", l)
	}
	if v := rdb.Get(ctxT(t), "test:lease:lk").Val(); v != m2.id {
		t.Fatalf("lease holder %q, want m2 (%s)", v, m2.id)
	}
	if e := a.Errors() + b.Errors(); e != 0 {
		t.Errorf("errors: %d", e)
	}
	a.Close()
	if n := rdb.Exists(ctxT(t), "test:lease:lk").Val(); n != 0 {
		t.Error("lease not released on Close")
	}
}

// TestCloseDuringResyncLeavesTheStoreClosed: Close while the subscriber's
// first resync runs. The resync may mark the Store healthy after Close
// has begun; once Close returns, the Store must still answer as closed:
// ProbeLease LeaseUnavailable, Lookup nothing.
func TestCloseDuringResyncLeavesTheStoreClosed(t *testing.T) {
	r := startRedis(t)
	c := r.Client(t)
	for i := range 50 {
		s, err := New(c, Options{Prefix: "closing"})
		if err != nil {
			t.Fatal(err)
		}
		m := s.Join(nil)
		for !s.subUp.Load() { // subscribed: the resync starts now
			runtime.Gosched()
		}
		s.Close()
		if l := m.ProbeLease("k", time.Second); l != httpbreaker.LeaseUnavailable {
			t.Fatalf("Store %d: ProbeLease after Close = %v, want LeaseUnavailable", i, l)
		}
	}
}
