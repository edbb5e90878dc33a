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
// parsed: version, state, time, sender and key with their separators.
const maxWireLen = MaxKeyLen + 64

// instanceIDLen is the length of an instance ID: 16 lower-case hex digits.
const instanceIDLen = 16

// maxMemberDigits bounds the member number in a sender ID.
const maxMemberDigits = 10

// wireVersion is the first field of every message. A Store ignores (and
// counts) messages of any other version.
const wireVersion = "1"

// A wireHint is one hint as it travels through Redis, both as the message
// on the hints channel and as the value of an open key:
//
//	1 o <open for, ms> <sender> <key>   an open breaker
//	1 c 0 <sender> <key>                a closed one
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
// An open key's retry-at is read from its time to live in Redis, for the
// same reason.
type wireHint struct {
	open    bool
	openFor int64 // milliseconds; 0 when closed
	sender  string
	key     string
}

// encode returns the wire form of w.
func (w wireHint) encode() string {
	var b strings.Builder
	b.Grow(len(w.key) + len(w.sender) + 28)
	b.WriteString(wireVersion)
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

// decodeWire parses a message or value read from Redis. It accepts only
// what encode produces, with a key of 1 to MaxKeyLen bytes and, for an
// open hint, a positive open time; anything else is errGarbage. It never
// panics, whatever s holds.
func decodeWire(s string) (wireHint, error) {
	if len(s) > maxWireLen {
		return wireHint{}, errGarbage
	}
	var f [4]string
	rest := s
	for i := range f {
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			return wireHint{}, errGarbage
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	w := wireHint{sender: f[3], key: rest}
	if f[0] != wireVersion || !validSender(w.sender) || len(w.key) == 0 || len(w.key) > MaxKeyLen {
		return wireHint{}, errGarbage
	}
	switch f[1] {
	case "o":
		w.open = true
		// Only plain decimal digits: no sign, no leading '+', at most 15
		// digits (30,000 years), no leading zero: so no overflow below,
		// and one spelling per value.
		if len(f[2]) == 0 || len(f[2]) > 15 || f[2][0] == '0' || strings.TrimLeft(f[2], "0123456789") != "" {
			return wireHint{}, errGarbage
		}
		ms, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || ms <= 0 {
			return wireHint{}, errGarbage
		}
		w.openFor = ms
	case "c":
		if f[2] != "0" {
			return wireHint{}, errGarbage
		}
	default:
		return wireHint{}, errGarbage
	}
	return w, nil
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
