package httpbreaker

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// The rolling window (window.go): what it counts, and old buckets
// leaving it.

func TestOldFailuresLeaveTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithMinRequests(4), WithWindow(10*time.Second))
		run(t, tr, d, steps(
			rep(3, fail500),
			// 10s later the three failures have left the window.
			with(fail500, func(s *step) { s.after = 10 * time.Second }),
			rep(2, fail500),
			// Now 4 in the window, all failures.
			step{code: 500, sent: true, want: StateOpen},
		))
		s := tr.Snapshot()
		require.Len(t, s, 1)
		require.EqualValues(t, 4, s[0].Requests)
		require.EqualValues(t, 4, s[0].Failures)
	})
}

func TestWindowOldBucketsLeave(t *testing.T) {
	runMachine(t, mset(nil), nil, []mrow{
		call(0, bad, StateClosed),
		call(1*sec, bad, StateClosed),
		call(2*sec, bad, StateClosed).counts("3/3/0"),
		look(10*sec, StateClosed).counts("2/2/0"), // the first bucket has left
		look(12*sec, StateClosed).counts("0/0/0"),
		call(12*sec, bad, StateClosed).counts("1/1/0"),
	})
}

// TestWindowRollsAndTotalsKeepEverything: sums count the buckets inside
// the window only; a bucket that comes round again starts empty; an
// outcome too late for its bucket, and a cleared window, leave the totals
// whole, so they never go backwards.
func TestWindowRollsAndTotalsKeepEverything(t *testing.T) {
	var w window
	w.init(int64(10 * sec)) // ten buckets of 1s
	w.add(0, ok)
	w.add(0, bad)
	w.add(int64(sec), bad)
	w.add(int64(5*sec), slow)
	w.add(int64(5*sec), ign)
	require.Equal(t, counts{1, 2, 1, 1}, w.sums(int64(5*sec)))
	require.EqualValues(t, 4, w.sums(int64(5*sec)).requests(), "ignored is not a request")
	require.Equal(t, counts{0, 1, 1, 1}, w.sums(int64(10*sec)), "the bucket of 0s has left")
	require.Equal(t, counts{}, w.sums(int64(16*sec)), "every bucket has left")

	w.add(int64(10*sec), ok) // bucket 0 comes round again
	require.Equal(t, counts{1, 1, 1, 1}, w.sums(int64(10*sec)))
	require.Equal(t, counts{2, 2, 1, 1}, w.totals())

	w.add(0, bad) // its bucket belongs to 10s now: totals only
	require.Equal(t, counts{1, 1, 1, 1}, w.sums(int64(10*sec)))
	require.Equal(t, counts{2, 3, 1, 1}, w.totals())

	w.clear()
	require.Equal(t, counts{}, w.sums(int64(10*sec)))
	require.Equal(t, counts{2, 3, 1, 1}, w.totals(), "clearing keeps the totals")
}
