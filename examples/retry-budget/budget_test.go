package retrybudget

import (
	"math"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// window is the breaker's window: the default, which the tests keep.
const window = 10 * time.Second

// allowance is the retries a budget of ratio and minPerSecond admits
// within one window that holds firsts first attempts: the rule of
// WithRetryBudget, rounded down.
func allowance(ratio, minPerSecond float64, firsts int) int64 {
	return int64(math.Floor(ratio*float64(firsts) + minPerSecond*window.Seconds()))
}

// unbudgeted is the requests calls logical calls take from a dependency
// that fails request n when fails(n), never twice in a row, when every
// failure is retried once, as with no budget.
func unbudgeted(calls int, fails func(int64) bool) int64 {
	var n int64
	for range calls {
		if fails(n) {
			n++ // the failure; its retry succeeds
		}
		n++
	}
	return n
}

// logRun prints one run's numbers.
func logRun(t *testing.T, label string, r result, labelled bool) {
	t.Helper()
	t.Logf("%-26s calls %4d (failed %3d, %2d on the SDK's own quota)  reached the dependency %4d = %4d first + %3d retries (%3d answered 500)  refused by the budget %3d  breaker %s, %d transitions  %v",
		label, r.calls, r.failedCalls, r.quotaSpent, r.arrivals, r.arrivals-r.retriesReached(labelled), r.retriesReached(labelled), r.failed,
		r.refused, r.state, r.transition, r.elapsed.Round(time.Millisecond))
}

// A dependency failing 3 requests in 10, below the failure rate of 0.5:
// the breaker rightly stays closed, and without a budget every SDK's
// retries add about 43 % to its load. With WithRetryBudget(0.1, 1) the
// attempts that reach it are at most first attempts × 1.1 + the floor.
//
// The bound, for F first attempts (one per logical call): F + ⌊0.1 F +
// 1/s × 10 s⌋. The floor is granted per window, 10 retries in any 10 s,
// not per second elapsed: the run, 3 s at most here, fits in one
// window (asserted), so the floor's term is the window's 10 whatever the
// run's length. No other slack: the calls go one at a time, so no retry
// is decided on a stale count, and this is exactly the rule the budget
// enforces. (A run longer than a window would earn another floor's worth,
// and the ratio's share again, per window.)
func TestRetryBudgetBoundsEverySDKsRetriesOnAPartialFailure(t *testing.T) {
	const calls = 300
	const ratio, floor = 0.1, 1
	bound := int64(calls) + allowance(ratio, floor, calls) // 340
	for _, s := range sdks {
		t.Run(s.name, func(t *testing.T) {
			with := run(t, s, threeInTen, calls, httpbreaker.WithRetryBudget(ratio, floor))
			without := run(t, s, threeInTen, calls)
			logRun(t, "WithRetryBudget(0.1, 1)", with, s.labelled)
			logRun(t, "no budget", without, s.labelled)
			t.Logf("bound: %d first attempts × 1.1 + 1/s × 10 s = %d", calls, bound)

			for _, r := range []result{with, without} {
				require.Equal(t, httpbreaker.StateClosed, r.state, "30 % failures never trip a breaker at 0.5")
				require.Zero(t, r.transition)
				require.InDelta(t, 0.3, float64(r.failed)/float64(r.arrivals), 0.01, "the dependency failed 3 in 10 of what reached it")
			}

			// With the budget: the bound holds, the budget refused
			// retries to hold it, and the retries it admitted reached
			// the dependency.
			require.Less(t, with.elapsed, window*9/10, "the run fits in one window, which the bound assumes")
			require.LessOrEqual(t, with.arrivals, bound)
			require.Positive(t, with.refused)
			require.LessOrEqual(t, with.retriesReached(s.labelled), allowance(ratio, floor, calls))

			// Without it, the same run exceeds the bound: every failure
			// was retried once, and the retry succeeded (the next request
			// never fails). 300 calls take 429 requests, 129 of them
			// retries.
			require.Zero(t, without.refused)
			require.Zero(t, without.failedCalls)
			require.Equal(t, without.failed, without.retriesReached(s.labelled))
			require.EqualValues(t, 429, unbudgeted(calls, threeInTen))
			require.Equal(t, unbudgeted(calls, threeInTen), without.arrivals)
			require.Greater(t, without.arrivals, bound, "without the budget the bound does not hold: the budget did the work")
		})
	}
}

// The suggested budget, WithRetryBudget(0.2, 10), on a healthy dependency
// with rare transient errors (1 request in 100 fails, once): every retry
// goes through and every call succeeds, for every SDK, at 500 calls in a
// window (50 a second). The ratio alone would let them through here as
// well: by the first failure, request 50, 50 first attempts have earned
// 10 retries.
func TestSuggestedBudgetLetsRareTransientErrorsThroughOnABusyDependency(t *testing.T) {
	const calls = 500
	for _, s := range sdks {
		t.Run(s.name, func(t *testing.T) {
			for _, b := range []struct {
				label string
				opt   httpbreaker.Option
			}{
				{"SuggestedBudget (0.2, 10)", SuggestedBudget()},
				{"ratio alone (0.2, 0)", httpbreaker.WithRetryBudget(0.2, 0)},
			} {
				r := run(t, s, oneInHundred, calls, b.opt)
				logRun(t, b.label, r, s.labelled)
				require.Less(t, r.elapsed, window*9/10, "the run fits in one window")
				require.EqualValues(t, 5, r.failed, "requests 50, 150, … 450 failed once")
				require.Zero(t, r.refused, "no retry of a rare transient error is refused")
				require.Zero(t, r.failedCalls, "every call succeeded on its retry")
				require.EqualValues(t, 5, r.retriesReached(s.labelled))
				require.EqualValues(t, calls+5, r.arrivals)
				require.Equal(t, httpbreaker.StateClosed, r.state)
			}
		})
	}
}

// The floor is what lets the retry of a rare transient error through on a
// dependency with little traffic: 5 calls in a window (one every 2 s; the
// budget counts by window, so the test makes them at once), the third of
// which fails once. The ratio alone has earned ⌊0.2 × 3⌋ = 0 retries by
// then and refuses it, and the call fails although its retry would have
// succeeded; with the floor's 100 retries a window it goes through. The
// ratio alone never lets a retry through below 5 first attempts a window.
func TestFloorLetsTheRetriesOfALowTrafficDependencyThrough(t *testing.T) {
	const calls = 5
	thirdFails := func(n int64) bool { return n == 2 }
	for _, s := range sdks {
		t.Run(s.name, func(t *testing.T) {
			alone := run(t, s, thirdFails, calls, httpbreaker.WithRetryBudget(0.2, 0))
			floored := run(t, s, thirdFails, calls, SuggestedBudget())
			logRun(t, "ratio alone (0.2, 0)", alone, s.labelled)
			logRun(t, "SuggestedBudget (0.2, 10)", floored, s.labelled)

			require.Positive(t, alone.refused, "the ratio alone refuses the retry")
			require.Equal(t, 1, alone.failedCalls, "and the call fails")
			require.Zero(t, alone.retriesReached(s.labelled))
			require.EqualValues(t, calls, alone.arrivals)

			require.Zero(t, floored.refused, "the floor lets it through")
			require.Zero(t, floored.failedCalls)
			require.EqualValues(t, 1, floored.retriesReached(s.labelled))
			require.EqualValues(t, calls+1, floored.arrivals)
		})
	}
}

// What the suggested budget does on the failing dependency (3 in 10): its
// floor of 100 retries a window is a dependency's own until the ratio's
// share passes it, so it binds only above about 44 calls a second (here,
// 440 in a window), where one retry per failure (0.43 per call) outgrows
// 0.2 per call + 100. At 300 calls in a window it refuses nothing, at
// 1000 it holds the load to first attempts × 1.2 + 100. Measured with
// openai-go, the quickest of the three to drive; the arithmetic is the
// budget's, the same for every SDK.
func TestSuggestedBudgetBindsAFailingDependencyAboveItsFloor(t *testing.T) {
	s := sdks[2]
	require.Equal(t, "openai-go", s.name)
	for _, tc := range []struct {
		calls    int
		refusals bool
	}{
		{300, false},
		{1000, true},
	} {
		r := run(t, s, threeInTen, tc.calls, SuggestedBudget())
		bound := int64(tc.calls) + allowance(0.2, 10, tc.calls)
		logRun(t, "SuggestedBudget (0.2, 10)", r, s.labelled)
		t.Logf("bound: %d first attempts × 1.2 + 10/s × 10 s = %d; without a budget: %d", tc.calls, bound, unbudgeted(tc.calls, threeInTen))
		require.Less(t, r.elapsed, window*9/10, "the run fits in one window")
		require.LessOrEqual(t, r.arrivals, bound)
		require.Equal(t, httpbreaker.StateClosed, r.state)
		if tc.refusals {
			require.Positive(t, r.refused)
			require.Greater(t, unbudgeted(tc.calls, threeInTen), bound, "the bound is below what the calls would take")
		} else {
			require.Zero(t, r.refused, "below the floor the budget refuses nothing")
			require.Equal(t, unbudgeted(tc.calls, threeInTen), r.arrivals, "every failure retried, as without a budget")
		}
	}
}
