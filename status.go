package httpbreaker

import (
	"encoding/json"
	"iter"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Status is a point-in-time view of one breaker, as Snapshot returns it.
type Status struct {
	// Key is the breaker's key.
	Key string
	// State is the breaker's state. An open breaker whose open period has
	// ended shows as StateHalfOpen.
	State State
	// Since is when the breaker entered State.
	Since time.Time
	// Reason is the reason of the transition that put the breaker in
	// State (ReasonTrip after a Trip of an open breaker); zero for a
	// breaker closed since it was made.
	Reason Reason
	// RetryAt is, when open, the time the next probe may go; zero
	// otherwise.
	RetryAt time.Time
	// Requests counts the outcomes in the current window, every outcome
	// but OutcomeIgnored; Failures and Throttled count those outcomes
	// among them.
	Requests, Failures, Throttled int64
	// Mode is the breaker's mode: ModeEnforce or ModeShadow (a key in
	// ModeOff has no breaker, and no Status).
	Mode Mode
	// Settings are the settings the breaker decides by: the defaults,
	// the Transport-wide options and every policy that names its key.
	Settings Settings
}

// Settings are the effective settings of one breaker, as Status shows
// them: every tunable, each the value of the option of the same name and
// of the PolicyConfig field of the same name (see the table of tunables in
// settings.go).
type Settings struct {
	Mode              Mode
	FailureRate       float64
	MinRequests       int64
	Window            time.Duration
	SlowCallThreshold time.Duration // 0: off
	OpenTimeout       time.Duration
	MaxOpenTimeout    time.Duration
	Jitter            float64
	HalfOpenProbes    int64
	ProbesToClose     int64
	ThrottleSustain   time.Duration
	MaxConcurrent     int64 // the bulkhead; 0: unlimited
	Queue             int64 // waiting places beside the bulkhead
	QueueWait         time.Duration
	CallTimeout       time.Duration // 0: none
	BodyErrors        bool
	RejectAsError     bool
	RetryBudget       RetryBudget // zero: none
}

// FailureRate is Failures/Requests, or 0 with no requests. 429s are not
// in it; they count toward tripping only when sustained.
func (s Status) FailureRate() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Failures) / float64(s.Requests)
}

// Snapshot returns the status of every live breaker, sorted by key.
func (t *Transport) Snapshot() []Status {
	now := t.now()
	var out []Status
	var trs []*transition
	t.eachBreaker(func(c *circuit) bool {
		st, tr := c.b.stats(now, true)
		out = append(out, t.status(c, &st))
		if tr != nil {
			trs = append(trs, tr)
		}
		return true
	})
	for _, tr := range trs {
		t.notify(tr)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// States yields the key and state of every live breaker, as the
// Prometheus collector reads them (see WithMetrics): in no particular
// order, each key once, the breakers of keys in ModeOff left out. It
// yields what State would report for each key, but only reads: an open
// breaker whose open period has ended yields StateHalfOpen and stays
// open until a call or State finds it so, and no hook or observer runs.
// It is for exporters that read state when they are asked, at a metrics
// collection (see Attacher), and takes each breaker's lock in turn, not
// for the request path.
func (t *Transport) States() iter.Seq2[string, State] {
	return func(yield func(string, State) bool) {
		now := t.now()
		t.eachBreaker(func(c *circuit) bool { return yield(c.key(), c.b.displayed(now)) })
	}
}

// eachBreaker calls f for each live breaker, each key once, until f
// returns false: what Snapshot, States and the metrics show. A key in
// ModeOff has a circuit (which says so) but no breaker to show.
func (t *Transport) eachBreaker(f func(*circuit) bool) {
	t.breakers.eachKey(t.maxBreakers, func(c *circuit) bool {
		return c.pol.Load().mode == ModeOff || f(c)
	})
}

// status is the Status of circuit c whose breaker's stats are st.
func (t *Transport) status(c *circuit, st *stats) Status {
	p := c.pol.Load()
	s := Status{
		Key:       c.key(),
		State:     st.state,
		Since:     wall(t.epoch, st.since),
		Reason:    st.reason,
		Requests:  st.window.requests(),
		Failures:  st.window[OutcomeFailure],
		Throttled: st.window[OutcomeThrottled],
		Mode:      p.mode,
		Settings:  p.effective(),
	}
	if st.state == StateOpen {
		s.RetryAt = wall(t.epoch, st.retryAt)
	}
	return s
}

// statusJSON is one breaker in StatusHandler's output.
type statusJSON struct {
	Key         string       `json:"key"`
	State       State        `json:"state"`
	Since       time.Time    `json:"since"`
	Reason      Reason       `json:"reason,omitzero"`
	RetryAt     *time.Time   `json:"retry_at,omitempty"`
	Requests    int64        `json:"requests"`
	Failures    int64        `json:"failures"`
	Throttled   int64        `json:"throttled"`
	FailureRate float64      `json:"failure_rate"`
	Mode        Mode         `json:"mode"`
	Settings    PolicyConfig `json:"settings"` // every field set
}

// StatusHandler returns a handler that serves Snapshot as JSON, each
// breaker's settings under the declarative form's names and in its
// formats (see Config), every tunable included; "reason" is left out for
// a breaker closed since it was made, and "retry_at" unless it is open
// (served indented, one field per line; compacted here):
//
//	{"breakers":[{"key":"api.example.com","state":"open","since":"…","reason":"failure_rate","retry_at":"…",
//	  "requests":40,"failures":31,"throttled":0,"failure_rate":0.775,"mode":"enforce",
//	  "settings":{"mode":"enforce","failure_rate":0.5,"min_requests":20,"window":"10s",
//	    "slow_call_threshold":"0s","open_timeout":"5s","max_open_timeout":"1m0s","jitter":0.2,
//	    "half_open_probes":1,"probes_to_close":3,"throttle_sustain":"10s","max_concurrent":0,
//	    "queue":0,"queue_wait":"0s","call_timeout":"0s","body_errors":false,"reject_as_error":false,
//	    "retry_budget":{"ratio":0,"min_per_second":0}}}]}
//
// It names hosts, routes and states: mount it on an internal admin port
// only, never on a mux that serves the public. It answers GET and HEAD;
// other methods get 405.
func (t *Transport) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		snap := t.Snapshot()
		out := struct {
			Breakers []statusJSON `json:"breakers"`
		}{Breakers: make([]statusJSON, 0, len(snap))}
		for _, s := range snap {
			j := statusJSON{
				Key: s.Key, State: s.State, Since: s.Since, Reason: s.Reason,
				Requests: s.Requests, Failures: s.Failures, Throttled: s.Throttled,
				FailureRate: s.FailureRate(),
				Mode:        s.Mode, Settings: s.Settings.file(),
			}
			if !s.RetryAt.IsZero() {
				j.RetryAt = &s.RetryAt
			}
			out.Breakers = append(out.Breakers, j)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodHead {
			return
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	})
}

// stats is what Snapshot, the status page and metrics read of a breaker,
// all at once, as of one clock time.
type stats struct {
	state       State  // as displayLocked shows it
	since       int64  // clock time it entered state
	reason      Reason // why it is in state
	retryAt     int64  // clock time an open breaker lets probes go; 0 otherwise
	window      counts
	totals      counts
	transitions [numTransitionKinds]int64
	open        time.Duration // time spent open, never decreasing
	probes      [numProbeResults]int64
}

// displayed is the state b shows at clock time now, without moving it
// (see displayLocked); a closed breaker's without its lock.
func (b *breaker) displayed(now int64) State {
	if s := stateOf(b.word.Load()); s == StateClosed {
		return s
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, _, _ := b.displayLocked(now)
	return s
}

// stats returns b's stats as of clock time now, applying any transition
// time alone has caused (advance false only reads: a scrape changes
// nothing).
func (b *breaker) stats(now int64, advance bool) (stats, *transition) {
	var st stats
	var tr *transition
	b.mu.Lock()
	if advance {
		tr = b.queueLocked(b.advanceLocked(now, b.cfg.Load(), false))
	}
	st.state, st.since, st.reason = b.displayLocked(now)
	if st.state == StateOpen {
		st.retryAt = b.retryAt.Load()
	}
	st.transitions = b.transitions
	st.probes = b.results
	st.open = time.Duration(b.openTotalLocked(now))
	b.mu.Unlock()
	st.window = b.win.sums(now)
	st.totals = b.win.totals()
	return st, tr
}
