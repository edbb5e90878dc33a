// Command table turns the benchmark output of bench/run.sh into the
// Markdown tables of bench/RESULTS.md: library × scenario, overhead over
// the bare stub measured in the same process, and extra allocations.
//
// It reads, for each library directory name L, either L.csv (the output
// of `benchstat -format csv L.txt`: benchstat's medians and confidence
// intervals) or, when there is no such file or -raw is set, L.txt (raw
// `go test -bench` output, whose medians it computes itself).
//
//	go run ./cmd/table -in out -gomod go.mod -meta out/meta.txt [-extra out/outage.md] > RESULTS.md
package main

import (
	"bufio"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// lib is one library column of the tables, in display order.
type lib struct {
	dir, name, module string
	routing           bool // has per-route breakers
	control           bool // no breaker: only in the loopback column, as its noise floor
}

var libs = []lib{
	{dir: "httpbreaker", name: "httpbreaker", routing: true},
	{dir: "gobreaker", name: "sony/gobreaker v2", module: "github.com/sony/gobreaker/v2"},
	{dir: "resty", name: "resty v3 (circuit breaker)", module: "resty.dev/v3"},
	{dir: "rubyist", name: "rubyist/circuitbreaker", module: "github.com/rubyist/circuitbreaker"},
	{dir: "eapache", name: "eapache/go-resiliency", module: "github.com/eapache/go-resiliency"},
	{dir: "failsafe", name: "failsafe-go (failsafehttp)", module: "github.com/failsafe-go/failsafe-go"},
	{dir: "hystrix", name: "afex/hystrix-go", module: "github.com/afex/hystrix-go"},
	{dir: "passthrough", name: "pass-through (control: only calls next)", control: true},
	{dir: "counter", name: "counter (control: one clock read, one atomic add)", control: true},
}

// stat is the summary of one benchmark in one unit.
type stat struct {
	median float64
	ci     string // benchstat's ± (a percentage), "" when unknown
	n      int    // samples, 0 when unknown (benchstat input)
}

// key is a benchmark without its -GOMAXPROCS suffix, plus that suffix.
type key struct {
	name  string // "Closed/bare"
	procs int    // 1 when the name had no suffix
}

// results holds one library's numbers: key → unit → stat. Units are
// normalised to ns/op, B/op, allocs/op and custom units with ns.
type results map[key]map[string]stat

// header lines of the input (goos, goarch, cpu, pkg).
var headers = map[string]string{}

func main() {
	in := flag.String("in", "out", "directory holding LIB.txt (raw) and, optionally, LIB.csv (benchstat -format csv)")
	raw := flag.Bool("raw", false, "ignore benchstat CSV files and compute medians from the raw output")
	gomod := flag.String("gomod", "go.mod", "bench module's go.mod, to print library versions (optional)")
	meta := flag.String("meta", "", "file whose text is printed under the title (optional)")
	extra := flag.String("extra", "", "Markdown file appended after the tables (optional; the outage report)")
	flag.Parse()

	versions := readVersions(*gomod)
	all := map[string]results{}
	source := map[string]string{}
	for _, l := range libs {
		r, src, err := load(*in, l.dir, *raw)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			fmt.Fprintf(os.Stderr, "table: %s: %v\n", l.dir, err)
			os.Exit(1)
		}
		all[l.dir] = r
		source[l.dir] = src
	}
	if len(all) == 0 {
		fmt.Fprintf(os.Stderr, "table: no results in %s\n", *in)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	render(w, all, source, versions, *meta)
	if *extra != "" {
		b, err := os.ReadFile(*extra)
		if err != nil {
			fmt.Fprintf(os.Stderr, "table: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(string(b)))
	}
}

// load reads one library's results, preferring benchstat's CSV.
func load(dir, name string, raw bool) (results, string, error) {
	if !raw {
		f, err := os.Open(filepath.Join(dir, name+".csv"))
		if err == nil {
			defer f.Close()
			r, err := parseBenchstatCSV(f)
			return r, "benchstat", err
		}
	}
	f, err := os.Open(filepath.Join(dir, name+".txt"))
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	r, err := parseRaw(f)
	return r, "raw", err
}

// splitProcs splits "Closed/bare-8" into ("Closed/bare", 8). A name
// without a numeric suffix ran with GOMAXPROCS=1.
func splitProcs(name string) key {
	name = strings.TrimPrefix(name, "Benchmark")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if p, err := strconv.Atoi(name[i+1:]); err == nil && p > 0 {
			return key{name[:i], p}
		}
	}
	return key{name, 1}
}

// normUnit turns benchstat's seconds back into nanoseconds.
func normUnit(unit string, v float64) (string, float64) {
	if strings.HasSuffix(unit, "sec/op") {
		return strings.TrimSuffix(unit, "sec/op") + "ns/op", v * 1e9
	}
	return unit, v
}

// parseRaw reads `go test -bench` output and keeps the median of each
// benchmark's samples per unit.
func parseRaw(r io.Reader) (results, error) {
	samples := map[key]map[string][]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, "Benchmark") && !strings.Contains(k, " ") {
			switch k {
			case "goos", "goarch", "cpu":
				headers[k] = strings.TrimSpace(v)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		k := splitProcs(f[0])
		if samples[k] == nil {
			samples[k] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			samples[k][f[i+1]] = append(samples[k][f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	res := results{}
	for k, units := range samples {
		res[k] = map[string]stat{}
		for u, vs := range units {
			res[k][u] = stat{median: median(vs), n: len(vs)}
		}
	}
	return res, nil
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// parseBenchstatCSV reads `benchstat -format csv` output of one input
// file: blocks of "key: value" headers, then per unit a ",file," line, a
// ",UNIT,CI" line and "name,median,ci" rows.
func parseBenchstatCSV(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	unit := ""
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			unit = ""
			continue
		}
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.Contains(k, ",") {
			switch k {
			case "goos", "goarch", "cpu":
				headers[k] = strings.TrimSpace(v)
			}
			continue
		}
		rec, err := csv.NewReader(strings.NewReader(line)).Read()
		if err != nil || len(rec) < 2 {
			continue
		}
		if rec[0] == "" {
			if len(rec) >= 3 && rec[2] == "CI" {
				unit = rec[1]
			}
			continue
		}
		if unit == "" || rec[0] == "geomean" {
			continue
		}
		v, err := strconv.ParseFloat(rec[1], 64)
		if err != nil {
			continue
		}
		u, v := normUnit(unit, v)
		k := splitProcs(rec[0])
		if res[k] == nil {
			res[k] = map[string]stat{}
		}
		ci := ""
		if len(rec) >= 3 {
			ci = rec[2]
		}
		res[k][u] = stat{median: v, ci: ci}
	}
	return res, sc.Err()
}

// readVersions maps module path → version from a go.mod's require lines.
func readVersions(path string) map[string]string {
	v := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return v
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && strings.Contains(f[0], ".") {
			v[f[0]] = f[1]
		}
	}
	return v
}

// get returns the median of name at procs (0: the only/default procs
// the name ran with) in unit.
func (r results) get(name string, procs int, unit string) (stat, bool) {
	if procs > 0 {
		s, ok := r[key{name, procs}][unit]
		return s, ok
	}
	best := 0
	for k := range r {
		if k.name == name && (best == 0 || k.procs > best) {
			best = k.procs
		}
	}
	s, ok := r[key{name, best}][unit]
	return s, ok
}

// procsOf lists the GOMAXPROCS values name ran with.
func (r results) procsOf(name string) []int {
	var ps []int
	for k := range r {
		if k.name == name {
			ps = append(ps, k.procs)
		}
	}
	slices.Sort(ps)
	return ps
}

// defaultProcs is the GOMAXPROCS of the non-parallel runs.
func (r results) defaultProcs() int {
	ps := r.procsOf("Closed/bare")
	if len(ps) == 0 {
		return 0
	}
	return ps[len(ps)-1]
}

func fmtNs(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + " ms"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " µs"
	case a >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 2, 64) + " µs"
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 0, 64) + " ns"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " ns"
}

func signed(s string, v float64) string {
	if v >= 0 {
		return "+" + s
	}
	return "−" + strings.TrimPrefix(s, "-")
}

func fmtAllocs(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// overhead formats wrapped − bare: "+155 ns · 0 allocs".
func overhead(r results, bare, wrapped string, procs int) string {
	b, ok1 := r.get(bare, procs, "ns/op")
	w, ok2 := r.get(wrapped, procs, "ns/op")
	if !ok1 || !ok2 {
		return "—"
	}
	d := w.median - b.median
	s := signed(fmtNs(d), d)
	ba, ok1 := r.get(bare, procs, "allocs/op")
	wa, ok2 := r.get(wrapped, procs, "allocs/op")
	if ok1 && ok2 {
		s += " · " + fmtAllocs(wa.median-ba.median)
	}
	return s
}

// absolute formats a benchmark's own cost: "57 ns · 0 allocs".
func absolute(r results, name string) string {
	t, ok := r.get(name, 0, "ns/op")
	if !ok {
		return "—"
	}
	s := fmtNs(t.median)
	if a, ok := r.get(name, 0, "allocs/op"); ok {
		s += " · " + fmtAllocs(a.median)
	}
	return s
}

func render(w io.Writer, all map[string]results, source map[string]string, versions map[string]string, metaFile string) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# Benchmark results\n\n")
	p("Generated by `bench/run.sh` (`go run ./cmd/table`); do not edit by hand.\n\n")
	if metaFile != "" {
		if b, err := os.ReadFile(metaFile); err == nil {
			p("%s\n", strings.TrimSpace(string(b)))
		}
	}
	if c := headers["cpu"]; c != "" {
		p("- cpu: %s (%s/%s)\n", c, headers["goos"], headers["goarch"])
	}
	srcs := map[string]bool{}
	for _, s := range source {
		srcs[s] = true
	}
	how := "medians computed from the raw samples"
	if srcs["benchstat"] && !srcs["raw"] {
		how = "medians from benchstat"
	} else if srcs["benchstat"] {
		how = "medians from benchstat where it ran, else from the raw samples"
	}
	p("- %s\n\n", how)

	p("Each library runs in its own process (`bench/<lib>`), against a stub RoundTripper that returns a fresh\n")
	p("200 response. **Overhead = median(wrapped) − median(bare stub), both measured in that process**, then the\n")
	p("extra allocations per request (wrapped − bare). On a loaded 2-core machine differences below ~20 ns, and\n")
	p("negative values, are noise.\n\n")

	// Closed path.
	var parProcs []int
	for _, l := range libs {
		if r, ok := all[l.dir]; ok {
			for _, pr := range r.procsOf("Parallel/wrapped") {
				if !slices.Contains(parProcs, pr) {
					parProcs = append(parProcs, pr)
				}
			}
		}
	}
	slices.Sort(parProcs)
	p("## Closed path: overhead per request (ns · extra allocs)\n\n")
	p("| library | host key | route key | per-host map, hot key | 1,000 hosts round-robin |")
	for _, pr := range parProcs {
		p(" parallel, -cpu %d |", pr)
	}
	p("\n|---|---:|---:|---:|---:|")
	for range parProcs {
		p("---:|")
	}
	p("\n")
	for _, l := range libs {
		r, ok := all[l.dir]
		if !ok || l.control {
			continue
		}
		name := l.name
		if v := versions[l.module]; v != "" {
			name += " " + v
		} else if l.module == "" {
			name += " (this tree)"
		}
		route := overhead(r, "Closed/bare", "Closed/route", 0)
		if !l.routing && route != "—" {
			route += " †"
		}
		p("| %s | %s | %s | %s | %s |", name,
			overhead(r, "Closed/bare", "Closed/host", 0),
			route,
			overhead(r, "Closed/bare", "Closed/hostmap", 0),
			overhead(r, "ManyHosts/bare", "ManyHosts/wrapped", 0))
		for _, pr := range parProcs {
			p(" %s |", overhead(r, "Parallel/bare", "Parallel/wrapped", pr))
		}
		p("\n")
	}
	p("\n")
	p("- **host key**: one breaker for the request. httpbreaker: `New(stub)` (HostKey + lookup); peers: one breaker, no lookup.\n")
	p("- **route key**: httpbreaker `WithRoutes` with 20 patterns, a 4-segment path matching `GET /v1/users/{id}/orders`.\n")
	p("  † peers have no routing: they get their single breaker again (same as *host key*).\n")
	p("- **per-host map, hot key** and **1,000 hosts**: peers get a `sync.Map` from `r.URL.Host` to a breaker, made on\n")
	p("  first use (uncapped); hystrix-go uses its own global command registry (command name = host). httpbreaker is\n")
	p("  the same `New(stub)` as *host key* (default cap 1,000 breakers). Every breaker exists before timing.\n")
	p("- **parallel**: `b.RunParallel`, one hot key from every P, overhead per request at that GOMAXPROCS.\n\n")

	// Open path and loopback.
	p("## Open path and a real loopback round trip\n\n")
	p("| library | open: rejection as error | open: synthetic 503 | loopback: wrapped / bare | loopback: overhead |\n")
	p("|---|---:|---:|---:|---:|\n")
	for _, l := range libs {
		r, ok := all[l.dir]
		if !ok {
			continue
		}
		ratio, overheadNs := "—", "—"
		if s, ok := r.get("Loopback", 0, "ratio"); ok {
			ratio = strconv.FormatFloat(s.median, 'f', 3, 64) + "×"
			if s.ci != "" && s.ci != "∞" {
				ratio += " ±" + strings.TrimPrefix(s.ci, "±")
			}
		}
		if s, ok := r.get("Loopback", 0, "overhead-ns/op"); ok {
			overheadNs = signed(fmtNs(s.median), s.median)
		}
		p("| %s | %s | %s | %s | %s |\n", l.name, absolute(r, "Open/error"), absolute(r, "Open/503"), ratio, overheadNs)
	}
	p("\n")
	p("- **open**: the breaker tripped by its own logic (a stub answering 500 until the library rejects), held open\n")
	p("  for an hour; the cost of one refused request, absolute (no request reaches the stub). Peers refuse only\n")
	p("  with an error: their 503 is what their user writes to answer that error as httpbreaker's synthetic 503\n")
	p("  (`harness.As503`: the same status, headers, body and Request, built the plain way). It has no mark that\n")
	p("  tells it from an upstream 503; httpbreaker's has one (`IsRejected`, through `http.Client` too), carried by a\n")
	p("  copy of the request with a marked context.\n")
	p("- **loopback**: `httptest.Server` + one pooled `http.Transport` shared by both sides; each iteration does one bare\n")
	p("  and one wrapped round trip (order alternating), body read and closed. Ratio: median wrapped / median bare\n")
	p("  round trip; overhead: median of the per-pair differences (medians, so that a stall of the machine does not\n")
	p("  count). A real round trip costs tens of µs, so differences of a few µs here are within the noise.\n")
	p("- **pass-through**: the control, a RoundTripper that only calls next: what the harness measures for a wrapper\n")
	p("  that does nothing, i.e. its noise floor.\n")
	p("- **counter**: the second control, no breaker either: only what any breaker that counts successes must do per\n")
	p("  call at the least (one clock read to pick a time bucket, one atomic add to its counter), i.e. the floor that\n")
	p("  counting alone puts under a breaker's loopback overhead.\n\n")

	// Raw medians.
	p("<details><summary>All medians (ns/op · B/op · allocs/op)</summary>\n\n")
	p("| benchmark |")
	for _, l := range libs {
		if _, ok := all[l.dir]; ok {
			p(" %s |", l.dir)
		}
	}
	p("\n|---|")
	for _, l := range libs {
		if _, ok := all[l.dir]; ok {
			p("---:|")
		}
	}
	p("\n")
	var keys []key
	seen := map[key]bool{}
	for _, r := range all {
		for k := range r {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return a.procs - b.procs
	})
	for _, k := range keys {
		p("| %s-%d |", k.name, k.procs)
		for _, l := range libs {
			r, ok := all[l.dir]
			if !ok {
				continue
			}
			u := r[k]
			if u == nil {
				p(" — |")
				continue
			}
			cell := ""
			if s, ok := u["ns/op"]; ok {
				cell = fmtNs(s.median)
				if s.ci != "" && s.ci != "∞" {
					cell += " ±" + s.ci
				}
			}
			if s, ok := u["B/op"]; ok {
				cell += " · " + strconv.FormatFloat(s.median, 'f', 0, 64)
			}
			if s, ok := u["allocs/op"]; ok {
				cell += " · " + fmtAllocs(s.median)
			}
			p(" %s |", cell)
		}
		p("\n")
	}
	p("\n</details>\n")
}
