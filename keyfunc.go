package httpbreaker

import (
	"net/http"
	"strings"
)

// A KeyFunc picks the breaker a request goes through. Requests with the
// same key share a breaker. A KeyFunc must be safe for concurrent use, must
// not modify the request, and must return keys from a bounded set: a key
// made from request content (raw paths, query strings, user IDs) would
// create a breaker per value. The Transport caps live breakers anyway (see
// WithMaxBreakers), but a capped key set protects nothing.
type KeyFunc func(*http.Request) string

// maxKeyLen bounds the length of a key. HostKey and RouteKey never return
// a longer one: a longer host is cut to this many bytes.
const maxKeyLen = 512

// HostKey is the default KeyFunc: the request's r.URL.Host, lower-cased,
// with the port kept, so "API.example.com:8443" and "api.example.com:8443"
// share a breaker but ":8443" and ":443" do not. It returns "" for a
// request without a URL. Keys are at most 512 bytes long. It does not
// allocate when the host is already lower-case.
func HostKey(r *http.Request) string {
	if r == nil || r.URL == nil {
		return ""
	}
	h := r.URL.Host
	if len(h) > maxKeyLen {
		h = h[:maxKeyLen]
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; c-'A' < 26 || c >= 0x80 {
			return strings.ToLower(h)
		}
	}
	return h
}
