package httpbreaker

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// wantFamilies are the metric families of DESIGN.md (and the probe
// counter), with their types.
var wantFamilies = map[string]string{
	"breaker_state":              "gauge",
	"breaker_requests_total":     "counter",
	"breaker_rejections_total":   "counter",
	"breaker_transitions_total":  "counter",
	"breaker_open_seconds_total": "counter",
	"breaker_probes_total":       "counter",
}

// scrapeHandler is what a service mounts on its metrics port.
func scrapeHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// families returns the "# TYPE" lines of an exposition as name → type.
func families(t *testing.T, exposition string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for line := range strings.Lines(exposition) {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, found := strings.Cut(strings.TrimSpace(f), " ")
			require.True(t, found, line)
			got[name] = typ
		}
	}
	return got
}

var breakerLabel = regexp.MustCompile(`breaker="([^"]*)"`)

// breakerLabels returns the distinct values of the breaker label in an
// exposition.
func breakerLabels(exposition string) map[string]bool {
	got := map[string]bool{}
	for _, m := range breakerLabel.FindAllStringSubmatch(exposition, -1) {
		got[m[1]] = true
	}
	return got
}

func TestScrapeOverHTTP(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	d := newDep(200)
	tr := New(d, WithMetrics(reg), WithMinRequests(2), WithJitter(0), WithRoutes("GET /v1/users/{id}"))
	_, _ = get(t, tr, "http://closed.test/")
	_, _ = get(t, tr, "http://api.test/v1/users/7")
	d.set(503, nil)
	for range 2 {
		_, _ = get(t, tr, "http://open.test/")
	}
	_, _ = get(t, tr, "http://open.test/") // rejected
	tr.Trip("half.test", time.Nanosecond)  // due for half-open at once

	srv := httptest.NewServer(scrapeHandler(reg))
	defer srv.Close()
	raw := rawGet(t, srv.Listener.Addr().String(), "/metrics")
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), resp.Header.Get("Content-Type"))
	text := string(body)

	require.Equal(t, wantFamilies, families(t, text), "exactly the documented families:\n%s", text)
	require.Equal(t, map[string]bool{
		"closed.test": true, "api.test GET /v1/users/{id}": true, "open.test": true, "half.test": true,
	}, breakerLabels(text))
	for _, line := range []string{
		`breaker_state{breaker="closed.test",state="closed"} 1`,
		`breaker_state{breaker="closed.test",state="open"} 0`,
		`breaker_state{breaker="api.test GET /v1/users/{id}",state="closed"} 1`,
		`breaker_state{breaker="open.test",state="open"} 1`,
		`breaker_state{breaker="half.test",state="half-open"} 1`,
		`breaker_requests_total{breaker="closed.test",outcome="success"} 1`,
		`breaker_requests_total{breaker="open.test",outcome="failure"} 2`,
		`breaker_requests_total{breaker="open.test",outcome="throttled"} 0`,
		`breaker_requests_total{breaker="open.test",outcome="ignored"} 0`,
		`breaker_rejections_total{breaker="open.test",reason="open"} 1`,
		`breaker_rejections_total{breaker="open.test",reason="half-open"} 0`,
		`breaker_rejections_total{breaker="open.test",reason="bulkhead"} 0`,
		`breaker_transitions_total{breaker="open.test",from="closed",reason="failure_rate",to="open"} 1`,
		// A scrape changes nothing: the breaker shows as due for half-open,
		// and the transition happens with the next request.
		`breaker_transitions_total{breaker="half.test",from="open",reason="open_elapsed",to="half-open"} 0`,
		`breaker_probes_total{breaker="half.test",result="success"} 0`,
	} {
		require.Contains(t, text, line+"\n")
	}
	require.Regexp(t, `(?m)^breaker_open_seconds_total\{breaker="open.test"\} \S+$`, text)
	// Every series of the four breakers is there: 3 states, 4 outcomes,
	// 4 rejection reasons, 14 possible transitions with their reasons, 1
	// open time and 4 probe results each.
	series := 0
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "#") {
			series++
		}
	}
	require.Equal(t, 4*(3+4+4+numTransitionKinds+1+4), series)
	require.Equal(t, 14, numTransitionKinds)
}

func TestScrapeLintAllStatesAndEvictions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		d := newDep(200)
		tr := New(d, WithMetrics(reg), WithMaxBreakers(30), WithMinRequests(2), WithJitter(0),
			WithOpenTimeout(time.Second), WithMaxConcurrent(5))
		host := func(kind string, i int) string { return fmt.Sprintf("http://%s-%d.test/", kind, i) }
		for i := range 10 {
			_, _ = get(t, tr, host("idle", i))
			tr.Trip(fmt.Sprintf("open-%d.test", i), time.Hour)
		}
		d.set(500, nil)
		for i := range 10 {
			for range 3 { // two failures trip it; the third is rejected
				_, _ = get(t, tr, host("half", i))
			}
		}
		d.set(200, nil)
		lint := func() {
			t.Helper()
			problems, err := testutil.GatherAndLint(reg)
			require.NoError(t, err)
			require.Empty(t, problems)
		}
		lint()

		// The idle closed breakers age out; new keys evict them, never an
		// open or half-open one.
		time.Sleep(11 * time.Second)
		for i := range 10 {
			_, _ = get(t, tr, host("new", i))
		}
		lint()
		require.Len(t, tr.Snapshot(), 30)
		states := map[State]int{}
		for _, s := range tr.Snapshot() {
			require.False(t, strings.HasPrefix(s.Key, "idle-"), "%s was not evicted", s.Key)
			states[s.State]++
		}
		require.Equal(t, map[State]int{StateClosed: 10, StateHalfOpen: 10, StateOpen: 10}, states)
		n, err := testutil.GatherAndCount(reg, "breaker_state")
		require.NoError(t, err)
		require.Equal(t, 30*3, n)
		for _, want := range []struct {
			state string
			n     float64
		}{{"closed", 10}, {"half-open", 10}, {"open", 10}} {
			require.Equal(t, want.n, sumSeries(t, reg, "breaker_state", `state="`+want.state+`"`), want.state)
		}
	})
}

// sumSeries adds the values of the series of name whose labels contain
// match.
func sumSeries(t *testing.T, reg *prometheus.Registry, name, match string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	scrapeHandler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	sum := 0.0
	for line := range strings.Lines(rec.Body.String()) {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, match) {
			continue
		}
		var v float64
		_, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		require.NoError(t, err, line)
		sum += v
	}
	return sum
}

func TestScrapeCardinalityBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hosts, maxBreakers = 10_000, 50
		reg := prometheus.NewPedanticRegistry()
		tr := New(newDep(200), WithMetrics(reg), WithMaxBreakers(maxBreakers))
		scrape := func() map[string]bool {
			t.Helper()
			rec := httptest.NewRecorder()
			scrapeHandler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			require.Equal(t, http.StatusOK, rec.Code)
			return breakerLabels(rec.Body.String())
		}
		seen := map[string]bool{} // every breaker label any scrape showed
		for i := range hosts {
			if i%1000 == 0 {
				// Some dependencies stay open throughout: never evicted.
				tr.Trip(fmt.Sprintf("down-%d.test", i), time.Hour)
			}
			_, _ = get(t, tr, fmt.Sprintf("http://h%d.test/", i))
			if i%100 == 99 {
				time.Sleep(time.Second) // lets older breakers go idle
			}
			if i%1000 == 999 {
				got := scrape()
				require.LessOrEqual(t, len(got), maxBreakers, "after %d hosts", i+1)
				require.True(t, got[fmt.Sprintf("h%d.test", i-999)], "idle breakers made room for new hosts")
				maps.Copy(seen, got)
			}
		}
		got := scrape()
		require.LessOrEqual(t, len(got), maxBreakers)
		for i := 0; i < hosts; i += 1000 {
			require.True(t, got[fmt.Sprintf("down-%d.test", i)], "open breakers survive the churn")
		}
		require.Greater(t, len(seen), 5*maxBreakers, "breakers were evicted and replaced")
		problems, err := testutil.GatherAndLint(reg)
		require.NoError(t, err)
		require.Empty(t, problems)
	})
}

// TestAlertRulesMatchTheExposition checks that every series the example
// alerting rules select is one a scrape produces, so that renaming a
// metric or a label value cannot silently disarm an alert. .ci/alerts.sh
// tests the rules themselves with promtool.
func TestAlertRulesMatchTheExposition(t *testing.T) {
	rules, err := os.ReadFile("examples/alerts/breaker.rules.yml")
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	tr := New(newDep(200), WithMetrics(reg))
	_, _ = get(t, tr, testURL)
	rec := httptest.NewRecorder()
	scrapeHandler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	exposition := rec.Body.String()

	selector := regexp.MustCompile(`(breaker_[a-z_]+)(\{[^}]*\})?`)
	matcher := regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	// Only the expressions: an "expr:" line and the more indented lines
	// of its block after it.
	var exprs int
	exprIndent := -1
	for line := range strings.Lines(string(rules)) {
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		switch {
		case strings.HasPrefix(trimmed, "expr:"):
			exprIndent = indent
		case exprIndent >= 0 && indent > exprIndent && strings.TrimSpace(trimmed) != "":
		default:
			exprIndent = -1
			continue
		}
		for _, sel := range selector.FindAllStringSubmatch(line, -1) {
			exprs++
			name := sel[1]
			require.Contains(t, wantFamilies, name, "%s", line)
			series := regexp.QuoteMeta(name) + `\{`
			for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
				series += `(?:[^}]*,)?` + regexp.QuoteMeta(m[1]+`="`+m[2]+`"`)
			}
			require.Regexp(t, `(?m)^`+series, exposition, "no series for %s", sel[0])
		}
	}
	require.Equal(t, 8, exprs, "selectors in the rules")
}

// TestScrapeNeverShowsMoreThanTheCap: during a flood of new hosts that
// evicts breakers as fast as it makes them, on real goroutines under
// -race, no scrape and no Snapshot lists more breakers than
// WithMaxBreakers.
func TestScrapeNeverShowsMoreThanTheCap(t *testing.T) {
	const limit = 200
	reg := prometheus.NewPedanticRegistry()
	tr := New(rtFunc(func(req *http.Request) (*http.Response, error) {
		return response(req, http.StatusOK, nil), nil
	}), WithMaxBreakers(limit), WithWindow(10*time.Millisecond), WithMetrics(reg))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = get(t, tr, "http://h"+strconv.Itoa(g)+"-"+strconv.Itoa(i)+".test/")
			}
		})
	}
	most, mostSnap := 0, 0
	for range 40 {
		n, err := testutil.GatherAndCount(reg, "breaker_state")
		require.NoError(t, err)
		most = max(most, n/int(numStates))
		mostSnap = max(mostSnap, len(tr.Snapshot()))
	}
	close(stop)
	wg.Wait()
	require.LessOrEqual(t, most, limit, "breakers in one scrape")
	require.LessOrEqual(t, mostSnap, limit, "breakers in one Snapshot")
	require.Positive(t, most)
}

// hungProbe returns a Transport whose breaker for testKey, tripped for
// 1s with a 2s probe bound (and so a 2s reopen, without jitter), sent its
// probe at clock 1s to a dependency that never answers it: the bound
// passes at 3s. It scrapes into reg.
func hungProbe(t *testing.T) (*Transport, *prometheus.Registry) {
	d := newDep(200)
	d.hangUntilDone()
	reg := prometheus.NewPedanticRegistry()
	tr := New(d, WithMetrics(reg), WithOpenTimeout(time.Second), WithMaxOpenTimeout(2*time.Second), WithJitter(0))
	tr.Trip(testKey, time.Second)
	time.Sleep(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _, _ = getCtx(t, ctx, tr, testURL) }() // the probe hangs
	synctest.Wait()
	return tr, reg
}

// TestScrapeShowsOpenOnceAProbeOutlivesTheBound: once a probe outlives
// the bound, a scrape shows the breaker open, as State does at the same
// instant, not a stale half-open.
func TestScrapeShowsOpenOnceAProbeOutlivesTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, reg := hungProbe(t)
		time.Sleep(3 * time.Second) // past the bound (3s); reopened for 2s, so still open
		scraped := gaugeValue(t, reg, "breaker_state", `state="half-open"`)
		require.Equal(t, StateOpen, tr.State(testKey))
		require.Zero(t, scraped, "the scrape said half-open at the instant State said open")
	})
}

// TestScrapeShowsHalfOpenOnceTheReopenAfterAProbeTimeoutHasPassed: a
// probe that outlived its bound reopened the breaker, and that open
// period has ended too, with nothing since to move the breaker: a
// request now goes as a probe, and State says half-open. The scrape says
// so as well (due for half-open, not a stale open).
func TestScrapeShowsHalfOpenOnceTheReopenAfterAProbeTimeoutHasPassed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, reg := hungProbe(t)
		time.Sleep(5 * time.Second) // bound passed at 3s, reopened for 2s until 5s; now 6s
		scraped := gaugeValue(t, reg, "breaker_state", `state="half-open"`)
		require.Equal(t, StateHalfOpen, tr.State(testKey))
		require.Equal(t, 1.0, scraped, "State says half-open; the scrape still said open")
	})
}
