package httpbreaker

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Regression tests for defects a review found, each failing before its
// fix.

// R2: ModeOff keys take breaker slots: with the cap reached by off
// keys, an enforcing key gets no breaker and its failures protect no one.
func TestReviewOffKeysTakeBreakerSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithMaxBreakers(1), WithMinRequests(5),
			WithPolicy("off.test", WithMode(ModeOff)))
		_, _ = get(t, tr, "http://off.test/")
		for range 20 {
			_, _ = get(t, tr, testURL)
		}
		require.Equal(t, StateOpen, tr.State(testKey), "ModeOff means no breaker, yet off.test holds the only slot")
	})
}

// R3: a fleet hint opens the breaker of a key in ModeOff: State reports
// open and the state-change hook fires for a key that has no breaker.
func TestReviewOffKeyTakesHints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		log := &transitionLog{}
		tr := New(newDep(200), WithStore(s), onStateChange(log.hook),
			WithPolicy("off.test", WithMode(ModeOff)))
		_, _ = get(t, tr, "http://off.test/")
		s.publish(Hint{Key: "off.test", State: StateOpen, RetryAt: time.Now().Add(time.Minute)})
		require.Equal(t, StateClosed, tr.State("off.test"), "DESIGN: State reports closed")
		require.Empty(t, log.list(), "no breaker, no transition")
	})
}

// R4: a wildcard with a port never matches even its own example key, so
// newPolicies checks nothing for it: an invalid option inside does not
// panic, and the policy silently applies to no breaker.
func TestReviewWildcardWithPortUnchecked(t *testing.T) {
	require.Panics(t, func() {
		New(newDep(200), WithPolicy("*.internal:8443", WithFailureRate(7)))
	}, "an invalid option inside WithPolicy must make New panic")
}

// R5: selectors are lower-cased, keys from a custom KeyFunc are not: a
// selector naming a KeyFunc key with upper case never matches it.
func TestReviewSelectorForMixedCaseCustomKey(t *testing.T) {
	tr := New(newDep(200), WithKeyFunc(func(*http.Request) string { return "Billing" }),
		WithPolicy("Billing", WithMinRequests(3)))
	_, _ = get(t, tr, testURL)
	s := tr.Snapshot()
	require.Len(t, s, 1)
	require.EqualValues(t, 3, s[0].Settings.MinRequests, "the policy of the key the KeyFunc returns")
}

var _ = context.Background

// R6: a probe that outlives the probe bound but returns before anything
// asks the breaker (no admission, State or Snapshot in between) is
// counted as a success and closes the breaker, instead of counting as
// failed when the bound passed.
func TestReviewLateProbeAfterBoundCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		log := &transitionLog{}
		tr := New(d, WithOpenTimeout(time.Second), WithMaxOpenTimeout(2*time.Second), WithJitter(0),
			WithProbesToClose(1), onStateChange(log.hook))
		tr.Trip(testKey, time.Second)
		time.Sleep(time.Second)
		d.mu.Lock()
		d.delay = 5 * time.Second // the probe takes 5s; the bound is 2s
		d.mu.Unlock()
		_, err := get(t, tr, testURL)
		require.NoError(t, err)
		require.Equal(t, []string{
			testKey + ": closed→open", testKey + ": open→half-open",
			testKey + ": half-open→open", // at the bound, 2s after the probe went
		}, log.list()[:3], "the late probe must not close the breaker")
	})
}

// R7: in ModeShadow a call the breaker would refuse goes to next without
// the call timeout: when the dependency hangs and the shadow breaker is
// open, calls hang for the caller's whole deadline.
func TestReviewShadowSkipsCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithCallTimeout(100*time.Millisecond), WithMode(ModeShadow))
		d.hangUntilDone()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		_, _ = getCtx(t, ctx, tr, testURL)
		require.Equal(t, 100*time.Millisecond, time.Since(start), "admitted: call timeout applies")
		tr.Trip(testKey, time.Minute)
		start = time.Now()
		_, _ = getCtx(t, ctx, tr, testURL)
		require.Equal(t, 100*time.Millisecond, time.Since(start), "would-be-refused: call timeout skipped")
	})
}

// R8: past the cap, a key in ModeOff falls back to its host's enforcing
// breaker: the off route is counted and refused.
func TestReviewOffRouteFallsBackToEnforcingHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := New(d, WithRoutes("/off"), WithMaxBreakers(1), WithMinRequests(5),
			WithPolicy("api.test /off", WithMode(ModeOff)))
		for range 5 {
			_, _ = get(t, tr, "http://api.test/other") // the host key: trips
		}
		require.Equal(t, StateOpen, tr.State("api.test"))
		d.set(200, nil)
		resp, err := get(t, tr, "http://api.test/off")
		require.NoError(t, err)
		require.False(t, IsRejected(resp), "ModeOff: requests go straight to next")
	})
}

// R9: selectors are lower-cased ASCII-only, HostKey with strings.ToLower.
func TestReviewSelectorUnicodeCase(t *testing.T) {
	tr := New(newDep(200), WithPolicy("ÄPI.test", WithMinRequests(3)))
	_, err := get(t, tr, "http://ÄPI.test/")
	require.NoError(t, err)
	s := tr.Snapshot()
	require.Len(t, s, 1)
	require.Equal(t, "äpi.test", s[0].Key)
	require.EqualValues(t, 3, s[0].Settings.MinRequests, "selector host lower-cased as HostKey does")
}

// R10: a "*" inside a whole-key selector does not panic.
func TestReviewStarInWholeKeySelector(t *testing.T) {
	require.Panics(t, func() { New(nil, WithPolicy("api.test GET /v1/*", WithMinRequests(3))) })
}

// R12: a scrape shows a half-open breaker whose probe outlived the bound
// as half-open (stale), while State at the same instant says open.
func TestReviewScrapeStaleAfterProbeBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.hangUntilDone()
		reg := prometheus.NewPedanticRegistry()
		tr := New(d, WithMetrics(reg), WithOpenTimeout(time.Second), WithMaxOpenTimeout(2*time.Second), WithJitter(0))
		tr.Trip(testKey, time.Second)
		time.Sleep(time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _, _ = getCtx(t, ctx, tr, testURL) }() // the probe hangs
		synctest.Wait()
		time.Sleep(3 * time.Second) // past the bound (2s); reopened for 2s, so still open
		scraped := gaugeValue(t, reg, "breaker_state", `state="half-open"`)
		require.Equal(t, StateOpen, tr.State(testKey))
		cancel()
		synctest.Wait()
		require.Zero(t, scraped, "the scrape said half-open at the instant State said open")
	})
}
