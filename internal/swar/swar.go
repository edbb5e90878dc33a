// Package swar holds byte scans of strings that look at eight bytes at a
// time (SWAR: SIMD within a register), for the request path's hosts and
// paths. Each is exact: a fast "no" means no.
package swar

import "unicode/utf8"

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// HasSlashPair reports whether p contains "//" or "/.". It looks at eight
// byte pairs at a time: '.' and '/' differ only in their low bit, so a
// pair is a '/' followed by a byte that is '/' once its low bit is set.
func HasSlashPair(p string) bool {
	const slashes = ones * '/'
	i := 0
	for ; i+9 <= len(p); i += 8 {
		v := (Load64(p[i:]) ^ slashes) | ((Load64(p[i+1:]) | ones) ^ slashes)
		if (v-ones)&^v&highs != 0 { // some byte of v is zero: a pair
			return true
		}
	}
	for ; i+1 < len(p); i++ {
		if p[i] == '/' && p[i+1]|1 == '/' {
			return true
		}
	}
	return false
}

// Load64 returns the first eight bytes of s, little-endian; the compiler
// makes it one load. s must have at least eight bytes.
func Load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// Load32 returns the first four bytes of s, little-endian. s must have at
// least four bytes.
func Load32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// HasUpperOrNonASCII reports whether s has an ASCII upper-case letter or
// a byte that is not ASCII. A string of eight bytes or more is read a
// word at a time, the last word overlapping the one before it.
func HasUpperOrNonASCII(s string) bool {
	n := len(s)
	if n < 8 {
		for i := 0; i < n; i++ {
			if c := s[i]; c-'A' < 26 || c >= utf8.RuneSelf {
				return true
			}
		}
		return false
	}
	for i := 0; i < n-8; i += 8 {
		if upperOrNonASCII(Load64(s[i:])) {
			return true
		}
	}
	return upperOrNonASCII(Load64(s[n-8:]))
}

// upperOrNonASCII reports whether a byte of x is an ASCII upper-case
// letter or not ASCII. On bytes under 0x80, adding 0x80-'A' sets a byte's
// high bit if it is at least 'A', and adding 0x80-'Z'-1 if it is past
// 'Z'; no sum carries into the next byte. A byte of 0x80 or more has its
// high bit set already, and then the sums' carries do not matter.
func upperOrNonASCII(x uint64) bool {
	return (x|(x+ones*(0x80-'A'))&^(x+ones*(0x80-'Z'-1)))&highs != 0
}
