package httpbreaker

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestNeedsFold checks needsFold against a byte loop for every byte value
// at every position of strings up to three words long.
func TestNeedsFold(t *testing.T) {
	naive := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf {
				return true
			}
		}
		return false
	}
	base := "api-0.example.test:8443[]"
	for n := 0; n <= len(base); n++ {
		s := []byte(base[:n])
		require.False(t, needsFold(string(s)), "%q", s)
		for i := range s {
			orig := s[i]
			for c := range 256 {
				s[i] = byte(c)
				require.Equal(t, naive(string(s)), needsFold(string(s)), "%q", s)
			}
			s[i] = orig
		}
	}
	require.True(t, needsFold(strings.Repeat("a", 100)+"Z"))
}
