// Package outage measures what a dead dependency costs its callers, with
// and without httpbreaker: a loopback server that stops answering (its
// handler hangs), 200 concurrent callers behind an http.Client with a 1s
// Timeout, for 5s.
//
//	go test -run TestOutage -v ./outage/
//
// Set OUTAGE_REPORT=path to also write the report as Markdown.
package outage

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hb "github.com/httpbreaker/httpbreaker"
)

const (
	callers       = 200
	duration      = 5 * time.Second
	clientTimeout = time.Second
	think         = 10 * time.Millisecond // pause between two calls of one caller
	openTimeout   = 500 * time.Millisecond
	probes        = 1 // WithHalfOpenProbes

	// p99Target is the goal after the trip; p99Bound is what the test
	// asserts, generous so that a loaded 2-core machine passes.
	// steady is how long after the trip the held-goroutine counts start:
	// by then every call admitted before the trip has timed out.
	steady = clientTimeout + 100*time.Millisecond

	p99Target = time.Millisecond
	p99Bound  = 50 * time.Millisecond
)

// report is what one run measured.
type report struct {
	name        string
	calls       int           // calls made during the run
	errors      int           // calls that ended in an error (timeouts)
	rejected    int           // synthetic 503s (IsRejected)
	tripAt      time.Duration // first closed→open, or (no breaker) the first failed call's end; 0: never
	after       []time.Duration
	p50, p99    time.Duration // latency of calls started after tripAt
	maxAfter    time.Duration
	depTotal    int64 // requests the dependency received during the run
	depAfter    int64 // of those, sent after tripAt
	halfOpens   int64 // open→half-open transitions
	opens       int64 // closed→open transitions
	heldMax     int64 // callers inside a call, max in the steady state (see steady)
	heldMean    float64
	gorMax      int // process goroutines, max in the steady state
	gorMean     float64
	gorBase     int // process goroutines before the callers started
	depInFlight int64
	stall       time.Duration // longest a 10ms ticker goroutine waited beyond its tick
}

func TestOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("outage runs 2×5s")
	}
	without := run(t, false)
	with := run(t, true)

	md := render(without, with)
	t.Log("\n" + md)
	if path := os.Getenv("OUTAGE_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
			t.Error(err)
		}
	}

	// Without a breaker the dead dependency is hammered and callers wait.
	if without.depAfter < callers {
		t.Errorf("without breaker: dependency got %d calls after the first timeout, want ≥ %d", without.depAfter, callers)
	}
	if without.p50 < clientTimeout/2 {
		t.Errorf("without breaker: p50 %v, want about the client timeout %v", without.p50, clientTimeout)
	}

	// With httpbreaker: it trips once, and after the trip the dependency
	// sees at most the half-open probes of each open period that ended.
	if with.opens != 1 {
		t.Fatalf("with httpbreaker: %d closed→open transitions, want exactly 1", with.opens)
	}
	if max := probes * with.halfOpens; with.depAfter > max {
		t.Errorf("with httpbreaker: dependency got %d calls sent after the trip, want ≤ %d (%d probe(s) × %d open periods ended)",
			with.depAfter, max, probes, with.halfOpens)
	}
	if len(with.after) < callers {
		t.Fatalf("with httpbreaker: only %d calls after the trip", len(with.after))
	}
	switch {
	case with.p99 > p99Bound && with.stall >= p99Bound:
		// The control goroutine, which never touches httpbreaker, was
		// itself kept off the CPU that long: the machine, not the
		// breaker, held the callers.
		t.Logf("WARNING: p99 after the trip %v is above the %v bound, but the process itself stalled for %v "+
			"(a 10ms ticker goroutine was not scheduled): machine overload, not asserted", with.p99, p99Bound, with.stall)
	case with.p99 > p99Bound:
		t.Errorf("with httpbreaker: p99 after the trip %v, want ≤ %v (target %v); longest process stall %v",
			with.p99, p99Bound, p99Target, with.stall)
	case with.p99 > p99Target:
		t.Logf("note: p99 after the trip %v is above the %v target (within the %v bound; loaded machine?)", with.p99, p99Target, p99Bound)
	}
}

// run makes 200 callers call a dependency that hangs, for 5s.
func run(t *testing.T, breaker bool) *report {
	r := &report{name: "no breaker"}
	if breaker {
		r.name = "httpbreaker"
	}
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }
	var tripAt atomic.Int64 // ns since start + 1; 0: not yet
	var hang atomic.Bool
	stop := make(chan struct{})
	var depTotal, depAfter, depInFlight atomic.Int64

	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !hang.Load() {
			io.WriteString(w, "ok\n")
			return
		}
		depTotal.Add(1)
		sent, _ := strconv.ParseInt(req.Header.Get("X-Sent-At"), 10, 64)
		if tr := tripAt.Load(); tr != 0 && sent > tr-1 {
			depAfter.Add(1)
		}
		depInFlight.Add(1)
		defer depInFlight.Add(-1)
		select { // the dependency stops answering
		case <-req.Context().Done():
		case <-stop:
		}
	}))
	defer dep.Close()
	defer close(stop)

	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = callers
	defer base.CloseIdleConnections()
	var rt http.RoundTripper = base
	if breaker {
		rt = hb.New(base,
			hb.WithOpenTimeout(openTimeout),
			hb.WithHalfOpenProbes(probes),
			hb.WithOnTransition(func(tr hb.Transition) {
				from, to := tr.From, tr.To
				switch {
				case from == hb.StateClosed && to == hb.StateOpen:
					if atomic.AddInt64(&r.opens, 1) == 1 {
						tripAt.Store(int64(since()) + 1)
					}
				case from == hb.StateOpen && to == hb.StateHalfOpen:
					atomic.AddInt64(&r.halfOpens, 1)
				}
			}))
	}
	client := &http.Client{Transport: rt, Timeout: clientTimeout}

	type sample struct {
		start, d time.Duration
		err      bool
		rejected bool
	}
	results := make([][]sample, callers)
	var held atomic.Int64
	var firstFail atomic.Int64 // ns since start + 1, no-breaker mode
	call := func() sample {
		s := sample{start: since()}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, dep.URL+"/v1/items", nil)
		req.Header.Set("X-Sent-At", strconv.FormatInt(int64(s.start)+1, 10))
		held.Add(1)
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.rejected = hb.IsRejected(resp)
		}
		held.Add(-1)
		s.d = since() - s.start
		s.err = err != nil
		return s
	}

	// Warm-up: every caller's first call succeeds (the window holds 200
	// successes and the pool 200 connections); then the dependency hangs.
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() { call() })
	}
	wg.Wait()
	runtime.GC()
	r.gorBase = runtime.NumGoroutine()
	hang.Store(true)
	start = time.Now()

	done := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			for since() < duration {
				s := call()
				results[i] = append(results[i], s)
				if s.err && !breaker {
					firstFail.CompareAndSwap(0, int64(s.start+s.d)+1)
				}
				time.Sleep(think)
			}
		})
	}
	type gsample struct {
		at        time.Duration
		held      int64
		goroutine int
	}
	var gs []gsample
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		last := since()
		for since() < duration {
			<-tick.C
			now := since()
			if gap := now - last - 10*time.Millisecond; gap > r.stall {
				r.stall = gap
			}
			last = now
			gs = append(gs, gsample{now, held.Load(), runtime.NumGoroutine()})
		}
	}()
	wg.Wait()
	<-done
	r.depTotal, r.depAfter, r.depInFlight = depTotal.Load(), depAfter.Load(), depInFlight.Load()

	if breaker {
		if v := tripAt.Load(); v != 0 {
			r.tripAt = time.Duration(v - 1)
		}
	} else if v := firstFail.Load(); v != 0 {
		r.tripAt = time.Duration(v - 1)
		// No hook to count at the dependency: count from the samples.
		for _, rs := range results {
			for _, s := range rs {
				if s.start > r.tripAt {
					r.depAfter++ // every call without a breaker reaches it
				}
			}
		}
	}
	for _, rs := range results {
		for _, s := range rs {
			r.calls++
			if s.err {
				r.errors++
			}
			if s.rejected {
				r.rejected++
			}
			if r.tripAt > 0 && s.start > r.tripAt {
				r.after = append(r.after, s.d)
			}
		}
	}
	slices.Sort(r.after)
	if n := len(r.after); n > 0 {
		r.p50 = r.after[n/2]
		r.p99 = r.after[min(n-1, n*99/100)]
		r.maxAfter = r.after[n-1]
	}
	var nh, sumHeld, sumGor int64
	for _, g := range gs {
		if r.tripAt == 0 || g.at < r.tripAt+steady {
			continue
		}
		nh++
		sumHeld += g.held
		sumGor += int64(g.goroutine)
		r.heldMax = max(r.heldMax, g.held)
		r.gorMax = max(r.gorMax, g.goroutine)
	}
	if nh > 0 {
		r.heldMean = float64(sumHeld) / float64(nh)
		r.gorMean = float64(sumGor) / float64(nh)
	}
	t.Logf("%s: %d calls, %d errors, %d rejected; trip at %v; dependency got %d calls (%d after the trip)",
		r.name, r.calls, r.errors, r.rejected, r.tripAt.Round(time.Millisecond), r.depTotal, r.depAfter)
	return r
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

// render writes the report of both runs as Markdown.
func render(without, with *report) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("## Outage: a dependency that stops answering\n\n")
	p("%d callers, each calling in a loop (%v pause between calls) through an `http.Client` with a %v Timeout, for %v,\n",
		callers, think, clientTimeout, duration)
	p("a loopback dependency whose handler hangs (after one successful warm-up call per caller). httpbreaker: defaults\n")
	p("but `WithOpenTimeout(%v)` and `WithHalfOpenProbes(%d)`. \"After\" means: calls started after the first trip\n", openTimeout, probes)
	p("(no breaker: after the first timed-out call ended). Target after the trip: p99 ≤ %v; the test asserts ≤ %v.\n\n", p99Target, p99Bound)
	p("| | no breaker | httpbreaker |\n|---|---:|---:|\n")
	row := func(name string, f func(r *report) string) { p("| %s | %s | %s |\n", name, f(without), f(with)) }
	row("first trip (no breaker: first timeout) at", func(r *report) string { return fmtDur(r.tripAt) })
	row("calls made / ended in error / rejected", func(r *report) string {
		return fmt.Sprintf("%d / %d / %d", r.calls, r.errors, r.rejected)
	})
	row("latency after: p50", func(r *report) string { return fmtDur(r.p50) })
	row("latency after: p99", func(r *report) string { return fmtDur(r.p99) })
	row("latency after: max", func(r *report) string { return fmtDur(r.maxAfter) })
	row("calls reaching the dead dependency (all / sent after the trip)", func(r *report) string {
		return fmt.Sprintf("%d / %d", r.depTotal, r.depAfter)
	})
	row("open periods ended (→ half-open) × probe limit", func(r *report) string {
		if r.name == "no breaker" {
			return "—"
		}
		return fmt.Sprintf("%d × %d = %d", r.halfOpens, probes, r.halfOpens*probes)
	})
	row("callers held in a call, steady state (mean / max)", func(r *report) string {
		return fmt.Sprintf("%.1f / %d", r.heldMean, r.heldMax)
	})
	row("process goroutines, steady state (mean / max; idle baseline)", func(r *report) string {
		return fmt.Sprintf("%.0f / %d (%d)", r.gorMean, r.gorMax, r.gorBase)
	})
	row("longest process stall (control: a 10ms ticker's lateness)", func(r *report) string { return fmtDur(r.stall) })
	p("\nSteady state: from %v after the trip to the end, when every call admitted before the trip has timed out.\n", steady)
	p("Process goroutines include the %d callers and the in-process dependency's handlers (about two per hung\n", callers)
	p("request) and the client's connection goroutines (two per connection); the callers held is the number that matters.\n")
	return b.String()
}
