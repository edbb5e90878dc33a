package httpbreaker

import (
	"math/bits"
	"math/rand/v2"
	"sync/atomic"

	"github.com/httpbreaker/httpbreaker/internal/swar"
)

// breakerTable is a Transport's set of live circuits, by key: an
// open-addressing hash table with linear probing. Reads are lock-free —
// a hash of the key and one atomic load per slot probed, with no write to
// shared memory — so that the request path neither allocates nor
// contends. Writes (insert, remove) must be serialized by the caller
// (Transport.mu); they publish a new slot array when the table grows.
//
// It exists because sync.Map hashes and compares its keys through
// interfaces, which cost the request path more than the rest of the key
// lookup.
type breakerTable struct {
	slots atomic.Pointer[tableSlots]
	seed  [2]uint64 // random: keys cannot be chosen to collide
	live  int       // live breakers; guarded by the writers' lock
	used  int       // slots holding a breaker or a tombstone; guarded by the writers' lock
}

// tableSlots is one slot array; its length is a power of two.
type tableSlots struct {
	slots []atomic.Pointer[circuit]
}

// home is the slot where a probe for hash h starts. The length, a power
// of two, less one is the mask.
func (s *tableSlots) home(h uint64) uint64 { return h & uint64(len(s.slots)-1) }

// next is the slot a probe tries after slot i.
func (s *tableSlots) next(i uint64) uint64 { return (i + 1) & uint64(len(s.slots)-1) }

// tombstone marks a removed breaker's slot, so that probes go on past it.
var tombstone = new(circuit)

// minTableSlots is the size of a new table.
const minTableSlots = 16

func newBreakerTable() *breakerTable {
	t := new(breakerTable)
	t.init()
	return t
}

// init makes t an empty table; call it once, before any other method.
func (t *breakerTable) init() {
	t.seed = [2]uint64{rand.Uint64(), rand.Uint64()}
	t.slots.Store(newTableSlots(minTableSlots))
}

func newTableSlots(n int) *tableSlots {
	return &tableSlots{slots: make([]atomic.Pointer[circuit], n)}
}

// hash is the hash of key in this table: wyhash, as the Go runtime's
// maps use it where the CPU has no AES instructions (memhashFallback in
// runtime/hash64.go). Inlined here, it costs keys of a host's length half
// of what hash/maphash does.
func (t *breakerTable) hash(key string) uint64 {
	const m5 = 0x1d8e4e27c47d124f
	seed, k := t.seed[0], t.seed[1]
	n := len(key)
	var a, b uint64
	switch {
	case n == 0:
		return seed
	case n < 4:
		a = uint64(key[0]) | uint64(key[n>>1])<<8 | uint64(key[n-1])<<16
	case n < 8:
		a, b = swar.Load32(key), swar.Load32(key[n-4:])
	case n <= 16:
		a, b = swar.Load64(key), swar.Load64(key[n-8:])
	default:
		for p := key; len(p) > 16; p = p[16:] {
			seed = hashMix(swar.Load64(p)^k, swar.Load64(p[8:])^seed)
		}
		a, b = swar.Load64(key[n-16:]), swar.Load64(key[n-8:])
	}
	return hashMix(m5^uint64(n), hashMix(a^k, b^seed))
}

// hashMix folds the 128-bit product of a and b into 64 bits.
func hashMix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// get returns the live breaker for key, or nil. A breaker removed
// concurrently may still be returned, as by any concurrent map.
func (t *breakerTable) get(key string) *circuit {
	s := t.slots.Load()
	if s == nil {
		return nil // the zero table, of a Transport not made by New
	}
	h := t.hash(key)
	for i := s.home(h); ; i = s.next(i) {
		b := s.slots[i].Load()
		if b == nil {
			return nil
		}
		if b.hash == h && b != tombstone && b.b.key == key {
			return b
		}
	}
}

// insert adds b, whose key is not in the table, and sets b.hash. The
// caller holds the writers' lock.
func (t *breakerTable) insert(b *circuit) {
	b.hash = t.hash(b.b.key)
	s := t.slots.Load()
	// Keep at least a quarter of the slots empty, so that probes are
	// short and always end; tombstones count as used until a rehash.
	if 4*(t.used+1) > 3*len(s.slots) {
		n := minTableSlots
		for 2*(t.live+1) > n {
			n *= 2
		}
		s = t.rehash(n)
	}
	for i := s.home(b.hash); ; i = s.next(i) {
		switch s.slots[i].Load() {
		case nil:
			t.used++
			fallthrough
		case tombstone:
			s.slots[i].Store(b)
			t.live++
			return
		}
	}
}

// rehash publishes a slot array of n slots holding the live breakers and
// no tombstone. Readers still probing the old array see the breakers they
// would have seen. The caller holds the writers' lock.
func (t *breakerTable) rehash(n int) *tableSlots {
	s := newTableSlots(n)
	t.used = 0
	t.each(func(b *circuit) bool {
		for i := s.home(b.hash); ; i = s.next(i) {
			if s.slots[i].Load() == nil {
				s.slots[i].Store(b)
				t.used++
				break
			}
		}
		return true
	})
	t.slots.Store(s)
	return s
}

// remove takes b out of the table, if it is there. The caller holds the
// writers' lock.
func (t *breakerTable) remove(b *circuit) {
	s := t.slots.Load()
	for i := s.home(b.hash); ; i = s.next(i) {
		switch s.slots[i].Load() {
		case nil:
			return
		case b:
			s.slots[i].Store(tombstone)
			t.live--
			return
		}
	}
}

// eachKey is each for readers that walk the table beside its writers:
// a key removed and inserted again during the walk can sit in two slots
// the walk meets, its old breaker and its new one, and eachKey calls f
// for the first of them only, so that each key is seen once.
//
// It also calls f for at most limit circuits, and none already evicted:
// a walk beside a flood of evictions and insertions could otherwise meet
// more circuits than were ever live at once, and a scrape would show
// more than the cap's worth of series.
func (t *breakerTable) eachKey(limit int, f func(*circuit) bool) {
	seen := make(map[string]struct{})
	t.each(func(b *circuit) bool {
		if _, dup := seen[b.b.key]; dup || b.b.evicted.Load() {
			return true
		}
		if len(seen) == limit {
			return false
		}
		seen[b.b.key] = struct{}{}
		return f(b)
	})
}

// each calls f for each live breaker until f returns false. It sees
// the table as it was when it started, give or take concurrent writes,
// like sync.Map.Range; a walk beside writers may meet a key twice (see
// eachKey).
func (t *breakerTable) each(f func(*circuit) bool) {
	s := t.slots.Load()
	if s == nil {
		return
	}
	for i := range s.slots {
		if b := s.slots[i].Load(); b != nil && b != tombstone && !f(b) {
			return
		}
	}
}
