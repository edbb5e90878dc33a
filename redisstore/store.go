// Package redisstore implements httpbreaker.Store on Redis, so that the
// instances of a service share what their circuit breakers learn: when one
// instance's breaker opens, the others open theirs within milliseconds
// instead of each paying its own failure quota, and when the open period
// ends one instance probes the dependency for the whole fleet.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb, redisstore.Options{Prefix: "checkout"})
//	if err != nil { ... }
//	defer store.Close()
//	client := httpbreaker.NewClient(httpbreaker.WithStore(store))
//
// # Members
//
// Each Transport given the Store (httpbreaker.WithStore) joins it once,
// when it is made, and becomes one of its members (Store.Join). Several
// Transports in one process may share one Store and share everything: a
// member's hints go to Redis, for the other instances, and at once, in
// process, to the Store's other members; and the probe lease is held by
// one member, not by the Store, so of two Transports sharing a Store only
// one probes for the fleet. A Store keeps its members for its lifetime:
// give a short-lived Transport no Store, or a Store of its own that you
// Close with it.
//
// # What goes through Redis
//
// Hints only. Failure counting stays in each process; Redis carries "this
// breaker opened, for d, after n failed probe cycles", "this breaker
// closed", an operator's Trip and Reset, plus one probe lease per key.
// Every method of Store and of its members answers from memory at once;
// the Redis I/O runs on the Store's own goroutines, each call bounded by
// Options.OpTimeout.
//
//   - <prefix>:hints is a pub/sub channel: each open and close, Trip and
//     Reset is published on it, and every Store subscribes, so the fleet
//     learns an opened breaker within milliseconds (one round trip
//     through Redis).
//   - <prefix>:open:<key> holds the latest open hint for key, expiring at its
//     retry-at (plus a second). A Store reads them all (SCAN) when it
//     connects and every Options.ResyncInterval, so a message missed while
//     disconnected, or a Redis restarted empty, is repaired.
//   - <prefix>:trip:<key> holds an operator's trip of key, expiring a second
//     after its end, or never for a trip until Reset; it is read with the
//     open keys. See Operators' Trip and Reset.
//   - <prefix>:lease:<key> is the probe lease, taken with SET NX PX: the
//     member that holds it (its value names the member: instance ID and
//     member number) probes for everyone; it is released when the breaker
//     closes and expires on its own if the prober dies.
//
// Hints carry how long a breaker stays open, not until when, and an open
// key's retry-at is read from its time to live in Redis: the instances'
// clocks need not agree. The format of messages and keys is versioned; see
// Versions and rolling deploys.
//
// Why pub/sub and not polling: an instance that learns of an outage late
// pays its own failure quota against the failing dependency, so the delay
// matters. Pub/sub delivers in one hop through Redis, at no cost while
// nothing happens: between two Stores on loopback, with the race detector
// on, TestPropagationLatency measures about 0.15ms at the median and 1 to
// 5ms at worst (35ms on a machine loaded with other work; it asserts
// < 100ms). Polling every P costs every instance a SCAN per P and
// delivers in P/2 on average (TestResyncRepairsMissedHints: ~200ms at
// P = 200ms; 2.5s at the default 5s); getting under 100ms would take ten
// SCANs a second per instance. Pub/sub alone is not enough, since Redis
// keeps no message for a subscriber that is away: that is what the keys
// and the periodic resync are for.
//
// # The fleet backs off as one breaker
//
// An open hint carries the breaker's backoff, its count of consecutive
// failed probe cycles (httpbreaker.Hint.Cycles), in the message and in the
// open key, and a Transport that receives it backs off from at least that
// count. So whichever instance holds the probe lease next doubles the
// fleet's open period, rather than starting again from the open timeout.
// And while the latest open hint of another member says the fleet's open
// period goes on, ProbeLease denies the lease without asking Redis (for
// at most the lease's time to live from when the hint came): a
// Transport's own open period, which ended, does not let it probe before
// the prober's backed-off one has. The fleet then sends one breaker's
// probes: TestFleetBacksOffAsOneBreaker measures 6 probes over a 6s
// outage of seven instances (two of them joining during it), at gaps of
// 0.2, 0.4, 0.8, 1.7 and 2.1s, as a lone breaker's 6 (100ms open
// timeout, 2s maximum, no jitter).
//
// # Operators' Trip and Reset
//
// An operator's httpbreaker.Transport.Trip(key, d) on one instance opens
// key on every instance for exactly d: its hint is not cut to MaxOpen, nor
// by the Transports to their MaxOpenTimeout. A d the clock cannot reach
// (time.Duration(math.MaxInt64)) trips it until Reset: its trip key has no
// time to live, and Lookup reports it with the zero RetryAt.
// Transport.Reset(key) on any instance ends the trip and closes key on
// every instance; it deletes the trip key and the open key.
//
// A trip is kept apart from the open hints, under its own key, so that an
// instance's own open and close hints (and those of instances of an
// earlier release, which know nothing of trips) cannot overwrite or delete
// it, and a Store that starts later learns it from its key. While a trip
// holds, a close that is not an operator's (from an instance that missed
// the trip) is not delivered to the members: only a Reset, or the end of
// d, ends it.
//
// The trip key is the trip. One that vanishes before its time (a Reset
// whose message this Store missed, or a Redis that lost its data) is taken
// for a Reset at the next resync, so that no instance stays tripped until
// a Reset that already happened. A Redis that restarts empty, or evicts
// keys (give it the noeviction policy, or room), so ends the fleet's
// trips: trip again. A Reset published while Redis is out of reach is
// kept and sent when it is back, with the members' open hints and trips.
//
// # Versions and rolling deploys
//
// Messages and keys start with a version (see wireHint). This release
// writes version 2, which carries the backoff and the operator's flag,
// and reads versions 1 and 2. Releases before it read version 1 only, and
// ignore, and count in Errors, everything else. So while a rolling deploy
// mixes the two, the instances of the earlier release miss every hint of
// the new ones, their opens and closes as well as Trips and Resets (and
// count an error per message, and per open key at every resync), and
// decide on their own, as without a Store; the new ones take the old
// ones' hints, without a backoff. The probe lease, whose format has not
// changed, is still one for all of them: an instance of the earlier
// release that is denied it waits for the lease, not for the new prober's
// close, which it cannot read. Once every instance runs this release, the
// errors stop.
//
// # Failing safe
//
// When Redis is down, slow or returns garbage, every instance keeps working
// on its own breakers, exactly as without a Store: Lookup reports nothing,
// ProbeLease answers httpbreaker.LeaseUnavailable (so each instance probes on
// its own), and Publish drops the hints meant for Redis (the Store's other
// members still get them, in process). An outage is logged once when it
// starts and once when it ends, not per error; Errors counts every failed
// operation. When Redis is back the Store resubscribes, reads the open and
// trip keys again and re-publishes its own breakers that are still open,
// and its members' trips and Resets, and the closes that did not reach
// Redis, which give back the probe leases they held: another instance
// need not wait for such a lease to expire before it probes.
//
// Anything read from Redis is validated: a malformed value or message is
// ignored and counted, an open time longer than Options.MaxOpen is cut to
// MaxOpen, an open key that would never expire is ignored, a lease that
// would never expire gets a time to live, and nothing read can make the
// Store panic or grow without bound. An operator's trip is the exception,
// by design: taken as it is, it holds breakers open for its whole time,
// or until Reset. Whoever may write to the Store's keys in Redis may trip
// the fleet.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultPrefix         = "httpbreaker"
	DefaultOpTimeout      = 50 * time.Millisecond
	DefaultMaxOpen        = 60 * time.Second
	DefaultQueueSize      = 1024
	DefaultResyncInterval = 5 * time.Second
)

// Options configures a Store. The zero value is usable: every field has a
// default.
type Options struct {
	// Prefix namespaces every key and the channel the Store uses in Redis
	// [DefaultPrefix]. Instances that should share hints use the same
	// prefix; unrelated services sharing a Redis use different ones. On a
	// Redis Cluster, make it a hash tag ("{checkout}") so that all the keys
	// live on one shard.
	Prefix string
	// OpTimeout bounds each call to Redis [DefaultOpTimeout]. The client
	// must have ContextTimeoutEnabled for the bound to cut a call short;
	// otherwise its own ReadTimeout and WriteTimeout do. Either way no
	// request waits: only the Store's background work does.
	OpTimeout time.Duration
	// MaxOpen caps the open time a hint can ask for, and the probe
	// lease's time to live [DefaultMaxOpen]: an absurd open time read from
	// Redis is cut to MaxOpen. A Transport also cuts it to its own
	// MaxOpenTimeout. An operator's trip is not cut (see the package doc).
	MaxOpen time.Duration
	// ResyncInterval is how often the Store reads all open and trip keys
	// from Redis to repair missed messages [DefaultResyncInterval]. It
	// also does so each time it reconnects.
	ResyncInterval time.Duration
	// QueueSize is the number of hints Publish can hold for sending, and
	// the number of hints waiting for delivery to the members
	// [DefaultQueueSize]. When the queue is full a hint is dropped and
	// counted in Errors.
	QueueSize int
	// Logger receives one line when Redis becomes unavailable and one when
	// it is back, plus rare warnings [none].
	Logger *slog.Logger
}

// Internal bounds: none is worth an option.
const (
	// retrySlack is how long an open key outlives its retry-at.
	retrySlack = time.Second
	// receiveTick is how long the subscriber waits for a message before it
	// looks after its periodic work.
	receiveTick = 100 * time.Millisecond
	// minBackoff and maxBackoff bound the wait between reconnection
	// attempts while Redis is down.
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
	// pingGrace is how long after a PING is due the subscription may stay
	// silent before it is replaced.
	pingGrace = 2 * time.Second
	// unhealthyRetry is how often the subscriber tries to resynchronise
	// while connected but not healthy.
	unhealthyRetry = 250 * time.Millisecond
	// maxHints bounds the open hints kept in memory, maxLeases the keys
	// with a lease state: garbage published into Redis cannot grow them
	// without bound.
	maxHints  = 10000
	maxLeases = 10000
	// batchSize is the most hints or lease requests sent in one round trip.
	batchSize = 64
	// garbageLogEvery is the least time between two warnings about invalid
	// data read from Redis.
	garbageLogEvery = time.Minute
)

// Store is an httpbreaker.Store on Redis. Make one with New and Close it
// when done; several Transports may share one Store, each a member of its
// own (see Join). Its methods, and its members', are safe for concurrent
// use and never wait on Redis.
type Store struct {
	client redis.UniversalClient
	opt    Options
	id     string // this Store's instance ID, tagged on what it publishes
	log    *slog.Logger
	now    func() time.Time

	channel     string
	openPrefix  string // <prefix>:open:
	tripPrefix  string // <prefix>:trip:
	leasePrefix string // <prefix>:lease:

	// decode parses what is read from Redis: decodeWire, or decodeV1 in
	// the tests that play a Store of an earlier release.
	decode func(string) (wireHint, error)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once

	queue    chan outHint  // hints waiting to be published
	leaseQ   chan leaseOp  // lease acquisitions and releases
	replay   chan struct{} // asks the publisher to re-publish own opens
	deliverQ chan delivery // hints waiting for delivery to the members

	errs atomic.Uint64
	// healthy: subscribed, synchronised, and no failure since. Lookup and
	// ProbeLease answer only while it holds.
	healthy atomic.Bool
	// subUp: the subscriber's connection is up and subscribed.
	subUp atomic.Bool
	// outage: an outage was logged and its end not yet.
	outage      atomic.Bool
	outageStart atomic.Int64 // unix nanoseconds
	lastGarbage atomic.Int64 // unix nanoseconds of the last garbage warning
	lastSync    time.Time    // last resync attempt; used by the subscriber goroutine only

	mu     sync.Mutex
	hints  map[string]hintEntry    // known open hints, by key; guarded by mu
	own    map[string]ownHint      // this Store's members' own open hints; guarded by mu
	trips  map[string]tripEntry    // known operator's trips, by key; guarded by mu
	resets map[string]pendingReset // this Store's members' Resets not yet in Redis; guarded by mu
	closes map[string]pendingClose // this Store's members' closed hints not yet in Redis; guarded by mu
	leases map[string]leaseState   // guarded by mu
	// missed are the keys Lookup answered false for while the Store was
	// not healthy: breakers made then, which learn what the Store knows
	// of their keys at the next resync (see missLocked); guarded by mu.
	missed map[string]struct{}
	// missedMany is set when more than maxMissed keys were missed: the
	// next resync delivers every trip and open hint it knows; guarded by
	// mu.
	missedMany bool
	seq        uint64 // the last number given to an operator's hint of a member; guarded by mu

	// members are the Store's members, member n at index n-1. Join
	// appends; nothing else changes it, so a copy of the slice header
	// taken under memMu can be read without it.
	memMu   sync.RWMutex
	members []*member // guarded by memMu
}

// member is one Transport's place in the Store (see Join).
type member struct {
	s  *Store
	n  int                    // its number in the Store, from 1
	id string                 // its sender ID: the Store's instance ID, "/", n
	f  func(httpbreaker.Hint) // receives the other members' hints; may be nil
}

// hintEntry is a known open hint.
type hintEntry struct {
	retryAt time.Time
	cycles  int       // failed probe cycles behind it
	sender  string    // the member that published it (wire sender ID)
	at      time.Time // when this Store learnt it
}

// same reports whether e and o are the same hint, as learnt from a
// message and from its key: same sender and cycles, and retry-ats that
// differ by no more than the message's latency and the clocks' rounding.
func (e hintEntry) same(o hintEntry) bool {
	return e.sender == o.sender && e.cycles == o.cycles && e.retryAt.Sub(o.retryAt).Abs() < sameHint
}

// ownHint is an open hint one of this Store's members published.
type ownHint struct {
	retryAt time.Time
	cycles  int
	by      *member
}

// tripEntry is a known operator's trip (httpbreaker.Transport.Trip): an
// open hint that the Store keeps apart from the others, under its own key
// in Redis, since it is taken exactly (no MaxOpen, no Transport's cap)
// and only an operator's Reset ends it before its time.
type tripEntry struct {
	retryAt time.Time // zero: until Reset
	cycles  int
	sender  string // the member that tripped (wire sender ID)
	// by is the member of this Store that tripped, nil for another
	// instance's trip; seq numbers its Publish, and sent is when the
	// publisher last wrote it to Redis (zero: not yet).
	by   *member
	seq  uint64
	sent time.Time
}

// live reports whether the trip still holds at now.
func (e tripEntry) live(now time.Time) bool { return e.retryAt.IsZero() || e.retryAt.After(now) }

// same reports whether e and o are the same trip (see hintEntry.same).
func (e tripEntry) same(o tripEntry) bool {
	if e.retryAt.IsZero() || o.retryAt.IsZero() {
		return e.sender == o.sender && e.retryAt.IsZero() == o.retryAt.IsZero()
	}
	return e.sender == o.sender && e.retryAt.Sub(o.retryAt).Abs() < sameHint
}

// hint is the trip as an httpbreaker.Hint for key.
func (e tripEntry) hint(key string) httpbreaker.Hint {
	return httpbreaker.Hint{Key: key, State: httpbreaker.StateOpen, RetryAt: e.retryAt, Cycles: e.cycles, Operator: true}
}

// pendingReset is an operator's Reset by a member of this Store that has
// not reached Redis yet (Redis was down): it is sent again with the
// members' own open hints when Redis is back, so that the other instances
// do not stay tripped.
type pendingReset struct {
	by  *member
	seq uint64
}

// maxScan bounds the keys one resync reads, of each kind: a variable, so
// that tests can make a scan fall short.
var maxScan = 10000

// pendingClose is a closed hint of a member of this Store that did not
// reach Redis (Redis was down, or the subscription was), with the probe
// lease it gives back: it is sent again with the members' own open
// hints when Redis is back, so that the lease, which Redis still holds
// unless it restarted, does not keep the other instances from probing
// until it expires. A later open hint of the key drops it.
type pendingClose struct {
	o     outHint
	lease leaseState // a lease a member of this Store held; else the zero leaseState
}

// outHint is a hint waiting to be published in Redis; seq numbers an
// operator's hint (see tripEntry), 0 for others.
type outHint struct {
	h   httpbreaker.Hint
	by  *member
	seq uint64
}

// delivery is a hint waiting to be delivered to the members: to all of
// them but the one numbered from (0: from another instance, all of them).
type delivery struct {
	h    httpbreaker.Hint
	from int
}

var (
	_ httpbreaker.Store  = (*Store)(nil)
	_ httpbreaker.Member = (*member)(nil)
)

// New returns a Store on client and starts its background goroutines; it
// does no I/O itself, so it returns at once even when Redis is down (the
// Store connects in the background and answers LeaseUnavailable and no
// hints until it has). It returns an error only for a nil client or
// invalid options. Close stops the Store; the client stays open.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s, err := newStore(client, opts)
	if err != nil {
		return nil, err
	}
	s.warnNoContextTimeout()
	s.start()
	return s, nil
}

// newStore checks opts and builds the Store without starting anything.
func newStore(client redis.UniversalClient, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if len(opts.Prefix) > 128 {
		return nil, fmt.Errorf("redisstore: Prefix longer than 128 bytes")
	}
	for name, d := range map[string]time.Duration{"OpTimeout": opts.OpTimeout, "MaxOpen": opts.MaxOpen, "ResyncInterval": opts.ResyncInterval} {
		if d < 0 {
			return nil, fmt.Errorf("redisstore: negative %s %v", name, d)
		}
	}
	if opts.QueueSize < 0 {
		return nil, fmt.Errorf("redisstore: negative QueueSize %d", opts.QueueSize)
	}
	if opts.OpTimeout == 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	if opts.MaxOpen == 0 {
		opts.MaxOpen = DefaultMaxOpen
	}
	if opts.ResyncInterval == 0 {
		opts.ResyncInterval = DefaultResyncInterval
	}
	if opts.QueueSize == 0 {
		opts.QueueSize = DefaultQueueSize
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var id [instanceIDLen / 2]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	ctx, cancel := context.WithCancel(context.Background())
	return &Store{
		client:      client,
		opt:         opts,
		id:          hex.EncodeToString(id[:]),
		log:         log,
		now:         time.Now,
		channel:     opts.Prefix + ":hints",
		openPrefix:  opts.Prefix + ":open:",
		tripPrefix:  opts.Prefix + ":trip:",
		leasePrefix: opts.Prefix + ":lease:",
		decode:      decodeWire,
		ctx:         ctx,
		cancel:      cancel,
		queue:       make(chan outHint, opts.QueueSize),
		leaseQ:      make(chan leaseOp, opts.QueueSize),
		replay:      make(chan struct{}, 1),
		deliverQ:    make(chan delivery, opts.QueueSize),
		hints:       make(map[string]hintEntry),
		own:         make(map[string]ownHint),
		trips:       make(map[string]tripEntry),
		resets:      make(map[string]pendingReset),
		closes:      make(map[string]pendingClose),
		leases:      make(map[string]leaseState),
		missed:      make(map[string]struct{}),
	}, nil
}

// warnNoContextTimeout logs once when the client ignores context
// deadlines, so that OpTimeout cannot cut a slow call short.
func (s *Store) warnNoContextTimeout() {
	enabled := true
	switch c := s.client.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	}
	if !enabled {
		s.log.Warn("redisstore: the Redis client has ContextTimeoutEnabled off: OpTimeout cannot cut slow calls short (requests still never wait on Redis)",
			"op_timeout", s.opt.OpTimeout)
	}
}

// start launches the background goroutines.
func (s *Store) start() {
	s.wg.Add(4)
	go s.subscriber()
	go s.publisher()
	go s.leaser()
	go s.deliverer()
}

// Close stops the Store's goroutines and gives back the probe leases its
// members hold (best effort, within OpTimeout, and only if Redis was
// available: otherwise they expire on their own). It does not close the
// client. After Close, a member's Publish does nothing and its ProbeLease
// answers LeaseUnavailable, and Lookup finds nothing; hints not delivered
// yet are dropped. Close is idempotent and returns nil.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		wasHealthy := s.healthy.Swap(false)
		s.cancel()
		s.wg.Wait()
		// A resync that was running may have made the Store healthy
		// again after the Swap above; no goroutine is left to do so now.
		if s.healthy.Swap(false) || wasHealthy {
			s.releaseAll()
		}
	})
	return nil
}

// Errors returns the number of failed operations since New: Redis calls
// that failed or timed out, invalid data read from Redis, and hints that
// were dropped (queue full, Redis unavailable, key too long). Given to
// httpbreaker.WithMetrics through WithStore, it is exported as
// breaker_store_errors_total.
func (s *Store) Errors() uint64 { return s.errs.Load() }

// Join makes a new member of the Store, for one Transport (httpbreaker.New
// calls it once per Transport given the Store), and returns it.
//
// The member's Publish sends its hints to the other instances, through
// Redis, and to the Store's other members, in process, without waiting for
// Redis (and even while Redis is down). f receives the hints of every
// other member: those of the Store's other members, and those that come
// through Redis from other instances (including, once more, those of the
// Store's other members: a hint is never delivered back to the member
// that published it). f is called on the Store's delivery goroutine, one
// hint at a time, and never inside Publish; a panic in f is recovered and
// counted. A nil f receives nothing.
//
// The member's ProbeLease asks for the probe lease for itself: the lease
// is held by one member, and the Store's other members are denied it as
// the other instances are.
//
// There is no way to leave: a Store keeps its members for its lifetime.
// Give a short-lived Transport no Store, or a Store of its own that you
// Close with it.
func (s *Store) Join(f func(httpbreaker.Hint)) httpbreaker.Member {
	return s.join(f)
}

func (s *Store) join(f func(httpbreaker.Hint)) *member {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	m := &member{s: s, n: len(s.members) + 1, f: f}
	m.id = s.id + "/" + strconv.Itoa(m.n)
	s.members = append(s.members, m)
	return m
}

// memberOf returns the member of this Store whose sender ID is id, or nil.
func (s *Store) memberOf(id string) *member {
	inst, n, ok := splitSender(id)
	if !ok || inst != s.id || n == 0 {
		return nil
	}
	s.memMu.RLock()
	defer s.memMu.RUnlock()
	if n > len(s.members) {
		return nil
	}
	return s.members[n-1]
}

// local reports whether sender is this Store or one of its members.
func (s *Store) local(sender string) bool {
	inst, _, _ := splitSender(sender)
	return inst == s.id
}

// Publish sends a local transition to the fleet: it records it in memory,
// queues it for delivery to the Store's other members and for the
// publisher goroutine; it never blocks, and never calls a member. Hints
// with a state other than open or closed, an empty key, or an open hint
// whose RetryAt has passed say nothing and are ignored; a hint whose key
// is longer than MaxKeyLen, or that finds a queue full, is dropped and
// counted in Errors. A closed hint also gives back the probe lease for its
// key, held by this member (or by another member of the Store: the
// breaker is closed for all of them).
//
// An open hint's RetryAt is cut to MaxOpen from now, and its Cycles to
// maxCycles (9999). An operator's open hint (Trip) is taken exactly: its
// RetryAt is not cut, and its zero RetryAt means until Reset. While an
// operator's trip holds, a closed hint that is not an operator's (a
// breaker that closed on its own, having missed the trip) is not
// delivered to the other members: only a Reset ends a trip early.
func (m *member) Publish(h httpbreaker.Hint) {
	s := m.s
	if s.closed.Load() || h.Key == "" {
		return
	}
	if len(h.Key) > MaxKeyLen {
		s.errs.Add(1)
		return
	}
	now := s.now()
	deliver := true
	var seq uint64
	switch {
	case h.State == httpbreaker.StateOpen && h.Operator:
		if !h.RetryAt.IsZero() && !h.RetryAt.After(now) {
			return
		}
		h.Cycles = clampCycles(h.Cycles)
		s.mu.Lock()
		s.seq++
		seq = s.seq
		s.setTripLocked(h.Key, tripEntry{retryAt: h.RetryAt, cycles: h.Cycles, sender: m.id, by: m, seq: seq}, now)
		delete(s.resets, h.Key)
		delete(s.closes, h.Key)
		s.mu.Unlock()
	case h.State == httpbreaker.StateOpen:
		r, ok := retryAt(h.RetryAt.Sub(now), now, s.opt.MaxOpen)
		if !ok {
			return
		}
		h.RetryAt, h.Cycles = r, clampCycles(h.Cycles)
		s.mu.Lock()
		s.setHintLocked(h.Key, hintEntry{retryAt: r, cycles: h.Cycles, sender: m.id, at: now}, now)
		if _, ok := s.own[h.Key]; ok || len(s.own) < maxHints {
			s.own[h.Key] = ownHint{retryAt: r, cycles: h.Cycles, by: m}
		}
		delete(s.closes, h.Key)
		s.mu.Unlock()
	case h.State == httpbreaker.StateClosed:
		h.RetryAt, h.Cycles = time.Time{}, 0
		s.mu.Lock()
		delete(s.hints, h.Key)
		delete(s.own, h.Key)
		if h.Operator {
			delete(s.trips, h.Key)
			s.seq++
			seq = s.seq
			if _, ok := s.resets[h.Key]; ok || len(s.resets) < maxHints {
				s.resets[h.Key] = pendingReset{by: m, seq: seq}
			}
		} else {
			deliver = !s.trippedLocked(h.Key, now)
		}
		s.mu.Unlock()
	default:
		return
	}
	if deliver && s.hasReceivers(m.n) {
		select {
		case s.deliverQ <- delivery{h: h, from: m.n}:
		default:
			s.errs.Add(1)
		}
	}
	select {
	case s.queue <- outHint{h: h, by: m, seq: seq}:
	default:
		s.errs.Add(1)
	}
}

// clampCycles bounds a count of failed probe cycles to what the wire
// carries.
func clampCycles(c int) int { return min(max(c, 0), maxCycles) }

// trippedLocked reports whether an operator's trip of key holds at now.
// Requires mu held.
func (s *Store) trippedLocked(key string, now time.Time) bool {
	e, ok := s.trips[key]
	return ok && e.live(now)
}

// Lookup returns the open hint known for key, if there is one whose
// RetryAt has not passed: an operator's trip if one holds (Operator set,
// and a zero RetryAt for one until Reset), or else the latest open hint,
// with its Cycles. While Redis is unavailable, or before the Store has
// synchronised, it returns false: the hints in memory may be stale, and
// each instance falls back on its own breakers; the breaker made then
// learns, once the Store has synchronised again, the trip or open hint
// the Store knows for its key. It reads memory only.
func (s *Store) Lookup(key string) (httpbreaker.Hint, bool) {
	if !s.healthy.Load() {
		s.mu.Lock()
		s.missLocked(key)
		s.mu.Unlock()
		return httpbreaker.Hint{}, false
	}
	now := s.now()
	s.mu.Lock()
	t, tripped := s.trips[key]
	e, ok := s.hints[key]
	s.mu.Unlock()
	if tripped && t.live(now) {
		return t.hint(key), true
	}
	if !ok || !e.retryAt.After(now) {
		return httpbreaker.Hint{}, false
	}
	return httpbreaker.Hint{Key: key, State: httpbreaker.StateOpen, RetryAt: e.retryAt, Cycles: e.cycles}, true
}

// maxMissed bounds the keys remembered as missed (see Store.missed).
const maxMissed = 10_000

// missLocked remembers that Lookup could not answer for key. Requires
// s.mu held.
func (s *Store) missLocked(key string) {
	if len(s.missed) < maxMissed {
		s.missed[key] = struct{}{}
	} else {
		s.missedMany = true
	}
}

// missedLocked returns the hints that the breakers made while the Store
// could not answer Lookup have to learn at clock time now: the live trip
// or open hint known for each missed key (every one, when too many keys
// were missed to remember), and forgets the misses. Requires s.mu held.
func (s *Store) missedLocked(now time.Time) []httpbreaker.Hint {
	var hs []httpbreaker.Hint
	known := func(k string) {
		if t, ok := s.trips[k]; ok && t.live(now) {
			hs = append(hs, t.hint(k))
		} else if e, ok := s.hints[k]; ok && e.retryAt.After(now) {
			hs = append(hs, httpbreaker.Hint{Key: k, State: httpbreaker.StateOpen, RetryAt: e.retryAt, Cycles: e.cycles})
		}
	}
	if s.missedMany {
		for k := range s.trips {
			known(k)
		}
		for k := range s.hints {
			if _, tripped := s.trips[k]; !tripped {
				known(k)
			}
		}
	} else {
		for k := range s.missed {
			known(k)
		}
	}
	clear(s.missed)
	s.missedMany = false
	return hs
}

// fail counts a failed operation, marks Redis unavailable and, the first
// time in an outage, logs it.
func (s *Store) fail(op string, err error) {
	s.errs.Add(1)
	s.healthy.Store(false)
	if s.closed.Load() {
		return
	}
	if s.outage.CompareAndSwap(false, true) {
		s.outageStart.Store(s.now().UnixNano())
		s.log.Warn("redisstore: Redis unavailable; breakers fall back to local state until it is back",
			"op", op, "error", err)
	}
}

// recovered marks Redis available again after a successful resync, logs
// the end of an outage, forgets what it knew of leases (a restarted Redis
// has lost them; the next ProbeLease asks again), and asks the publisher
// to re-publish its members' own open hints, which a restarted Redis has
// lost too.
func (s *Store) recovered() {
	if s.healthy.Load() {
		return
	}
	s.mu.Lock()
	for k, l := range s.leases {
		if l.kind != leasePending {
			delete(s.leases, k)
		}
	}
	s.mu.Unlock()
	if s.healthy.Swap(true) {
		return
	}
	if s.outage.CompareAndSwap(true, false) {
		d := s.now().Sub(time.Unix(0, s.outageStart.Load()))
		s.log.Info("redisstore: Redis available again; hints shared", "outage", d.Round(time.Millisecond))
	}
	select {
	case s.replay <- struct{}{}:
	default:
	}
}

// garbage counts invalid data read from Redis and warns at most once per
// garbageLogEvery.
func (s *Store) garbage(where string, err error) {
	s.errs.Add(1)
	now := s.now().UnixNano()
	last := s.lastGarbage.Load()
	if now-last >= int64(garbageLogEvery) && s.lastGarbage.CompareAndSwap(last, now) {
		s.log.Warn("redisstore: ignored invalid data in Redis (further occurrences are counted, not logged, for a minute)",
			"where", where, "error", err)
	}
}

// setHintLocked records an open hint, keeping the map bounded: when it is
// full, expired entries are dropped first, and a new key that still finds
// no room is ignored. Requires mu held.
func (s *Store) setHintLocked(key string, e hintEntry, now time.Time) bool {
	if _, ok := s.hints[key]; !ok && len(s.hints) >= maxHints {
		for k, old := range s.hints {
			if !old.retryAt.After(now) {
				delete(s.hints, k)
			}
		}
		if len(s.hints) >= maxHints {
			return false
		}
	}
	s.hints[key] = e
	return true
}

// setTripLocked records an operator's trip, keeping the map bounded as
// setHintLocked does. Requires mu held.
func (s *Store) setTripLocked(key string, e tripEntry, now time.Time) bool {
	if _, ok := s.trips[key]; !ok && len(s.trips) >= maxHints {
		for k, old := range s.trips {
			if !old.live(now) {
				delete(s.trips, k)
			}
		}
		if len(s.trips) >= maxHints {
			return false
		}
	}
	s.trips[key] = e
	return true
}

// hasReceivers reports whether a hint from member number from (0: from
// another instance) has a member to go to.
func (s *Store) hasReceivers(from int) bool {
	s.memMu.RLock()
	n := len(s.members)
	s.memMu.RUnlock()
	if from == 0 {
		return n > 0
	}
	return n > 1
}

// post queues a hint that came through Redis for delivery to the members
// but from (0: all of them). Unlike Publish, it waits for room in the
// queue (the members' functions return quickly), so that the members get
// every hint Redis delivered, in order; it gives up when the Store closes.
func (s *Store) post(h httpbreaker.Hint, from int) {
	if !s.hasReceivers(from) {
		return
	}
	select {
	case s.deliverQ <- delivery{h: h, from: from}:
	case <-s.ctx.Done():
	}
}

// deliverer delivers the queued hints to the members, one at a time, in
// the order they were queued.
func (s *Store) deliverer() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case d := <-s.deliverQ:
			s.deliver(d)
		}
	}
}

// deliver calls every member but d.from with d.h. A member's panic is
// recovered and counted: it must not kill the Store's goroutine.
func (s *Store) deliver(d delivery) {
	s.memMu.RLock()
	members := s.members
	s.memMu.RUnlock()
	for _, m := range members {
		if m.n != d.from && m.f != nil {
			s.call(m.f, d.h)
		}
	}
}

func (s *Store) call(f func(httpbreaker.Hint), h httpbreaker.Hint) {
	defer func() {
		if r := recover(); r != nil {
			s.errs.Add(1)
			s.log.Error("redisstore: a member's hint function panicked", "panic", r)
		}
	}()
	f(h)
}

// opCtx returns the context for one Redis call.
func (s *Store) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.opt.OpTimeout)
}
