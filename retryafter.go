package httpbreaker

import (
	"net/http"
	"strings"
	"time"
)

// maxRetryAfter is the longest delay ParseRetryAfter will return. Longer
// values are clamped to 24h; the breaker caps again at MaxOpenTimeout.
const maxRetryAfter = 24 * time.Hour

// maxRetryAfterSeconds is maxRetryAfter expressed in whole seconds.
const maxRetryAfterSeconds = uint64(maxRetryAfter / time.Second)

// ParseRetryAfter parses an HTTP Retry-After header value (RFC 9110 §10.2.3)
// relative to now and reports how long to wait before retrying.
//
// The rules are:
//
//   - Optional whitespace (spaces and horizontal tabs) around the value is
//     ignored. An empty or all-whitespace value yields (0, false).
//   - delay-seconds must be 1*DIGIT: ASCII digits only. Signs ("+5", "-5"),
//     fractions ("1.5"), exponents ("1e3"), hex ("0x10"), inner whitespace
//     ("1 2") and trailing garbage ("5s", "5,6") are rejected with (0, false).
//     Leading zeros are allowed ("007" is 7s). "0" yields (0, true).
//   - An HTTP-date may be in any of the three forms accepted by
//     [http.ParseTime]: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the
//     obsolete RFC 850 form ("Sunday, 06-Nov-94 08:49:37 GMT") or the
//     ANSI C asctime form ("Sun Nov  6 08:49:37 1994"); the RFC 850 form
//     must say GMT, as RFC 9110 requires, and its two-digit year is the
//     latest one that is not more than 50 years after now (RFC 9110
//     §5.6.7: "70" is 2070 in 2026, "80" is 1980). The result is the
//     date minus now. A date at or before now yields (0, true), meaning
//     "retry now". An unparseable date (including out-of-range fields such
//     as day 32) yields (0, false).
//   - Delays longer than 24h are clamped to 24h; the breaker caps again at
//     MaxOpenTimeout. This includes digit strings too long to fit in an
//     integer, which never wrap around to a negative or short delay.
//
// The returned duration is never negative, and it is 0 whenever ok is false.
// Parsing the delay-seconds form does not allocate.
func ParseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return 0, false
	}

	// All three HTTP-date forms start with a day name, so a leading digit
	// can only be delay-seconds.
	if c := v[0]; '0' <= c && c <= '9' {
		return parseDelaySeconds(v)
	}

	// http.ParseTime reads any zone name in the RFC 850 form (the one
	// with dashes), which would make the result depend on the machine's
	// zone database; HTTP-dates are always GMT.
	rfc850 := strings.IndexByte(v, '-') >= 0
	if rfc850 && !strings.HasSuffix(v, " GMT") {
		return 0, false
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if rfc850 {
		t = rfc850Year(t, now)
	}
	// Time.Sub saturates rather than overflowing for far-off dates.
	d = t.Sub(now)
	if d <= 0 {
		return 0, true
	}
	return min(d, maxRetryAfter), true
}

// rfc850Year gives t, parsed from the two-digit year of the RFC 850 form,
// the year RFC 9110 §5.6.7 reads into it: the latest year with those last
// two digits that is not more than 50 years after now.
func rfc850Year(t, now time.Time) time.Time {
	y := now.Year() - now.Year()%100 + t.Year()%100
	switch {
	case y > now.Year()+50:
		y -= 100
	case y+100 <= now.Year()+50:
		y += 100
	}
	return t.AddDate(y-t.Year(), 0, 0)
}

// parseDelaySeconds parses a non-empty delay-seconds value (1*DIGIT),
// clamping it to maxRetryAfter. It does not allocate.
func parseDelaySeconds(v string) (time.Duration, bool) {
	var n uint64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		// Stop accumulating once past the clamp: n stays small enough that
		// n*10+9 can never overflow, however many digits follow. The
		// remaining digits are still validated.
		if n <= maxRetryAfterSeconds {
			n = n*10 + uint64(c-'0')
		}
	}
	if n > maxRetryAfterSeconds {
		return maxRetryAfter, true
	}
	return time.Duration(n) * time.Second, true
}

// retryAfter is the delay the Retry-After header of resp asks for, when
// the outcome o of the call may open the breaker (a failure or a 429),
// or 0.
func retryAfter(resp *http.Response, o Outcome) time.Duration {
	if resp == nil || o != OutcomeFailure && o != OutcomeThrottled {
		return 0
	}
	return headerRetryAfter(resp.Header)
}

// headerRetryAfter is the delay a Retry-After header in h asks for, or 0.
func headerRetryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	d, ok := ParseRetryAfter(v, time.Now())
	if !ok {
		return 0
	}
	return d
}
