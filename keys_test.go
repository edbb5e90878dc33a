package httpbreaker

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestHostKey(t *testing.T) {
	for raw, want := range map[string]string{
		"http://API.Example.com/x":      "api.example.com",
		"https://api.example.com:8443/": "api.example.com:8443",
		"http://127.0.0.1:9000/a?b=c":   "127.0.0.1:9000",
		"https://[::1]:80/":             "[::1]:80",
		"http://[::1]:80/":              "[::1]",
		"https://example.com:443/":      "example.com",
		"https://example.com/":          "example.com",
		"http://example.com.:80/":       "example.com",
		"http://example.com./":          "example.com",
		"http://example.com:0080/":      "example.com",
		"http://example.com:08080/":     "example.com:8080",
		"http://example.com:443/":       "example.com:443",
		"https://Example.COM.:0443/":    "example.com",
		"http://127.0.0.1:00/":          "127.0.0.1:0",
		// An empty port, which url.Parse keeps (http.NewRequest drops
		// it), is the scheme's default; a trailing dot before it goes too.
		"http://payments.internal:/v1":  "payments.internal",
		"https://payments.internal:/v1": "payments.internal",
		"http://x.:/":                   "x",
		"https://API.Example.com.:/":    "api.example.com",
		"http://[::1]:/":                "[::1]",
		"http://127.0.0.1:/":            "127.0.0.1",
		// No host name: net/http dials the local host, and the key is
		// its port, read as every port is; the default port is kept.
		"http://:8080/":  ":8080",
		"http://:08080/": ":8080",
		"http://:80/":    ":80",
		"http://:080/":   ":80",
		"http://:/":      ":80",
		"https://:/":     ":443",
		"https://:0/":    ":0",
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		k := HostKey(&http.Request{URL: u})
		require.Equal(t, want, k, raw)
		require.Equal(t, k, canonicalHostKey(k), "%s: the key reads back as itself", raw)
	}
	u, err := url.Parse("http://payments.internal:/v1")
	require.NoError(t, err)
	require.Equal(t, "payments.internal:", u.Host, "url.Parse keeps an empty port")
	require.Equal(t, "", HostKey(nil))
	require.Equal(t, "", HostKey(&http.Request{}))
	long := &http.Request{URL: mustReq(t, "http://x.test/").URL}
	long.URL.Host = strings.Repeat("a", 5000)
	require.Len(t, HostKey(long), maxKeyLen)
	for _, u := range []string{"http://api.example.com/", "https://api.example.com:8443/"} {
		r := mustReq(t, u)
		require.Zero(t, testing.AllocsPerRun(100, func() { _ = HostKey(r) }), u)
	}
}

// TestEmptyPortThroughReverseProxy: httputil.ReverseProxy copies a
// target's empty port into the outgoing request's URL. Its calls must
// still be the host's, under the host's policy: with a bulkhead of one
// and one call in flight, the proxied call is refused, not let through.
func TestEmptyPortThroughReverseProxy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var calls atomic.Int64
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			if calls.Add(1) == 1 {
				<-gate // the first call holds the one place
			}
			return response(r, http.StatusOK, nil), nil
		})
		tr := New(next, WithPolicy("payments.internal", WithMaxConcurrent(1)))
		done := make(chan struct{})
		go func() { _, _ = get(t, tr, "http://payments.internal/v1/charges"); close(done) }()
		defer func() { close(gate); <-done }()
		synctest.Wait()
		require.EqualValues(t, 1, calls.Load())

		target, err := url.Parse("http://payments.internal:")
		require.NoError(t, err)
		proxy := httputil.NewSingleHostReverseProxy(target)
		proxy.Transport = tr
		proxy.ErrorLog = log.New(io.Discard, "", 0)
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://front.test/v1/charges", nil))
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, "the payments bulkhead of 1 holds")
		require.EqualValues(t, 1, calls.Load(), "the proxied call never reached payments")
		require.Equal(t, []string{"payments.internal"}, keys(tr))
	})
}

// TestKeyReadsBackAsItself: for every host of up to five bytes made of
// the bytes the reading looks at, what HostKey makes of it, under each
// scheme, reads back as itself when Trip, State, Reset or a selector
// read it, and is never empty.
func TestKeyReadsBackAsItself(t *testing.T) {
	const alphabet = "a.:08[]"
	var hosts []string
	var grow func(prefix string)
	grow = func(prefix string) {
		hosts = append(hosts, prefix)
		if len(prefix) < 5 {
			for i := range len(alphabet) {
				grow(prefix + alphabet[i:i+1])
			}
		}
	}
	grow("")
	for _, h := range hosts {
		for _, scheme := range []string{"http", "https", ""} {
			k := HostKey(&http.Request{URL: &url.URL{Scheme: scheme, Host: h}})
			if h != "" {
				require.NotEmpty(t, k, "%s %q", scheme, h)
			}
			require.Equal(t, k, canonicalHostKey(k), "%s %q", scheme, h)
		}
	}
}

// asciiUpperTest upper-cases ASCII letters only.
func asciiUpperTest(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// requireHostKey checks a key of HostKey: a key, and lower-case.
func requireHostKey(t *testing.T, k string) {
	t.Helper()
	requireKey(t, "HostKey", k)
	require.Equal(t, -1, strings.IndexFunc(k, func(r rune) bool { return 'A' <= r && r <= 'Z' }), "HostKey: key %q is not lower-case", k)
}

// FuzzHostKey: for any URL url.Parse accepts (and any string as a raw
// host), HostKey never panics and returns a valid key; the key does not
// depend on the ASCII case of the host; for an ASCII host it is the
// lower-cased host trimmed, cut only if that is longer than maxKeyLen,
// and it reads back as itself, as RouteKey's key does. RouteKey's keys, built on HostKey's,
// obey the same bounds.
func FuzzHostKey(f *testing.F) {
	for _, s := range []string{
		"http://API.Example.com:8443/x",
		"https://[::1]:443/",
		"http://127.0.0.1:9000/a?b=c",
		"http://user:pass@Host.Test/",
		"//host.only/path",
		"/relative",
		"mailto:someone@example.com",
		"",
		"http://%ff.example/",
		"http://xn--bcher-kva.example/",
		"http://" + strings.Repeat("A", 600) + "/",
	} {
		f.Add(s)
	}
	route := RouteKey("GET /users/{id}", "/files/{path...}")
	f.Fuzz(func(t *testing.T, raw string) {
		var reqs []*http.Request
		if u, err := url.Parse(raw); err == nil {
			reqs = append(reqs, &http.Request{Method: http.MethodGet, URL: u, Host: u.Host})
		}
		reqs = append(reqs, &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: "http", Host: raw, Path: "/users/1"}})
		for _, r := range reqs {
			host := r.URL.Host
			k := HostKey(r)
			requireHostKey(t, k)
			up := *r.URL
			up.Host = asciiUpperTest(host)
			require.Equal(t, k, HostKey(&http.Request{URL: &up}), "HostKey depends on ASCII case")
			if isASCIITest(host) {
				// The host lower-cased and trimmed; cut only if still too long.
				if want := trimHost(strings.ToLower(host[:min(len(host), 4*maxKeyLen)]), defaultPort(r.URL.Scheme)); len(want) <= maxKeyLen {
					require.Equal(t, want, k) // else cut: requireHostKey bounds its length
				}
				if !strings.Contains(k, " ") { // no real host has one: a space starts a key's route part
					require.Equal(t, k, canonicalHostKey(k), "Trip, State and Reset read a host key as it is")
					rk := route(r)
					require.Equal(t, rk, canonicalHostKey(rk), "and a route key")
				}
			}
			requireKey(t, "RouteKey", route(r))
		}
	})
}

func isASCIITest(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// TestSelectorOfAnEmptyHostName: a selector of a port alone names the
// local host's breaker on that port (see TestHostKey), and ":" alone
// names no host.
func TestSelectorOfAnEmptyHostName(t *testing.T) {
	sel, err := parseSelector(":08080")
	require.NoError(t, err)
	require.True(t, sel.matches(HostKey(mustReq(t, "http://:8080/x"))))
	_, err = parseSelector(":")
	require.ErrorContains(t, err, "names no host")
}

// TestHostKeyNeverLongerThanMaxKeyLen: HostKey cuts the host to 512
// bytes and then lower-cases it with strings.ToLower, which can make it
// longer: some upper-case runes have longer lower-case forms ('Ⱥ',
// U+023A, 2 bytes, becomes 'ⱥ', U+2C65, 3 bytes), and a cut in the middle
// of a rune leaves an invalid byte that ToLower replaces with the 3-byte
// U+FFFD. Both hosts below are accepted by url.Parse.
func TestHostKeyNeverLongerThanMaxKeyLen(t *testing.T) {
	for name, host := range map[string]string{
		"runes that grow when lower-cased": strings.Repeat("Ⱥ", 256),
		"cut inside a rune":                strings.Repeat("a", 511) + "é",
	} {
		t.Run(name, func(t *testing.T) {
			u, err := url.Parse("http://" + host + "/")
			require.NoError(t, err)
			requireHostKey(t, HostKey(&http.Request{URL: u}))
		})
	}
}

// A host that fits in maxKeyLen once its default port, trailing dot and
// leading zeros are read is not cut: the cut never leaves part of the
// default port as a port the request does not use ("h:44"). A host
// still too long is cut, and reads back as itself.
func TestHostKeyReadsThePortBeforeItCuts(t *testing.T) {
	key := func(raw string) string {
		t.Helper()
		u, err := url.Parse(raw)
		require.NoError(t, err)
		return HostKey(&http.Request{URL: u})
	}
	h := strings.Repeat("b", 501) + ".example" // 509 bytes
	require.Equal(t, h, key("https://"+h+"/"))
	for _, raw := range []string{
		"https://" + h + ":443/",
		"https://" + h + ":0443/",
		"https://" + h + ".:443/",
		"https://" + strings.ToUpper(h) + ".:443/", // folded first
		"http://" + h + ":00080/",
	} {
		require.Equal(t, h, key(raw), "%s…%s", raw[:12], raw[len(raw)-8:])
	}
	require.Equal(t, h+":8", key("https://"+h+":0008/"), "511 bytes: the port is kept")
	long := key("https://" + h + ":84430/")
	require.Len(t, long, maxKeyLen, "513 bytes, cut")
	require.Equal(t, long, canonicalHostKey(long))
	dot := key("https://" + strings.Repeat("c", 511) + ".d/") // cut just after the dot
	require.Equal(t, strings.Repeat("c", 511), dot, "a cut that ends in a dot is read again")
}

// TestKeyFuncKeysReadAsEveryKeyIs: the Transport reads a KeyFunc's keys
// as Trip, State, Reset and selectors read keys, so an operator who
// trips the key the KeyFunc returns trips the breaker its requests use.
func TestKeyFuncKeysReadAsEveryKeyIs(t *testing.T) {
	d := newDep(200)
	tr := New(d, WithKeyFunc(func(*http.Request) string { return "Tenant-A." }),
		WithPolicy("tenant-a", WithMinRequests(3)))
	_, err := get(t, tr, "http://api.test/")
	require.NoError(t, err)
	require.Equal(t, []string{"tenant-a"}, keys(tr))
	require.EqualValues(t, 3, tr.Snapshot()[0].Settings.MinRequests)
	tr.Trip("Tenant-A.", time.Hour)
	require.Equal(t, []string{"tenant-a"}, keys(tr), "one breaker, whoever spells the key")
	calls := d.calls.Load()
	resp, err := get(t, tr, "http://api.test/")
	require.NoError(t, err)
	require.True(t, IsRejected(resp), "the tripped breaker is the one requests use")
	require.Equal(t, calls, d.calls.Load())
	require.Equal(t, StateOpen, tr.State("Tenant-A."))
}

// TestOperatorKeysReadAsHostKeyDoes: Trip, State and Reset read a key's
// host part as HostKey does, so an operator's spelling reaches the
// breaker requests use.
func TestOperatorKeysReadAsHostKeyDoes(t *testing.T) {
	tr := New(newDep(200))
	for _, spelling := range []string{"API.Example.com", "api.example.com.", "Api.Example.Com.", "api.example.com:0443 GET /x"} {
		tr.Trip(spelling, time.Hour)
	}
	for _, u := range []string{"https://api.example.com/", "https://API.EXAMPLE.COM.:443/v1"} {
		resp, err := get(t, tr, u)
		require.NoError(t, err)
		require.True(t, IsRejected(resp), u)
	}
	require.Equal(t, StateOpen, tr.State("API.example.com."))
	require.Equal(t, StateOpen, tr.State("api.example.com:443 GET /x"), "a route key's host part too")
	require.Equal(t, StateOpen, tr.State("API.Example.com.:"), "an empty port is none")
	require.Equal(t, "payments.internal GET /x", canonicalHostKey("payments.internal: GET /x"))
	tr.Reset("Api.Example.Com")
	require.Equal(t, StateClosed, tr.State("api.example.com"))
	require.ElementsMatch(t, []string{"api.example.com", "api.example.com:443 GET /x"}, keys(tr))
}

// BenchmarkHostKey measures HostKey on the request path: a host already
// in its key's form (the common case, which must not allocate), one with
// a port, and one it has to lower-case.
func BenchmarkHostKey(b *testing.B) {
	for _, c := range []struct{ name, url string }{
		{"canonical", "https://api.example.com/v1/users"},
		{"port", "https://api.example.com:8443/v1/users"},
		{"default-port", "https://api.example.com:443/v1/users"},
		{"upper", "https://API.Example.com/v1/users"},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := mustReq(b, c.url)
			b.ReportAllocs()
			for b.Loop() {
				_ = HostKey(r)
			}
		})
	}
}
