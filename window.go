package httpbreaker

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// window counts outcomes over a rolling time window of bucketCount
// buckets. Recording an outcome is two atomic operations, plus a short
// lock once per bucket width when a bucket rolls over. Counts of buckets
// that roll out of the window are kept in retired, so that totals (for
// metrics) never go backwards.
type window struct {
	width   atomic.Int64 // nanoseconds per bucket; written with mu held (see resize)
	buckets [bucketCount]bucket

	mu      sync.Mutex         // guards retired and bucket roll-over
	retired [numOutcomes]int64 // counts moved out of rolled buckets; guarded by mu
	_       [0]func()          // not comparable
}

// numOutcomes is the number of Outcome values.
const numOutcomes = 4

// bucketCount is the number of buckets a rolling window is divided into.
const bucketCount = 10

// minWindow is the shortest window WithWindow accepts: buckets of 1ms.
const minWindow = bucketCount * time.Millisecond

type bucket struct {
	// epoch is the bucket number (clock / width) the counts belong to.
	// Written only with window.mu held.
	epoch  atomic.Int64
	counts [numOutcomes]atomic.Uint32 // indexed by Outcome; a bucket never sees 2^32 calls
	// hint is the longest Retry-After (ns) of the failed or throttled
	// responses counted in the bucket (see window.hint).
	hint atomic.Int64
}

// counts are the outcome counts of a window.
type counts [numOutcomes]int64

// requests is every outcome but Ignored.
func (c counts) requests() int64 {
	return c[OutcomeSuccess] + c[OutcomeFailure] + c[OutcomeThrottled]
}

// init sets the window's length; call it once, before any other method.
func (w *window) init(length int64) { w.width.Store(length / bucketCount) }

// noBucket is the bucket number of a bucket that belongs to none: after
// resize, every bucket waits to be claimed afresh.
const noBucket = math.MinInt64 / 2

// resize empties the window and gives it buckets for a window of length:
// a fresh window, whose totals keep every outcome the old length counted.
// An outcome counted while it runs lands in the totals either way: in a
// bucket it retires, or in one it left to no bucket number, which totals
// reads and the next add to it retires (see add, addSlow).
func (w *window) resize(length int64) {
	w.mu.Lock()
	for i := range w.buckets {
		w.retireLocked(&w.buckets[i])
		w.buckets[i].epoch.Store(noBucket)
	}
	w.width.Store(length / bucketCount)
	w.mu.Unlock()
}

// add records one outcome at clock time now. An outcome whose time is so
// far back that its bucket has moved on (a success counted at admission,
// see Transport.RoundTrip, that outlived its bucket's turn) counts in the
// totals only.
func (w *window) add(now int64, o Outcome) {
	idx := now / w.width.Load()
	b := &w.buckets[idx%bucketCount]
	if b.epoch.Load() != idx {
		w.addSlow(now, o)
		return
	}
	b.counts[o].Add(1)
}

// addSlow is add at clock time now for a bucket that does not belong to
// now's bucket number idx (read again, with the width, under mu: resize
// may have changed it): it moves the bucket's counts to retired and gives
// it to idx, unless a newer bucket number owns it already, in which case
// the outcome counts in retired only.
func (w *window) addSlow(now int64, o Outcome) {
	w.mu.Lock()
	idx := now / w.width.Load()
	b := &w.buckets[idx%bucketCount]
	if e := b.epoch.Load(); e > idx {
		w.retired[o]++
		w.mu.Unlock()
		return
	} else if e < idx {
		w.retireLocked(b)
		b.epoch.Store(idx)
	}
	w.mu.Unlock()
	b.counts[o].Add(1)
}

// addTotal records outcome o in the totals only, outside every bucket:
// the outcome of a call admitted in a state that is over.
func (w *window) addTotal(o Outcome) {
	w.mu.Lock()
	w.retired[o]++
	w.mu.Unlock()
}

// retireLocked moves b's counts to retired, and forgets its hint.
// Requires w.mu held.
func (w *window) retireLocked(b *bucket) {
	for o := range b.counts {
		w.retired[o] += int64(b.counts[o].Swap(0))
	}
	b.hint.Store(0)
}

// inWindow reports whether bucket number e is inside the window that
// ends with bucket number idx.
func inWindow(e, idx int64) bool { return e > idx-bucketCount && e <= idx }

// sums returns the counts of the buckets inside the window at clock time
// now.
func (w *window) sums(now int64) counts {
	var c counts
	idx := now / w.width.Load()
	for i := range w.buckets {
		b := &w.buckets[i]
		if inWindow(b.epoch.Load(), idx) {
			for o := range c {
				c[o] += int64(b.counts[o].Load())
			}
		}
	}
	return c
}

// hint records a Retry-After of d nanoseconds on a response counted at
// clock time now (after add): its bucket keeps the longest. A late
// outcome's, whose bucket has moved on, is dropped.
func (w *window) hint(now, d int64) {
	idx := now / w.width.Load()
	b := &w.buckets[idx%bucketCount]
	if b.epoch.Load() != idx {
		return
	}
	for old := b.hint.Load(); d > old && !b.hint.CompareAndSwap(old, d); old = b.hint.Load() {
	}
}

// longestHint returns the longest Retry-After recorded in the buckets
// inside the window at clock time now, or 0.
func (w *window) longestHint(now int64) int64 {
	var h int64
	idx := now / w.width.Load()
	for i := range w.buckets {
		if b := &w.buckets[i]; inWindow(b.epoch.Load(), idx) {
			h = max(h, b.hint.Load())
		}
	}
	return h
}

// clearHints forgets every Retry-After recorded; the counts stay.
func (w *window) clearHints() {
	for i := range w.buckets {
		w.buckets[i].hint.Store(0)
	}
}

// totals returns every outcome ever recorded, including those that have
// left the window. The result never decreases between calls.
func (w *window) totals() counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := counts(w.retired)
	for i := range w.buckets {
		for o := range c {
			c[o] += int64(w.buckets[i].counts[o].Load())
		}
	}
	return c
}

// clear empties the window; totals keep what it held.
func (w *window) clear() {
	w.mu.Lock()
	for i := range w.buckets {
		w.retireLocked(&w.buckets[i])
	}
	w.mu.Unlock()
}
