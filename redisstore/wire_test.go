package redisstore

import (
	"math"
	"strings"
	"testing"
	"time"
)

const testID = "0123456789abcdef"

// TestWireRoundTrip: what encode writes, decodeWire reads back, and so
// for encodeV1 of what version 1 can carry.
func TestWireRoundTrip(t *testing.T) {
	for _, w := range []wireHint{
		{open: true, openFor: 1700000000123, sender: testID, key: "api.example:443"},
		{open: false, sender: testID, key: "api.example:443 POST /v1/charges"},
		{open: true, openFor: 1, sender: testID, key: "with spaces | and 1 o 2 separators"},
		{open: true, openFor: 5, sender: testID, key: "\xff\xfe not utf-8 \x00 nul"},
		{open: true, openFor: 5, sender: testID, key: strings.Repeat("k", MaxKeyLen)},
		{open: true, openFor: 5, sender: testID + "/1", key: "k"},
		{open: false, sender: testID + "/4294967296", key: "a/b 1/2"},
		{open: true, openFor: 999_999_999_999_999, sender: testID + "/9999999999", key: strings.Repeat("k", MaxKeyLen)},
		{open: true, openFor: 800, cycles: 3, sender: testID + "/2", key: "k"},
		{open: true, openFor: 2000, cycles: maxCycles, sender: testID, key: "2 o 1 1 1 k"},
		{open: true, openFor: 3_600_000, operator: true, sender: testID + "/1", key: "k"},
		{open: true, openFor: 0, operator: true, sender: testID + "/1", key: "k"}, // until Reset
		{open: true, openFor: 0, cycles: 4, operator: true, sender: testID, key: "k"},
		{open: false, operator: true, sender: testID + "/3", key: "k"},
		{open: true, openFor: 999_999_999_999_999, cycles: maxCycles, operator: true, sender: testID + "/9999999999", key: strings.Repeat("k", MaxKeyLen)},
	} {
		enc := w.encode()
		if !strings.HasPrefix(enc, "2 ") {
			t.Fatalf("encode(%+v) = %q: not version 2", w, enc)
		}
		got, err := decodeWire(enc)
		if err != nil {
			t.Fatalf("decode(%q): %v", enc, err)
		}
		if got != w {
			t.Fatalf("round trip: got %+v, want %+v", got, w)
		}
		// Version 1 carries what it can: no cycles, no operator.
		if w.operator || (!w.open && w.openFor != 0) {
			continue
		}
		v1 := w
		v1.cycles = 0
		if got, err := decodeWire(w.encodeV1()); err != nil || got != v1 {
			t.Fatalf("v1 round trip of %+v: got %+v, %v", v1, got, err)
		}
	}
}

// TestWireExamples pins the two versions' spelling, as other releases
// write and read it.
func TestWireExamples(t *testing.T) {
	for _, c := range []struct {
		w    wireHint
		v2   string
		v1   string // "": not expressible in version 1
		note string
	}{
		{wireHint{open: true, openFor: 300, sender: testID + "/1", key: "api:443"}, "2 o 300 0 0 " + testID + "/1 api:443", "1 o 300 " + testID + "/1 api:443", "open"},
		{wireHint{open: true, openFor: 1600, cycles: 4, sender: testID + "/1", key: "api:443"}, "2 o 1600 4 0 " + testID + "/1 api:443", "", "open after 4 failed probe cycles"},
		{wireHint{sender: testID + "/1", key: "api:443"}, "2 c 0 0 0 " + testID + "/1 api:443", "1 c 0 " + testID + "/1 api:443", "closed"},
		{wireHint{open: true, openFor: 3_600_000, operator: true, sender: testID + "/1", key: "api:443"}, "2 o 3600000 0 1 " + testID + "/1 api:443", "", "Trip for an hour"},
		{wireHint{open: true, operator: true, sender: testID + "/1", key: "api:443"}, "2 o 0 0 1 " + testID + "/1 api:443", "", "Trip until Reset"},
		{wireHint{operator: true, sender: testID + "/1", key: "api:443"}, "2 c 0 0 1 " + testID + "/1 api:443", "", "Reset"},
	} {
		if got := c.w.encode(); got != c.v2 {
			t.Errorf("%s: encode = %q, want %q", c.note, got, c.v2)
		}
		if c.v1 != "" {
			if got := c.w.encodeV1(); got != c.v1 {
				t.Errorf("%s: encodeV1 = %q, want %q", c.note, got, c.v1)
			}
			if _, err := decodeV1(c.v1); err != nil {
				t.Errorf("%s: decodeV1(%q): %v", c.note, c.v1, err)
			}
		}
		// A Store of an earlier release reads version 1 only: version 2
		// is garbage to it, whatever it says.
		if w, err := decodeV1(c.v2); err == nil {
			t.Errorf("%s: the version 1 decoder accepted %q as %+v", c.note, c.v2, w)
		}
	}
}

// TestWireCyclesClamped: a count of cycles beyond what the wire carries is
// sent as maxCycles, a negative one as 0.
func TestWireCyclesClamped(t *testing.T) {
	for c, want := range map[int]int{-1: 0, 0: 0, 7: 7, maxCycles: maxCycles, maxCycles + 1: maxCycles, 1 << 40: maxCycles} {
		got, err := decodeWire(wireHint{open: true, openFor: 5, cycles: c, sender: testID, key: "k"}.encode())
		if err != nil || got.cycles != want {
			t.Errorf("cycles %d: decoded %+v, %v; want %d", c, got, err, want)
		}
	}
}

// TestWireGarbage: nothing but what encode and encodeV1 write is read.
func TestWireGarbage(t *testing.T) {
	for _, s := range []string{
		"",
		"garbage",
		"1 o 123 " + testID,                           // no key
		"1 o 123 " + testID + " ",                     // empty key
		"3 o 123 " + testID + " k",                    // version
		"0 o 123 " + testID + " k",                    // version
		"1 x 123 " + testID + " k",                    // state
		"1 o -5 " + testID + " k",                     // negative
		"1 o +5 " + testID + " k",                     // sign
		"1 o 0 " + testID + " k",                      // zero retry-at
		"1 o 05 " + testID + " k",                     // leading zero
		"1 o 0x10 " + testID + " k",                   // hex
		"1 o 1e9 " + testID + " k",                    // float
		"1 o 9999999999999999999999 " + testID + " k", // overflow
		"1 o  " + testID + " k",                       // empty time
		"1 c 5 " + testID + " k",                      // closed with a time
		"1 o 5 0123456789ABCDEF k",                    // upper-case instance
		"1 o 5 0123 k",                                // short instance
		"1 o 5 " + testID + "0 k",                     // long instance
		"1 o 5 " + testID + " " + strings.Repeat("k", MaxKeyLen+1),     // key too long
		"1 o 5 " + testID + "/ k",                                      // empty member number
		"1 o 5 " + testID + "/0 k",                                     // member 0
		"1 o 5 " + testID + "/01 k",                                    // leading zero
		"1 o 5 " + testID + "/-1 k",                                    // negative member
		"1 o 5 " + testID + "/+1 k",                                    // sign
		"1 o 5 " + testID + "/1a k",                                    // not decimal
		"1 o 5 " + testID + "/1/2 k",                                   // two members
		"1 o 5 " + testID + "/12345678901 k",                           // 11 digits
		"1 o 5 /1 k",                                                   // member without instance
		"1 o 5 0 0 " + testID + " k",                                   // version 2 fields under version 1
		"2 o 123 " + testID + " k",                                     // version 1 fields under version 2
		"2 o 5 0 " + testID + " k",                                     // no flags
		"2 o 5 0 0 " + testID,                                          // no key
		"2 o 5 0 0 " + testID + " ",                                    // empty key
		"2 o 0 0 0 " + testID + " k",                                   // zero open time, not an operator's
		"2 o -5 0 0 " + testID + " k",                                  // negative
		"2 o 05 0 0 " + testID + " k",                                  // leading zero
		"2 o 00 0 1 " + testID + " k",                                  // leading zero, operator
		"2 o 1234567890123456 0 0 " + testID + " k",                    // 16 digits
		"2 o 5 -1 0 " + testID + " k",                                  // negative cycles
		"2 o 5 +1 0 " + testID + " k",                                  // sign
		"2 o 5 01 0 " + testID + " k",                                  // leading zero
		"2 o 5 10000 0 " + testID + " k",                               // 5 digits
		"2 o 5 1.5 0 " + testID + " k",                                 // not an integer
		"2 o 5  0 " + testID + " k",                                    // empty cycles
		"2 o 5 0 2 " + testID + " k",                                   // an unknown flag
		"2 o 5 0 3 " + testID + " k",                                   // an unknown flag with the operator's
		"2 o 5 0 01 " + testID + " k",                                  // leading zero
		"2 o 5 0 x " + testID + " k",                                   // not a number
		"2 o 5 0  " + testID + " k",                                    // empty flags
		"2 c 5 0 0 " + testID + " k",                                   // closed with a time
		"2 c 0 3 0 " + testID + " k",                                   // closed with cycles
		"2 c 0 0 2 " + testID + " k",                                   // closed, unknown flag
		"2 c 0 0 0 0123 k",                                             // short instance
		"2 c 0 0 0 " + testID + "/0 k",                                 // member 0
		"2 x 5 0 0 " + testID + " k",                                   // state
		"2  5 0 0 " + testID + " k",                                    // empty state
		"2 o 5 0 0 " + testID + " " + strings.Repeat("k", MaxKeyLen+1), // key too long
		strings.Repeat("x", 1<<20),                                     // huge
		`{"k":"json","s":"open"}`,
	} {
		if w, err := decodeWire(s); err == nil {
			t.Errorf("decode(%.60q) accepted: %+v", s, w)
		}
	}
}

// FuzzDecodeWire: whatever it is given, decodeWire never panics, accepts
// only valid hints, in their one spelling, and reads version 1 as an
// earlier release does.
func FuzzDecodeWire(f *testing.F) {
	f.Add("1 o 1700000000123 " + testID + " api:443")
	f.Add("1 c 0 " + testID + " k k k")
	f.Add("1 o 99999999999999 " + testID + " \xff")
	f.Add("1 o 5 " + testID + "/12 k")
	f.Add("2 o 1600 4 0 " + testID + "/1 api:443")
	f.Add("2 o 0 0 1 " + testID + "/1 k k")
	f.Add("2 c 0 0 1 " + testID + " k")
	f.Add("2 o 999999999999999 9999 1 " + testID + "/9999999999 \xff")
	f.Fuzz(func(t *testing.T, s string) {
		w, err := decodeWire(s)
		if err != nil {
			return
		}
		if len(w.key) == 0 || len(w.key) > MaxKeyLen || !validSender(w.sender) ||
			(w.open && w.openFor <= 0 && !w.operator) || w.openFor < 0 ||
			w.cycles < 0 || w.cycles > maxCycles || (!w.open && (w.openFor != 0 || w.cycles != 0)) {
			t.Fatalf("accepted an invalid hint %+v from %q", w, s)
		}
		enc := w.encode()
		if strings.HasPrefix(s, "1 ") {
			enc = w.encodeV1()
			if w.cycles != 0 || w.operator {
				t.Fatalf("version 1 %q decoded to %+v", s, w)
			}
		}
		if enc != s {
			t.Fatalf("not canonical: %q decodes to %+v, which encodes to %q", s, w, enc)
		}
		// What an earlier release reads is what this one reads of
		// version 1, and nothing of version 2.
		w1, err1 := decodeV1(s)
		if strings.HasPrefix(s, "1 ") != (err1 == nil) || (err1 == nil && w1 != w) {
			t.Fatalf("decodeV1(%q) = %+v, %v; decodeWire: %+v", s, w1, err1, w)
		}
	})
}

func TestRetryAt(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	maxOpen := time.Minute
	for _, d := range []time.Duration{0, -time.Second} {
		if _, ok := retryAt(d, now, maxOpen); ok {
			t.Errorf("open for %v accepted", d)
		}
	}
	if r, ok := retryAt(5*time.Second, now, maxOpen); !ok || !r.Equal(now.Add(5*time.Second)) {
		t.Errorf("5s: got %v %v", r, ok)
	}
	// Absurd open times (a thousand years, the largest the wire allows)
	// are cut to MaxOpen.
	for _, ms := range []int64{1000 * 365 * 24 * 3600 * 1000, 999_999_999_999_999, math.MaxInt64} {
		if r, ok := retryAt(msDuration(ms), now, maxOpen); !ok || !r.Equal(now.Add(maxOpen)) {
			t.Errorf("%d ms: got %v %v, want now+MaxOpen", ms, r, ok)
		}
	}
}

func TestEscapeGlob(t *testing.T) {
	if got, want := escapeGlob(`a*b?c[d]e\f-g^h:open:`), `a\*b\?c\[d\]e\\f\-g\^h:open:`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
