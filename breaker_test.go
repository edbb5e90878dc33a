package httpbreaker

import (
	"fmt"
	"go/parser"
	"go/token"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The state machine on its own, with no Transport and no HTTP: rows of
// (clock time, event, expected state and counts), in the style of
// golang.org/x/time/rate's tests. Clock times are durations since the
// breaker was made.

// mrow is one row of a state-machine table.
type mrow struct {
	at time.Duration // clock time of the event; rows are in time order
	do string        // call, admit, end, trip, reset, hint-open, hint-close, look
	id string        // admit, end: which call
	o  Outcome       // call, end: the outcome
	d  time.Duration // call, end: the response's Retry-After; trip, hint-open: the duration

	refused rejectReason // call, admit: why it is refused (admitted: not refused)

	want    State         // the state shown after the event
	since   time.Duration // when the shown state began; checked when sinceOK
	sinceOK bool
	retryIn time.Duration // open: retryAt - at; checked when not zero
	window  string        // "requests/failures/throttled" in the window after the event; "" unchecked
}

// mset returns the settings most tables use: no jitter, so open periods
// are exact.
func mset(f func(*settings)) settings {
	s := defaultSettings()
	s.minRequests, s.jitter = 4, 0
	s.openTimeout, s.maxOpenTimeout = time.Second, 8*time.Second
	s.probesToClose = 2
	if f != nil {
		f(&s)
	}
	return s
}

// runMachine plays rows against a new breaker with settings s and fleet
// f, and returns it with every transition it reported, as "from→to@at".
func runMachine(t *testing.T, s settings, f fleet, rows []mrow) (*breaker, []string) {
	t.Helper()
	b := newBreaker("k", &s, time.Now(), 0, f)
	calls := map[string]ticket{}
	var log []string
	note := func(tr *transition) {
		for ; tr != nil; tr = tr.next {
			log = append(log, fmt.Sprintf("%v→%v@%v", tr.From, tr.To, tr.At.Sub(b.epoch)))
		}
	}
	for i, r := range rows {
		now := int64(r.at)
		switch r.do {
		case "call", "admit":
			tk, reason, tr := b.admit(now, &s)
			note(tr)
			require.Equal(t, r.refused, reason, "row %d: admission", i)
			if reason == admitted {
				if r.do == "admit" {
					calls[r.id] = tk
				} else {
					note(b.count(tk, r.o, now, r.d))
				}
			}
		case "end":
			tk, ok := calls[r.id]
			require.True(t, ok, "row %d: no call %q", i, r.id)
			note(b.count(tk, r.o, now, r.d))
		case "trip":
			tr, ok := b.trip(now, r.d, false, 0)
			require.True(t, ok, "row %d: a live breaker trips", i)
			note(tr)
		case "reset":
			tr, ok := b.reset(now, false)
			require.True(t, ok, "row %d: a live breaker resets", i)
			note(tr)
		case "hint-open":
			note(b.hintOpen(now, r.d, 0))
		case "hint-close":
			note(b.hintClose(now))
		case "look":
		default:
			t.Fatalf("row %d: unknown event %q", i, r.do)
		}
		st, tr := b.stats(now, true)
		note(tr)
		require.Equal(t, r.want, st.state, "row %d (%s at %v): state", i, r.do, r.at)
		if r.sinceOK {
			require.Equal(t, r.since, time.Duration(st.since), "row %d: since", i)
		}
		if r.retryIn != 0 {
			require.Equal(t, StateOpen, st.state, "row %d", i)
			require.Equal(t, r.retryIn, time.Duration(st.retryAt-now), "row %d: open for", i)
		}
		if r.window != "" {
			got := fmt.Sprintf("%d/%d/%d", st.window.requests(), st.window[OutcomeFailure], st.window[OutcomeThrottled])
			require.Equal(t, r.window, got, "row %d: window", i)
		}
	}
	return b, log
}

// Row makers, to keep tables readable.
func call(at time.Duration, o Outcome, want State) mrow {
	return mrow{at: at, do: "call", o: o, want: want}
}
func refused(at time.Duration, why rejectReason, want State) mrow {
	return mrow{at: at, do: "call", refused: why, want: want}
}
func look(at time.Duration, want State) mrow { return mrow{at: at, do: "look", want: want} }

// with returns r changed by f.
func (r mrow) with(f func(*mrow)) mrow { f(&r); return r }
func (r mrow) counts(w string) mrow    { r.window = w; return r }
func (r mrow) openFor(d time.Duration) mrow {
	r.retryIn = d
	return r
}
func (r mrow) sinceAt(d time.Duration) mrow {
	r.since, r.sinceOK = d, true
	return r
}

const (
	ok   = OutcomeSuccess
	bad  = OutcomeFailure
	slow = OutcomeThrottled // a 429
	ign  = OutcomeIgnored
	ms   = time.Millisecond
	sec  = time.Second
)

func TestBreakerTripsAtTheFailureRate(t *testing.T) {
	_, log := runMachine(t, mset(nil), nil, []mrow{
		call(0, ok, StateClosed).counts("1/0/0"),
		call(10*ms, bad, StateClosed).counts("2/1/0"),
		call(20*ms, ign, StateClosed).counts("2/1/0"), // ignored: not a request
		call(30*ms, bad, StateClosed).counts("3/2/0"), // 2 of 3, but below the minimum volume
		call(40*ms, ok, StateClosed).counts("4/2/0"),  // 2 of 4 = the rate, on a success: not checked
		call(50*ms, bad, StateOpen).counts("5/3/0").openFor(sec).sinceAt(50 * ms),
		refused(60*ms, rejectOpen, StateOpen),
		refused(1049*ms, rejectOpen, StateOpen),
	})
	require.Equal(t, []string{"closed→open@50ms"}, log)
}

func TestBreakerNeedsTheMinimumVolumeAndRate(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests, s.failureRate = 10, 0.6 })
	var rows []mrow
	for i := range 5 {
		rows = append(rows, call(time.Duration(i)*ms, ok, StateClosed))
	}
	for i := range 7 {
		rows = append(rows, call(time.Duration(10+i)*ms, bad, StateClosed)) // up to 7/12 = 0.583
	}
	rows = append(rows, call(20*ms, bad, StateOpen).counts("13/8/0")) // 8/13 = 0.615
	runMachine(t, s, nil, rows)
}

func TestBreakerTripsOnSustained429sOnly(t *testing.T) {
	s := mset(func(s *settings) { s.throttleSustain = 10 * sec })
	t.Run("a burst shorter than the sustain period", func(t *testing.T) {
		var rows []mrow
		for i := range 10 {
			rows = append(rows, call(time.Duration(i)*sec, slow, StateClosed))
		}
		rows = append(rows, call(9500*ms, bad, StateClosed).counts("11/1/10"))
		runMachine(t, s, nil, rows)
	})
	t.Run("429s making up the rate for the whole period", func(t *testing.T) {
		var rows []mrow
		for range 4 {
			rows = append(rows, call(0, slow, StateClosed)) // the minimum volume: the streak starts
		}
		for i := range 9 {
			rows = append(rows, call(time.Duration(i+1)*sec, slow, StateClosed))
		}
		rows = append(rows, call(10*sec, slow, StateOpen).counts("10/0/10"))
		runMachine(t, s, nil, rows)
	})
	t.Run("429s in batches", func(t *testing.T) {
		// Ten every 2s, every one a 429: the window stays full of them,
		// and the gaps between batches do not break the streak.
		s := mset(func(s *settings) { s.minRequests, s.throttleSustain = 20, 10*sec })
		var rows []mrow
		for batch := range 6 {
			for range 10 {
				rows = append(rows, call(time.Duration(2*batch)*sec, slow, StateClosed))
			}
		}
		rows = append(rows, call(12*sec, slow, StateOpen)) // MinRequests reached at 2s: 10s sustained
		runMachine(t, s, nil, rows)
	})
	t.Run("429s that are a minority", func(t *testing.T) {
		var rows []mrow
		for i := range 30 {
			at := time.Duration(i) * sec
			rows = append(rows, call(at, slow, StateClosed), call(at, ok, StateClosed), call(at, ok, StateClosed), call(at, ok, StateClosed))
		}
		runMachine(t, mset(func(s *settings) { s.throttleSustain = 0 }), nil, rows)
	})
}

func TestBreakerOpenPeriodBacksOffToTheCap(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests, s.probesToClose = 1, 1 })
	_, log := runMachine(t, s, nil, []mrow{
		call(0, bad, StateOpen).openFor(1 * sec),
		call(1*sec, bad, StateOpen).openFor(2 * sec), // each failed probe cycle doubles it
		call(3*sec, bad, StateOpen).openFor(4 * sec),
		call(7*sec, bad, StateOpen).openFor(8 * sec), // the cap
		call(15*sec, bad, StateOpen).openFor(8 * sec),
		call(23*sec, ok, StateClosed),
		call(24*sec, bad, StateOpen).openFor(1 * sec), // closing reset the backoff
	})
	require.Len(t, log, 12, "five failed probe cycles, a close, a trip: %v", log)
}

func TestBreakerOpenPeriodFollowsRetryAfter(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests = 2 })
	for _, tc := range []struct {
		name   string
		header time.Duration
		want   time.Duration
	}{
		{"raises the base", 5 * sec, 5 * sec},
		{"never lowers it", 100 * ms, 1 * sec},
		{"is capped", time.Hour, 8 * sec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runMachine(t, s, nil, []mrow{
				call(0, bad, StateClosed).with(func(r *mrow) { r.d = tc.header }),
				call(ms, bad, StateOpen).openFor(tc.want),
			})
		})
	}
	t.Run("an old one is forgotten", func(t *testing.T) {
		runMachine(t, mset(func(s *settings) { s.minRequests = 3 }), nil, []mrow{
			call(0, slow, StateClosed).with(func(r *mrow) { r.d = time.Minute }),
			call(time.Hour, bad, StateClosed),
			call(time.Hour, bad, StateClosed),
			call(time.Hour, bad, StateOpen).openFor(sec),
		})
	})
}

func TestBreakerJitterStaysInBounds(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests, s.jitter, s.openTimeout, s.maxOpenTimeout = 1, 0.5, 10*sec, 10*sec })
	seen := map[time.Duration]bool{}
	for range 200 {
		b := newBreaker("k", &s, time.Now(), 0, nil)
		tk, _, _ := b.admit(0, &s)
		require.NotNil(t, b.count(tk, bad, 0, time.Hour)) // even when Retry-After holds it at the cap
		d := time.Duration(b.retryAt.Load())
		require.GreaterOrEqual(t, d, 10*sec)
		require.LessOrEqual(t, d, 15*sec)
		seen[d] = true
	}
	require.Greater(t, len(seen), 100, "open periods are spread out")
}

// TestBreakerShowsTheReopenAProbeTimeoutWillMake: a half-open breaker
// whose probe outlives the bound shows, without being moved, as reopened
// at the bound and then as half-open again from the end of that open
// period, jitter included: exactly as moving it then makes it.
func TestBreakerShowsTheReopenAProbeTimeoutWillMake(t *testing.T) {
	for _, jitter := range []float64{0, 0.5, 1} {
		s := mset(func(s *settings) { s.jitter, s.openTimeout, s.maxOpenTimeout = jitter, sec, 2*sec })
		for range 20 {
			b := newBreaker("k", &s, time.Now(), 0, nil)
			b.trip(0, sec, false, 0)
			tk, reason, _ := b.admit(int64(sec), &s)
			require.Equal(t, admitted, reason)
			require.NotZero(t, tk.probe, "a probe, which never ends")
			var shown stats
			bound := int64(3 * sec)
			now := int64(sec)
			for ; now <= int64(10*sec); now += int64(ms) {
				if shown, _ = b.stats(now, false); now >= bound && shown.state == StateHalfOpen {
					break
				}
				if now >= bound {
					require.Equal(t, [2]any{StateOpen, bound}, [2]any{shown.state, shown.since}, "reopened at the bound, at %v", time.Duration(now))
				}
			}
			end := shown.since // half-open from the end of the reopen, shown from the first scrape after it
			require.True(t, end > now-int64(ms) && end <= now, "half-open since %v, shown at %v", time.Duration(end), time.Duration(now))
			require.GreaterOrEqual(t, end, bound+int64(2*sec), "the reopen: 2s")
			require.LessOrEqual(t, end, bound+int64(2*sec)+int64(jitter*float64(2*sec)), "jittered by at most %v", jitter)
			moved, tr := b.stats(now, true)
			require.Equal(t, [2]any{StateHalfOpen, end}, [2]any{moved.state, moved.since}, "moving it makes what it showed")
			require.NotNil(t, tr)
			require.Equal(t, [3]any{StateHalfOpen, StateOpen, ReasonProbeTimeout}, [3]any{tr.From, tr.To, tr.Reason})
		}
	}
}

func TestBreakerHalfOpenBoundsProbes(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests, s.halfOpenProbes = 1, 2 })
	_, log := runMachine(t, s, nil, []mrow{
		call(0, bad, StateOpen),
		{at: sec, do: "admit", id: "p1", want: StateHalfOpen},
		{at: sec, do: "admit", id: "p2", want: StateHalfOpen},
		refused(sec, rejectHalfOpen, StateHalfOpen),
		{at: 2 * sec, do: "end", id: "p1", o: ign, want: StateHalfOpen}, // frees its slot, decides nothing
		{at: 2 * sec, do: "admit", id: "p3", want: StateHalfOpen},
		{at: 2 * sec, do: "end", id: "p2", o: ok, want: StateHalfOpen},
		{at: 3 * sec, do: "end", id: "p3", o: ok, want: StateClosed}, // two in a row
		call(3*sec, ok, StateClosed).counts("1/0/0"),                 // closing cleared the window
	})
	require.Equal(t, []string{"closed→open@0s", "open→half-open@1s", "half-open→closed@3s"}, log)
}

// TestBreakerProbeFailureReopens: a failed probe reopens the breaker at
// once, even after successes short of ProbesToClose, and backs off.
func TestBreakerProbeFailureReopens(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests, s.probesToClose = 1, 3 })
	runMachine(t, s, nil, []mrow{
		call(0, bad, StateOpen),
		call(sec, ok, StateHalfOpen),
		call(sec, ok, StateHalfOpen),
		call(sec, bad, StateOpen).openFor(2 * sec), // not three in a row: reopened, backed off
		refused(2*sec, rejectOpen, StateOpen),
		call(3*sec, ok, StateHalfOpen),
	})
}

// TestBreakerHungProbeReopensFromTheBound: a probe that hangs past the bound counts as
// failed when the bound passed, and the breaker reopens from that moment:
// a dependency called again long after is probed at once, not refused
// for an open period that ended long before.
func TestBreakerHungProbeReopensFromTheBound(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests = 1 })
	_, log := runMachine(t, s, nil, []mrow{
		call(0, bad, StateOpen),
		{at: sec, do: "admit", id: "hung", want: StateHalfOpen},
		refused(8*sec, rejectHalfOpen, StateHalfOpen), // the bound is the maximum open timeout, 8s
		look(9*sec, StateOpen).openFor(2 * sec).sinceAt(9 * sec),
		call(time.Hour, ok, StateHalfOpen),                                 // reopened at 9s for 2s: long over
		{at: time.Hour, do: "end", id: "hung", o: ok, want: StateHalfOpen}, // the late result decides nothing
	})
	require.Equal(t, []string{
		"closed→open@0s", "open→half-open@1s", "half-open→open@9s", "open→half-open@11s",
	}, log)
}

// TestBreakerSinceAfterAQuietHour: an open period that ended long ago
// shows as half-open since its end, not since whenever someone looked.
func TestBreakerSinceAfterAQuietHour(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests = 1 })
	runMachine(t, s, nil, []mrow{
		call(0, bad, StateOpen).sinceAt(0),
		look(time.Hour, StateHalfOpen).sinceAt(sec),
	})
}

func TestBreakerDropsStaleOutcomes(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests, s.probesToClose = 2, 1 })
	runMachine(t, s, nil, []mrow{
		{at: 0, do: "admit", id: "old", want: StateClosed},
		call(ms, bad, StateClosed),
		call(ms, bad, StateOpen),
		call(sec+ms, ok, StateClosed).counts("0/0/0"),
		{at: 2 * sec, do: "end", id: "old", o: bad, want: StateClosed}, // admitted two generations ago
		look(2*sec, StateClosed).counts("0/0/0"),
	})
}

func TestBreakerTripAndReset(t *testing.T) {
	_, log := runMachine(t, mset(nil), nil, []mrow{
		call(0, ok, StateClosed).counts("1/0/0"),
		{at: sec, do: "trip", d: time.Minute, want: StateOpen, retryIn: time.Minute}, // exactly d: no cap, no jitter
		refused(2*sec, rejectOpen, StateOpen),
		{at: 3 * sec, do: "reset", want: StateClosed, window: "0/0/0"},
		{at: 4 * sec, do: "trip", d: time.Duration(math.MaxInt64), want: StateOpen},
		refused(100*365*24*time.Hour, rejectOpen, StateOpen), // "until Reset"
	})
	require.Equal(t, []string{"closed→open@1s", "open→closed@3s", "closed→open@4s"}, log)
}

func TestBreakerFollowsFleetHints(t *testing.T) {
	_, log := runMachine(t, mset(nil), nil, []mrow{
		{at: 0, do: "hint-open", d: time.Hour, want: StateOpen, retryIn: 8 * sec},     // never past the maximum
		{at: sec, do: "hint-open", d: time.Second, want: StateOpen, retryIn: 7 * sec}, // an open breaker keeps its longer period
		{at: sec, do: "hint-open", d: time.Hour, want: StateOpen, retryIn: 8 * sec},   // and stays open up to the maximum for a longer one
		{at: 2 * sec, do: "hint-close", want: StateClosed},
		{at: 3 * sec, do: "hint-close", want: StateClosed},
		{at: 3 * sec, do: "hint-open", d: -sec, want: StateClosed}, // a time in the past
		{at: 4 * sec, do: "trip", d: time.Hour, want: StateOpen},
		{at: 5 * sec, do: "hint-close", want: StateOpen}, // an operator's trip: only a reset ends it
		{at: 6 * sec, do: "reset", want: StateClosed},
	})
	require.Equal(t, []string{"closed→open@0s", "open→closed@2s", "closed→open@4s", "open→closed@6s"}, log)
}

// leaseFleet is a fleet that answers every lease request with lease.
type leaseFleet struct{ lease Lease }

func (f leaseFleet) ProbeLease(string, time.Duration) Lease { return f.lease }

func TestBreakerProbesOnlyWithAFleetLease(t *testing.T) {
	s := mset(func(s *settings) { s.minRequests = 1 })
	runMachine(t, s, leaseFleet{LeaseDenied}, []mrow{
		call(0, bad, StateOpen),
		look(sec, StateHalfOpen),                         // due to probe, shown as such
		refused(sec, rejectOpen, StateOpen).openFor(sec), // another instance probes: ask again in a while
		refused(2*sec-ms, rejectOpen, StateOpen),
	})
	runMachine(t, s, leaseFleet{LeaseGranted}, []mrow{
		call(0, bad, StateOpen),
		call(sec, ok, StateHalfOpen),
	})
}

// TestBreakerProbeSlotsAreNotPreallocated: a breaker keeps memory for the
// probes in flight only, whatever the limit.
func TestBreakerProbeSlotsAreNotPreallocated(t *testing.T) {
	s := mset(func(s *settings) { s.halfOpenProbes = maxHalfOpenProbes })
	b := newBreaker("k", &s, time.Now(), 0, nil)
	require.Zero(t, cap(b.probes))
}

// TestBreakerKnowsNoHTTP: the state machine's files import nothing of
// net/http; the Transport turns HTTP into what the breaker takes.
func TestBreakerKnowsNoHTTP(t *testing.T) {
	for _, file := range []string{"breaker.go", "window.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			require.NotContains(t, imp.Path.Value, "net/http", file)
		}
	}
}
