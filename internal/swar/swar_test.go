package swar

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// requireAgrees checks scan against naive, a byte loop, on every prefix
// of base, for which scan must say false, and with every byte value at
// every position of each prefix.
func requireAgrees(t *testing.T, base string, scan, naive func(string) bool) {
	t.Helper()
	for n := 0; n <= len(base); n++ {
		s := []byte(base[:n])
		require.False(t, scan(string(s)), "%q", s)
		for i := range s {
			orig := s[i]
			for c := range 256 {
				s[i] = byte(c)
				require.Equal(t, naive(string(s)), scan(string(s)), "%q", s)
			}
			s[i] = orig
		}
	}
}

// TestHasUpperOrNonASCII checks HasUpperOrNonASCII against a byte loop for
// every byte value at every position of strings up to three words long.
func TestHasUpperOrNonASCII(t *testing.T) {
	requireAgrees(t, "api-0.example.test:8443[]", HasUpperOrNonASCII, func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf {
				return true
			}
		}
		return false
	})
	require.True(t, HasUpperOrNonASCII(strings.Repeat("a", 100)+"Z"))
}

// TestHasSlashPair checks HasSlashPair against strings.Contains for
// every byte value at every position of paths up to three words long,
// and for every pair placed across a word's edge.
func TestHasSlashPair(t *testing.T) {
	requireAgrees(t, "/v1/users/42/orders/x", HasSlashPair, func(s string) bool {
		return strings.Contains(s, "//") || strings.Contains(s, "/.")
	})
	for i := range 24 {
		for _, pair := range []string{"//", "/."} {
			p := strings.Repeat("a", i) + pair + strings.Repeat("b", 24-i)
			require.True(t, HasSlashPair(p), "%q", p)
		}
	}
}

// TestLoad reads the words little-endian.
func TestLoad(t *testing.T) {
	require.Equal(t, uint64(0x0807060504030201), Load64("\x01\x02\x03\x04\x05\x06\x07\x08\x09"))
	require.Equal(t, uint64(0x04030201), Load32("\x01\x02\x03\x04\x05"))
}
