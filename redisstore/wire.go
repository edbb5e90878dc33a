package redisstore

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// MaxKeyLen is the longest breaker key the Store carries, in bytes. It is
// the longest key httpbreaker's own key functions produce; a longer key is
// not published, and a longer key read from Redis is ignored and counted.
const MaxKeyLen = 512

// maxWireLen bounds a message or value read from Redis before it is
// parsed: version, state, open time, cycles, flags, sender and key with
// their separators.
const maxWireLen = MaxKeyLen + 64

// instanceIDLen is the length of an instance ID: 16 lower-case hex digits.
const instanceIDLen = 16

// maxMemberDigits bounds the member number in a sender ID.
const maxMemberDigits = 10

// maxCycles is the largest count of failed probe cycles the wire carries
// (four digits); a larger count is sent as maxCycles. It changes nothing:
// a breaker's open time, doubled per cycle, reaches any maximum open
// timeout in far fewer cycles.
const maxCycles = 9999

// The wire versions: the first field of every message and open key. A
// Store writes wireVersion and reads both; a Store of an older release
// reads only wireV1, and ignores (and counts) everything else.
const (
	wireV1      = "1"
	wireVersion = "2"
)

// A wireHint is one hint as it travels through Redis, both as the message
// on the hints channel and as the value of an open or trip key. Version 2,
// which a Store writes:
//
//	2 o <open for, ms> <cycles> 0 <sender> <key>        an open breaker
//	2 c 0 0 0 <sender> <key>                            a closed one
//	2 o <open for, ms, or 0> <cycles> 1 <sender> <key>  an operator's Trip
//	2 c 0 0 1 <sender> <key>                            an operator's Reset
//
// and version 1, which Stores of earlier releases write and a Store still
// reads (as version 2 with no cycles and no flags):
//
//	1 o <open for, ms> <sender> <key>   an open breaker
//	1 c 0 <sender> <key>                a closed one
//
// Cycles is the count of consecutive failed probe cycles behind the open
// period (httpbreaker.Hint.Cycles), 0 to maxCycles. Flags is a bit set in
// decimal; bit 0 (1) marks an operator's hint (httpbreaker.Hint.Operator).
// No other bit is defined, and a value with one is invalid: a flag that
// older Stores must not silently miss needs a new version. An operator's
// open time may be 0, "until Reset"; any other open time is positive.
//
// The sender is the member that published the hint: its Store's instance
// ID, a slash and its member number ("0123456789abcdef/2", see
// Store.Join). A bare instance ID is accepted too.
//
// The key comes last and is taken verbatim to the end of the value, so any
// byte may appear in it (spaces, '|', invalid UTF-8) without escaping.
//
// An open hint says how long the breaker stays open from the moment it is
// sent, not until when: a receiver adds it to its own clock, so the
// instances' clocks need not agree (a message takes about a millisecond).
// An open or trip key's retry-at is read from its time to live in Redis,
// for the same reason; a trip key without one is a trip until Reset.
type wireHint struct {
	open     bool
	openFor  int64 // milliseconds; 0 when closed, or for an operator's "until Reset"
	cycles   int   // failed probe cycles, 0 to maxCycles; 0 when closed
	operator bool  // an operator's Trip or Reset
	sender   string
	key      string
}

// forever reports whether w is an operator's trip until Reset.
func (w wireHint) forever() bool { return w.open && w.operator && w.openFor == 0 }

// encode returns the version 2 form of w.
func (w wireHint) encode() string {
	var b strings.Builder
	b.Grow(len(w.key) + len(w.sender) + 32)
	b.WriteString(wireVersion)
	if w.open {
		b.WriteString(" o ")
		b.WriteString(strconv.FormatInt(w.openFor, 10))
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(min(max(w.cycles, 0), maxCycles)))
	} else {
		b.WriteString(" c 0 0")
	}
	if w.operator {
		b.WriteString(" 1 ")
	} else {
		b.WriteString(" 0 ")
	}
	b.WriteString(w.sender)
	b.WriteByte(' ')
	b.WriteString(w.key)
	return b.String()
}

// encodeV1 returns the version 1 form of w, as Stores of earlier releases
// write it; it drops w's cycles and operator flag, which version 1 cannot
// carry. A Store never writes it: it defines what decodeV1 reads, for the
// tests of a fleet that mixes releases.
func (w wireHint) encodeV1() string {
	var b strings.Builder
	b.Grow(len(w.key) + len(w.sender) + 28)
	b.WriteString(wireV1)
	if w.open {
		b.WriteString(" o ")
		b.WriteString(strconv.FormatInt(w.openFor, 10))
	} else {
		b.WriteString(" c 0")
	}
	b.WriteByte(' ')
	b.WriteString(w.sender)
	b.WriteByte(' ')
	b.WriteString(w.key)
	return b.String()
}

var errGarbage = errors.New("redisstore: invalid hint")

// decodeWire parses a message or value read from Redis, of either
// version. It accepts only what encode and encodeV1 produce, with a key
// of 1 to MaxKeyLen bytes and, for an open hint, a positive open time (or
// 0 for an operator's); anything else is errGarbage. It never panics,
// whatever s holds.
func decodeWire(s string) (wireHint, error) {
	if strings.HasPrefix(s, wireVersion+" ") {
		return decodeV2(s)
	}
	return decodeV1(s)
}

// decodeV1 parses a version 1 message or value: what a Store of an
// earlier release reads, and all it reads. It never panics.
func decodeV1(s string) (wireHint, error) {
	var f [4]string
	rest, ok := fields(s, f[:])
	if !ok || f[0] != wireV1 {
		return wireHint{}, errGarbage
	}
	w := wireHint{sender: f[3], key: rest}
	if !validSender(w.sender) || len(w.key) == 0 || len(w.key) > MaxKeyLen {
		return wireHint{}, errGarbage
	}
	switch f[1] {
	case "o":
		ms, ok := decimal(f[2], 15)
		if !ok || ms == 0 {
			return wireHint{}, errGarbage
		}
		w.open, w.openFor = true, ms
	case "c":
		if f[2] != "0" {
			return wireHint{}, errGarbage
		}
	default:
		return wireHint{}, errGarbage
	}
	return w, nil
}

// decodeV2 parses a version 2 message or value. It never panics.
func decodeV2(s string) (wireHint, error) {
	var f [6]string
	rest, ok := fields(s, f[:])
	if !ok || f[0] != wireVersion {
		return wireHint{}, errGarbage
	}
	w := wireHint{sender: f[5], key: rest}
	if !validSender(w.sender) || len(w.key) == 0 || len(w.key) > MaxKeyLen {
		return wireHint{}, errGarbage
	}
	switch f[4] {
	case "0":
	case "1":
		w.operator = true
	default:
		return wireHint{}, errGarbage // an unknown flag: see wireHint
	}
	switch f[1] {
	case "o":
		ms, ok := decimal(f[2], 15)
		if !ok || (ms == 0 && !w.operator) {
			return wireHint{}, errGarbage
		}
		c, ok := decimal(f[3], 4)
		if !ok {
			return wireHint{}, errGarbage
		}
		w.open, w.openFor, w.cycles = true, ms, int(c)
	case "c":
		if f[2] != "0" || f[3] != "0" {
			return wireHint{}, errGarbage
		}
	default:
		return wireHint{}, errGarbage
	}
	return w, nil
}

// fields splits the first len(f) space-separated fields of s into f and
// returns the rest, the key, which may hold spaces; ok is false when s is
// too long or has too few fields.
func fields(s string, f []string) (rest string, ok bool) {
	if len(s) > maxWireLen {
		return "", false
	}
	rest = s
	for i := range f {
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			return "", false
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	return rest, true
}

// decimal parses a field of plain decimal digits, at most digits of them:
// no sign, no leading '+', no leading zero (so one spelling per value),
// and so no overflow for digits up to 18. "0" is zero.
func decimal(f string, digits int) (int64, bool) {
	if len(f) == 0 || len(f) > digits || (f[0] == '0' && len(f) > 1) || strings.TrimLeft(f, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(f, 10, 64)
	return n, err == nil
}

// validInstance reports whether id looks like an instance ID.
func validInstance(id string) bool {
	if len(id) != instanceIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validSender reports whether id looks like a sender: an instance ID,
// optionally followed by a slash and a member number (decimal, no leading
// zero).
func validSender(id string) bool {
	_, _, ok := splitSender(id)
	return ok
}

// splitSender splits a sender ID into its instance ID and member number
// (0 for a bare instance ID); ok is false when id is not a sender ID.
func splitSender(id string) (instance string, member int, ok bool) {
	instance, num, hasMember := strings.Cut(id, "/")
	if !validInstance(instance) {
		return "", 0, false
	}
	if !hasMember {
		return instance, 0, true
	}
	if len(num) == 0 || len(num) > maxMemberDigits || num[0] == '0' || strings.TrimLeft(num, "0123456789") != "" {
		return "", 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return "", 0, false
	}
	return instance, n, true
}

// retryAt turns an open time received at now into a retry-at, cut to
// maxOpen; ok is false when nothing is left of it.
func retryAt(openFor time.Duration, now time.Time, maxOpen time.Duration) (time.Time, bool) {
	if openFor <= 0 {
		return time.Time{}, false
	}
	return now.Add(min(openFor, maxOpen)), true
}

// msDuration converts milliseconds to a Duration without overflow.
func msDuration(ms int64) time.Duration {
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// escapeGlob escapes the characters SCAN's MATCH treats specially, so that
// any prefix matches only itself.
func escapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
