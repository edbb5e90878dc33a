package httpbreaker

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	// date is the instant named by every valid HTTP-date below.
	date := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)
	const (
		imf     = "Sun, 06 Nov 1994 08:49:37 GMT"
		rfc850  = "Sunday, 06-Nov-94 08:49:37 GMT"
		asctime = "Sun Nov  6 08:49:37 1994"
	)
	before := date.Add(-90 * time.Second) // date is 90s in the future
	after := date.Add(time.Hour)          // date is 1h in the past

	tests := []struct {
		name   string
		value  string
		now    time.Time
		want   time.Duration
		wantOK bool
	}{
		// delay-seconds
		{name: "zero", value: "0", want: 0, wantOK: true},
		{name: "seconds", value: "120", want: 120 * time.Second, wantOK: true},
		{name: "leading zeros", value: "007", want: 7 * time.Second, wantOK: true},
		{name: "all zeros", value: "0000", want: 0, wantOK: true},
		{name: "leading and trailing spaces", value: "  30  ", want: 30 * time.Second, wantOK: true},
		{name: "tabs", value: "\t30\t", want: 30 * time.Second, wantOK: true},
		{name: "mixed whitespace", value: " \t 30 \t ", want: 30 * time.Second, wantOK: true},
		{name: "exactly 24h", value: "86400", want: maxRetryAfter, wantOK: true},
		{name: "just over 24h clamped", value: "86401", want: maxRetryAfter, wantOK: true},
		{name: "max int64 clamped", value: "9223372036854775807", want: maxRetryAfter, wantOK: true},
		{name: "max uint64 clamped", value: "18446744073709551615", want: maxRetryAfter, wantOK: true},
		{name: "overflows uint64 clamped", value: "99999999999999999999999", want: maxRetryAfter, wantOK: true},
		{name: "huge with leading zeros", value: "000000000000000000000000000001", want: time.Second, wantOK: true},
		{name: "plus sign", value: "+1", wantOK: false},
		{name: "minus sign", value: "-1", wantOK: false},
		{name: "fraction", value: "1.0", wantOK: false},
		{name: "fraction half", value: "1.5", wantOK: false},
		{name: "exponent", value: "1e3", wantOK: false},
		{name: "hex", value: "0x10", wantOK: false},
		{name: "inner space", value: "1 2", wantOK: false},
		{name: "unit suffix", value: "5s", wantOK: false},
		{name: "list", value: "5,6", wantOK: false},
		{name: "huge with trailing garbage", value: "99999999999999999999999x", wantOK: false},
		{name: "non-ASCII digit", value: "٣", wantOK: false},
		{name: "newline is not OWS", value: "5\n", wantOK: false},

		// empty
		{name: "empty", value: "", wantOK: false},
		{name: "space only", value: " ", wantOK: false},
		{name: "whitespace only", value: " \t \t", wantOK: false},

		// IMF-fixdate
		{name: "imf future", value: imf, now: before, want: 90 * time.Second, wantOK: true},
		{name: "imf past", value: imf, now: after, want: 0, wantOK: true},
		{name: "imf equal", value: imf, now: date, want: 0, wantOK: true},
		{name: "imf whitespace", value: "\t " + imf + " \t", now: before, want: 90 * time.Second, wantOK: true},
		{name: "imf clamped", value: imf, now: date.Add(-48 * time.Hour), want: maxRetryAfter, wantOK: true},
		{name: "imf exactly 24h", value: imf, now: date.Add(-24 * time.Hour), want: maxRetryAfter, wantOK: true},
		{name: "imf far past", value: imf, now: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), want: 0, wantOK: true},
		{name: "imf far future", value: imf, now: time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC), want: maxRetryAfter, wantOK: true},

		// obsolete RFC 850
		{name: "rfc850 future", value: rfc850, now: before, want: 90 * time.Second, wantOK: true},
		{name: "rfc850 past", value: rfc850, now: after, want: 0, wantOK: true},
		{name: "rfc850 equal", value: rfc850, now: date, want: 0, wantOK: true},

		// asctime
		{name: "asctime future", value: asctime, now: before, want: 90 * time.Second, wantOK: true},
		{name: "asctime past", value: asctime, now: after, want: 0, wantOK: true},
		{name: "asctime equal", value: asctime, now: date, want: 0, wantOK: true},
		{name: "asctime whitespace", value: " " + asctime + "\t", now: before, want: 90 * time.Second, wantOK: true},

		// invalid dates
		{name: "garbage", value: "soon", now: before, wantOK: false},
		{name: "garbage date", value: "Sun, 06 Nov 1994 08:49:37 GMT garbage", now: before, wantOK: false},
		{name: "truncated date", value: "Sun, 06 Nov 1994", now: before, wantOK: false},
		{name: "invalid day", value: "Mon, 32 Nov 1994 08:49:37 GMT", now: before, wantOK: false},
		{name: "invalid month", value: "Sun, 06 Foo 1994 08:49:37 GMT", now: before, wantOK: false},
		{name: "invalid hour", value: "Sun, 06 Nov 1994 25:49:37 GMT", now: before, wantOK: false},
		{name: "February 30", value: "Wed, 30 Feb 2000 00:00:00 GMT", now: before, wantOK: false},
		{name: "RFC 850 in another zone", value: "Sunday, 06-Nov-94 08:49:37 PST", now: before, wantOK: false},
		{name: "RFC 3339", value: "1994-11-06T08:49:37Z", now: before, wantOK: false},
		// http.ParseTime matches day and month names case-insensitively.
		{name: "lowercase day name", value: "sun, 06 nov 1994 08:49:37 GMT", now: before, want: 90 * time.Second, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = date
			}
			got, ok := ParseRetryAfter(tt.value, now)
			require.Equal(t, tt.wantOK, ok, "ok for %q", tt.value)
			require.Equal(t, tt.want, got, "duration for %q", tt.value)
		})
	}
}

func TestParseRetryAfterSecondsDoesNotAllocate(t *testing.T) {
	now := time.Now()
	for _, v := range []string{"120", " 007\t", "99999999999999999999999", "1.5"} {
		allocs := testing.AllocsPerRun(100, func() {
			_, _ = ParseRetryAfter(v, now)
		})
		require.Zero(t, allocs, "allocations for %q", v)
	}
}

// isASCIIDigits reports whether s is non-empty and consists only of ASCII
// digits.
func isASCIIDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, seed := range []string{
		"",
		" ",
		"0",
		"120",
		"007",
		" \t30\t ",
		"86400",
		"86401",
		"99999999999999999999999",
		"+1",
		"-1",
		"1.5",
		"1e3",
		"0x10",
		"5s",
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"Mon, 32 Nov 1994 08:49:37 GMT",
		"Fri, 31 Dec 9999 23:59:59 GMT",
	} {
		f.Add(seed)
	}

	now := time.Date(1994, time.November, 6, 8, 48, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s, now)

		require.GreaterOrEqual(t, d, time.Duration(0), "negative duration for %q", s)
		require.LessOrEqual(t, d, maxRetryAfter, "duration above cap for %q", s)
		if !ok {
			require.Zero(t, d, "non-zero duration with ok=false for %q", s)
		}

		// Surrounding optional whitespace never changes the result.
		d2, ok2 := ParseRetryAfter(" \t"+s+"\t ", now)
		require.Equal(t, ok, ok2, "whitespace changed ok for %q", s)
		require.Equal(t, d, d2, "whitespace changed duration for %q", s)

		trimmed := strings.Trim(s, " \t")
		switch {
		case isASCIIDigits(trimmed):
			// Every pure digit string is valid delay-seconds.
			require.True(t, ok, "digits rejected: %q", s)
			if len(trimmed) <= 18 { // always fits in a uint64
				n, err := strconv.ParseUint(trimmed, 10, 64)
				require.NoError(t, err)
				want := time.Duration(min(n, maxRetryAfterSeconds)) * time.Second
				require.Equal(t, want, d, "disagrees with strconv for %q", s)
			}
		case trimmed != "" && trimmed[0] >= '0' && trimmed[0] <= '9':
			// Starts like delay-seconds but contains a non-digit.
			require.False(t, ok, "accepted malformed delay-seconds %q", s)
		case ok:
			// Anything else accepted must be an HTTP-date.
			_, err := http.ParseTime(trimmed)
			require.NoError(t, err, "accepted %q, which http.ParseTime rejects", s)
		}
	})
}

func BenchmarkParseRetryAfter(b *testing.B) {
	now := time.Now()
	b.Run("seconds", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = ParseRetryAfter("120", now)
		}
	})
	b.Run("http-date", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now)
		}
	})
}

// TestParseRetryAfterRFC850Year: RFC 9110 §5.6.7 reads a two-digit year
// as the latest year with those digits not more than 50 years ahead;
// Go's own reading (69–99 as 19xx) differs in part of the range.
func TestParseRetryAfterRFC850Year(t *testing.T) {
	for _, tc := range []struct {
		now    int // year
		value  string
		want   time.Duration
		reason string
	}{
		{2026, "Thursday, 01-Jan-70 00:00:00 GMT", maxRetryAfter, "2070: 44 years ahead, a date in the future"},
		{2026, "Friday, 01-Jan-77 00:00:00 GMT", 0, "2077 is 51 years ahead: 1977, past"},
		{2026, "Thursday, 01-Jan-26 00:01:00 GMT", time.Minute, "this century"},
		{2090, "Tuesday, 01-Jan-10 00:00:00 GMT", maxRetryAfter, "2110: 20 years ahead, not 2010"},
		{1994, "Sunday, 06-Nov-94 00:01:00 GMT", time.Minute, "1994"},
	} {
		now := time.Date(tc.now, time.January, 1, 0, 0, 0, 0, time.UTC)
		if tc.now == 1994 {
			now = time.Date(1994, time.November, 6, 0, 0, 0, 0, time.UTC)
		}
		d, ok := ParseRetryAfter(tc.value, now)
		require.True(t, ok, tc.value)
		require.Equal(t, tc.want, d, tc.reason)
	}
}
