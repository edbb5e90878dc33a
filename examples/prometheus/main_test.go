package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/httpbreaker/httpbreaker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	var out bytes.Buffer
	res, err := run(context.Background(), &out)
	require.NoError(t, err)

	// The failing dependency's breaker is open, the healthy one's closed,
	// as the alert expression breaker_state{state="open"} == 1 sees them.
	for state, want := range map[string]float64{"open": 1, "closed": 0, "half-open": 0} {
		v, ok := sample(res.Scrape, "breaker_state", map[string]string{"breaker": res.Failing, "client": "pricing", "state": state})
		require.True(t, ok, "failing %s", state)
		require.Equal(t, want, v, "failing %s", state)
	}
	for state, want := range map[string]float64{"open": 0, "closed": 1, "half-open": 0} {
		v, ok := sample(res.Scrape, "breaker_state", map[string]string{"breaker": res.Healthy, "client": "inventory", "state": state})
		require.True(t, ok, "healthy %s", state)
		require.Equal(t, want, v, "healthy %s", state)
	}
	open := matching(res.Scrape, "breaker_state", map[string]string{"state": "open"})
	require.Equal(t, map[string]float64{res.Failing: 1, res.Healthy: 0}, open, `breaker_state{state="open"}`)

	// The failing breaker tripped after MinRequests failures and rejected
	// the rest; the healthy one saw every request succeed.
	v, _ := sample(res.Scrape, "breaker_requests_total", map[string]string{"breaker": res.Failing, "outcome": "failure"})
	require.Equal(t, float64(minRequests), v)
	v, _ = sample(res.Scrape, "breaker_rejections_total", map[string]string{"breaker": res.Failing, "reason": "open"})
	require.Equal(t, float64(requests-minRequests), v)
	v, _ = sample(res.Scrape, "breaker_requests_total", map[string]string{"breaker": res.Healthy, "outcome": "success"})
	require.Equal(t, float64(requests), v)
	v, _ = sample(res.Scrape, "breaker_transitions_total", map[string]string{"breaker": res.Failing, "from": "closed", "to": "open", "reason": "failure_rate"})
	require.Equal(t, 1.0, v)

	// The service degraded instead of failing, and said why.
	require.Len(t, res.Answers, requests)
	require.Equal(t, "stock: 42 in stock; price: failed (500 Internal Server Error)", res.Answers[minRequests-1])
	require.Equal(t, "stock: 42 in stock; price: unavailable (breaker open)", res.Answers[minRequests])

	// What it printed.
	require.Contains(t, out.String(), `breaker_state{breaker="`+res.Failing+`",client="pricing",state="open"} 1`+"\n")
	require.Contains(t, out.String(), `breaker_state{breaker="`+res.Healthy+`",client="inventory",state="closed"} 1`+"\n")
}

// TestSharedRegistryNeedsWrapping pins why newClient wraps the registerer:
// a second Transport on the same registry without a distinguishing label
// is refused (New panics, naming WithMetrics), and so is one whose label
// names differ from those already registered.
func TestSharedRegistryNeedsWrapping(t *testing.T) {
	reg := prometheus.NewRegistry()
	httpbreaker.New(nil, httpbreaker.WithMetrics(reg))

	var v any
	func() {
		defer func() { v = recover() }()
		httpbreaker.New(nil, httpbreaker.WithMetrics(reg))
	}()
	require.NotNil(t, v, "a second unwrapped WithMetrics on one registry must panic")
	require.Contains(t, v, "httpbreaker: WithMetrics:")

	// Mixing an unwrapped Transport with a wrapped one fails too:
	// Prometheus wants one set of label names per metric name.
	require.Panics(t, func() {
		httpbreaker.New(nil, httpbreaker.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"client": "b"}, reg)))
	})

	// Wrapped with the same label name and different values, any number
	// fit on one registry.
	reg = prometheus.NewRegistry()
	require.NotPanics(t, func() {
		for _, name := range []string{"a", "b", "c"} {
			httpbreaker.New(nil, httpbreaker.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"client": name}, reg)))
		}
	})
}

// sample returns the value of the series name whose labels include want.
// It fails the lookup if more than one series matches.
func sample(scrape, name string, want map[string]string) (float64, bool) {
	var v float64
	n := 0
	for _, s := range parse(scrape) {
		if s.name == name && includes(s.labels, want) {
			v = s.value
			n++
		}
	}
	return v, n == 1
}

// matching returns, by breaker label, the values of the series name whose
// labels include want.
func matching(scrape, name string, want map[string]string) map[string]float64 {
	m := map[string]float64{}
	for _, s := range parse(scrape) {
		if s.name == name && includes(s.labels, want) {
			m[s.labels["breaker"]] = s.value
		}
	}
	return m
}

func includes(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

type series struct {
	name   string
	labels map[string]string
	value  float64
}

// parse reads the Prometheus text format as promhttp writes it for this
// example: no escaped quotes or commas in label values, no timestamps.
func parse(scrape string) []series {
	var out []series
	for _, line := range strings.Split(scrape, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		s := series{name: line[:i], labels: map[string]string{}, value: v}
		if j := strings.IndexByte(s.name, '{'); j >= 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(s.name[j+1:], "}"), ",") {
				k, val, _ := strings.Cut(kv, "=")
				s.labels[k] = strings.Trim(val, `"`)
			}
			s.name = s.name[:j]
		}
		out = append(out, s)
	}
	return out
}
