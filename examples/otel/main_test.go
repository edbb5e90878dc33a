package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The output as stdouttrace and stdoutmetric write it, decoded only as
// far as the test reads it.
type kv struct {
	Key   string
	Value struct {
		Type  string
		Value any
	}
}

type span struct {
	Name       string
	Attributes []kv
	Events     []struct {
		Name       string
		Attributes []kv
	}
}

type metrics struct {
	ScopeMetrics []struct {
		Metrics []struct {
			Name string
			Unit string
			Data struct {
				DataPoints []struct {
					Attributes []kv
					Value      float64 // a sum's
					Count      uint64  // a histogram's
				}
			}
		}
	}
}

func attrMap(a []kv) map[string]any {
	m := map[string]any{}
	for _, x := range a {
		m[x.Key] = x.Value.Value
	}
	return m
}

// output is run's output, split as it prints it.
type output struct {
	lines   []string // before the traces
	spans   []span
	metrics metrics
}

func runExample(t *testing.T) output {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, run(context.Background(), &buf))
	var out output
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	section := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == tracesHeader || line == metricsHeader:
			section = line
		case section == "":
			out.lines = append(out.lines, line)
		case section == tracesHeader:
			var s span
			require.NoError(t, json.Unmarshal([]byte(line), &s), line)
			out.spans = append(out.spans, s)
		default:
			require.NoError(t, json.Unmarshal([]byte(line), &out.metrics), line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// README.md quotes the first lines of the output in its "What it prints"
// block; run prints exactly those.
func TestPrintsWhatTheREADMESays(t *testing.T) {
	out := runExample(t)
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	block := strings.SplitN(string(readme), "```text\n", 2)
	require.Len(t, block, 2, "README.md has a text block")
	want := strings.Split(strings.SplitN(block[1], "```", 2)[0], "\n")
	want = want[:len(want)-1] // the newline before the fence
	require.Equal(t, want, append(out.lines, tracesHeader))
}

// The spans are those the README describes: five client spans, each with
// the breaker and its state; the third carries the trip, the fourth and
// fifth the refusal; and the trip is a span of its own.
func TestSpansShowTheTripAndTheRefusals(t *testing.T) {
	out := runExample(t)
	var client []span
	var trips []span
	for _, s := range out.spans {
		switch s.Name {
		case "HTTP GET":
			client = append(client, s)
		case "httpbreaker.transition":
			trips = append(trips, s)
		}
	}
	require.Len(t, client, requests)
	for i, want := range []string{"closed", "closed", "closed", "open", "open"} {
		a := attrMap(client[i].Attributes)
		require.Equal(t, want, a["httpbreaker.state"], "request %d", i+1)
		require.Contains(t, a["httpbreaker.breaker"], "127.0.0.1:", "request %d", i+1)
		require.EqualValues(t, 503, a["http.response.status_code"], "request %d: every answer is a 503", i+1)
	}
	require.Empty(t, client[0].Events)
	require.Len(t, client[2].Events, 1)
	require.Equal(t, "httpbreaker.transition", client[2].Events[0].Name)
	ev := attrMap(client[2].Events[0].Attributes)
	require.Equal(t, "failure_rate", ev["httpbreaker.transition.reason"])
	require.Equal(t, "open", ev["httpbreaker.transition.to"])
	require.EqualValues(t, minRequests, ev["httpbreaker.failures"])
	require.EqualValues(t, openTimeout.Seconds(), ev["httpbreaker.open_for"])
	for _, s := range client[3:] {
		require.Len(t, s.Events, 1)
		require.Equal(t, "httpbreaker.rejected", s.Events[0].Name)
		ev := attrMap(s.Events[0].Attributes)
		require.Equal(t, "open", ev["httpbreaker.rejected.reason"])
		require.InDelta(t, openTimeout.Seconds(), ev["httpbreaker.retry_after"], 5)
	}
	require.Len(t, trips, 1)
	require.Equal(t, "failure_rate", attrMap(trips[0].Attributes)["httpbreaker.transition.reason"])
}

// The metrics are those the README describes: three failures and two
// refusals in httpbreaker.calls, one transition, the state gauge at open,
// and otelhttp's histogram with the two refusals labelled apart.
func TestMetricsTellRefusalsFromTheDependencysOwn503s(t *testing.T) {
	out := runExample(t)
	points := map[string][]map[string]any{}
	values := map[string][]float64{}
	for _, sm := range out.metrics.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, dp := range m.Data.DataPoints {
				points[m.Name] = append(points[m.Name], attrMap(dp.Attributes))
				v := dp.Value
				if dp.Count > 0 {
					v = float64(dp.Count)
				}
				values[m.Name] = append(values[m.Name], v)
			}
		}
	}
	calls := map[string]float64{}
	for i, a := range points["httpbreaker.calls"] {
		calls[a["httpbreaker.outcome"].(string)] += values["httpbreaker.calls"][i]
	}
	require.Equal(t, map[string]float64{"failure": 3, "rejected": 2}, calls)
	require.Equal(t, []float64{1}, values["httpbreaker.transitions"])
	for i, a := range points["httpbreaker.state"] {
		want := 0.0
		if a["httpbreaker.state"] == "open" {
			want = 1
		}
		require.Equal(t, want, values["httpbreaker.state"][i], "%v", a)
	}
	var labelled, plain float64
	for i, a := range points["http.client.request.duration"] {
		require.EqualValues(t, 503, a["http.response.status_code"])
		if a["httpbreaker.rejected"] == true {
			labelled += values["http.client.request.duration"][i]
		} else {
			plain += values["http.client.request.duration"][i]
		}
	}
	require.Equal(t, 2.0, labelled, "the refusals")
	require.Equal(t, 3.0, plain, "the dependency's own 503s")
}
