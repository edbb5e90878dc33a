//go:build unix

package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/httpbreaker/httpbreaker"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The settings files of the tests: before a reload, and after it. Jitter
// is off and the open timeout long, so that an open breaker stays open,
// with a Retry-After of exactly 3600, for the whole test; the window is
// long, so that no count expires during it.
const (
	before = `{
  "min_requests": 10,
  "window": "1m",
  "open_timeout": "1h",
  "jitter": 0,
  "policies": {"inventory.internal": {"min_requests": 3}}
}`
	after = `{
  "min_requests": 10,
  "window": "1m",
  "open_timeout": "1h",
  "jitter": 0,
  "policies": {
    "inventory.internal": {"min_requests": 3, "open_timeout": "30m"},
    "pricing.internal": {"min_requests": 3}
  }
}`
)

// fixture is a service on its settings file, calling both dependencies on
// loopback, with its log in a buffer.
type fixture struct {
	deps *dependencies
	s    *service
	path string
	log  *syncBuffer
}

// newFixture writes settings to a file and starts the dependencies, both
// failing, and a service on that file; the test's cleanup stops them.
func newFixture(t *testing.T, settings string) *fixture {
	t.Helper()
	f := &fixture{path: filepath.Join(t.TempDir(), "breakers.json"), log: &syncBuffer{}}
	f.write(t, settings)
	f.deps = startDependencies()
	t.Cleanup(f.deps.close)
	f.deps.inventory.failing.Store(true)
	f.deps.pricing.failing.Store(true)
	s, err := newService(f.path, f.deps.transport(), slog.New(slog.NewTextHandler(f.log, nil)))
	require.NoError(t, err)
	t.Cleanup(s.close)
	f.s = s
	return f
}

// write replaces the settings file with data.
func (f *fixture) write(t *testing.T, data string) {
	t.Helper()
	require.NoError(t, os.WriteFile(f.path, []byte(data), 0o644))
}

// fail makes n calls to url, each of which must reach the dependency and
// fail.
func (f *fixture) fail(t *testing.T, url string, n int) {
	t.Helper()
	for i := range n {
		require.Equal(t, "failed (500 Internal Server Error)", f.s.call(context.Background(), url), "call %d", i+1)
	}
}

// retryAfter GETs inventory.internal, whose breaker must refuse the call
// with its synthetic 503, and returns the 503's Retry-After.
func retryAfter(t *testing.T, s *service) string {
	t.Helper()
	resp, err := s.client.Get(inventoryURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.True(t, httpbreaker.IsRejected(resp), "a synthetic 503, got %s", resp.Status)
	return resp.Header.Get("Retry-After")
}

// status is key's Status in tr's Snapshot.
func status(t *testing.T, tr *httpbreaker.Transport, key string) httpbreaker.Status {
	t.Helper()
	for _, st := range tr.Snapshot() {
		if st.Key == key {
			return st
		}
	}
	require.FailNow(t, "no breaker", key)
	return httpbreaker.Status{}
}

// TestReloadMidTraffic changes the settings file while traffic runs and
// reloads it: inventory.internal's breaker, open, stays open with the
// same Retry-After and RetryAt, although its open timeout changed; and
// pricing.internal's new min_requests (10 → 3) decides its next trip,
// counting the failures its window already holds.
func TestReloadMidTraffic(t *testing.T) {
	f := newFixture(t, before)
	f.fail(t, inventoryURL, 3)
	require.Equal(t, httpbreaker.StateOpen, f.s.tr.State(inventoryHost), "min_requests 3")
	ra := retryAfter(t, f.s)
	require.Equal(t, "3600", ra)
	retryAt := status(t, f.s.tr, inventoryHost).RetryAt

	f.fail(t, pricingURL, 3)
	p := status(t, f.s.tr, pricingHost)
	require.Equal(t, httpbreaker.StateClosed, p.State, "3 failures of the 10 min_requests asks for")
	require.EqualValues(t, 3, p.Failures)
	require.EqualValues(t, 10, p.Settings.MinRequests)

	traffic := startTraffic(f.s, 2, ra)
	<-traffic.after(20)
	f.write(t, after)
	require.NoError(t, f.s.reload())
	<-traffic.after(20)
	require.Empty(t, traffic.stop(), "every call to inventory.internal, across the reload, refused with Retry-After %s", ra)

	inv := status(t, f.s.tr, inventoryHost)
	require.Equal(t, httpbreaker.StateOpen, inv.State, "an open breaker stays open")
	require.Equal(t, retryAt, inv.RetryAt, "with the open period it had")
	require.Equal(t, ra, retryAfter(t, f.s), "and the same Retry-After")
	require.Equal(t, 30*time.Minute, inv.Settings.OpenTimeout, "although its open timeout is new")

	p = status(t, f.s.tr, pricingHost)
	require.Equal(t, httpbreaker.StateClosed, p.State, "Update decides nothing by itself")
	require.EqualValues(t, 3, p.Failures, "the window is kept")
	require.EqualValues(t, 3, p.Settings.MinRequests)
	f.fail(t, pricingURL, 1)
	require.Equal(t, httpbreaker.StateOpen, f.s.tr.State(pricingHost), "the new min_requests decides the next trip")
	require.Equal(t, "12.90 (cached)", f.s.call(context.Background(), pricingURL), "the code's fallback passed again with the file")

	log := f.log.String()
	require.Contains(t, log, `msg="httpbreaker: setting changed" selector=pricing.internal setting=min_requests from=10 to=3`)
	require.Contains(t, log, `msg="httpbreaker: setting changed" selector=inventory.internal setting=open_timeout from=1h0m0s to=30m0s`)
	require.Contains(t, log, `level=INFO msg="reload: settings applied"`)
	require.NotContains(t, log, "fallback", "no setting changed but those of the file")
}

// TestWithoutReloadNoTrip is the control of TestReloadMidTraffic: under
// the old settings, the same four failures do not trip pricing.internal.
func TestWithoutReloadNoTrip(t *testing.T) {
	f := newFixture(t, before)
	f.fail(t, pricingURL, 4)
	require.Equal(t, httpbreaker.StateClosed, f.s.tr.State(pricingHost))
}

// TestBadFileIgnored: a file that does not read, decode or validate is
// logged at Error and ignored; the settings stay, and so does every
// breaker's state.
func TestBadFileIgnored(t *testing.T) {
	f := newFixture(t, before)
	f.fail(t, inventoryURL, 3)
	f.fail(t, pricingURL, 2)
	ra := retryAfter(t, f.s)
	was := f.s.tr.Snapshot()
	require.Len(t, was, 2)

	for _, tc := range []struct {
		name, file, want string
	}{
		{"half-written", before[:len(before)/2], "unexpected end of JSON input"},
		{"empty", "", "unexpected end of JSON input"},
		{"invalid JSON", `{"min_requests": 3,}`, "invalid character"},
		{"a rate of 1.5", `{"policies": {"pricing.internal": {"failure_rate": 1.5}}}`, `policies["pricing.internal"].failure_rate`},
		{"an unknown field", `{"min_request": 3}`, `unknown field "min_request"`},
		{"an unknown field in a policy", `{"policies": {"pricing.internal": {"open_timout": "1m"}}}`, `policies["pricing.internal"]: unknown field "open_timout"`},
		{"an unknown mode", `{"mode": "Shadow"}`, `unknown mode "Shadow"`},
		{"a negative duration", `{"window": "-1s"}`, "window"},
		{"a maximum open timeout shorter than the open timeout", `{"open_timeout": "2m", "max_open_timeout": "1m"}`, "max_open_timeout: must be at least open_timeout (2m0s)"},
		{"a missing file", "", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "a missing file" {
				require.NoError(t, os.Remove(f.path))
			} else {
				f.write(t, tc.file)
			}
			mark := f.log.Len()
			err := f.s.reload()
			require.ErrorContains(t, err, tc.want)
			t.Logf("refused: %v", err)
			require.Equal(t, was, f.s.tr.Snapshot(), "the settings and every breaker's state stay")
			require.Equal(t, ra, retryAfter(t, f.s))

			log := f.log.String()[mark:]
			require.Contains(t, log, `level=ERROR msg="reload: settings file refused; the old settings stay"`)
			require.Contains(t, log, "file="+f.path)
			require.NotContains(t, log, "setting changed")
		})
	}

	// A good file after the bad ones applies.
	f.write(t, after)
	require.NoError(t, f.s.reload())
	require.EqualValues(t, 3, status(t, f.s.tr, pricingHost).Settings.MinRequests)
}

// TestReloadOnSIGHUP sends the test process a real SIGHUP: the service
// reloads, keeping the open breaker's open period; a bad file sent the
// same way is refused.
func TestReloadOnSIGHUP(t *testing.T) {
	f := newFixture(t, before)
	f.deps.pricing.failing.Store(false)
	require.Equal(t, "12.90", f.s.call(context.Background(), pricingURL))
	f.fail(t, inventoryURL, 3)
	ra := retryAfter(t, f.s)
	retryAt := status(t, f.s.tr, inventoryHost).RetryAt

	results := make(chan error, 1)
	stop := sync.OnceFunc(f.s.reloadOnSIGHUP(func(err error) { results <- err })) // signal.Notify is set
	t.Cleanup(stop)
	hup := func() error {
		t.Helper()
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
		select {
		case err := <-results:
			return err
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no reload after SIGHUP")
			return nil
		}
	}

	f.write(t, after)
	require.NoError(t, hup())
	require.EqualValues(t, 3, status(t, f.s.tr, pricingHost).Settings.MinRequests)
	inv := status(t, f.s.tr, inventoryHost)
	require.Equal(t, 30*time.Minute, inv.Settings.OpenTimeout)
	require.Equal(t, retryAt, inv.RetryAt)
	require.Equal(t, ra, retryAfter(t, f.s))

	was := f.s.tr.Snapshot()
	f.write(t, `{"failure_rate": 1.5}`)
	require.ErrorContains(t, hup(), "failure_rate")
	require.Equal(t, was, f.s.tr.Snapshot())
	require.Contains(t, f.log.String(), `level=ERROR msg="reload: settings file refused; the old settings stay"`)
	stop()
}

// TestOpenPeriodKeptFakeTime moves a fake clock (testing/synctest, with
// the dependencies in memory): an open breaker whose open timeout changes
// from 1h to 1m ten minutes into its open period keeps the 50 minutes it
// has left, and probes exactly when it said; its failed probe then reopens
// it by the new settings, 1m doubled for the failed probe cycle.
func TestOpenPeriodKeptFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "breakers.json")
		require.NoError(t, os.WriteFile(path, []byte(before), 0o644))
		inv := &dependency{name: "inventory", body: "42 in stock"}
		inv.failing.Store(true)
		next := inMemory{inventoryHost: inv, pricingHost: &dependency{name: "pricing", body: "12.90"}}
		s, err := newService(path, next, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		for range 3 {
			require.Equal(t, "failed (500 Internal Server Error)", s.call(context.Background(), inventoryURL))
		}
		retryAt := status(t, s.tr, inventoryHost).RetryAt
		require.Equal(t, time.Hour, time.Until(retryAt))
		require.Equal(t, "3600", retryAfter(t, s))

		time.Sleep(10 * time.Minute)
		require.Equal(t, "3000", retryAfter(t, s))
		require.NoError(t, os.WriteFile(path, []byte(strings.Replace(after, `"open_timeout": "30m"`, `"open_timeout": "1m", "max_open_timeout": "10m"`, 1)), 0o644))
		require.NoError(t, s.reload())
		st := status(t, s.tr, inventoryHost)
		require.Equal(t, time.Minute, st.Settings.OpenTimeout)
		require.Equal(t, retryAt, st.RetryAt)
		require.Equal(t, "3000", retryAfter(t, s))

		time.Sleep(50*time.Minute - time.Second)
		require.Equal(t, "1", retryAfter(t, s))
		time.Sleep(time.Second)
		require.Equal(t, httpbreaker.StateHalfOpen, s.tr.State(inventoryHost), "the old open period ended when it said")
		require.Equal(t, "failed (500 Internal Server Error)", s.call(context.Background(), inventoryURL), "the probe")
		require.Equal(t, "120", retryAfter(t, s), "reopened for the new open timeout, doubled")
	})
}

// TestRun runs the walkthrough, on a temporary sample file and on a file
// of the caller's, and checks what it prints.
func TestRun(t *testing.T) {
	for _, own := range []bool{false, true} {
		path := ""
		if own {
			path = filepath.Join(t.TempDir(), "mine.json")
			require.NoError(t, os.WriteFile(path, []byte(sampleSettings), 0o644))
		}
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), &out, path))
		got := out.String()
		t.Log(got)
		for _, want := range []string{
			"quote 3: stock: failed (500 Internal Server Error); price: failed (500 Internal Server Error)\n",
			"quote 4: stock: refused by its breaker (Retry-After: 60); price: failed (500 Internal Server Error)\n",
			"  pricing.internal: closed; 4 failures of 4 calls; min_requests 10, open_timeout 30s\n",
			`msg="httpbreaker: setting changed" selector=pricing.internal setting=min_requests from=10 to=3` + "\n",
			`msg="httpbreaker: setting changed" selector=inventory.internal setting=open_timeout from=1m0s to=2m0s` + "\n",
			"  inventory.internal: open for 60s more; 3 failures of 3 calls; min_requests 3, open_timeout 2m0s\n",
			"quote 5: stock: refused by its breaker (Retry-After: 60); price: failed (500 Internal Server Error)\n",
			"quote 6: stock: refused by its breaker (Retry-After: 60); price: 12.90 (cached)\n",
			"  pricing.internal: open for 30s more; 5 failures of 5 calls; min_requests 3, open_timeout 30s\n",
		} {
			require.Contains(t, got, want)
		}
		require.Equal(t, 3, strings.Count(got, "setting changed"), "step 2 changes three settings (max_open_timeout follows open_timeout), step 5 none")
		require.Equal(t, 2, strings.Count(got, `level=ERROR msg="reload: settings file refused; the old settings stay"`))
		require.Equal(t, 2, strings.Count(got, `level=INFO msg="reload: settings applied"`))
		if own {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			cfg, err := httpbreaker.ParseConfig(data)
			require.NoError(t, err, "the walkthrough leaves the last good file")
			require.Equal(t, 3, *cfg.Policies[pricingHost].MinRequests)
		}
	}
}

// traffic is callers looping on inventory.internal, whose breaker is open,
// each call of which must be refused with one Retry-After.
type traffic struct {
	s    *service
	want string // the Retry-After every refusal must carry

	mu      sync.Mutex
	n       int
	bad     []string
	waiters []waiter

	quit chan struct{}
	wg   sync.WaitGroup
}

// waiter is a channel to close once the traffic reaches n calls.
type waiter struct {
	n  int
	ch chan struct{}
}

// startTraffic starts callers calling inventory.internal through s.
func startTraffic(s *service, callers int, want string) *traffic {
	tr := &traffic{s: s, want: want, quit: make(chan struct{})}
	for range callers {
		tr.wg.Go(tr.loop)
	}
	return tr
}

// loop calls until stop, recording every answer that is not a refusal
// with the Retry-After wanted.
func (tr *traffic) loop() {
	for {
		select {
		case <-tr.quit:
			return
		default:
		}
		got := "ok"
		resp, err := tr.s.client.Get(inventoryURL)
		if err != nil {
			got = err.Error()
		} else {
			resp.Body.Close()
			if !httpbreaker.IsRejected(resp) || resp.Header.Get("Retry-After") != tr.want {
				got = resp.Status + ", Retry-After " + resp.Header.Get("Retry-After")
			}
		}
		tr.mu.Lock()
		tr.n++
		if got != "ok" {
			tr.bad = append(tr.bad, got)
		}
		kept := tr.waiters[:0]
		for _, w := range tr.waiters {
			if tr.n >= w.n {
				close(w.ch)
			} else {
				kept = append(kept, w)
			}
		}
		tr.waiters = kept
		tr.mu.Unlock()
	}
}

// after returns a channel closed once the traffic has made n more calls.
func (tr *traffic) after(n int) <-chan struct{} {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	w := waiter{n: tr.n + n, ch: make(chan struct{})}
	tr.waiters = append(tr.waiters, w)
	return w.ch
}

// stop stops the callers and returns the answers that were not refusals
// with the Retry-After wanted.
func (tr *traffic) stop() []string {
	close(tr.quit)
	tr.wg.Wait()
	return tr.bad
}

// inMemory is a RoundTripper that serves each host's handler in memory,
// for testing/synctest, where sockets cannot be used.
type inMemory map[string]http.Handler

// RoundTrip serves req with the handler of its host.
func (m inMemory) RoundTrip(req *http.Request) (*http.Response, error) {
	h, ok := m[req.URL.Host]
	if !ok {
		return nil, &url.Error{Op: req.Method, URL: req.URL.String(), Err: os.ErrNotExist}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// syncBuffer is a bytes.Buffer safe for concurrent use: the log.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is the length of what was written.
func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
