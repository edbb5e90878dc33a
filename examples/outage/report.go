package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// printIntro says what is about to run.
func printIntro(w io.Writer, c config) {
	fmt.Fprintf(w, "Checkout asks a fraud service to score every order, through an http.Client with a %v timeout.\n", c.Timeout)
	fmt.Fprintf(w, "Fraud is healthy until %s, hangs every call (until the caller gives up) until %s, then recovers; runs last %s.\n",
		secs(c.healthyEnd()), secs(c.outageEnd()), secs(c.Duration))
	fmt.Fprintf(w, "%d callers loop on checkout (%v pause between orders) against two copies at once, alike but for the fraud client:\n",
		c.Concurrency, c.Think)
	fmt.Fprintf(w, "  plain:       &http.Client{Transport: cleanhttp.DefaultPooledTransport(), Timeout: %v}\n", c.Timeout)
	fmt.Fprintf(w, "  httpbreaker: &http.Client{Transport: httpbreaker.New(nil, WithMinRequests(%d), WithWindow(%v),\n", c.MinRequests, c.Window)
	fmt.Fprintf(w, "                 WithOpenTimeout(%v), WithMaxOpenTimeout(%v)), Timeout: %v}\n", c.OpenTimeout, c.MaxOpenTimeout, c.Timeout)
	fmt.Fprintln(w, "When fraud cannot answer, checkout accepts the order as pending review (202): nothing ships until a")
	fmt.Fprintln(w, "deferred fraud check clears it. Failing open is a risk decision; the breaker decides only how fast it is taken.")
	fmt.Fprintln(w)
}

// Column widths of the table.
const (
	labelWidth = 28
	colWidth   = 20
)

// printTable prints the side-by-side comparison, the breaker's
// transitions and a one-line verdict.
func printTable(w io.Writer, r result) {
	row := func(label, a, b string) {
		fmt.Fprintf(w, "%-*s%*s%*s\n", labelWidth, label, colWidth, a, colWidth, b)
	}
	row("", r.Plain.Name, r.Breaker.Name)
	fmt.Fprintln(w, strings.Repeat("─", labelWidth+2*colWidth))
	for p := range numPhases {
		a, b := r.Plain.Phases[p], r.Breaker.Phases[p]
		title := a.Name
		if p == phaseOutage {
			title += " (fraud hangs)"
		}
		fmt.Fprintf(w, "%s  %s–%s\n", title, secs(a.Start), secs(a.End))
		row("  latency p50", dur(a.P50), dur(b.P50))
		row("  latency p99", dur(a.P99), dur(b.P99))
		row("  orders served", count(int64(a.Served)), count(int64(b.Served)))
		row("    of which deferred", count(int64(a.Deferred)), count(int64(b.Deferred)))
		row("  calls reaching fraud", count(a.FraudCalls), count(b.FraudCalls))
		row("  workers held avg / max", held(a), held(b))
	}
	fmt.Fprintln(w, strings.Repeat("─", labelWidth+2*colWidth))
	if n := r.Plain.LoadErrors + r.Breaker.LoadErrors; n > 0 {
		fmt.Fprintf(w, "load errors: plain %d, httpbreaker %d\n", r.Plain.LoadErrors, r.Breaker.LoadErrors)
	}

	fmt.Fprintln(w, "\nbreaker transitions (WithOnTransition), time since start:")
	if len(r.Breaker.Transitions) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, t := range r.Breaker.Transitions {
		note := ""
		switch {
		case t.From == httpbreaker.StateClosed && t.To == httpbreaker.StateOpen:
			note = "the first wave of timeouts tripped it"
		case t.To == httpbreaker.StateHalfOpen:
			note = "next request is a probe"
		case t.From == httpbreaker.StateHalfOpen && t.To == httpbreaker.StateOpen:
			note = "probe failed: open again, for longer"
		case t.From == httpbreaker.StateHalfOpen && t.To == httpbreaker.StateClosed:
			note = "probes succeeded"
		}
		fmt.Fprintf(w, "  %8s  %-21s %s\n", secs3(t.At), t.From.String()+" → "+t.To.String(), note)
	}

	a, b := r.Plain.Phases[phaseOutage], r.Breaker.Phases[phaseOutage]
	fmt.Fprintf(w, "\nDuring the outage, with httpbreaker: p99 %s instead of %s (%s lower), %s as many orders served,\n",
		dur(b.P99), dur(a.P99), ratio(float64(a.P99), float64(b.P99)), ratio(float64(b.Served), float64(a.Served)))
	fmt.Fprintf(w, "%s fewer calls piled onto the fraud service, %s fewer checkout workers held on average.\n",
		ratio(float64(a.FraudCalls), float64(b.FraudCalls)), ratio(a.HeldAvg, b.HeldAvg))
	fmt.Fprintf(w, "The peak is the same: until the first timeouts land, %v after the outage starts, no breaker can know.\n",
		r.Config.Timeout)
}

// held formats average and peak workers held.
func held(p phaseStats) string {
	return fmt.Sprintf("%.1f / %d", p.HeldAvg, p.HeldMax)
}

// ratio formats a/b as "12×", or "∞×" when b is 0.
func ratio(a, b float64) string {
	if b <= 0 {
		return "∞×"
	}
	r := a / b
	switch {
	case r >= 100:
		return count(int64(math.Round(r))) + "×"
	case r >= 10:
		return fmt.Sprintf("%.0f×", r)
	}
	return fmt.Sprintf("%.1f×", r)
}

// dur formats a latency with three significant figures or so.
func dur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "–"
	case ms < 1:
		return fmt.Sprintf("%.0fµs", ms*1000)
	case ms < 10:
		return fmt.Sprintf("%.1fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.2fs", ms/1000)
}

// secs formats an offset in seconds, dropping a zero fraction.
func secs(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// secs3 formats an offset in seconds with milliseconds.
func secs3(d time.Duration) string {
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// count formats n with thousands separators.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + count(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
