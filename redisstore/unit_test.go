package redisstore

// Tests of the Store's memory — hints, leases, the queue — that need no
// Redis: the Store is built without its goroutines (newStore), and what
// the goroutines would do is done by hand.

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/redis/go-redis/v9"
)

// offlineStore returns a Store whose goroutines are not running, on a
// client that is never used, with a settable clock.
func offlineStore(t testing.TB, opts Options) (*Store, *time.Time) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	s, err := newStore(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cancel)
	now := time.UnixMilli(1_700_000_000_000)
	s.now = func() time.Time { return now }
	s.healthy.Store(true)
	s.subUp.Store(true)
	return s, &now
}

// recorder collects delivered hints.
type recorder struct {
	mu    sync.Mutex
	hints []httpbreaker.Hint
}

func (r *recorder) f(h httpbreaker.Hint) {
	r.mu.Lock()
	r.hints = append(r.hints, h)
	r.mu.Unlock()
}

func (r *recorder) get() []httpbreaker.Hint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]httpbreaker.Hint(nil), r.hints...)
}

// flush does the delivery goroutine's work by hand: it delivers every
// queued hint.
func flush(s *Store) {
	for {
		select {
		case d := <-s.deliverQ:
			s.deliver(d)
		default:
			return
		}
	}
}

func TestNewOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil client accepted")
	}
	for _, o := range []Options{{OpTimeout: -1}, {MaxOpen: -time.Second}, {ResyncInterval: -1}, {QueueSize: -1}, {Prefix: string(make([]byte, 129))}} {
		if _, err := newStore(c, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	s, err := newStore(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	if s.opt.Prefix != DefaultPrefix || s.opt.OpTimeout != DefaultOpTimeout || s.opt.MaxOpen != DefaultMaxOpen ||
		s.opt.QueueSize != DefaultQueueSize || s.opt.ResyncInterval != DefaultResyncInterval {
		t.Errorf("defaults: %+v", s.opt)
	}
	if !validInstance(s.id) {
		t.Errorf("instance ID %q", s.id)
	}
	if s.openPrefix != "httpbreaker:open:" || s.leasePrefix != "httpbreaker:lease:" || s.channel != "httpbreaker:hints" {
		t.Errorf("names: %q %q %q", s.openPrefix, s.leasePrefix, s.channel)
	}
}

func TestPublishRecordsAndQueues(t *testing.T) {
	st, now := offlineStore(t, Options{QueueSize: 2, MaxOpen: time.Minute})
	s := st.join(nil) // the only member: nothing to deliver in process
	s.Publish(httpbreaker.Hint{Key: "a", State: httpbreaker.StateOpen, RetryAt: now.Add(5 * time.Second)})
	h, ok := st.Lookup("a")
	if !ok || h.State != httpbreaker.StateOpen || !h.RetryAt.Equal(now.Add(5*time.Second)) {
		t.Fatalf("Lookup after Publish: %+v %v", h, ok)
	}
	// An absurd retry-at is cut to MaxOpen.
	s.Publish(httpbreaker.Hint{Key: "b", State: httpbreaker.StateOpen, RetryAt: now.Add(1000 * time.Hour)})
	if h, _ := st.Lookup("b"); !h.RetryAt.Equal(now.Add(time.Minute)) {
		t.Errorf("clamped: %v", h.RetryAt)
	}
	if len(st.queue) != 2 || st.Errors() != 0 || len(st.deliverQ) != 0 {
		t.Fatalf("queue %d, errors %d, deliveries %d", len(st.queue), st.Errors(), len(st.deliverQ))
	}
	// Full queue: dropped and counted, never blocked.
	done := make(chan struct{})
	go func() {
		s.Publish(httpbreaker.Hint{Key: "a", State: httpbreaker.StateClosed})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Publish blocked on a full queue")
	}
	if st.Errors() != 1 {
		t.Errorf("errors %d, want 1 drop", st.Errors())
	}
	// The close still applies locally.
	if _, ok := st.Lookup("a"); ok {
		t.Error("closed key still looked up")
	}
	// Ignored: empty key, other states, stale; too long is counted.
	s.Publish(httpbreaker.Hint{Key: "", State: httpbreaker.StateOpen, RetryAt: now.Add(time.Second)})
	s.Publish(httpbreaker.Hint{Key: "c", State: httpbreaker.StateHalfOpen})
	s.Publish(httpbreaker.Hint{Key: "c", State: httpbreaker.StateOpen, RetryAt: now.Add(-time.Second)})
	if _, ok := st.Lookup("c"); ok {
		t.Error("stale or half-open hint recorded")
	}
	s.Publish(httpbreaker.Hint{Key: string(make([]byte, MaxKeyLen+1)), State: httpbreaker.StateOpen, RetryAt: now.Add(time.Second)})
	if st.Errors() != 2 {
		t.Errorf("errors %d, want 2", st.Errors())
	}
}

func TestLookupStaleAndUnhealthy(t *testing.T) {
	s, now := offlineStore(t, Options{})
	s.join(nil).Publish(httpbreaker.Hint{Key: "a", State: httpbreaker.StateOpen, RetryAt: now.Add(time.Second)})
	if _, ok := s.Lookup("a"); !ok {
		t.Fatal("not found")
	}
	s.healthy.Store(false)
	if _, ok := s.Lookup("a"); ok {
		t.Error("found while Redis is unavailable")
	}
	s.healthy.Store(true)
	*now = now.Add(time.Second)
	if _, ok := s.Lookup("a"); ok {
		t.Error("found after its retry-at")
	}
	if _, ok := s.Lookup("missing"); ok {
		t.Error("missing key found")
	}
}

func TestHandleMessage(t *testing.T) {
	s, now := offlineStore(t, Options{MaxOpen: time.Minute})
	var r recorder
	m := s.join(r.f)
	s.join(nil) // receives nothing
	other := "fedcba9876543210"
	retry := now.Add(3 * time.Second)

	m.Publish(httpbreaker.Hint{Key: "own", State: httpbreaker.StateOpen, RetryAt: retry})
	s.handleMessage(wireHint{open: true, openFor: 3000, sender: m.id, key: "own"}.encode())
	flush(s)
	if len(r.get()) != 0 {
		t.Fatal("own hint delivered back")
	}

	s.handleMessage(wireHint{open: true, openFor: 3000, sender: other, key: "k"}.encode())
	flush(s)
	got := r.get()
	if len(got) != 1 || got[0] != (httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: retry}) {
		t.Fatalf("delivered %+v", got)
	}
	if h, ok := s.Lookup("k"); !ok || !h.RetryAt.Equal(retry) {
		t.Fatalf("Lookup: %+v %v", h, ok)
	}

	// The same hint again, as when a resync read the open key before
	// its message came: known, so not delivered twice. Another sender's
	// is news.
	s.handleMessage(wireHint{open: true, openFor: 3000, sender: other, key: "k"}.encode())
	flush(s)
	if got := r.get(); len(got) != 1 {
		t.Fatalf("the same hint delivered again: %+v", got)
	}
	s.handleMessage(wireHint{open: true, openFor: 3000, sender: "0123456789abcdef", key: "k"}.encode())
	flush(s)
	if got := r.get(); len(got) != 2 {
		t.Fatalf("another sender's hint: delivered %+v", got)
	}

	// An absurd open time (a year): cut to MaxOpen.
	s.handleMessage(wireHint{open: true, openFor: (24 * 365 * time.Hour).Milliseconds(), sender: other, key: "far"}.encode())
	flush(s)
	if h, _ := s.Lookup("far"); !h.RetryAt.Equal(now.Add(time.Minute)) {
		t.Errorf("far: %v", h.RetryAt)
	}
	n := len(r.get())

	// Garbage: ignored and counted.
	errs := s.Errors()
	s.handleMessage("1 o nonsense")
	s.handleMessage("\x00\x01\x02")
	flush(s)
	if len(r.get()) != n || s.Errors() != errs+2 {
		t.Errorf("garbage: delivered %d, errors %d", len(r.get())-n, s.Errors()-errs)
	}

	// Closed: forgotten, delivered, our member's lease given back.
	s.leases["k"] = leaseState{kind: leaseMine, until: now.Add(time.Minute), holder: m}
	s.handleMessage(wireHint{sender: other, key: "k"}.encode())
	flush(s)
	if _, ok := s.Lookup("k"); ok {
		t.Error("closed key still looked up")
	}
	if got := r.get(); got[len(got)-1] != (httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed}) {
		t.Errorf("last delivered %+v", got[len(got)-1])
	}
	if _, ok := s.leases["k"]; ok {
		t.Error("lease state kept")
	}
	select {
	case op := <-s.leaseQ:
		if !op.release || op.key != "k" || op.by != m {
			t.Errorf("queued %+v", op)
		}
	default:
		t.Error("lease release not queued")
	}
}

func TestMemberPanicRecovered(t *testing.T) {
	s, _ := offlineStore(t, Options{})
	var r recorder
	s.join(func(httpbreaker.Hint) { panic("boom") })
	s.join(r.f)
	s.handleMessage(wireHint{open: true, openFor: 1000, sender: "fedcba9876543210", key: "k"}.encode())
	flush(s)
	if len(r.get()) != 1 {
		t.Error("second member not called after the first panicked")
	}
	if s.Errors() != 1 {
		t.Errorf("errors %d", s.Errors())
	}
}

func TestHintsBounded(t *testing.T) {
	s, now := offlineStore(t, Options{})
	for i := range maxHints + 100 {
		s.handleMessage(wireHint{open: true, openFor: 1000, sender: "fedcba9876543210", key: "k" + itoa(i)}.encode())
	}
	if len(s.hints) > maxHints {
		t.Errorf("%d hints kept", len(s.hints))
	}
	// Once they expire, new ones find room again.
	*now = now.Add(2 * time.Second)
	s.handleMessage(wireHint{open: true, openFor: 1000, sender: "fedcba9876543210", key: "fresh"}.encode())
	if _, ok := s.Lookup("fresh"); !ok {
		t.Error("no room after expiry")
	}
}

func itoa(i int) string { return string(rune('a'+i%26)) + time.Duration(i).String() }

func TestProbeLeaseStates(t *testing.T) {
	s, now := offlineStore(t, Options{OpTimeout: 50 * time.Millisecond, MaxOpen: time.Minute})
	m, m2 := s.join(nil), s.join(nil)
	ttl := 10 * time.Second

	// Unknown: ask Redis in the background, Denied meanwhile, to the
	// other member too.
	if l := m.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied {
		t.Fatalf("first ask: %v", l)
	}
	op := <-s.leaseQ
	if op.key != "k" || op.ttl != ttl || op.release || op.by != m {
		t.Fatalf("queued %+v", op)
	}
	for _, x := range []*member{m, m2} {
		if l := x.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied {
			t.Fatalf("member %d, pending: %v", x.n, l)
		}
	}
	if len(s.leaseQ) != 0 {
		t.Fatal("asked Redis twice")
	}

	// The answer: m's, with 10s left. The other member is denied it.
	st, err := s.leaseAnswer(redis.NewCmdResult([]any{int64(1), int64(10000), m.id}, nil), op, *now, *now)
	if err != nil {
		t.Fatal(err)
	}
	s.leases["k"] = st
	if l := m.ProbeLease("k", ttl); l != httpbreaker.LeaseGranted {
		t.Fatalf("mine: %v", l)
	}
	if l := m2.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied || len(s.leaseQ) != 0 {
		t.Fatalf("the other member, while m holds it: %v", l)
	}
	// Until it runs out: then ask again.
	*now = now.Add(ttl)
	if l := m2.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied || len(s.leaseQ) != 1 {
		t.Fatalf("expired: %v, queue %d", l, len(s.leaseQ))
	}
	if op := <-s.leaseQ; op.by != m2 {
		t.Fatalf("asked for member %d, want 2", op.by.n)
	}

	// No answer within pendingFor: Redis is too slow, decide locally.
	*now = now.Add(s.pendingFor())
	if l := m.ProbeLease("k", ttl); l != httpbreaker.LeaseUnavailable {
		t.Fatalf("slow: %v", l)
	}

	// Someone else's, 3s left: Denied for 3s, no Redis call.
	st, _ = s.leaseAnswer(redis.NewCmdResult([]any{int64(0), int64(3000), "fedcba9876543210/1"}, nil), op, *now, *now)
	s.leases["k"] = st
	if l := m.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied || len(s.leaseQ) != 0 {
		t.Fatalf("other: %v", l)
	}
	*now = now.Add(3 * time.Second)
	if l := m.ProbeLease("k", ttl); l != httpbreaker.LeaseDenied || len(s.leaseQ) != 1 {
		t.Fatalf("other expired: %v", l)
	}
	<-s.leaseQ

	// Redis unavailable: Unavailable whatever is cached.
	s.leases["k"] = leaseState{kind: leaseMine, until: now.Add(time.Hour), holder: m}
	s.healthy.Store(false)
	if l := m.ProbeLease("k", ttl); l != httpbreaker.LeaseUnavailable {
		t.Fatalf("down: %v", l)
	}
	s.healthy.Store(true)

	// Garbage under the lease key: Unavailable for a while.
	s.leases["k"] = leaseState{kind: leaseBroken, until: now.Add(time.Second)}
	if l := m.ProbeLease("k", ttl); l != httpbreaker.LeaseUnavailable {
		t.Fatalf("broken: %v", l)
	}

	// Invalid arguments.
	for _, c := range []struct {
		key string
		ttl time.Duration
	}{{"", ttl}, {string(make([]byte, MaxKeyLen+1)), ttl}, {"x", 0}, {"x", -time.Second}} {
		if l := m.ProbeLease(c.key, c.ttl); l != httpbreaker.LeaseUnavailable {
			t.Errorf("ProbeLease(%.10q, %v) = %v", c.key, c.ttl, l)
		}
	}
}

func TestProbeLeaseTTLClamped(t *testing.T) {
	s, _ := offlineStore(t, Options{MaxOpen: time.Second})
	s.join(nil).ProbeLease("k", time.Hour)
	if op := <-s.leaseQ; op.ttl != time.Second {
		t.Errorf("ttl %v, want MaxOpen", op.ttl)
	}
}

// A ttl under a millisecond, Redis's resolution, asks for a lease of one
// millisecond: "PX 0" is an error in Redis.
func TestProbeLeaseTTLAtLeastAMillisecond(t *testing.T) {
	s, _ := offlineStore(t, Options{})
	s.join(nil).ProbeLease("k", 900*time.Microsecond)
	if op := <-s.leaseQ; op.ttl != time.Millisecond {
		t.Errorf("ttl %v, want 1ms", op.ttl)
	}
}

func TestProbeLeaseQueueFull(t *testing.T) {
	s, _ := offlineStore(t, Options{QueueSize: 1})
	m := s.join(nil)
	if l := m.ProbeLease("a", time.Second); l != httpbreaker.LeaseDenied {
		t.Fatal(l)
	}
	if l := m.ProbeLease("b", time.Second); l != httpbreaker.LeaseUnavailable {
		t.Errorf("queue full: %v", l)
	}
	if s.Errors() != 1 {
		t.Errorf("errors %d", s.Errors())
	}
	if _, ok := s.leases["b"]; ok {
		t.Error("b left pending with no request on its way")
	}
}

func TestLeaseAnswer(t *testing.T) {
	s, now := offlineStore(t, Options{})
	m1, m2 := s.join(nil), s.join(nil)
	sent := now.Add(-2 * time.Millisecond)
	ttl := 10 * time.Second
	op := leaseOp{key: "k", ttl: ttl, by: m1}
	other := "fedcba9876543210/1"
	for _, c := range []struct {
		name  string
		reply any
		err   error
		want  leaseState
		fails bool
	}{
		{"mine", []any{int64(1), int64(10000), m1.id}, nil, leaseState{leaseMine, sent.Add(ttl), m1}, false},
		{"mine, more than asked", []any{int64(1), int64(1 << 40), m1.id}, nil, leaseState{leaseMine, sent.Add(ttl), m1}, false},
		{"mine, nothing left", []any{int64(1), int64(1), m1.id}, nil, leaseState{}, false},
		{"another member's", []any{int64(0), int64(3000), m2.id}, nil, leaseState{leaseMine, sent.Add(3 * time.Second), m2}, false},
		{"other", []any{int64(0), int64(3000), other}, nil, leaseState{leaseOther, now.Add(3 * time.Second), nil}, false},
		{"other, bare instance", []any{int64(0), int64(3000), "fedcba9876543210"}, nil, leaseState{leaseOther, now.Add(3 * time.Second), nil}, false},
		{"this instance, unknown member", []any{int64(0), int64(3000), s.id + "/9"}, nil, leaseState{leaseOther, now.Add(3 * time.Second), nil}, false},
		{"this instance, no member", []any{int64(0), int64(3000), s.id}, nil, leaseState{leaseOther, now.Add(3 * time.Second), nil}, false},
		{"other, garbage holder", []any{int64(0), int64(3000), "\xff"}, nil, leaseState{leaseOther, now.Add(3 * time.Second), nil}, false},
		{"other, negative", []any{int64(0), int64(-1), other}, nil, leaseState{}, false},
		{"server error", nil, errors.New("WRONGTYPE"), leaseState{}, true},
		{"not an array", "OK", nil, leaseState{}, true},
		{"short", []any{int64(1), int64(2)}, nil, leaseState{}, true},
		{"strings", []any{"1", "2", m1.id}, nil, leaseState{}, true},
		{"holder not a string", []any{int64(0), int64(2), int64(3)}, nil, leaseState{}, true},
		{"flag 7", []any{int64(7), int64(2), m1.id}, nil, leaseState{}, true},
	} {
		got, err := s.leaseAnswer(redis.NewCmdResult(c.reply, c.err), op, sent, *now)
		if (err != nil) != c.fails || got != c.want {
			t.Errorf("%s: got %+v, %v", c.name, got, err)
		}
	}
}

func TestClosedStoreIsInert(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	before := s.Join(r.f)
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	_ = s.Close() // idempotent
	for _, m := range []httpbreaker.Member{before, s.Join(r.f)} {
		m.Publish(httpbreaker.Hint{Key: "a", State: httpbreaker.StateOpen, RetryAt: time.Now().Add(time.Second)})
		if l := m.ProbeLease("a", time.Second); l != httpbreaker.LeaseUnavailable {
			t.Errorf("ProbeLease after Close: %v", l)
		}
	}
	if _, ok := s.Lookup("a"); ok {
		t.Error("Lookup after Close")
	}
	if len(r.get()) != 0 || len(s.deliverQ) != 0 {
		t.Error("hints delivered after Close")
	}
}

// TestMembersInProcess: a member's hints go to the Store's other members,
// never back to it, through the delivery queue (never inside Publish);
// its echo through Redis goes to the others again unless a later Publish
// superseded it; another instance's hints go to every member.
func TestMembersInProcess(t *testing.T) {
	s, now := offlineStore(t, Options{})
	var r1, r2, r3 recorder
	m1, m2, m3 := s.join(r1.f), s.join(r2.f), s.join(r3.f)
	if m1.n != 1 || m2.n != 2 || m3.n != 3 || m2.id != s.id+"/2" || s.memberOf(m3.id) != m3 {
		t.Fatalf("members %d %q, %d %q, %d %q", m1.n, m1.id, m2.n, m2.id, m3.n, m3.id)
	}
	for _, id := range []string{s.id, s.id + "/4", s.id + "/0", "fedcba9876543210/1", "garbage"} {
		if s.memberOf(id) != nil {
			t.Errorf("memberOf(%q) found a member", id)
		}
	}
	open := httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: now.Add(5 * time.Second)}
	closed := httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed}
	want := func(what string, r *recorder, hints ...httpbreaker.Hint) {
		t.Helper()
		got := r.get()
		if len(got) != len(hints) {
			t.Fatalf("%s: delivered %+v, want %+v", what, got, hints)
		}
		for i := range got {
			if got[i] != hints[i] {
				t.Fatalf("%s: delivered %+v, want %+v", what, got, hints)
			}
		}
	}

	m1.Publish(open)
	want("inside Publish", &r2)
	if len(s.deliverQ) != 1 || len(s.queue) != 1 {
		t.Fatalf("queued %d deliveries and %d hints for Redis, want 1 and 1", len(s.deliverQ), len(s.queue))
	}
	if o := <-s.queue; o.by != m1 || o.h != open {
		t.Fatalf("queued for Redis %+v", o)
	}
	flush(s)
	want("m1", &r1)
	want("m2", &r2, open)
	want("m3", &r3, open)

	// The echo through Redis: to the others again, not to m1; memory
	// unchanged.
	s.handleMessage(wireHint{open: true, openFor: 5000, sender: m1.id, key: "k"}.encode())
	flush(s)
	want("m1 after the echo", &r1)
	want("m2 after the echo", &r2, open, open)
	if h, _ := s.Lookup("k"); h != open {
		t.Errorf("Lookup %+v after the echo", h)
	}

	// m2 closes; the late echo of m1's open is superseded: delivered to
	// nobody, and it does not bring the open hint back.
	m2.Publish(closed)
	<-s.queue
	s.handleMessage(wireHint{open: true, openFor: 5000, sender: m1.id, key: "k"}.encode())
	flush(s)
	want("m1 after the close", &r1, closed)
	want("m2 after the close", &r2, open, open)
	want("m3 after the close", &r3, open, open, closed)
	if _, ok := s.Lookup("k"); ok {
		t.Error("a stale echo brought the open hint back")
	}
	s.handleMessage(wireHint{sender: m2.id, key: "k"}.encode()) // the close's echo
	flush(s)
	want("m1 after the close's echo", &r1, closed, closed)
	want("m2 after the close's echo", &r2, open, open)

	// Another instance's hint: to every member.
	s.handleMessage(wireHint{open: true, openFor: 5000, sender: "fedcba9876543210/7", key: "x"}.encode())
	flush(s)
	for i, r := range []*recorder{&r1, &r2, &r3} {
		if got := r.get(); got[len(got)-1].Key != "x" {
			t.Errorf("member %d: %+v", i+1, got)
		}
	}
	if s.Errors() != 0 {
		t.Errorf("errors %d", s.Errors())
	}
}

// TestMemberDeliveryQueueFull: Publish never blocks on the delivery
// queue; a hint that finds it full is dropped and counted.
func TestMemberDeliveryQueueFull(t *testing.T) {
	s, now := offlineStore(t, Options{QueueSize: 1})
	var r recorder
	m := s.join(nil)
	s.join(r.f)
	m.Publish(httpbreaker.Hint{Key: "a", State: httpbreaker.StateOpen, RetryAt: now.Add(time.Second)})
	done := make(chan struct{})
	go func() {
		m.Publish(httpbreaker.Hint{Key: "b", State: httpbreaker.StateOpen, RetryAt: now.Add(time.Second)})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Publish blocked on a full queue")
	}
	if e := s.Errors(); e != 2 { // the delivery and the Redis queue
		t.Errorf("errors %d, want 2", e)
	}
	flush(s)
	if got := r.get(); len(got) != 1 || got[0].Key != "a" {
		t.Errorf("delivered %+v", got)
	}
}

// TestMembersShareWithoutRedis: with the Store's goroutines running and
// Redis unreachable, a member's hint still reaches the other members of
// its Store, at once, on the delivery goroutine and not inside Publish.
func TestMembersShareWithoutRedis(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The publisher holds mu around Publish, as a Transport could hold a
	// lock of its own; f takes it. A call to f inside Publish would never
	// return.
	var mu sync.Mutex
	got := make(chan httpbreaker.Hint, 16)
	f := func(h httpbreaker.Hint) {
		mu.Lock()
		mu.Unlock()
		got <- h
	}
	m1 := s.Join(nil)
	s.Join(f)
	s.Join(f)
	start := time.Now()
	published := make(chan struct{})
	go func() {
		mu.Lock()
		defer mu.Unlock()
		m1.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: time.Now().Add(time.Minute)})
		close(published)
	}()
	select {
	case <-published:
	case <-time.After(time.Second):
		t.Fatal("Publish did not return: it called a member")
	}
	for range 2 {
		select {
		case h := <-got:
			if h.Key != "k" || h.State != httpbreaker.StateOpen {
				t.Fatalf("got %+v", h)
			}
		case <-time.After(time.Second):
			t.Fatal("not delivered in process while Redis is down")
		}
	}
	t.Logf("delivered to both other members in %v", time.Since(start))
	if l := m1.ProbeLease("k", time.Second); l != httpbreaker.LeaseUnavailable {
		t.Errorf("ProbeLease while Redis is down: %v", l)
	}
}

// A closed hint that does not reach Redis (here, the subscription is
// down) keeps the lease it gives back, for sendOwn to give back when
// Redis is back; a later open hint of the key drops it.
func TestACloseThatMissesRedisOwesItsLease(t *testing.T) {
	s, now := offlineStore(t, Options{})
	m := s.join(nil)
	mine := leaseState{kind: leaseMine, until: now.Add(time.Minute), holder: m}
	s.leases["k"] = mine
	s.subUp.Store(false)
	m.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed})
	s.send([]outHint{<-s.queue})
	if _, ok := s.leases["k"]; ok {
		t.Error("the lease is still the Store's: recovered would forget it")
	}
	p, ok := s.closes["k"]
	if !ok || p.lease != mine || p.o.h.State != httpbreaker.StateClosed || p.o.by != m {
		t.Fatalf("pending close %+v, %v", p, ok)
	}
	if got := s.takeLeases([]outHint{{h: httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed}, by: m}}); got[0] != mine {
		t.Errorf("a new close of k gives back %+v, want the lease owed", got[0])
	}
	if _, ok := s.closes["k"]; ok {
		t.Error("the new close replaces the pending one")
	}

	s.send([]outHint{{h: httpbreaker.Hint{Key: "k", State: httpbreaker.StateClosed}, by: m}})
	if _, ok := s.closes["k"]; !ok {
		t.Fatal("no pending close")
	}
	m.Publish(httpbreaker.Hint{Key: "k", State: httpbreaker.StateOpen, RetryAt: now.Add(time.Second)})
	if _, ok := s.closes["k"]; ok {
		t.Error("an open hint of k keeps its pending close")
	}

	// With the subscription up, a close that Redis does not take (none
	// listens on this Store's address) is owed too.
	s.subUp.Store(true)
	s.leases["j"] = mine
	s.send([]outHint{{h: httpbreaker.Hint{Key: "j", State: httpbreaker.StateClosed}, by: m}})
	if p, ok := s.closes["j"]; !ok || p.lease != mine {
		t.Errorf("after a failed publish: pending close %+v, %v", p, ok)
	}
}
