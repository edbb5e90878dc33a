package httpbreaker

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRecoveryWithoutThunderingHerd: 1,000 callers keep calling while the
// breaker is open, all waking at the same instants (fake time), so the
// instant the open period ends they arrive together. The dependency sees
// exactly HalfOpenProbes calls, and no more for as long as the probes are
// unresolved, however often the herd retries; everyone else is refused
// at once with the synthetic 503. When the probes succeed the breaker
// closes and the herd flows again.
func TestRecoveryWithoutThunderingHerd(t *testing.T) {
	for _, probes := range []int{1, 3} {
		t.Run("probes="+strconv.Itoa(probes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				herdRun(t, probes)
			})
		})
	}
}

func herdRun(t *testing.T, probes int) {
	const (
		callers = 1000
		every   = 50 * time.Millisecond // each caller's retry interval
		openFor = time.Second
		hold    = 5 * time.Second // how long the probes stay unresolved
	)
	d := newDep(500)
	log := &transitionLog{}
	var opened time.Time
	var firstCall atomic.Int64 // when the first call after the trip reached the dependency
	firstCall.Store(-1)
	next := rtFunc(func(r *http.Request) (*http.Response, error) {
		if !opened.IsZero() {
			firstCall.CompareAndSwap(-1, int64(time.Since(opened)))
		}
		return d.RoundTrip(r)
	})
	tr := New(next, WithMinRequests(1), WithJitter(0), WithOpenTimeout(openFor),
		WithHalfOpenProbes(probes), WithProbesToClose(probes), onStateChange(log.hook))
	_, _ = get(t, tr, testURL)
	require.Equal(t, StateOpen, tr.State(testKey))
	opened = time.Now()
	d.set(200, nil)
	d.block() // probes hang until released

	var (
		stop     atomic.Bool
		rejected atomic.Int64
		answered atomic.Int64 // real responses from the dependency
	)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for !stop.Load() {
				resp, err := get(t, tr, testURL)
				require.NoError(t, err)
				switch {
				case IsRejected(resp):
					rejected.Add(1)
				default:
					require.Equal(t, 200, resp.StatusCode)
					answered.Add(1)
				}
				time.Sleep(every)
			}
		})
	}

	// Open: nobody gets through, however hard the herd tries.
	time.Sleep(openFor - time.Millisecond)
	synctest.Wait()
	require.EqualValues(t, 1, d.calls.Load(), "no call reaches the dependency while open")
	require.Positive(t, rejected.Load())

	// The open period ends with the herd awake at that very instant:
	// exactly the probe bound goes through, and no more while the probes
	// hang, across thirty more retries of every caller.
	time.Sleep(time.Millisecond)
	synctest.Wait()
	require.EqualValues(t, 1+probes, d.calls.Load(), "exactly HalfOpenProbes calls when the open period ends")
	require.Equal(t, openFor, time.Duration(firstCall.Load()), "the probes went the instant the period ended")
	rejectedAtOpen := rejected.Load()
	time.Sleep(hold)
	synctest.Wait()
	require.EqualValues(t, 1+probes, d.calls.Load(), "no more calls until the probes resolve")
	require.Greater(t, rejected.Load()-rejectedAtOpen, int64(callers-probes)*int64(hold/every)-int64(callers),
		"the herd kept retrying and was refused at once")
	require.Equal(t, StateHalfOpen, tr.State(testKey))

	// The probes succeed: closed, and the herd flows.
	d.release()
	synctest.Wait()
	require.Equal(t, StateClosed, tr.State(testKey))
	time.Sleep(2 * every)
	synctest.Wait()
	require.Greater(t, d.calls.Load(), int64(1+probes+callers), "closed: everyone gets through")
	stop.Store(true)
	wg.Wait()
	require.Equal(t, []string{
		testKey + ": closed→open", testKey + ": open→half-open", testKey + ": half-open→closed",
	}, log.list(), "one transition each: the herd raced for the probe slots, not the transitions")
}
