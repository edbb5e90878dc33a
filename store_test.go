package httpbreaker

import (
	"math"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestStorePublishesOpenAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		d := newDep(500)
		tr := tripped(t, d, WithStore(s), WithProbesToClose(1))
		start := time.Now()
		require.Equal(t, []Hint{{Key: testKey, State: StateOpen, RetryAt: start.Add(time.Second)}}, s.hints())
		time.Sleep(time.Second)
		d.set(200, nil)
		_, _ = get(t, tr, testURL) // the probe closes it
		require.Equal(t, StateClosed, tr.State(testKey))
		h := s.hints()
		require.Len(t, h, 2, "half-open is not published")
		require.Equal(t, Hint{Key: testKey, State: StateClosed}, h[1])
	})
}

func TestStoreFleetLearnsAnOutageOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		d := newDep(500)
		opts := []Option{WithStore(s), WithMinRequests(3), WithJitter(0), WithOpenTimeout(5 * time.Second)}
		a, b := New(d, opts...), New(d, opts...)
		_, _ = get(t, b, testURL) // b has a breaker for the key already
		for range 3 {
			_, _ = get(t, a, testURL)
		}
		require.Equal(t, StateOpen, a.State(testKey))
		require.Equal(t, StateOpen, b.State(testKey), "b learnt it from the fleet")
		calls := d.calls.Load()
		for range 10 {
			resp, err := get(t, b, testURL)
			require.NoError(t, err)
			require.True(t, IsRejected(resp))
		}
		// A Transport that had no breaker for the key learns it on first use.
		c := New(d, opts...)
		resp, _ := get(t, c, testURL)
		require.True(t, IsRejected(resp))
		require.Equal(t, calls, d.calls.Load(), "no instance called the dead dependency")
		require.Len(t, s.hints(), 1, "fleet-made transitions are not published back")
		require.Equal(t, 5*time.Second, time.Until(b.Snapshot()[0].RetryAt))
	})
}

func TestStoreHintsAreClampedAndValidated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		tr := New(newDep(200), WithStore(s), WithMaxOpenTimeout(time.Minute))
		_, _ = get(t, tr, testURL)
		s.publish(Hint{Key: testKey, State: StateOpen, RetryAt: time.Now().Add(-time.Second)}) // past
		require.Equal(t, StateClosed, tr.State(testKey))
		s.publish(Hint{Key: testKey, State: State(9), RetryAt: time.Now().Add(time.Hour)}) // nonsense
		require.Equal(t, StateClosed, tr.State(testKey))
		s.publish(Hint{Key: "other.test", State: StateOpen, RetryAt: time.Now().Add(time.Hour)})
		require.Len(t, tr.Snapshot(), 1, "a hint creates no breaker")
		s.publish(Hint{Key: testKey, State: StateOpen, RetryAt: time.Now().Add(100 * 365 * 24 * time.Hour)})
		require.Equal(t, StateOpen, tr.State(testKey))
		require.Equal(t, time.Minute, time.Until(tr.Snapshot()[0].RetryAt), "clamped to MaxOpenTimeout")
		s.publish(Hint{Key: testKey, State: StateClosed})
		require.Equal(t, StateClosed, tr.State(testKey), "a closed hint closes")
	})
}

func TestStoreProbeLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		d := newDep(500)
		tr := tripped(t, d, WithStore(s), WithProbesToClose(1))
		calls := d.calls.Load()
		time.Sleep(time.Second)
		// Another instance holds the lease: no probe from here, and the
		// breaker asks again after leaseRecheck.
		s.lease = LeaseDenied
		d.set(200, nil)
		for range 5 {
			resp, _ := get(t, tr, testURL)
			require.True(t, IsRejected(resp))
		}
		require.Equal(t, calls, d.calls.Load())
		require.Equal(t, 1, s.leaseAsks, "asked once, then waits for the recheck")
		require.Equal(t, time.Second, time.Until(tr.Snapshot()[0].RetryAt))
		// The lease is ours: probe.
		time.Sleep(time.Second)
		s.lease = LeaseGranted
		resp, _ := get(t, tr, testURL)
		require.False(t, IsRejected(resp))
		require.Equal(t, calls+1, d.calls.Load())
		require.Equal(t, StateClosed, tr.State(testKey))
	})
	synctest.Test(t, func(t *testing.T) {
		// The store cannot tell: decide locally, as without a store.
		s := newMemStore()
		d := newDep(500)
		tr := tripped(t, d, WithStore(s))
		time.Sleep(time.Second)
		require.Equal(t, StateHalfOpen, tr.State(testKey))
		before := d.calls.Load()
		_, _ = get(t, tr, testURL)
		require.Equal(t, before+1, d.calls.Load())
	})
}

func TestStoreErrorsMetric(t *testing.T) {
	s := newMemStore()
	s.errors = 7
	reg := prometheus.NewPedanticRegistry()
	New(newDep(200), WithStore(s), WithMetrics(reg))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var got float64
	for _, mf := range mfs {
		if mf.GetName() == "breaker_store_errors_total" {
			got = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	require.Equal(t, 7.0, got)
}

func TestStoreAbsentChangesNothing(t *testing.T) {
	require.Nil(t, New(nil).store)
	require.Panics(t, func() { New(nil, WithStore(nil)) })
}

type nilMemberStore struct{ memStore }

func (*nilMemberStore) Join(func(Hint)) Member { return nil }

func TestStoreJoinMustReturnAMember(t *testing.T) {
	require.PanicsWithValue(t, "httpbreaker: WithStore: Store.Join returned a nil Member", func() {
		New(nil, WithStore(&nilMemberStore{}))
	})
}

// TestOperatorActionsReachTheFleet: Trip and Reset on one Transport act
// on every other on the Store, exactly and uncapped, carrying the
// backoff; an ordinary close from an instance that missed the trip does
// not end it.
func TestOperatorActionsReachTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a := New(newDep(200), WithStore(s), WithMaxOpenTimeout(10*time.Second))
		b := New(newDep(200), WithStore(s), WithMaxOpenTimeout(10*time.Second))
		_, _ = get(t, b, testURL) // b has a breaker for the key
		a.Trip(testKey, time.Hour)
		require.Equal(t, StateOpen, b.State(testKey), "the hint opened b's breaker")
		a.Trip(testKey, time.Duration(math.MaxInt64)) // a was open already: still published
		s.mu.Lock()
		last := s.published[len(s.published)-1]
		s.mu.Unlock()
		require.True(t, last.Operator)
		require.True(t, last.RetryAt.IsZero(), "until Reset")
		time.Sleep(2 * time.Hour)
		require.Equal(t, StateOpen, b.State(testKey), "past b's MaxOpenTimeout and the first trip's hour")
		late := New(newDep(200), WithStore(s))
		resp, err := get(t, late, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "an instance that joins later learns the trip")
		for _, m := range s.members {
			m.f(Hint{Key: testKey, State: StateClosed}) // an instance that missed the trip closes
		}
		require.Equal(t, StateOpen, b.State(testKey), "an ordinary close does not end an operator's trip")
		b.Reset(testKey)
		require.Equal(t, StateClosed, a.State(testKey))
		require.Equal(t, StateClosed, b.State(testKey))
	})
}

// TestOperatorTripCarriesTheBackoff: an operator's open hint carries the
// breaker's backoff as every open hint does, also when the breaker was
// open already, so that an instance that learns the trip backs off after
// it as the tripping one does.
func TestOperatorTripCarriesTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		opts := []Option{WithStore(s), WithMaxOpenTimeout(time.Hour)}
		d := newDep(500)
		a := tripped(t, d, opts...) // open for 1s
		time.Sleep(time.Second)
		_, _ = get(t, a, testURL) // the probe fails: one failed cycle, open for 2s
		require.Equal(t, 2*time.Second, openFor(t, a))
		a.Trip(testKey, time.Minute) // open already: still published
		last := s.hints()[len(s.hints())-1]
		require.True(t, last.Operator)
		require.Equal(t, 1, last.Cycles, "the trip's hint carries the backoff")

		late := New(d, append([]Option{WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second)}, opts...)...)
		resp, err := get(t, late, testURL)
		require.NoError(t, err)
		require.True(t, IsRejected(resp), "late learnt the trip")
		time.Sleep(time.Minute)
		_, _ = get(t, late, testURL) // late's probe fails: its second failed cycle, as a's would be
		require.Equal(t, 4*time.Second, openFor(t, late))
	})
}

// TestTripWithoutALocalBreakerStillReachesTheFleet: a Trip of a key that
// gets no breaker here (its mode is off, or the cap leaves no room) still
// opens it on every other instance, as Reset closes it there.
func TestTripWithoutALocalBreakerStillReachesTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a := New(newDep(http.StatusOK), WithStore(s), WithPolicy(testKey, WithMode(ModeOff)))
		b := New(newDep(http.StatusOK), WithStore(s))
		_, _ = get(t, b, testURL)
		a.Trip(testKey, time.Hour)
		require.Empty(t, a.Snapshot(), "no breaker for an off key")
		require.Equal(t, StateOpen, b.State(testKey), "the fleet is told")
		h := s.hints()[len(s.hints())-1]
		require.True(t, h.Operator)
		require.Equal(t, time.Now().Add(time.Hour), h.RetryAt)
	})
}

// TestTripOfAHungProbeReachesTheFleet: with a Store, Trip opens the key
// on every instance for exactly d, also when it finds a half-open
// breaker whose probe has outlived the probe bound: time reopens it
// first (probe_timeout), so the Trip itself is no transition, and the
// operator's hint must still go out, after the reopening's.
func TestTripOfAHungProbeReachesTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		opts := []Option{WithStore(s), WithMinRequests(1), WithJitter(0),
			WithOpenTimeout(time.Second), WithMaxOpenTimeout(2 * time.Second)}
		d := newDep(http.StatusInternalServerError)
		a := New(d, opts...)
		b := New(newDep(http.StatusOK), opts...)
		_, _ = get(t, b, testURL) // b has a breaker for the key
		_, _ = get(t, a, testURL) // a trips, and so does b through the fleet
		require.Equal(t, StateOpen, a.State(testKey))

		time.Sleep(time.Second)
		d.block() // a's probe hangs
		done := make(chan struct{})
		go func() { defer close(done); _, _ = get(t, a, testURL) }()
		synctest.Wait()
		time.Sleep(2500 * time.Millisecond) // past the probe bound (2s)

		a.Trip(testKey, time.Hour)
		st := b.Snapshot()
		d.release()
		<-done

		last := s.hints()[len(s.hints())-1]
		require.True(t, last.Operator, "the fleet is told of the operator's Trip: last hint %+v", last)
		require.Equal(t, time.Now().Add(time.Hour), last.RetryAt)
		require.Len(t, st, 1)
		require.Equal(t, StateOpen, st[0].State)
		require.Equal(t, time.Hour, time.Until(st[0].RetryAt), "b is open for the Trip's hour")
	})
}

// TestADroppedBreakerTakesNoHint: a hint, or a Reset, that finds a
// breaker an Update has just dropped (its key switched to ModeOff) moves
// it no more: no caller reaches it, and its transitions would be told
// beside those of the key's next breaker. Each reaches a circuit found
// before the Update, as a hint racing it does.
func TestADroppedBreakerTakesNoHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log transitionLog
		tr := New(newDep(200), WithOnTransition(log.record))
		for _, k := range []string{"open.test", "closed.test"} {
			_, _ = get(t, tr, "http://"+k+"/")
		}
		tr.Trip("open.test", time.Hour)
		open, closed := tr.breakers.get("open.test"), tr.breakers.get("closed.test")
		require.NoError(t, tr.Update(WithPolicy("*.test", WithMode(ModeOff))))
		before := log.list()

		tr.take(closed, Hint{Key: "closed.test", State: StateOpen, RetryAt: time.Now().Add(time.Hour)})
		tr.take(open, Hint{Key: "open.test", State: StateClosed})
		tr.take(open, Hint{Key: "open.test", State: StateClosed, Operator: true})
		rtr, ok := open.b.reset(tr.now(), false)
		require.False(t, ok, "a dropped breaker is not reset")
		tr.notify(rtr)
		require.Equal(t, before, log.list(), "no transition of a dropped breaker")
		require.Equal(t, StateClosed, stateOf(closed.b.word.Load()), "the closed one stays closed")
		require.Equal(t, StateOpen, stateOf(open.b.word.Load()), "the open one stays open")
	})
}

// TestTripOfAHungProbeReachesTheFleetWhileAHookRuns: as
// TestTripOfAHungProbeReachesTheFleet, with the key's transitions being
// told on another goroutine (a slow hook on the open_elapsed before): the
// operator's hint still goes out after the probe_timeout reopening's, so
// that the Store keeps it as the key's latest.
func TestTripOfAHungProbeReachesTheFleetWhileAHookRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		hold := make(chan struct{})
		opts := []Option{WithStore(s), WithMinRequests(1), WithJitter(0),
			WithOpenTimeout(time.Second), WithMaxOpenTimeout(2 * time.Second)}
		d := newDep(http.StatusInternalServerError)
		a := New(d, append(opts, WithOnTransition(func(x Transition) {
			if x.Reason == ReasonOpenElapsed {
				<-hold // a slow hook
			}
		}))...)
		_, _ = get(t, a, testURL) // a trips
		require.Equal(t, StateOpen, a.State(testKey))

		time.Sleep(time.Second)
		done := make(chan struct{})
		go func() { defer close(done); _, _ = get(t, a, testURL) }() // the probe; its hook on open_elapsed blocks
		synctest.Wait()
		time.Sleep(2500 * time.Millisecond) // past the probe bound (2s)

		a.Trip(testKey, time.Hour)
		close(hold)
		<-done
		synctest.Wait()

		last, ok := s.Lookup(testKey)
		require.True(t, ok)
		require.True(t, last.Operator, "the Store's latest hint is the operator's Trip: %+v (all: %+v)", last, s.hints())
		require.Equal(t, time.Now().Add(time.Hour), last.RetryAt)
	})
}

// TestFleetCloseAfterATripEndsClosesEveryone: once an operator's Trip is
// over, the fleet's prober probes and its published close closes every
// instance, also one whose tripped breaker has not moved since.
func TestFleetCloseAfterATripEndsClosesEveryone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		da, db := newDep(200), newDep(200)
		opts := []Option{WithStore(s), WithProbesToClose(1)}
		a, b := New(da, opts...), New(db, opts...)
		_, _ = get(t, a, testURL)
		_, _ = get(t, b, testURL) // both have a breaker for the key
		a.Trip(testKey, time.Minute)
		require.Equal(t, StateOpen, b.State(testKey), "b took the trip")
		time.Sleep(time.Minute) // the trip is over everywhere

		// b is asked first, but another instance holds the lease.
		s.lease = LeaseDenied
		resp, _ := get(t, b, testURL)
		require.True(t, IsRejected(resp), "b waits for the fleet's prober")

		// a holds the lease and probes: the dependency is back.
		s.lease = LeaseGranted
		resp, _ = get(t, a, testURL)
		require.False(t, IsRejected(resp))
		require.Equal(t, StateClosed, a.State(testKey))
		require.Equal(t, Hint{Key: testKey, State: StateClosed}, s.hints()[len(s.hints())-1], "a's close was published")

		require.Equal(t, StateClosed, b.State(testKey), "the prober's close closes b, whose trip is over")
		calls := db.calls.Load()
		resp, _ = get(t, b, testURL)
		require.False(t, IsRejected(resp), "b answers from the dependency")
		require.Equal(t, calls+1, db.calls.Load())
	})
}

// TestFleetLearnsAnOpenTheClockCannotEnd: a breaker whose open period is one
// the clock cannot reach (open timeout of time.Duration(math.MaxInt64),
// accepted: "such a value means 'very long', never 'already passed'")
// opens; the fleet must learn it ("when one instance's breaker opens, the
// others open theirs"). Its hint is published with the zero RetryAt, which
// the other instances read as a time in the past, and ignore.
func TestFleetLearnsAnOpenTheClockCannotEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		d := newDep(500)
		opts := []Option{WithStore(s), WithMinRequests(3), WithJitter(0),
			WithOpenTimeout(time.Duration(math.MaxInt64)), WithMaxOpenTimeout(time.Duration(math.MaxInt64))}
		a, b := New(d, opts...), New(d, opts...)
		_, _ = get(t, b, testURL) // b has a breaker for the key
		for range 3 {
			_, _ = get(t, a, testURL)
		}
		require.Equal(t, StateOpen, a.State(testKey))
		h := s.hints()
		require.Len(t, h, 1)
		require.False(t, h[0].Operator)
		require.True(t, h[0].RetryAt.After(time.Now().Add(100*365*24*time.Hour)), "centuries ahead")
		require.Equal(t, StateOpen, b.State(testKey), "b learnt a's open from the fleet")
	})
}
