package main

import (
	"strings"
	"testing"
)

const rawOut = `goos: linux
goarch: amd64
pkg: github.com/httpbreaker/httpbreaker/bench/x
cpu: Test CPU
BenchmarkClosed/bare-2         	11991754	       100 ns/op	     144 B/op	       1 allocs/op
BenchmarkClosed/host-2         	 6357854	       250 ns/op	     144 B/op	       1 allocs/op
BenchmarkClosed/bare-2         	11991754	       120 ns/op	     144 B/op	       1 allocs/op
BenchmarkClosed/host-2         	 6357854	       260 ns/op	     144 B/op	       1 allocs/op
BenchmarkClosed/bare-2         	11991754	       500 ns/op	     144 B/op	       1 allocs/op
BenchmarkClosed/host-2         	 6357854	       270 ns/op	     176 B/op	       3 allocs/op
BenchmarkParallel/bare         	     100	       90 ns/op	     144 B/op	       1 allocs/op
BenchmarkParallel/wrapped-8    	     100	      190 ns/op	     144 B/op	       1 allocs/op
BenchmarkLoopback-2   	     100	    120704 ns/op	     38202 bare-ns/op	     44151 overhead-ns/op	         2.156 ratio	     82353 wrapped-ns/op	   10164 B/op	     118 allocs/op
PASS
ok  	github.com/httpbreaker/httpbreaker/bench/x	0.154s
`

func TestParseRaw(t *testing.T) {
	r, err := parseRaw(strings.NewReader(rawOut))
	if err != nil {
		t.Fatal(err)
	}
	if s := r[key{"Closed/bare", 2}]["ns/op"]; s.median != 120 || s.n != 3 {
		t.Errorf("Closed/bare-2 = %+v, want median 120 of 3", s)
	}
	if got := overhead(r, "Closed/bare", "Closed/host", 0); got != "+140 ns · 0" {
		t.Errorf("overhead = %q", got)
	}
	if s := r[key{"Parallel/bare", 1}]["ns/op"]; s.median != 90 {
		t.Errorf("Parallel/bare (procs 1) = %+v", s)
	}
	if s := r[key{"Loopback", 2}]["ratio"]; s.median != 2.156 {
		t.Errorf("Loopback ratio = %+v", s)
	}
	if headers["cpu"] != "Test CPU" {
		t.Errorf("cpu header = %q", headers["cpu"])
	}
}

const csvOut = `goos: linux
goarch: amd64
pkg: github.com/httpbreaker/httpbreaker/bench/x
cpu: AMD EPYC
,x.txt,
,sec/op,CI
Closed/bare-2,6.4e-08,3%
Closed/host-2,2.0e-07,∞
geomean,1e-07,

,x.txt,
,allocs/op,CI
Closed/bare-2,1,0%
Closed/host-2,2,0%
geomean,1.4,

,x.txt,
,bare-sec/op,CI
Loopback-2,4.7e-05,1%
`

func TestParseBenchstatCSV(t *testing.T) {
	r, err := parseBenchstatCSV(strings.NewReader(csvOut))
	if err != nil {
		t.Fatal(err)
	}
	if s := r[key{"Closed/bare", 2}]["ns/op"]; s.median != 64 || s.ci != "3%" {
		t.Errorf("Closed/bare-2 = %+v", s)
	}
	if got := overhead(r, "Closed/bare", "Closed/host", 0); got != "+136 ns · 1" {
		t.Errorf("overhead = %q", got)
	}
	if s := r[key{"Loopback", 2}]["bare-ns/op"]; s.median != 47000 {
		t.Errorf("Loopback bare-ns/op = %+v", s)
	}
}

func TestSplitProcs(t *testing.T) {
	for in, want := range map[string]key{
		"BenchmarkClosed/bare-2": {"Closed/bare", 2},
		"Parallel/wrapped":       {"Parallel/wrapped", 1},
		"Open/503-8":             {"Open/503", 8},
		"Open/503":               {"Open/503", 1},
	} {
		if got := splitProcs(in); got != want {
			t.Errorf("splitProcs(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestRenderControl(t *testing.T) {
	lib, err := parseRaw(strings.NewReader(rawOut))
	if err != nil {
		t.Fatal(err)
	}
	control, err := parseRaw(strings.NewReader("BenchmarkLoopback-2 100 120704 ns/op 38202 bare-ns/op 12 overhead-ns/op 1.001 ratio 38214 wrapped-ns/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	render(&b, map[string]results{"httpbreaker": lib, "passthrough": control},
		map[string]string{"httpbreaker": "raw", "passthrough": "raw"}, nil, "")
	out := b.String()
	closed, rest, ok := strings.Cut(out, "## Open path")
	if !ok {
		t.Fatalf("no open-path section in:\n%s", out)
	}
	if strings.Contains(closed, "pass-through") {
		t.Errorf("the control has a row in the closed-path table:\n%s", closed)
	}
	if !strings.Contains(rest, "| pass-through (control: only calls next) | — | — | 1.001× | +12 ns |") {
		t.Errorf("no loopback row for the control in:\n%s", rest)
	}
	if !strings.Contains(rest, "| httpbreaker | — | — | 2.156× |") {
		t.Errorf("no loopback row for httpbreaker in:\n%s", rest)
	}
}
