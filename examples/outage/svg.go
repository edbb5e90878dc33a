package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// Geometry of the SVG, in pixels.
const (
	svgWidth  = 960
	plotLeft  = 78  // left edge of the plots: room for the latency labels
	plotRight = 930 // right edge of the plots
	panelH    = 200 // height of one plot
	firstTop  = 132 // top of the first plot
	panelGap  = 82  // from the bottom of one plot to the top of the next
	cell      = 3   // side of a density cell: requests in one cell share a dot
)

// Colours: one per outcome, the probe marker, the breaker's bands.
const (
	colChecked  = "#4e79a7"
	colSlow     = "#e15759"
	colFast     = "#59a14f"
	colProbe    = "#b07aa1"
	colOpen     = "#e15759"
	colHalfOpen = "#edc948"
	colInk      = "#222"
	colMuted    = "#666"
	colGrid     = "#e6e6e6"
)

// outcomeColours maps an outcome to its dot colour.
var outcomeColours = [...]string{checked: colChecked, deferredSlow: colSlow, deferredFast: colFast}

// logScale maps latencies to y on a log axis.
type logScale struct {
	lo, hi     float64 // log10 of the bounds, in seconds
	top, bottm float64 // pixel rows of hi and lo
}

// y returns the pixel row of latency d.
func (s logScale) y(d time.Duration) float64 {
	v := math.Log10(math.Max(d.Seconds(), 1e-9))
	v = math.Max(s.lo, math.Min(s.hi, v))
	return s.bottm - (v-s.lo)/(s.hi-s.lo)*(s.bottm-s.top)
}

// renderSVG draws both runs as two panels sharing a time axis: every
// request's latency (log scale) at the time it started, a p99 line, the
// fraud outage, and for the breaker run its open and half-open periods
// and its probes. It uses the standard library only.
func renderSVG(r result) string {
	c := r.Config
	runs := []*runResult{&r.Plain, &r.Breaker}
	height := firstTop + len(runs)*panelH + (len(runs)-1)*panelGap + 58

	// One latency scale for both panels, from the fastest request's
	// decade to a little above the slowest request or the timeout.
	fastest, slowest := time.Duration(math.MaxInt64), c.Timeout
	for _, run := range runs {
		for _, s := range run.Samples {
			fastest = min(fastest, s.Latency)
			slowest = max(slowest, s.Latency)
		}
	}
	fastest = max(fastest, time.Microsecond)
	lo := math.Floor(math.Log10(fastest.Seconds()))
	hi := math.Log10(slowest.Seconds()) + 0.8 // headroom for the phase names

	xOf := func(t time.Duration) float64 {
		return plotLeft + float64(t)/float64(c.Duration)*(plotRight-plotLeft)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12" fill="%s">`+"\n",
		svgWidth, height, svgWidth, height, colInk)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc("Checkout latency during a fraud-service outage, with and without httpbreaker"))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")

	// Title, subtitle, legend.
	text(&b, plotLeft-60, 30, "start", `font-size="18" font-weight="600"`,
		"Checkout latency while its fraud dependency hangs")
	text(&b, plotLeft-60, 50, "start", `fill="`+colMuted+`"`, fmt.Sprintf(
		"Each dot is one order: checkout handler latency (log scale) at the time it started; darker where orders overlap. %d callers, fraud client timeout %v.",
		c.Concurrency, c.Timeout))
	bucket := niceStep(c.Duration / 30)
	legend(&b, 78, []legendItem{
		{kind: "dot", colour: colChecked, label: "fraud-checked"},
		{kind: "dot", colour: colSlow, label: "deferred after the timeout"},
		{kind: "dot", colour: colFast, label: "deferred at once: breaker refused"},
		{kind: "probe", colour: colProbe, label: "probe"},
		{kind: "line", colour: colInk, label: "p99 per " + dur(bucket)},
	})
	legend(&b, 98, []legendItem{
		{kind: "band", colour: "#000", opacity: 0.06, label: "fraud service hangs"},
		{kind: "band", colour: colOpen, opacity: 0.16, label: "breaker open"},
		{kind: "band", colour: colHalfOpen, opacity: 0.4, label: "breaker half-open (probe in flight)"},
		{kind: "dash", colour: colMuted, label: "fraud client timeout (" + c.Timeout.String() + ")"},
	})

	for i, run := range runs {
		top := float64(firstTop + i*(panelH+panelGap))
		bottom := top + panelH
		sc := logScale{lo: lo, hi: hi, top: top, bottm: bottom}
		out := run.Phases[phaseOutage]
		fmt.Fprintf(&b, `<g class="panel" id="panel-%d">`+"\n", i)
		text(&b, plotLeft, top-10, "start", `font-size="14" font-weight="600"`, run.Name)
		text(&b, plotRight, top-10, "end", `fill="`+colMuted+`"`, fmt.Sprintf(
			"outage: p99 %s · %s orders served · %s calls reached fraud · %.1f workers held on average",
			dur(out.P99), count(int64(out.Served)), count(out.FraudCalls), out.HeldAvg))

		// Fraud outage, then breaker bands on top.
		ostart, oend := c.phaseBounds(phaseOutage)
		fmt.Fprintf(&b, `<rect class="outage" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#000" fill-opacity="0.06"/>`+"\n",
			xOf(ostart), top, xOf(oend)-xOf(ostart), panelH)
		for _, bd := range bands(run.Transitions, c.Duration) {
			class, col, op := "band-open", colOpen, 0.16
			if bd.state == httpbreaker.StateHalfOpen {
				class, col, op = "band-half-open", colHalfOpen, 0.4
			}
			w := math.Max(xOf(bd.to)-xOf(bd.from), 1)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" fill-opacity="%.2f"><title>%s %s–%s</title></rect>`+"\n",
				class, xOf(bd.from), top, w, panelH, col, op, bd.state, secs3(bd.from), secs3(bd.to))
		}

		// Grid and latency axis.
		for d := math.Ceil(lo); d <= hi; d++ {
			y := sc.y(time.Duration(math.Pow(10, d) * float64(time.Second)))
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, plotRight, y, y, colGrid)
			text(&b, plotLeft-8, y+4, "end", `fill="`+colMuted+`"`, dur(time.Duration(math.Pow(10, d)*float64(time.Second))))
		}
		fmt.Fprintf(&b, `<text transform="translate(%d %.1f) rotate(-90)" text-anchor="middle" fill="%s">latency</text>`+"\n",
			plotLeft-58, (top+bottom)/2, colMuted)

		// Phase boundaries and names.
		for p := range numPhases {
			ps, pe := c.phaseBounds(p)
			if p > 0 {
				fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="3 3"/>`+"\n",
					xOf(ps), xOf(ps), top, bottom)
			}
			name := [numPhases]string{"healthy", "fraud hangs", "fraud recovered"}[p]
			text(&b, (xOf(ps)+xOf(pe))/2, top+14, "middle", `fill="`+colMuted+`"`, name)
		}

		// The fraud client's timeout.
		ty := sc.y(c.Timeout)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6 4"/>`+"\n",
			plotLeft, plotRight, ty, ty, colMuted)

		// p99 per time bucket, under the requests so that it hides none.
		p99Line(&b, run.Samples, c, bucket, xOf, sc)

		// Requests, merged into density cells.
		dots(&b, run.Samples, xOf, sc)

		// What to look at.
		if i == 0 {
			mid := (top + bottom) / 2
			text(&b, (xOf(ostart)+xOf(oend))/2, mid, "middle", `font-size="13" fill="`+colSlow+`"`,
				"every order waits out the "+c.Timeout.String()+" timeout, then degrades anyway;")
			text(&b, (xOf(ostart)+xOf(oend))/2, mid+17, "middle", `font-size="13" fill="`+colSlow+`"`,
				"the callers are stuck, and the hung fraud service keeps getting a call per caller per timeout")
		} else if len(run.Transitions) > 0 {
			x := xOf(ostart) + 6
			text(&b, x, sc.y(c.Timeout)+34, "start", `font-size="11" fill="`+colSlow+`"`, "first wave waits")
			text(&b, x, sc.y(c.Timeout)+48, "start", `font-size="11" fill="`+colSlow+`"`, "the full timeout")
		}

		// Probes.
		for _, s := range run.Samples {
			if !s.Probe {
				continue
			}
			x, y := xOf(s.At), sc.y(s.Latency)
			fmt.Fprintf(&b, `<path class="probe" d="M%.1f %.1fl5 5-5 5-5-5z" fill="%s" stroke="%s" stroke-width="1"><title>probe at %s: %s</title></path>`+"\n",
				x, y-5, colProbe, colInk, secs3(s.At), dur(s.Latency))
		}

		// Frame and time axis.
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%d" fill="none" stroke="#bbb"/>`+"\n",
			plotLeft, top, plotRight-plotLeft, panelH)
		step := tickStep(c.Duration)
		for t := time.Duration(0); t <= c.Duration; t += step {
			x := xOf(t)
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#bbb"/>`+"\n", x, x, bottom, bottom+4)
			text(&b, x, bottom+17, "middle", `fill="`+colMuted+`"`, secs(t))
		}
		b.WriteString("</g>\n")
	}
	last := float64(firstTop + len(runs)*panelH + (len(runs)-1)*panelGap)
	text(&b, (plotLeft+plotRight)/2, last+38, "middle", `fill="`+colMuted+`"`, "time since start")
	b.WriteString("</svg>\n")
	return b.String()
}

// band is a stretch of time a breaker spent open or half-open.
type band struct {
	state    httpbreaker.State
	from, to time.Duration
}

// bands turns transitions into the open and half-open stretches, the
// last one running to end.
func bands(trs []transitionEvent, end time.Duration) []band {
	var out []band
	state, since := httpbreaker.StateClosed, time.Duration(0)
	flush := func(to time.Duration) {
		if state != httpbreaker.StateClosed && to > since {
			out = append(out, band{state: state, from: since, to: min(to, end)})
		}
	}
	for _, t := range trs {
		flush(t.At)
		state, since = t.To, t.At
	}
	flush(end)
	return out
}

// dots draws the requests as density cells: one square per outcome and
// cell, darker the more requests it holds. Squares of one colour and
// shade share a path, which keeps the file small.
func dots(b *strings.Builder, samples []sample, xOf func(time.Duration) float64, sc logScale) {
	type key struct {
		o    outcome
		x, y int
	}
	cells := map[key]int{}
	most := 1
	for _, s := range samples {
		k := key{s.Outcome, int(xOf(s.At)) / cell, int(sc.y(s.Latency)) / cell}
		cells[k]++
		most = max(most, cells[k])
	}
	shades := []float64{0.45, 0.6, 0.72, 0.86, 1}
	paths := map[[2]int]*strings.Builder{}
	for k, n := range cells {
		// Shade by log count, so a lone request still shows.
		lvl := 0
		if most > 1 {
			lvl = int(math.Log(float64(n)) / math.Log(float64(most)) * float64(len(shades)-1))
		}
		pb := paths[[2]int{int(k.o), lvl}]
		if pb == nil {
			pb = &strings.Builder{}
			paths[[2]int{int(k.o), lvl}] = pb
		}
		// Orders that waited out the timeout are few and the point of
		// the picture: draw them larger.
		size, off := cell, 0
		if k.o == deferredSlow {
			size, off = 6, -1
		}
		fmt.Fprintf(pb, "M%d %dh%dv%dh-%dz", k.x*cell+off, k.y*cell+off, size, size, size)
	}
	keys := make([][2]int, 0, len(paths))
	for k := range paths {
		keys = append(keys, k)
	}
	// Slow orders last, on top.
	rank := func(k [2]int) [3]int {
		slow := 0
		if k[0] == int(deferredSlow) {
			slow = 1
		}
		return [3]int{slow, k[0], k[1]}
	}
	slices.SortFunc(keys, func(a, b [2]int) int {
		ra, rb := rank(a), rank(b)
		return slices.Compare(ra[:], rb[:])
	})
	for _, k := range keys {
		fmt.Fprintf(b, `<path class="requests" fill="%s" fill-opacity="%.2f" d="%s"/>`+"\n",
			outcomeColours[k[0]], shades[k[1]], paths[k].String())
	}
}

// p99Line draws the p99 latency of the requests that started in each
// bucket of about width bucket as a step line, broken where a bucket has
// too few requests. Buckets never straddle a phase boundary, and a request
// counts in the phase it counts in for the table (see sample.Phase).
func p99Line(b *strings.Builder, samples []sample, c config, bucket time.Duration, xOf func(time.Duration) float64, sc logScale) {
	type span struct{ from, to time.Duration }
	var spans []span
	var lats [][]time.Duration
	first := [numPhases + 1]int{} // index of each phase's first bucket
	for p := range numPhases {
		ps, pe := c.phaseBounds(p)
		n := max(1, int(math.Round(float64(pe-ps)/float64(bucket))))
		first[p] = len(spans)
		for k := range n {
			spans = append(spans, span{ps + (pe-ps)*time.Duration(k)/time.Duration(n), ps + (pe-ps)*time.Duration(k+1)/time.Duration(n)})
		}
		first[p+1] = len(spans)
	}
	lats = make([][]time.Duration, len(spans))
	for _, s := range samples {
		ps, pe := c.phaseBounds(s.Phase)
		at := min(max(s.At, ps), pe-1)
		k := first[s.Phase] + int(float64(at-ps)/float64(pe-ps)*float64(first[s.Phase+1]-first[s.Phase]))
		lats[k] = append(lats[k], s.Latency)
	}
	var d strings.Builder
	pen := false
	for k, l := range lats {
		if len(l) < 5 {
			pen = false
			continue
		}
		slices.Sort(l)
		y := sc.y(percentile(l, 0.99))
		if pen {
			fmt.Fprintf(&d, "V%.1fH%.1f", y, xOf(spans[k].to))
		} else {
			fmt.Fprintf(&d, "M%.1f %.1fH%.1f", xOf(spans[k].from), y, xOf(spans[k].to))
		}
		pen = true
	}
	fmt.Fprintf(b, `<path class="p99" d="%s" fill="none" stroke="%s" stroke-opacity="0.75" stroke-width="1.5" stroke-linejoin="round"/>`+"\n", d.String(), colInk)
}

// niceStep rounds d down to 1, 2 or 5 times a power of ten, at least 1ms.
func niceStep(d time.Duration) time.Duration {
	best := time.Millisecond
	for p := time.Millisecond; p <= d; p *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if p*m <= d {
				best = p * m
			}
		}
	}
	return best
}

// tickStep picks a time-axis step that gives at most about 12 ticks.
func tickStep(total time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute} {
		if total/s <= 12 {
			return s
		}
	}
	return 5 * time.Minute
}

// legendItem is one entry of a legend row.
type legendItem struct {
	kind    string // "dot", "probe", "line", "dash" or "band"
	colour  string
	opacity float64 // bands only
	label   string
}

// legend draws a row of legend items starting at the left of the plots,
// with their middle at row y.
func legend(b *strings.Builder, y float64, items []legendItem) {
	x := float64(plotLeft - 60)
	for _, it := range items {
		switch it.kind {
		case "dot":
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="8" height="8" fill="%s"/>`, x, y-4, it.colour)
		case "probe":
			fmt.Fprintf(b, `<path d="M%.1f %.1fl5 5-5 5-5-5z" fill="%s" stroke="%s"/>`, x+4, y-5, it.colour, colInk)
		case "dash":
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6 4"/>`, x-2, x+12, y, y, it.colour)
		case "line":
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`, x-2, x+12, y, y, it.colour)
		case "band":
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="14" height="12" fill="%s" fill-opacity="%.2f" stroke="#ccc"/>`, x-2, y-6, it.colour, it.opacity)
		}
		b.WriteString("\n")
		text(b, x+18, y+4, "start", "", it.label)
		x += 18 + textWidth(it.label) + 22
	}
}

// textWidth estimates the width of s at 12px in a sans-serif font.
func textWidth(s string) float64 {
	return float64(len([]rune(s))) * 6.4
}

// text writes a <text> element with escaped content.
func text(b *strings.Builder, x, y float64, anchor, attrs, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, attrs, esc(s))
}

// esc escapes s for XML character data and attribute values.
func esc(s string) string {
	var buf bytes.Buffer
	_ = xml.EscapeText(&buf, []byte(s))
	return buf.String()
}
