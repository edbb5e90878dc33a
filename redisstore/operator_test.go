package redisstore

// Tests of operators' hints (Trip and Reset), of the backoff (Cycles) that
// open hints carry, and of the two wire versions: first on the Store's
// memory without Redis (as unit_test.go), then against a real
// redis-server.

import (
	"math"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// TestPublishOperatorHints: an operator's open hint is recorded and
// looked up exactly, beyond MaxOpen, or until Reset (zero RetryAt); an
// open hint's Cycles are kept; an operator's Reset forgets both and is
// kept until it reaches Redis; while a trip holds, another member's close
// that is not an operator's is not delivered in process.
func TestPublishOperatorHints(t *testing.T) {
	s, now := offlineStore(t, Options{MaxOpen: time.Minute})
	var r2 recorder
	m1 := s.join(nil)
	s.join(r2.f)
	drain := func() []outHint {
		var out []outHint
		for len(s.queue) > 0 {
			out = append(out, <-s.queue)
		}
		return out
	}

	hour := now.Add(time.Hour)
	trip := httpbreaker.Hint{Key: "a", State: httpbreaker.StateOpen, RetryAt: hour, Operator: true}
	m1.Publish(trip)
	if h, ok := s.Lookup("a"); !ok || h != trip {
		t.Fatalf("Lookup after an hour's Trip: %+v %v, want %+v (not cut to MaxOpen)", h, ok, trip)
	}
	forever := httpbreaker.Hint{Key: "b", State: httpbreaker.StateOpen, Operator: true}
	m1.Publish(forever)
	if h, ok := s.Lookup("b"); !ok || h != forever {
		t.Fatalf("Lookup after a Trip until Reset: %+v %v, want %+v", h, ok, forever)
	}
	open := httpbreaker.Hint{Key: "c", State: httpbreaker.StateOpen, RetryAt: now.Add(800 * time.Millisecond), Cycles: 3}
	m1.Publish(open)
	if h, ok := s.Lookup("c"); !ok || h != open {
		t.Fatalf("Lookup of an open hint with cycles: %+v %v, want %+v", h, ok, open)
	}
	huge := httpbreaker.Hint{Key: "d", State: httpbreaker.StateOpen, RetryAt: now.Add(time.Second), Cycles: 1 << 40}
	m1.Publish(huge)
	if h, _ := s.Lookup("d"); h.Cycles != maxCycles {
		t.Errorf("cycles %d, want cut to %d", h.Cycles, maxCycles)
	}
	m1.Publish(httpbreaker.Hint{Key: "e", State: httpbreaker.StateOpen, RetryAt: now.Add(-time.Second), Operator: true})
	if _, ok := s.Lookup("e"); ok {
		t.Error("a Trip whose time has passed was recorded")
	}
	q := drain()
	if len(q) != 4 || q[0].h != trip || q[1].h != forever || q[0].seq == 0 || q[1].seq <= q[0].seq || q[2].seq != 0 {
		t.Fatalf("queued for Redis %+v", q)
	}
	flush(s)
	if got := r2.get(); len(got) != 4 || got[0] != trip || got[1] != forever || got[2] != open {
		t.Fatalf("delivered in process %+v", got)
	}

	// A trip outlives the open hints' expiry, as long as it holds.
	*now = now.Add(30 * time.Minute)
	if _, ok := s.Lookup("a"); !ok {
		t.Error("an hour's Trip forgotten after 30 minutes")
	}
	if _, ok := s.Lookup("c"); ok {
		t.Error("an 800ms open hint after 30 minutes")
	}

	// A close that is not an operator's does not end a trip for the
	// other members; a Reset does, and waits to be sent.
	m1.Publish(httpbreaker.Hint{Key: "b", State: httpbreaker.StateClosed})
	flush(s)
	if got := r2.get(); len(got) != 4 {
		t.Errorf("a plain close of a tripped key delivered: %+v", got[4:])
	}
	if h, ok := s.Lookup("b"); !ok || h != forever {
		t.Errorf("a plain close ended the trip: %+v %v", h, ok)
	}
	reset := httpbreaker.Hint{Key: "b", State: httpbreaker.StateClosed, Operator: true}
	m1.Publish(reset)
	flush(s)
	if got := r2.get(); len(got) != 5 || got[4] != reset {
		t.Fatalf("Reset delivered as %+v", got)
	}
	if _, ok := s.Lookup("b"); ok {
		t.Error("looked up after Reset")
	}
	q = drain()
	if len(q) != 2 || q[1].h != reset || q[1].seq == 0 {
		t.Fatalf("queued %+v", q)
	}
	if p, ok := s.resets["b"]; !ok || p.by != m1 || p.seq != q[1].seq {
		t.Errorf("pending Reset %+v %v", p, ok)
	}
	// A Trip after it supersedes the pending Reset.
	m1.Publish(forever)
	if _, ok := s.resets["b"]; ok {
		t.Error("a Reset still pending after a later Trip")
	}
}

// TestHandleMessageVersion2: another instance's version 2 messages carry
// cycles and operators' hints: a newer open hint of the same sender with
// more cycles is news; a trip is taken exactly, or until Reset; a close
// that is not an operator's does not end it, a Reset does.
func TestHandleMessageVersion2(t *testing.T) {
	s, now := offlineStore(t, Options{MaxOpen: time.Minute})
	var r recorder
	s.join(r.f)
	other := "fedcba9876543210/1"
	last := func() httpbreaker.Hint {
		t.Helper()
		flush(s)
		got := r.get()
		if len(got) == 0 {
			t.Fatal("nothing delivered")
		}
		return got[len(got)-1]
	}

	s.handleMessage(wireHint{open: true, openFor: 100, sender: other, key: "k"}.encode())
	if h := last(); h != (httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: now.Add(100 * time.Millisecond)}) {
		t.Fatalf("delivered %+v", h)
	}
	// The prober's next open period, 200ms later than the first ended:
	// within sameHint of the last retry-at, but one more cycle, so news.
	*now = now.Add(100 * time.Millisecond)
	s.handleMessage(wireHint{open: true, openFor: 200, cycles: 1, sender: other, key: "k"}.encode())
	if h := last(); h != (httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: now.Add(200 * time.Millisecond), Cycles: 1}) {
		t.Fatalf("the next cycle delivered as %+v", h)
	}
	if h, _ := s.Lookup("k"); h.Cycles != 1 {
		t.Errorf("Lookup %+v, want 1 cycle", h)
	}
	n := len(r.get())
	s.handleMessage(wireHint{open: true, openFor: 200, cycles: 1, sender: other, key: "k"}.encode())
	flush(s)
	if len(r.get()) != n {
		t.Error("the same hint delivered twice")
	}

	// Trips: exact, and until Reset.
	s.handleMessage(wireHint{open: true, openFor: time.Hour.Milliseconds(), operator: true, sender: other, key: "k"}.encode())
	want := httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: now.Add(time.Hour), Operator: true}
	if h := last(); h != want {
		t.Fatalf("trip delivered as %+v, want %+v", h, want)
	}
	if h, _ := s.Lookup("k"); h != want {
		t.Errorf("Lookup %+v, want %+v", h, want)
	}
	s.handleMessage(wireHint{open: true, operator: true, sender: other, key: "f"}.encode())
	forever := httpbreaker.Hint{Key: "f", State: httpbreaker.StateOpen, Operator: true}
	if h := last(); h != forever {
		t.Fatalf("trip until Reset delivered as %+v", h)
	}
	*now = now.Add(365 * 24 * time.Hour)
	if h, ok := s.Lookup("f"); !ok || h != forever {
		t.Errorf("a year later, Lookup %+v %v", h, ok)
	}

	// A plain close while tripped: forgotten (the open hint), not
	// delivered, the trip kept. A Reset: delivered, all forgotten.
	n = len(r.get())
	s.handleMessage(wireHint{sender: other, key: "f"}.encode())
	flush(s)
	if len(r.get()) != n {
		t.Errorf("a plain close of a tripped key delivered: %+v", r.get()[n:])
	}
	if _, ok := s.Lookup("f"); !ok {
		t.Error("a plain close ended a trip")
	}
	s.handleMessage(wireHint{operator: true, sender: "0123456789abcdef/4", key: "f"}.encode())
	if h := last(); h != (httpbreaker.Hint{Key: "f", State: httpbreaker.StateClosed, Operator: true}) {
		t.Fatalf("Reset delivered as %+v", h)
	}
	if _, ok := s.Lookup("f"); ok {
		t.Error("looked up after Reset")
	}
	if s.Errors() != 0 {
		t.Errorf("errors %d", s.Errors())
	}
}

// TestHandleMessageVersions: a Store reads version 1, as Stores of earlier
// releases write it; a Store of an earlier release (decodeV1, all it
// reads) ignores version 2 and counts it.
func TestHandleMessageVersions(t *testing.T) {
	other := "fedcba9876543210/1"
	v1open := wireHint{open: true, openFor: 3000, sender: other, key: "k"}
	s, now := offlineStore(t, Options{})
	var r recorder
	s.join(r.f)
	s.handleMessage(v1open.encodeV1())
	flush(s)
	if got := r.get(); len(got) != 1 || got[0] != (httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: now.Add(3 * time.Second)}) {
		t.Fatalf("version 1 open delivered as %+v", got)
	}
	s.handleMessage(wireHint{sender: other, key: "k"}.encodeV1())
	flush(s)
	if got := r.get(); len(got) != 2 || got[1] != (httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed}) {
		t.Fatalf("version 1 close delivered as %+v", got)
	}
	if s.Errors() != 0 {
		t.Errorf("errors %d reading version 1", s.Errors())
	}

	old, _ := offlineStore(t, Options{})
	old.decode = decodeV1
	var ro recorder
	old.join(ro.f)
	for i, w := range []wireHint{
		{open: true, openFor: 3000, cycles: 2, sender: other, key: "k"},
		{open: true, openFor: 3000, sender: other, key: "k"}, // nothing v1 could not say, still v2
		{open: true, operator: true, sender: other, key: "k"},
		{operator: true, sender: other, key: "k"},
		{sender: other, key: "k"},
	} {
		old.handleMessage(w.encode())
		flush(old)
		if got := ro.get(); len(got) != 0 {
			t.Fatalf("an earlier release delivered version 2 %q as %+v", w.encode(), got)
		}
		if e := old.Errors(); e != uint64(i+1) {
			t.Fatalf("an earlier release counted %d errors after %d version 2 messages", e, i+1)
		}
	}
	old.handleMessage(v1open.encodeV1())
	flush(old)
	if len(ro.get()) != 1 {
		t.Error("an earlier release missed version 1")
	}
}

// TestProbeLeaseWaitsForTheFleet: while another member's open hint says
// the fleet's open period goes on (for at most ttl from when it was
// learnt), or another member's trip holds, the lease is denied without
// asking Redis; a member's own hint does not hold it back.
func TestProbeLeaseWaitsForTheFleet(t *testing.T) {
	s, now := offlineStore(t, Options{MaxOpen: time.Minute})
	m1, m2 := s.join(nil), s.join(nil)
	ttl := 2 * time.Second
	asked := func() bool {
		select {
		case <-s.leaseQ:
			return true
		default:
			return false
		}
	}

	// Another instance's prober backed off for 1.6s.
	s.handleMessage(wireHint{open: true, openFor: 1600, cycles: 4, sender: "fedcba9876543210/1", key: "k"}.encode())
	for _, d := range []time.Duration{0, time.Second, 1599 * time.Millisecond} {
		at := now.Add(d)
		s.now = func() time.Time { return at }
		if l := m1.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied || asked() {
			t.Fatalf("%v into the fleet's 1.6s: %v, or Redis asked", d, l)
		}
	}
	at := now.Add(1600 * time.Millisecond)
	s.now = func() time.Time { return at }
	if l := m1.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied || !asked() {
		t.Fatalf("after the fleet's open period: %v, want Denied while Redis is asked", l)
	}
	delete(s.leases, "k")

	// A longer open period than the asking Transport's ttl holds it back
	// for ttl at most.
	s.now = func() time.Time { return *now }
	s.handleMessage(wireHint{open: true, openFor: 50000, sender: "fedcba9876543210/1", key: "long"}.encode())
	at = now.Add(ttl)
	s.now = func() time.Time { return at }
	if m1.ProbeLease("long", ttl); !asked() {
		t.Error("held back longer than ttl")
	}
	delete(s.leases, "long")

	// A member's own open hint: it asks; the other member waits for it.
	s.now = func() time.Time { return *now }
	m1.Publish(httpbreaker.Hint{Key: "own", State: httpbreaker.StateOpen, RetryAt: now.Add(time.Second)})
	<-s.queue
	if m2.ProbeLease("own", ttl); asked() {
		t.Error("m2 asked Redis during m1's open period")
	}
	if m1.ProbeLease("own", ttl); !asked() {
		t.Error("m1 held back by its own hint")
	}

	// A trip: every other member is denied, whatever the ttl.
	m1.Publish(httpbreaker.Hint{Key: "t", State: httpbreaker.StateOpen, Operator: true})
	at = now.Add(time.Hour)
	s.now = func() time.Time { return at }
	if l := m2.ProbeLease("t", ttl); l != httpbreaker.LeaseDenied || asked() {
		t.Errorf("during another member's trip: %v", l)
	}
}

// TestTripUntilResetIsMaxDuration: the Transport's "until Reset" is a Trip
// for time.Duration(math.MaxInt64); its hint has the zero RetryAt, which
// is what the Store stores, sends with no time to live and looks up.
func TestTripUntilResetIsMaxDuration(t *testing.T) {
	s, _ := offlineStore(t, Options{})
	var r recorder
	s.join(r.f)
	tr := httpbreaker.New(okTransport{}, httpbreaker.WithStore(s))
	tr.Trip("dep.internal", time.Duration(math.MaxInt64))
	o := <-s.queue
	if o.h != (httpbreaker.Hint{Key: "dep.internal", State: httpbreaker.StateOpen, Operator: true}) {
		t.Fatalf("published %+v", o.h)
	}
	if h, ok := s.Lookup("dep.internal"); !ok || !h.RetryAt.IsZero() || !h.Operator {
		t.Errorf("Lookup %+v %v", h, ok)
	}
	flush(s)
	if got := r.get(); len(got) != 1 || got[0] != o.h {
		t.Errorf("delivered %+v", got)
	}
}

// TestTripThroughRedis: an operator's trip goes to the trip key, for
// exactly its time (beyond MaxOpen) or with no time to live until Reset,
// and to the other instances with its flag; an open hint's cycles go to
// the open key and the message; a Store that starts later looks all of
// them up as stored; a plain close does not end a trip; a Reset deletes
// the keys and reaches every instance.
func TestTripThroughRedis(t *testing.T) {
	r := startRedis(t)
	rdb := r.Client(t)
	ctx := ctxT(t)
	a := newTestStore(t, r.Client(t), Options{MaxOpen: 10 * time.Second})
	b := newTestStore(t, r.Client(t), Options{MaxOpen: 10 * time.Second})
	waitHealthy(t, 5*time.Second, a, b)
	got := hintWaiter(b)
	pa := a.join(nil)
	near := func(what string, at, want time.Time) {
		t.Helper()
		if d := at.Sub(want).Abs(); d > 500*time.Millisecond {
			t.Errorf("%s: retry-at %v off", what, d)
		}
	}

	hour := time.Now().Add(time.Hour)
	pa.Publish(httpbreaker.Hint{Key: "h", State: httpbreaker.StateOpen, RetryAt: hour, Operator: true})
	h := recv(t, got, time.Second, "an hour's trip")
	if h.Key != "h" || h.State != httpbreaker.StateOpen || !h.Operator {
		t.Fatalf("got %+v", h)
	}
	near("an hour's trip through pub/sub", h.RetryAt, hour)
	if ttl := rdb.PTTL(ctx, "test:trip:h").Val(); ttl < time.Hour-time.Minute || ttl > time.Hour+retrySlack {
		t.Errorf("trip key TTL %v, want an hour (plus the slack), not MaxOpen", ttl)
	}
	if n := rdb.Exists(ctx, "test:open:h").Val(); n != 0 {
		t.Error("a trip wrote the open key")
	}

	pa.Publish(httpbreaker.Hint{Key: "f", State: httpbreaker.StateOpen, Operator: true})
	if h := recv(t, got, time.Second, "a trip until Reset"); h != (httpbreaker.Hint{Key: "f", State: httpbreaker.StateOpen, Operator: true}) {
		t.Fatalf("got %+v", h)
	}
	if ttl := rdb.PTTL(ctx, "test:trip:f").Val(); ttl != -1 {
		t.Errorf("trip key until Reset: TTL %v, want none (-1)", ttl)
	}
	if v := rdb.Get(ctx, "test:trip:f").Val(); v != (wireHint{open: true, operator: true, sender: pa.id, key: "f"}).encode() {
		t.Errorf("trip key holds %q", v)
	}

	five := time.Now().Add(5 * time.Second)
	pa.Publish(httpbreaker.Hint{Key: "n", State: httpbreaker.StateOpen, RetryAt: five, Cycles: 5})
	h = recv(t, got, time.Second, "an open hint with cycles")
	if h.Key != "n" || h.Cycles != 5 || h.Operator {
		t.Fatalf("got %+v", h)
	}
	if w, err := decodeWire(rdb.Get(ctx, "test:open:n").Val()); err != nil || w.cycles != 5 {
		t.Errorf("open key: %+v %v, want 5 cycles", w, err)
	}

	// A Store that starts now learns all three from the keys.
	c := newTestStore(t, r.Client(t), Options{MaxOpen: 10 * time.Second})
	waitHealthy(t, 5*time.Second, c)
	if h, ok := c.Lookup("h"); !ok || !h.Operator || h.Cycles != 0 {
		t.Errorf("Lookup(h) %+v %v", h, ok)
	} else {
		near("an hour's trip through its key", h.RetryAt, hour)
	}
	if h, ok := c.Lookup("f"); !ok || h != (httpbreaker.Hint{Key: "f", State: httpbreaker.StateOpen, Operator: true}) {
		t.Errorf("Lookup(f) %+v %v, want a trip until Reset", h, ok)
	}
	if h, ok := c.Lookup("n"); !ok || h.Cycles != 5 || h.Operator {
		t.Errorf("Lookup(n) %+v %v", h, ok)
	} else {
		near("an open hint through its key", h.RetryAt, five)
	}

	// A plain close of a tripped key: the open key goes, the trip stays,
	// and the other instances are not told to close.
	pa.Publish(httpbreaker.Hint{Key: "f", State: httpbreaker.StateOpen, RetryAt: five})
	recv(t, got, time.Second, "an open hint of a tripped key")
	pa.Publish(httpbreaker.Hint{Key: "f", State: httpbreaker.StateClosed})
	quiet(t, got, 200*time.Millisecond, "a plain close of a tripped key", func(httpbreaker.Hint) bool { return false })
	if _, ok := b.Lookup("f"); !ok {
		t.Error("a plain close ended the trip")
	}
	if n := rdb.Exists(ctx, "test:trip:f").Val(); n != 1 {
		t.Error("a plain close deleted the trip key")
	}

	// Reset: both keys deleted, every instance told.
	pa.Publish(httpbreaker.Hint{Key: "f", State: httpbreaker.StateOpen, RetryAt: five})
	recv(t, got, time.Second, "an open hint of a tripped key")
	pa.Publish(httpbreaker.Hint{Key: "f", State: httpbreaker.StateClosed, Operator: true})
	if h := recv(t, got, time.Second, "Reset"); h != (httpbreaker.Hint{Key: "f", State: httpbreaker.StateClosed, Operator: true}) {
		t.Fatalf("got %+v", h)
	}
	if n := rdb.Exists(ctx, "test:trip:f", "test:open:f").Val(); n != 0 {
		t.Errorf("%d keys left after Reset", n)
	}
	eventually(t, time.Second, "c forgets f", func() bool { _, ok := c.Lookup("f"); return !ok })
	eventually(t, time.Second, "the Reset no longer pending", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		_, ok := a.resets["f"]
		return !ok
	})
	if e := a.Errors() + b.Errors() + c.Errors(); e != 0 {
		t.Errorf("errors: %d", e)
	}
}

// TestResyncRepairsMissedTrips: a trip key written without a message (a
// Trip missed while disconnected) is learnt by the periodic resync; a trip
// key that vanishes before its time (a Reset whose message was missed) is
// delivered as a Reset, to the instance that tripped too; trip keys that
// no Store writes are ignored and counted.
func TestResyncRepairsMissedTrips(t *testing.T) {
	r := startRedis(t)
	rdb := r.Client(t)
	ctx := ctxT(t)
	so := Options{ResyncInterval: 200 * time.Millisecond}
	a := newTestStore(t, r.Client(t), so)
	b := newTestStore(t, r.Client(t), so)
	waitHealthy(t, 5*time.Second, a, b)
	gotB := hintWaiter(b)
	pa, _ := join(a)
	gotA := hintWaiter(a)
	other := "fedcba9876543210/1"

	// Missed Trip: learnt.
	rdb.Set(ctx, "test:trip:g", wireHint{open: true, operator: true, cycles: 2, sender: other, key: "g"}.encode(), 0)
	want := httpbreaker.Hint{Key: "g", State: httpbreaker.StateOpen, Operator: true, Cycles: 2}
	for i, ch := range []<-chan httpbreaker.Hint{gotA, gotB} {
		if h := recv(t, ch, 2*time.Second, "a missed trip"); h != want {
			t.Fatalf("store %d got %+v, want %+v", i, h, want)
		}
	}
	// A resync that finds it again does not deliver it again.
	quiet(t, gotB, 500*time.Millisecond, "a known trip", func(httpbreaker.Hint) bool { return false })

	// Missed Resets: of another instance's trip, and of a's own.
	pa.Publish(httpbreaker.Hint{Key: "own", State: httpbreaker.StateOpen, Operator: true})
	recv(t, gotA, time.Second, "own trip, in process")
	recv(t, gotB, time.Second, "own trip, through Redis")
	eventually(t, time.Second, "own trip sent", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.trips["own"].sent.IsZero()
	})
	rdb.Del(ctx, "test:trip:g", "test:trip:own")
	for i, ch := range []<-chan httpbreaker.Hint{gotA, gotB} {
		resets := map[string]bool{}
		for len(resets) < 2 {
			h := recv(t, ch, 2*time.Second, "a missed Reset")
			switch {
			case h.Key == "own" && h.State == httpbreaker.StateOpen:
				// the echo of a's own trip, to a's other members
			case h.State == httpbreaker.StateClosed && h.Operator && (h.Key == "g" || h.Key == "own"):
				resets[h.Key] = true
			default:
				t.Fatalf("store %d got %+v, want the Resets of g and own", i, h)
			}
		}
	}
	for _, s := range []*Store{a, b} {
		for _, key := range []string{"g", "own"} {
			if _, ok := s.Lookup(key); ok {
				t.Errorf("%s still tripped after its key vanished", key)
			}
		}
	}

	// Garbage under trip keys: ignored and counted.
	e := b.Errors()
	rdb.Set(ctx, "test:trip:plain", wireHint{open: true, openFor: 5000, sender: other, key: "plain"}.encode(), time.Minute)
	rdb.Set(ctx, "test:trip:timed", wireHint{open: true, openFor: 5000, operator: true, sender: other, key: "timed"}.encode(), 0)
	rdb.Set(ctx, "test:trip:other", wireHint{open: true, operator: true, sender: other, key: "someone-else"}.encode(), 0)
	rdb.Set(ctx, "test:trip:reset", wireHint{operator: true, sender: other, key: "reset"}.encode(), 0)
	rdb.Set(ctx, "test:open:op", wireHint{open: true, openFor: 5000, operator: true, sender: other, key: "op"}.encode(), time.Minute)
	eventually(t, 2*time.Second, "garbage counted", func() bool { return b.Errors() >= e+5 })
	for _, k := range []string{"plain", "timed", "someone-else", "reset", "op"} {
		if h, ok := b.Lookup(k); ok {
			t.Errorf("garbage %q looked up as %+v", k, h)
		}
	}
	if !b.healthy.Load() {
		t.Error("garbage made the Store unhealthy")
	}
}

// TestResetPendingUntilRedisIsBack: a Reset published while Redis is out
// of reach is kept and sent when it is back, so that the other instances
// do not stay tripped until a Reset that already happened.
func TestResetPendingUntilRedisIsBack(t *testing.T) {
	r, a, b := twoStores(t)
	rdb := r.Client(t)
	got := hintWaiter(b)
	pa := a.join(nil)
	pa.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, Operator: true})
	recv(t, got, time.Second, "trip")

	// As while a's subscription is down (send drops what it is given).
	a.subUp.Store(false)
	e := a.Errors()
	pa.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed, Operator: true})
	eventually(t, time.Second, "the Reset dropped", func() bool { return a.Errors() > e })
	if n := rdb.Exists(ctxT(t), "test:trip:k").Val(); n != 1 {
		t.Fatal("the trip key went while Redis was out of reach")
	}
	if _, ok := b.Lookup("k"); !ok {
		t.Fatal("b untripped while a's Reset could not be sent")
	}
	a.mu.Lock()
	_, pending := a.resets["k"]
	a.mu.Unlock()
	if !pending {
		t.Fatal("the Reset is not pending")
	}

	// Back: the members' own hints are sent again, the Reset with them.
	a.subUp.Store(true)
	a.replay <- struct{}{}
	if h := recv(t, got, 2*time.Second, "the pending Reset"); h != (httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed, Operator: true}) {
		t.Fatalf("got %+v", h)
	}
	eventually(t, time.Second, "trip key deleted", func() bool { return rdb.Exists(ctxT(t), "test:trip:k").Val() == 0 })
	eventually(t, time.Second, "Reset no longer pending", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		_, ok := a.resets["k"]
		return !ok
	})
}

// TestRollingDeploy: a Store of this release (version 2) and one of an
// earlier release (version 1 only, played by decodeV1) on one Redis. The
// old one ignores and counts the new one's messages and keys, and learns
// nothing from them: it decides locally. The new one reads what the old
// one writes (version 1, published here by hand as the old code does).
// The probe lease, whose format did not change, still holds across them.
func TestRollingDeploy(t *testing.T) {
	r := startRedis(t)
	rdb := r.Client(t)
	ctx := ctxT(t)
	so := Options{ResyncInterval: 200 * time.Millisecond}
	newer := newTestStore(t, r.Client(t), so)
	old, err := newStore(r.Client(t), Options{Prefix: "test", ResyncInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	old.decode = decodeV1
	old.start()
	t.Cleanup(func() { old.Close() })
	waitHealthy(t, 5*time.Second, newer, old)
	gotOld := hintWaiter(old)
	pn := newer.join(nil)

	e := old.Errors()
	pn.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: time.Now().Add(10 * time.Second), Cycles: 2})
	pn.Publish(httpbreaker.Hint{Key: "t", State: httpbreaker.StateOpen, Operator: true})
	quiet(t, gotOld, 500*time.Millisecond, "version 2 to an earlier release", func(httpbreaker.Hint) bool { return false })
	if _, ok := old.Lookup("k"); ok {
		t.Error("an earlier release learnt a version 2 open key")
	}
	if _, ok := old.Lookup("t"); ok {
		t.Error("an earlier release learnt a trip")
	}
	// Two messages, and the open key at every resync (the trip key is
	// not under the prefix it reads).
	if d := old.Errors() - e; d < 3 {
		t.Errorf("an earlier release counted %d errors, want the 2 messages and the open key", d)
	}
	t.Logf("an earlier release counted %d errors in 500ms (ResyncInterval 200ms)", old.Errors()-e)

	// What an earlier release writes: a version 1 open key and message.
	gotNew := hintWaiter(newer) // after pn's hints and their echoes
	v1 := wireHint{open: true, openFor: 5000, sender: old.id + "/1", key: "o"}.encodeV1()
	rdb.Set(ctx, "test:open:o", v1, 6*time.Second)
	rdb.Publish(ctx, "test:hints", v1)
	if h := recv(t, gotNew, time.Second, "version 1"); h.Key != "o" || h.State != httpbreaker.StateOpen || h.Cycles != 0 {
		t.Fatalf("got %+v", h)
	}
	c := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, c)
	if _, ok := c.Lookup("o"); !ok {
		t.Error("a version 1 open key not learnt")
	}
	rdb.Publish(ctx, "test:hints", wireHint{sender: old.id + "/1", key: "o"}.encodeV1())
	if h := recv(t, gotNew, time.Second, "version 1 close"); h != (httpbreaker.Hint{Key: "o", State: httpbreaker.StateClosed}) {
		t.Fatalf("got %+v", h)
	}
	if e := newer.Errors() + c.Errors(); e != 0 {
		t.Errorf("this release counted %d errors", e)
	}

	// One lease for both releases.
	po := old.join(nil)
	pn.ProbeLease("l", 5*time.Second)
	eventually(t, time.Second, "new granted", func() bool { return pn.ProbeLease("l", 5*time.Second) == httpbreaker.LeaseGranted })
	po.ProbeLease("l", 5*time.Second)
	time.Sleep(50 * time.Millisecond)
	if l := po.ProbeLease("l", 5*time.Second); l != httpbreaker.LeaseDenied {
		t.Errorf("the earlier release's member: %v while this release's holds the lease", l)
	}
}
