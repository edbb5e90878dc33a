package redisstore

import (
	"math"
	"strings"
	"testing"
	"time"
)

const testID = "0123456789abcdef"

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
	} {
		got, err := decodeWire(w.encode())
		if err != nil {
			t.Fatalf("decode(%q): %v", w.encode(), err)
		}
		if got != w {
			t.Fatalf("round trip: got %+v, want %+v", got, w)
		}
	}
}

func TestWireGarbage(t *testing.T) {
	for _, s := range []string{
		"",
		"garbage",
		"1 o 123 " + testID,         // no key
		"1 o 123 " + testID + " ",   // empty key
		"2 o 123 " + testID + " k",  // version
		"1 x 123 " + testID + " k",  // state
		"1 o -5 " + testID + " k",   // negative
		"1 o +5 " + testID + " k",   // sign
		"1 o 0 " + testID + " k",    // zero retry-at
		"1 o 0x10 " + testID + " k", // hex
		"1 o 1e9 " + testID + " k",  // float
		"1 o 9999999999999999999999 " + testID + " k",              // overflow
		"1 o  " + testID + " k",                                    // empty time
		"1 c 5 " + testID + " k",                                   // closed with a time
		"1 o 5 0123456789ABCDEF k",                                 // upper-case instance
		"1 o 5 0123 k",                                             // short instance
		"1 o 5 " + testID + "0 k",                                  // long instance
		"1 o 5 " + testID + " " + strings.Repeat("k", MaxKeyLen+1), // key too long
		"1 o 5 " + testID + "/ k",                                  // empty member number
		"1 o 5 " + testID + "/0 k",                                 // member 0
		"1 o 5 " + testID + "/01 k",                                // leading zero
		"1 o 5 " + testID + "/-1 k",                                // negative member
		"1 o 5 " + testID + "/+1 k",                                // sign
		"1 o 5 " + testID + "/1a k",                                // not decimal
		"1 o 5 " + testID + "/1/2 k",                               // two members
		"1 o 5 " + testID + "/12345678901 k",                       // 11 digits
		"1 o 5 /1 k",                                               // member without instance
		strings.Repeat("x", 1<<20),                                 // huge
		`{"k":"json","s":"open"}`,
	} {
		if w, err := decodeWire(s); err == nil {
			t.Errorf("decode(%.60q) accepted: %+v", s, w)
		}
	}
}

func FuzzDecodeWire(f *testing.F) {
	f.Add("1 o 1700000000123 " + testID + " api:443")
	f.Add("1 c 0 " + testID + " k k k")
	f.Add("1 o 99999999999999 " + testID + " \xff")
	f.Add("1 o 5 " + testID + "/12 k")
	f.Fuzz(func(t *testing.T, s string) {
		w, err := decodeWire(s)
		if err != nil {
			return
		}
		if len(w.key) == 0 || len(w.key) > MaxKeyLen || !validSender(w.sender) || (w.open && w.openFor <= 0) {
			t.Fatalf("accepted an invalid hint %+v from %q", w, s)
		}
		if w.encode() != s {
			t.Fatalf("not canonical: %q decodes to %+v, which encodes to %q", s, w, w.encode())
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
