package httpbreaker

import "unicode/utf8"

// Byte scans of request hosts and paths that look at eight bytes at a time
// (SWAR: SIMD within a register). Each is exact: a fast "no" means no.

const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// hasSlashPair reports whether p contains "//" or "/.". It looks at eight
// byte pairs at a time: '.' and '/' differ only in their low bit, so a
// pair is a '/' followed by a byte that is '/' once its low bit is set.
func hasSlashPair(p string) bool {
	const slashes = swarOnes * '/'
	i := 0
	for ; i+9 <= len(p); i += 8 {
		v := (load64(p[i:]) ^ slashes) | ((load64(p[i+1:]) | swarOnes) ^ slashes)
		if (v-swarOnes)&^v&swarHighs != 0 { // some byte of v is zero: a pair
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

// load64 returns the first eight bytes of s, little-endian; the compiler
// makes it one load.
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// load32 returns the first four bytes of s, little-endian.
func load32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// needsFold reports whether s has an ASCII upper-case letter or a byte
// that is not ASCII. On bytes under 0x80, adding 0x80-'A' sets a byte's
// high bit if it is at least 'A', and adding 0x80-'Z'-1 if it is past
// 'Z'; no sum carries into the next byte.
func needsFold(s string) bool {
	if len(s) < 8 {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c-'A' < 26 || c >= utf8.RuneSelf {
				return true
			}
		}
		return false
	}
	for i := 0; ; i += 8 {
		if i+8 > len(s) {
			i = len(s) - 8 // the last word overlaps the one before
		}
		x := load64(s[i:])
		if x&swarHighs != 0 || (x+swarOnes*(0x80-'A'))&^(x+swarOnes*(0x80-'Z'-1))&swarHighs != 0 {
			return true
		}
		if i+8 == len(s) {
			return false
		}
	}
}
