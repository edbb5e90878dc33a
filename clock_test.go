package httpbreaker

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestClockArithmeticSaturates(t *testing.T) {
	const maxD = time.Duration(math.MaxInt64)
	require.Equal(t, int64(math.MaxInt64), later(5, maxD))
	require.Equal(t, int64(math.MaxInt64), later(math.MaxInt64, 1))
	require.Equal(t, int64(15), later(5, 10))
	require.Equal(t, int64(math.MinInt64), later(-5, time.Duration(math.MinInt64)))
	require.Equal(t, maxD, doubled(maxD/2+1))
	require.Equal(t, 4*time.Second, doubled(2*time.Second))
	require.Equal(t, maxD, scaled(maxD, 0.2*5+0.5))
	require.Equal(t, time.Second, scaled(5*time.Second, 0.2))
	epoch := time.Now()
	require.True(t, wall(epoch, math.MaxInt64).After(epoch), "the clock's end is in the future")
	require.Less(t, time.Time{}.Sub(epoch), time.Duration(0), "the zero deadline left no budget")
	require.Equal(t, maxD, time.Unix(1<<62, 0).Sub(epoch), "a far deadline is very long")
}

// longest is the longest duration every duration option accepts, and
// longestText its declarative form.
const (
	longest     = time.Duration(math.MaxInt64)
	longestText = "2562047h47m16.854775807s"
)

// fileOptions is the options of a declarative configuration; a
// duration written as longestText must survive decoding and encoding.
func fileOptions(t *testing.T, doc string) []Option {
	t.Helper()
	c, err := ParseConfig([]byte(doc))
	require.NoError(t, err)
	out, err := json.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(out), longestText, "the longest duration round-trips")
	opts, err := c.Options()
	require.NoError(t, err)
	return opts
}

// TestLongestDurationsMeanVeryLong: every duration option, and Trip's d,
// at time.Duration(math.MaxInt64) means "very long", never "already
// passed", given in Go or in the declarative form. Each case starts a
// second after New, so that the Transport's clock is past zero and
// now + d overflows where it is not saturated.
func TestLongestDurationsMeanVeryLong(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []Option
		file  string // the same settings in the declarative form; "" for none
		check func(t *testing.T, tr *Transport, d *dep)
	}{{
		name: "WithCallTimeout: a healthy dependency never trips",
		opts: []Option{WithCallTimeout(longest), WithMinRequests(1)},
		file: `{"call_timeout": "` + longestText + `", "min_requests": 1}`,
		check: func(t *testing.T, tr *Transport, d *dep) {
			for i := range 30 {
				requireAnswers(t, tr, http.StatusOK)
				require.Equal(t, StateClosed, tr.State(testKey), "call %d", i+1)
			}
			d.mu.Lock()
			d.delay = 1000 * time.Hour
			d.mu.Unlock()
			requireAnswers(t, tr, http.StatusOK) // a slow call is not cut
			require.Equal(t, StateClosed, tr.State(testKey))
			require.Zero(t, d.nearDeadlines.Load(), "the call timeout set a deadline the clock reaches")
			require.EqualValues(t, 31, d.calls.Load())
		},
	}, {
		name: "WithMaxOpenTimeout: probes still close the breaker",
		opts: []Option{WithMinRequests(1), WithOpenTimeout(time.Second), WithMaxOpenTimeout(longest), WithJitter(0), WithProbesToClose(3)},
		file: `{"min_requests": 1, "open_timeout": "1s", "max_open_timeout": "` + longestText + `", "jitter": 0, "probes_to_close": 3}`,
		check: func(t *testing.T, tr *Transport, d *dep) {
			d.set(http.StatusInternalServerError, nil)
			_, _ = get(t, tr, testURL)
			require.Equal(t, StateOpen, tr.State(testKey))
			time.Sleep(time.Second)
			d.set(http.StatusOK, nil)
			for i := range 3 {
				require.Equal(t, StateHalfOpen, tr.State(testKey), "before probe %d", i+1)
				requireAnswers(t, tr, http.StatusOK)
			}
			require.Equal(t, StateClosed, tr.State(testKey), "three good probes close it")
		},
	}, {
		name: "WithMaxOpenTimeout: a failed probe backs off",
		opts: []Option{WithMinRequests(1), WithOpenTimeout(time.Second), WithMaxOpenTimeout(longest), WithJitter(0)},
		file: `{"min_requests": 1, "open_timeout": "1s", "max_open_timeout": "` + longestText + `", "jitter": 0}`,
		check: func(t *testing.T, tr *Transport, d *dep) {
			d.set(http.StatusInternalServerError, nil)
			_, _ = get(t, tr, testURL)
			require.Equal(t, time.Second, openFor(t, tr))
			time.Sleep(time.Second)
			requireAnswers(t, tr, http.StatusInternalServerError) // the probe fails
			require.Equal(t, 2*time.Second, openFor(t, tr), "backed off: doubled")
			requireRefused(t, tr, "2")
			time.Sleep(2 * time.Second)
			requireAnswers(t, tr, http.StatusInternalServerError)
			require.Equal(t, 4*time.Second, openFor(t, tr), "doubled again")
		},
	}, {
		name:  "WithOpenTimeout and WithMaxOpenTimeout: open until the clock's end",
		opts:  []Option{WithMinRequests(1), WithOpenTimeout(longest), WithMaxOpenTimeout(longest)}, // default jitter: saturates too
		file:  `{"min_requests": 1, "open_timeout": "` + longestText + `", "max_open_timeout": "` + longestText + `"}`,
		check: checkOpenForever,
	}, {
		name:  "WithOpenTimeout alone: open until the clock's end",
		opts:  []Option{WithMinRequests(1), WithOpenTimeout(longest), WithJitter(1)},
		file:  `{"min_requests": 1, "open_timeout": "` + longestText + `", "jitter": 1}`,
		check: checkOpenForever,
	}, {
		name: "WithSlowCallThreshold: no call is slow",
		opts: []Option{WithMinRequests(1), WithSlowCallThreshold(longest)},
		file: `{"min_requests": 1, "slow_call_threshold": "` + longestText + `"}`,
		check: func(t *testing.T, tr *Transport, d *dep) {
			d.mu.Lock()
			d.delay = 1000 * time.Hour
			d.mu.Unlock()
			for i := range 5 {
				requireAnswers(t, tr, http.StatusOK)
				require.Equal(t, StateClosed, tr.State(testKey), "call %d", i+1)
			}
			s := tr.Snapshot()[0]
			require.Positive(t, s.Requests)
			require.Zero(t, s.Failures)
		},
	}, {
		name: "WithThrottleSustain: 429s never trip",
		opts: []Option{WithMinRequests(1), WithThrottleSustain(longest)},
		file: `{"min_requests": 1, "throttle_sustain": "` + longestText + `"}`,
		check: func(t *testing.T, tr *Transport, d *dep) {
			d.set(http.StatusTooManyRequests, nil)
			for i := range 300 { // 30s of nothing but 429s: three default windows
				requireAnswers(t, tr, http.StatusTooManyRequests)
				require.Equal(t, StateClosed, tr.State(testKey), "429 %d", i+1)
				time.Sleep(100 * time.Millisecond)
			}
			require.Positive(t, tr.Snapshot()[0].Throttled)
		},
	}, {
		name: "WithWindow: outcomes stay in the window",
		opts: []Option{WithMinRequests(4), WithWindow(longest)},
		file: `{"min_requests": 4, "window": "` + longestText + `"}`,
		check: func(t *testing.T, tr *Transport, d *dep) {
			d.set(http.StatusInternalServerError, nil)
			for i := range 3 {
				requireAnswers(t, tr, http.StatusInternalServerError)
				time.Sleep(24 * time.Hour)
				require.Equal(t, StateClosed, tr.State(testKey), "failure %d", i+1)
			}
			s := tr.Snapshot()[0]
			require.EqualValues(t, 3, s.Requests, "three days later, all three are in the window")
			require.EqualValues(t, 3, s.Failures)
			requireAnswers(t, tr, http.StatusInternalServerError)
			require.Equal(t, StateOpen, tr.State(testKey), "the fourth trips it")
		},
	}, {
		name: "WithQueue: a waiter waits for its place",
		opts: []Option{WithMaxConcurrent(1), WithQueue(1, longest)},
		file: `{"max_concurrent": 1, "queue": 1, "queue_wait": "` + longestText + `"}`,
		check: func(t *testing.T, tr *Transport, d *dep) {
			d.block()
			first, second := make(chan *http.Response, 1), make(chan *http.Response, 1)
			go func() { r, _ := get(t, tr, testURL); first <- r }()
			synctest.Wait()
			go func() { r, _ := get(t, tr, testURL); second <- r }()
			synctest.Wait()
			time.Sleep(1000 * time.Hour)
			synctest.Wait()
			require.Empty(t, second, "the waiter was refused: its maximum wait passed at once")
			d.release()
			for _, ch := range []chan *http.Response{first, second} {
				r := <-ch
				require.NotNil(t, r)
				require.False(t, IsRejected(r))
				require.Equal(t, http.StatusOK, r.StatusCode)
			}
			require.EqualValues(t, 2, d.calls.Load())
		},
	}, {
		name: "Trip: open until Reset",
		check: func(t *testing.T, tr *Transport, d *dep) {
			tr.Trip(testKey, longest)
			require.Equal(t, StateOpen, tr.State(testKey))
			requireRefused(t, tr, "3600")
			time.Sleep(1000 * time.Hour)
			require.Equal(t, StateOpen, tr.State(testKey), "1000h later")
			requireRefused(t, tr, "3600")
			require.True(t, tr.Snapshot()[0].RetryAt.After(time.Now().Add(century)))
			require.Zero(t, d.calls.Load())
			tr.Reset(testKey)
			requireAnswers(t, tr, http.StatusOK)
		},
	}} {
		forms := map[string][]Option{"Go": tc.opts}
		if tc.file != "" {
			forms["file"] = fileOptions(t, tc.file)
		}
		for form, opts := range forms {
			t.Run(tc.name+"/"+form, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					d := newDep(http.StatusOK)
					tr := New(d, opts...)
					time.Sleep(time.Second)
					tc.check(t, tr, d)
				})
			})
		}
	}
}

// checkOpenForever: a breaker whose open period the clock cannot reach
// trips, stays open, refuses with Retry-After: 3600 and never probes.
func checkOpenForever(t *testing.T, tr *Transport, d *dep) {
	d.set(http.StatusInternalServerError, nil)
	_, _ = get(t, tr, testURL)
	require.Equal(t, StateOpen, tr.State(testKey))
	requireRefused(t, tr, "3600")
	time.Sleep(1000 * time.Hour)
	require.Equal(t, StateOpen, tr.State(testKey), "1000h later")
	requireRefused(t, tr, "3600")
	s := tr.Snapshot()[0]
	require.True(t, s.RetryAt.After(time.Now().Add(century)), "RetryAt %v", s.RetryAt)
	require.EqualValues(t, 1, d.calls.Load(), "no probe went")
}

// TestLongestDurationsInAnyCombinationNeverPanic runs one scenario —
// failures, 429s with an enormous Retry-After, long sleeps, caller
// deadlines at both ends, Trip until Reset, Reset, Update, Snapshot, the
// status page, Health and a metrics scrape — under every combination of
// duration options at time.Duration(math.MaxInt64), with and without
// the widest jitter. Nothing panics, no call fails, and every refusal
// says a Retry-After between 1 and 3600.
func TestLongestDurationsInAnyCombinationNeverPanic(t *testing.T) {
	extremes := []Option{
		WithWindow(longest), WithSlowCallThreshold(longest), WithOpenTimeout(longest),
		WithMaxOpenTimeout(longest), WithThrottleSustain(longest), WithCallTimeout(longest),
		WithQueue(1, longest),
	}
	for mask := range 1 << len(extremes) {
		for _, jitter := range []float64{0.2, 1} {
			opts := []Option{WithMinRequests(2), WithMaxConcurrent(4), WithJitter(jitter)}
			for i, o := range extremes {
				if mask&(1<<i) != 0 {
					opts = append(opts, o)
				}
			}
			t.Run(strconv.Itoa(mask)+"/jitter="+strconv.FormatFloat(jitter, 'g', -1, 64), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { extremeScenario(t, opts) })
			})
		}
	}
}

func extremeScenario(t *testing.T, opts []Option) {
	d := newDep(http.StatusInternalServerError)
	reg := prometheus.NewRegistry()
	tr := New(d, append(opts, WithMetrics(reg))...)
	time.Sleep(time.Second)

	call := func(ctx context.Context, expired bool) {
		t.Helper()
		resp, err := getCtx(t, ctx, tr, testURL)
		if expired {
			if err != nil {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				return
			}
		} else {
			require.NoError(t, err)
		}
		if IsRejected(resp) {
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err)
			require.GreaterOrEqual(t, secs, 1)
			require.LessOrEqual(t, secs, 3600)
		}
	}
	calls := func(n int) {
		t.Helper()
		for range n {
			call(context.Background(), false)
		}
	}
	look := func() {
		t.Helper()
		for _, s := range tr.Snapshot() {
			if s.State == StateOpen {
				require.False(t, s.RetryAt.Before(s.Since), "open until %v, since %v", s.RetryAt, s.Since)
			}
		}
		rec := httptest.NewRecorder()
		tr.StatusHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.True(t, json.Valid(rec.Body.Bytes()))
		_ = tr.Health(testKey)
		_ = tr.State(testKey)
		_, err := reg.Gather()
		require.NoError(t, err)
	}

	calls(5)
	look()
	time.Sleep(time.Hour)
	d.set(http.StatusTooManyRequests, nil)
	d.setHeader(http.Header{"Retry-After": {"999999999999999999999"}})
	calls(5)
	look()
	d.setHeader(http.Header{"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"}})
	d.set(http.StatusServiceUnavailable, nil)
	calls(5)
	look()
	time.Sleep(1000 * time.Hour)
	d.setHeader(nil)
	d.set(http.StatusOK, nil)
	calls(5)
	look()

	for _, dl := range []time.Time{{}, time.Unix(-1<<62, 0), time.Unix(1<<62, 0)} {
		ctx, cancel := context.WithDeadline(context.Background(), dl)
		call(ctx, dl.Before(time.Now()))
		cancel()
	}
	tr.Trip(testKey, longest)
	calls(2)
	look()
	time.Sleep(1000 * time.Hour)
	calls(2)
	tr.Trip(testKey, longest) // a Trip of an open breaker
	tr.Reset(testKey)
	calls(2)
	tr.Trip(testKey, time.Nanosecond)
	time.Sleep(time.Millisecond)
	calls(2)
	require.NoError(t, tr.Update(opts...))
	d.set(http.StatusInternalServerError, nil)
	calls(5)
	time.Sleep(1000 * time.Hour)
	calls(5)
	look()
}

// TestLaterSaturatesOnlyAtTheClocksEnds: later adds d to a clock time,
// either way, and saturates only a sum the clock cannot hold.
func TestLaterSaturatesOnlyAtTheClocksEnds(t *testing.T) {
	for _, tc := range []struct {
		now  int64
		d    time.Duration
		want int64
	}{
		{10, 5, 15},
		{10, -5, 5},
		{10, math.MinInt64, 10 + math.MinInt64},
		{0, math.MinInt64, math.MinInt64},
		{-10, math.MinInt64, math.MinInt64},
		{-10, -5, -15},
		{-10, 5, -5},
		{math.MinInt64, math.MaxInt64, -1},
		{math.MaxInt64 - 1, 5, never},
		{10, math.MaxInt64, never},
	} {
		require.Equal(t, tc.want, later(tc.now, tc.d), "later(%d, %d)", tc.now, tc.d)
	}
}
