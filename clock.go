package httpbreaker

import (
	"math"
	"time"
)

// This file is the one place where clock times and durations meet. Every
// option accepts durations up to time.Duration(math.MaxInt64), which
// means "very long", never "already passed": a clock time plus a
// duration saturates at the clock's end, and a deadline minus now
// saturates at zero and below (time.Time.Sub saturates on its own, and
// RoundTrip relies on it for the deadline budget).

// never is the clock's end: the clock time later gives for a d the
// clock cannot reach, such as an operator's trip until Reset.
const never = math.MaxInt64

// later returns clock time now plus d, saturated at the clock's ends:
// a d the clock cannot reach gives never.
func later(now int64, d time.Duration) int64 {
	switch {
	// Only a sum of two terms of one sign can pass an end (and only then
	// does the bound not wrap).
	case d > 0 && now > 0 && int64(d) > math.MaxInt64-now:
		return never
	case d < 0 && now < 0 && int64(d) < math.MinInt64-now:
		return math.MinInt64
	}
	return now + int64(d)
}

// doubled returns 2·d, saturated at the longest duration.
func doubled(d time.Duration) time.Duration {
	if d > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * d
}

// scaled returns d·f for f ≥ 0, saturated at the longest duration.
func scaled(d time.Duration, f float64) time.Duration {
	if x := float64(d) * f; x < math.MaxInt64 { // float64(MaxInt64) rounds up to 2^63
		return time.Duration(x)
	}
	return math.MaxInt64
}

// wall is the wall time of clock time now on a Transport's clock, which
// started at epoch: saturated, as time.Time.Add is.
func wall(epoch time.Time, now int64) time.Time { return epoch.Add(time.Duration(now)) }
