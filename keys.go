package httpbreaker

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/httpbreaker/httpbreaker/internal/route"
	"github.com/httpbreaker/httpbreaker/internal/swar"
)

// A KeyFunc picks the breaker a request goes through. Requests with the
// same key share a breaker. A KeyFunc must be safe for concurrent use, must
// not modify the request, and must return keys from a bounded set: a key
// made from request content (raw paths, query strings, user IDs) would
// create a breaker per value. The Transport caps live breakers anyway (see
// WithMaxBreakers), but a capped key set protects nothing.
//
// The Transport reads every key as Trip, State, Reset and WithPolicy's
// selectors read keys: its host part, up to its first space, as HostKey
// reads a host (lower-cased, without a trailing dot, an empty port or a
// port's leading zeros, at most 512 bytes), and each byte that is not
// valid UTF-8 replaced by U+FFFD. So "Tenant-A" and "tenant-a" share the
// breaker "tenant-a", and metric labels stay valid. A key still longer
// than 512 bytes is replaced by the request's host key. Keys of HostKey
// and RouteKey read as themselves; a key that does not costs that
// reading on every request.
type KeyFunc func(*http.Request) string

// keying is how a Transport picks a request's breaker, chosen once at
// New: by host key (the zero keying), by WithRoutes' patterns, or by the
// caller's KeyFunc.
type keying struct {
	user      KeyFunc        // WithKeyFunc's function, or nil
	routes    *route.Matcher // WithRoutes' patterns, or nil
	routeKeys *routeKeyCache // the keys of routes, by host
}

// canonicalKey is key as valid UTF-8: each invalid byte is U+FFFD.
func canonicalKey(key string) string {
	if utf8.ValidString(key) {
		return key
	}
	return strings.ToValidUTF8(key, "\uFFFD")
}

// maxKeyLen bounds the length of a key. HostKey and RouteKey never return
// a longer one: a longer host is cut to this many bytes.
const maxKeyLen = 512

// HostKey is the default KeyFunc: the request's r.URL.Host, lower-cased,
// without a trailing dot, with the port kept unless it is the scheme's
// default and without leading zeros. An empty port, which url.Parse keeps
// and httputil.ReverseProxy passes on ("payments.internal:"), is the
// default port. So "https://API.example.com.:443",
// "https://api.example.com:", "https://api.example.com" and
// "https://api.example.com:0443" share the breaker "api.example.com",
// "api.example.com:8443" has its own, and "http://x:443" keeps its port.
// A URL with no host name, which net/http dials on the local host, keeps
// its port, the default too: "http://:08080" is ":8080" and "http://:" is
// ":80".
// It returns "" for a request without a URL. Keys are valid UTF-8
// (invalid bytes become U+FFFD) and at most 512 bytes long: a host still
// longer once its port and trailing dot are read is cut at a character
// boundary. It does not allocate when the host is
// lower-case ASCII and needs no leading zero, trailing dot or port
// removed.
func HostKey(r *http.Request) string {
	if r == nil || r.URL == nil {
		return ""
	}
	return readHost(r.URL.Host, defaultPort(r.URL.Scheme))
}

// defaultPort is the port a URL of scheme has when it names none.
func defaultPort(scheme string) string {
	switch scheme {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// canonicalHostKey is key as the Transport reads every key: the keys a
// KeyFunc returns, the keys Trip, State and Reset are given, the keys
// selectors are matched against, and whole-key selectors. It is valid
// UTF-8, and its host part, up to its first space, is read as HostKey
// reads a host (see readHost). A key names a scheme's default port by
// leaving it out, as HostKey does, so a port in a key is always kept.
func canonicalHostKey(key string) string {
	key = canonicalKey(key)
	host, rest, isRoute := strings.Cut(key, " ")
	h := readHost(host, "")
	if h == host {
		return key
	}
	if isRoute {
		return h + " " + rest
	}
	return h
}

// readHost is the one reading of a host: valid UTF-8, lower-cased,
// without a trailing dot, a port's leading zeros, or a port that is empty
// or def, and then, if still longer than maxKeyLen bytes, cut to that
// many at a character boundary. HostKey reads r.URL.Host with def the
// scheme's default port; keys and the hosts of selectors are read with
// def "". The port is read before the cut, so that the cut never leaves
// a part of the default port ("h:443" of a 509-byte h is h), and the cut
// is read again, so that the result reads back as itself. It does not
// allocate for a lower-case ASCII host that needs nothing trimmed, and
// otherwise only to fold the host or to rejoin a host and port it
// changed.
func readHost(h, def string) string {
	if len(h) > 4*maxKeyLen {
		h = h[:4*maxKeyLen] // bound the work: far more than any key keeps
	}
	if swar.HasUpperOrNonASCII(h) {
		h = strings.ToLower(strings.ToValidUTF8(h, "\uFFFD"))
	}
	if h = trimHost(h, def); len(h) > maxKeyLen {
		h = trimHost(truncateUTF8(h, maxKeyLen), "")
	}
	return h
}

// trimHost is h without a trailing dot, a port's leading zeros, or a
// port that is empty or def. A host that loses its port is read again:
// "x.:" is "x", and "a.:1:" (no host, but a raw host or key may be
// anything) is "a:1".
func trimHost(h, def string) string {
	for {
		n := len(h)
		if n == 0 {
			return h
		}
		if c := h[n-1]; c != '.' && c != ':' && (c < '0' || c > '9') {
			return h // no port and no trailing dot: most hosts
		}
		host, port := splitKeyPort(h)
		for len(port) > 1 && port[0] == '0' {
			port = port[1:]
		}
		for len(host) > 1 && host[len(host)-1] == '.' {
			host = host[:len(host)-1]
		}
		if host == "" {
			// An empty host name dials the local host, so its port is
			// all the key has: "http://:08080" is ":8080", and
			// "http://:" and "http://:80" are ":80".
			if port == "" {
				port = def
			}
			if port == "" || len(port)+1 == n {
				return h
			}
			return ":" + port
		}
		if port != "" && port != def {
			if len(host)+1+len(port) == n {
				return h // nothing trimmed
			}
			return host + ":" + port
		}
		if len(host) == n {
			return h // no port, no trailing dot
		}
		h = host
	}
}

// splitKeyPort splits the host part of a key into host and port: the
// port is the digits after the last colon, none for an empty port. The
// host may be empty: ":8080" is host "" and port "8080". An IPv6
// literal's colons are inside its brackets, which end before a port's
// colon. Without a port, host is h and port "".
func splitKeyPort(h string) (host, port string) {
	i := len(h)
	for i > 0 && h[i-1] >= '0' && h[i-1] <= '9' {
		i--
	}
	if i < 1 || h[i-1] != ':' {
		return h, ""
	}
	return h[:i-1], h[i:]
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
