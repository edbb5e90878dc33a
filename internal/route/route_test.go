package route

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/httpbreaker/httpbreaker/internal/route/routetest"
	"github.com/stretchr/testify/require"
)

// routeAPIPatterns is a realistic API pattern set, also used by the
// benchmarks.
var routeAPIPatterns = routetest.APIPatterns

// routeTrickyPatterns exercises precedence, hosts, {$}, subtrees and
// escaping.
var routeTrickyPatterns = []string{
	"/",
	"/a/",
	"/a/{$}",
	"GET /a/b",
	"/a/{x}/c",
	"/a/b/z",
	"example.com/",
	"example.com/a/{x}",
	"HEAD /h",
	"GET /h",
	"POST /p/{id}",
	"/p/{id}/",
	"DELETE /p/{id}",
	"/x%2Fy/z",
	"/files/{path...}",
	"/%2F/q",
	"/dots/.../x",
	"::1/v6",
	"GET /w/{a}/{b}/{c}",
	"/c/{x}/d/{$}",
	"/a/../b",
	"//x",
	"CONNECT /tunnel/",
	"CONNECT /t/../u",
	"GET /sp%20ace/{x}",
}

// routeSubtreePatterns has no catch-all, so that unmatched paths and 405s
// occur.
var routeSubtreePatterns = []string{
	"/static/",
	"/static/{$}",
	"/api/v1/",
	"GET /api/v1/items/{id}",
	"PUT /api/v1/items/{id}",
	"/api/v1/items/{id}/sub/{rest...}",
	"POST /api/v1/items/{$}",
	"api.example.com/api/v1/items/{id}",
	"GET API.example.org/x/{y}/",
	"GET /only-get",
	"POST /only-post/{$}",
}

// routeManyLiteralPatterns gives nodes enough literal children to be
// indexed by a map.
var routeManyLiteralPatterns = func() []string {
	var ps []string
	for i := range 12 {
		ps = append(ps, fmt.Sprintf("/lit%d/x", i), fmt.Sprintf("GET /m/lit%d", i))
	}
	return append(ps, "/m/{other}", "/lit%2F/x", "/sp%20ace/{x}")
}()

var routePatternSets = map[string][]string{
	"api":     routeAPIPatterns,
	"tricky":  routeTrickyPatterns,
	"subtree": routeSubtreePatterns,
	"many":    routeManyLiteralPatterns,
	"lengths": routeLiteralLengthPatterns,
}

// routeLiteralLengthPatterns have literals of every length around a
// machine word (which literal compares as one), sharing prefixes, in
// nodes that also have a wildcard to fall back to.
var routeLiteralLengthPatterns = []string{
	"/a/{x}", "/ab/{x}", "/abc/{x}", "/abcd/end", "/abcde/{x}", "/abcdef/{x}", "/abcdefg/end",
	"/abcdefgh/{x}", "/abcdefghi/{x}", "/abcdefghij/end", "/{w}", "/{w}/{x}/{y}",
	"/abcdefgh/abcdefgh/{z}", "/abcdefgh/abcdefg", "/abcdefgh/abcdefghi/{$}", "/b/c/d/e/f/g/h/i/j",
}

// routeTestHandler is the handler registered for a pattern, so that a
// ServeMux answer can be told apart from its redirects, 404 and 405.
type routeTestHandler string

func (routeTestHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// mustNew is New for patterns a test knows to be valid.
func mustNew(t testing.TB, patterns []string) *Matcher {
	t.Helper()
	m, err := New(patterns)
	require.NoError(t, err)
	return m
}

// match returns the pattern, exactly as given, that m matches r with, or
// ("", false) if there is none.
func match(m *Matcher, r *http.Request) (string, bool) {
	if i := m.Match(r); i >= 0 {
		return m.patterns[i], true
	}
	return "", false
}

func newRouteTestMux(t testing.TB, patterns []string) *http.ServeMux {
	t.Helper()
	mux := http.NewServeMux()
	for _, p := range patterns {
		// Matcher compares hosts regardless of case; serveMuxRoute
		// lower-cases request hosts, and this function pattern hosts.
		_, host, path := splitPattern(p)
		mux.Handle(p[:len(p)-len(host)-len(path)]+strings.ToLower(host)+path, routeTestHandler(p))
	}
	return mux
}

// serveMuxRoute returns the pattern whose handler mux serves r with, or
// ("", false) for a redirect, 404 or 405. It first applies the documented
// differences of Matcher: the host is r.Host or else r.URL.Host and
// is compared without regard to ASCII case; an empty method is GET; an
// empty path is "/" (except for CONNECT, which ServeMux does not clean);
// a CONNECT request's host loses its port like any other, and one whose
// path does not start with "/" matches nothing. A URL with Opaque is
// served by the request line the client writes from it, as a server
// parses it.
func serveMuxRoute(mux *http.ServeMux, r *http.Request) (string, bool) {
	if r.Method == http.MethodConnect {
		if p := r.URL.EscapedPath(); p != "" && p[0] != '/' {
			return "", false
		}
	}
	u := *r.URL
	if u.Opaque != "" {
		// The server parses the request line the client writes from it;
		// the host matched stays r.Host or else r.URL.Host, even where
		// the line names another.
		sent, err := url.ParseRequestURI(u.RequestURI())
		if err != nil {
			return "", false // a request line no server accepts
		}
		sent.Host = u.Host
		u = *sent
	}
	r2 := &http.Request{Method: r.Method, Host: r.Host, URL: &u}
	if r2.Method == "" {
		r2.Method = http.MethodGet
	}
	if r2.Host == "" {
		r2.Host = u.Host
	}
	r2.Host = strings.Map(func(c rune) rune {
		if 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}, r2.Host)
	if r2.Method == http.MethodConnect {
		if h, _, err := net.SplitHostPort(r2.Host); err == nil {
			r2.Host = h
		}
		u.Host = r2.Host
	} else if u.EscapedPath() == "" {
		u.Path, u.RawPath = "/", ""
	}
	h, _ := mux.Handler(r2)
	if p, ok := h.(routeTestHandler); ok {
		return string(p), true
	}
	return "", false
}

// routeRequest returns a request for target, as parsed from a request
// line.
var routeRequest = routetest.Request

func TestMatch(t *testing.T) {
	tests := []struct {
		patterns []string
		method   string
		host     string
		target   string // parsed with url.ParseRequestURI
		want     string // "" for no match
	}{
		// Methods: GET also matches HEAD; a method-less pattern any method.
		{routeAPIPatterns, "GET", "api.test", "/v1/users/42", "GET /v1/users/{id}"},
		{routeAPIPatterns, "HEAD", "api.test", "/v1/users/42", "GET /v1/users/{id}"},
		{routeAPIPatterns, "", "api.test", "/v1/users/42", "GET /v1/users/{id}"},
		{routeAPIPatterns, "PUT", "api.test", "/v1/users/42", "PUT /v1/users/{id}"},
		{routeAPIPatterns, "PATCH", "api.test", "/v1/users/42", ""}, // 405
		{routeAPIPatterns, "POST", "api.test", "/v1/charges", "POST /v1/charges"},
		{routeAPIPatterns, "HEAD", "api.test", "/v1/charges", ""}, // 405
		{routeAPIPatterns, "DELETE", "api.test", "/files/a/b/c.txt", "/files/{path...}"},
		{routeAPIPatterns, "GET", "api.test", "/files/", "/files/{path...}"},
		{routeAPIPatterns, "GET", "api.test", "/files", ""}, // redirect to /files/
		{routeAPIPatterns, "GET", "api.test", "/v1/users/42/orders/7", "GET /v1/users/{id}/orders/{order}"},
		{routeAPIPatterns, "GET", "api.test", "/repos/golang/go/issues", "GET /repos/{owner}/{repo}/issues"},
		{routeAPIPatterns, "GET", "api.test", "/repos/golang/go/pulls", ""},
		{routeAPIPatterns, "GET", "api.test", "/v1/users/42?x=1", "GET /v1/users/{id}"},
		{routeAPIPatterns, "GET", "api.test", "/v1/users/", ""},    // {id} does not match ""
		{routeAPIPatterns, "GET", "api.test", "/v1/users/42/", ""}, // no trailing slash pattern
		{routeAPIPatterns, "GET", "api.test", "/v2/admin", ""},     // redirect to /v2/admin/
		{routeAPIPatterns, "GET", "api.test", "/v2/admin/x/y", "/v2/admin/"},
		{routeAPIPatterns, "GET", "api.test", "/", ""},
		{routeAPIPatterns, "GET", "api.test", "", ""},
		// Unclean paths are redirected by ServeMux.
		{routeAPIPatterns, "GET", "api.test", "/v1/../v1/users", ""},
		{routeAPIPatterns, "GET", "api.test", "//v1/users", ""},
		{routeAPIPatterns, "GET", "api.test", "/v1/./users", ""},
		{routeAPIPatterns, "GET", "api.test", "/v2/admin/x/..", ""},
		// Escaped segments: %2F stays inside its segment.
		{routeAPIPatterns, "GET", "api.test", "/v1/users/a%2Fb", "GET /v1/users/{id}"},
		{routeAPIPatterns, "GET", "api.test", "/v1/users/a%2Fb/orders", "GET /v1/users/{id}/orders"},
		{routeAPIPatterns, "GET", "api.test", "/v1/us%65rs/42", "GET /v1/users/{id}"},
		{routeAPIPatterns, "GET", "api.test", "/v1/users/john%20doe", "GET /v1/users/{id}"},
		{routeAPIPatterns, "GET", "api.test", "/v1/users/%2E%2E", "GET /v1/users/{id}"},

		// Precedence: the most specific pattern wins.
		{routeTrickyPatterns, "GET", "", "/a/b", "GET /a/b"},
		{routeTrickyPatterns, "POST", "", "/a/b", "/a/"},
		{routeTrickyPatterns, "GET", "", "/a/", "/a/{$}"},
		{routeTrickyPatterns, "GET", "", "/a/q/c", "/a/{x}/c"},
		{routeTrickyPatterns, "GET", "", "/a/b/z", "/a/b/z"},
		{routeTrickyPatterns, "GET", "", "/a/b/c", "/a/{x}/c"},
		{routeTrickyPatterns, "GET", "", "/a", ""}, // redirect to /a/
		{routeTrickyPatterns, "GET", "", "/zzz", "/"},
		{routeTrickyPatterns, "GET", "", "/c/1/d/", "/c/{x}/d/{$}"},
		{routeTrickyPatterns, "GET", "", "/c/1/d/e", "/"},
		{routeTrickyPatterns, "GET", "", "/c/1/d", ""}, // redirect to /c/1/d/
		{routeTrickyPatterns, "GET", "", "/w/1/2/3", "GET /w/{a}/{b}/{c}"},
		{routeTrickyPatterns, "POST", "", "/w/1/2/3", "/"},
		// Hosts: a pattern with a host beats one without; port and case
		// do not matter; r.Host wins over r.URL.Host.
		{routeTrickyPatterns, "GET", "example.com", "/a/q", "example.com/a/{x}"},
		{routeTrickyPatterns, "GET", "EXAMPLE.com:8443", "/a/q", "example.com/a/{x}"},
		{routeTrickyPatterns, "GET", "example.com", "/a/b", "example.com/a/{x}"},
		{routeTrickyPatterns, "GET", "example.com", "/zzz", "example.com/"},
		{routeTrickyPatterns, "GET", "other.com", "/a/q", "/a/"},
		{routeTrickyPatterns, "GET", "other.com", "/a/q/c", "/a/{x}/c"},
		{routeTrickyPatterns, "GET", "example.com", "/a/q/c", "example.com/"},
		{routeTrickyPatterns, "GET", "[::1]:80", "/v6", "::1/v6"},
		// HEAD has its own pattern here.
		{routeTrickyPatterns, "HEAD", "", "/h", "HEAD /h"},
		{routeTrickyPatterns, "GET", "", "/h", "GET /h"},
		{routeTrickyPatterns, "POST", "", "/h", "/"},
		// Subtree with a wildcard.
		{routeTrickyPatterns, "POST", "", "/p/1", "POST /p/{id}"},
		{routeTrickyPatterns, "DELETE", "", "/p/1", "DELETE /p/{id}"},
		{routeTrickyPatterns, "GET", "", "/p/1", ""}, // redirect to /p/1/
		{routeTrickyPatterns, "GET", "", "/p/1/", "/p/{id}/"},
		{routeTrickyPatterns, "GET", "", "/p/1/2", "/p/{id}/"},
		// Escaped literals in patterns and requests.
		{routeTrickyPatterns, "GET", "", "/x%2Fy/z", "/x%2Fy/z"},
		{routeTrickyPatterns, "GET", "", "/x%2fy/z", "/x%2Fy/z"},
		{routeTrickyPatterns, "GET", "", "/x/y/z", "/"},
		{routeTrickyPatterns, "GET", "", "/%2F/q", "/%2F/q"},
		{routeTrickyPatterns, "GET", "", "/a/%2F", "/a/{$}"}, // ServeMux unescapes %2F to the "/" of {$}
		{routeTrickyPatterns, "GET", "", "/sp%20ace/1", "GET /sp%20ace/{x}"},
		{routeTrickyPatterns, "GET", "", "/sp ace/1", "GET /sp%20ace/{x}"},
		{routeTrickyPatterns, "GET", "", "/dots/.../x", "/dots/.../x"},
		// Unclean method-less patterns match only unclean CONNECT paths.
		{routeTrickyPatterns, "GET", "", "/a/../b", ""},
		{routeTrickyPatterns, "CONNECT", "", "/a/../b", "/a/../b"},
		{routeTrickyPatterns, "CONNECT", "", "//x", "//x"},
		{routeTrickyPatterns, "CONNECT", "", "/t/../u", "CONNECT /t/../u"},
		{routeTrickyPatterns, "CONNECT", "", "/tunnel/x", "CONNECT /tunnel/"},
		{routeTrickyPatterns, "CONNECT", "", "/tunnel", ""},

		{routeSubtreePatterns, "GET", "", "/static/", "/static/{$}"},
		{routeSubtreePatterns, "GET", "", "/static/app.js", "/static/"},
		{routeSubtreePatterns, "GET", "", "/static", ""},
		{routeSubtreePatterns, "GET", "", "/api/v1/items/9", "GET /api/v1/items/{id}"},
		{routeSubtreePatterns, "HEAD", "", "/api/v1/items/9", "GET /api/v1/items/{id}"},
		{routeSubtreePatterns, "POST", "", "/api/v1/items/9", "/api/v1/"},
		{routeSubtreePatterns, "POST", "", "/api/v1/items/", "POST /api/v1/items/{$}"},
		{routeSubtreePatterns, "GET", "", "/api/v1/items/", "/api/v1/"},
		{routeSubtreePatterns, "DELETE", "", "/api/v1/items/9", "/api/v1/"},
		{routeSubtreePatterns, "DELETE", "API.example.com", "/api/v1/items/9", "api.example.com/api/v1/items/{id}"},
		{routeSubtreePatterns, "GET", "", "/api/v1/items/9/sub/a/b", "/api/v1/items/{id}/sub/{rest...}"},
		{routeSubtreePatterns, "GET", "", "/api/v1/items/9/sub", ""}, // redirect to .../sub/
		{routeSubtreePatterns, "GET", "api.example.org", "/x/1/", "GET API.example.org/x/{y}/"},
		{routeSubtreePatterns, "POST", "api.example.org", "/x/1/", ""}, // 405
		{routeSubtreePatterns, "GET", "", "/only-get", "GET /only-get"},
		{routeSubtreePatterns, "DELETE", "", "/only-get", ""}, // 405
		{routeSubtreePatterns, "POST", "", "/only-post/", "POST /only-post/{$}"},
		{routeSubtreePatterns, "POST", "", "/only-post", ""},   // redirect
		{routeSubtreePatterns, "GET", "", "/nothing/here", ""}, // 404

		{routeManyLiteralPatterns, "GET", "", "/lit7/x", "/lit7/x"},
		{routeManyLiteralPatterns, "GET", "", "/lit%37/x", "/lit7/x"},
		{routeManyLiteralPatterns, "GET", "", "/lit%2F/x", "/lit%2F/x"},
		{routeManyLiteralPatterns, "GET", "", "/lit%2f/x", "/lit%2F/x"},
		{routeManyLiteralPatterns, "GET", "", "/lit99/x", ""},
		{routeManyLiteralPatterns, "GET", "", "/m/lit3", "GET /m/lit3"},
		{routeManyLiteralPatterns, "GET", "", "/m/l%69t3", "GET /m/lit3"},
		{routeManyLiteralPatterns, "POST", "", "/m/lit3", "/m/{other}"},
		{routeManyLiteralPatterns, "GET", "", "/m/lit%25zz", "/m/{other}"},
		{routeManyLiteralPatterns, "GET", "", "/m/" + strings.Repeat("%41", 60), "/m/{other}"},
	}
	muxes := map[string]*http.ServeMux{}
	for _, tt := range tests {
		name := fmt.Sprintf("%s %s %s", tt.method, tt.host, tt.target)
		key := strings.Join(tt.patterns, "\n")
		if muxes[key] == nil {
			muxes[key] = newRouteTestMux(t, tt.patterns)
		}
		m := mustNew(t, tt.patterns)
		r := routeRequest(tt.method, tt.host, tt.target)
		got, ok := match(m, r)
		require.Equal(t, tt.want, got, name)
		require.Equal(t, tt.want != "", ok, name)
		muxGot, _ := serveMuxRoute(muxes[key], r)
		require.Equal(t, tt.want, muxGot, "ServeMux disagrees with the table: %s", name)
	}
}

func TestMatchHost(t *testing.T) {
	m := mustNew(t, []string{"api.example.com/x", "/x"})
	// r.Host, when set, is the host matched.
	r := routeRequest("GET", "10.0.0.1:443", "/x")
	r.Host = "API.Example.Com:443"
	got, ok := match(m, r)
	require.True(t, ok)
	require.Equal(t, "api.example.com/x", got)
	// Else r.URL.Host.
	r = routeRequest("GET", "api.example.com", "/x")
	got, _ = match(m, r)
	require.Equal(t, "api.example.com/x", got)
	r = routeRequest("GET", "", "/x")
	got, _ = match(m, r)
	require.Equal(t, "/x", got)
	// A request without a URL matches nothing.
	got, ok = match(m, &http.Request{Method: "GET"})
	require.False(t, ok)
	require.Empty(t, got)
}

// routeTestSegments are the pieces random request paths are made of.
var routeTestSegments = []string{
	"", ".", "..", "...", "a", "b", "c", "d", "x", "z", "h", "p", "q", "1", "42",
	"v1", "v2", "users", "orders", "files", "admin", "static", "api", "items",
	"sub", "w", "tunnel", "t", "u", "v6", "dots", "lit3", "lit%2F", "lit%37", "m",
	"only-get", "only-post", "repos", "issues", "charges", "refunds",
	"%2F", "%2f", "a%2Fb", "x%2Fy", "%41", "%zz", "%", "%2", "sp%20ace", "sp ace",
	"{x}", "é", "a+b", "a;b", "%2E%2E", "%2e", "?", "#",
}

var routeTestHosts = []string{
	"", "example.com", "EXAMPLE.com", "example.com:8080", "other.org",
	"api.example.com", "API.example.org:1", "[::1]:80", "[::1]", "::1",
	"example.com:", "[example.com]:80",
}

var routeTestMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "CONNECT", "OPTIONS", ""}

// randomRoutePath returns a random path made of routeTestSegments.
func randomRoutePath(rng *rand.Rand) string {
	var b strings.Builder
	n := rng.IntN(6)
	for range n {
		b.WriteByte('/')
		b.WriteString(routeTestSegments[rng.IntN(len(routeTestSegments))])
	}
	switch rng.IntN(4) {
	case 0:
		b.WriteByte('/')
	case 1:
		if n == 0 {
			b.WriteByte('/')
		}
	}
	s := b.String()
	if rng.IntN(20) == 0 && len(s) > 0 {
		s = s[1:] // no leading slash
	}
	return s
}

// randomRoutePathFor returns a random path near one of patterns: its
// wildcards filled in, its literals sometimes escaped or replaced, its end
// sometimes changed.
func randomRoutePathFor(rng *rand.Rand, patterns []string) string {
	_, _, p := splitPattern(patterns[rng.IntN(len(patterns))])
	randomSeg := func() string { return routeTestSegments[rng.IntN(len(routeTestSegments))] }
	var b strings.Builder
	for _, seg := range strings.Split(p, "/")[1:] {
		switch {
		case seg == "{$}":
			b.WriteByte('/')
		case strings.HasSuffix(seg, "...}"):
			for range rng.IntN(4) {
				b.WriteString("/" + randomSeg())
			}
		case strings.HasPrefix(seg, "{"):
			b.WriteString("/" + randomSeg())
		case rng.IntN(8) == 0:
			b.WriteString("/" + randomSeg())
		case rng.IntN(6) == 0 && seg != "":
			i := rng.IntN(len(seg))
			b.WriteString(fmt.Sprintf("/%s%%%02X%s", seg[:i], seg[i], seg[i+1:]))
		default:
			b.WriteString("/" + seg)
		}
	}
	s := b.String()
	switch rng.IntN(6) {
	case 0:
		s += "/"
	case 1:
		s = strings.TrimSuffix(s, "/")
	case 2:
		s += "/" + randomSeg()
	}
	return s
}

// randomRouteURL builds a URL for the raw path p in one of several ways.
func randomRouteURL(rng *rand.Rand, p string) *url.URL {
	switch rng.IntN(3) {
	case 0: // the path as an unescaped Path
		return &url.URL{Path: p}
	case 1: // parsed, which sets RawPath when needed
		if u, err := url.Parse(p); err == nil {
			return u
		}
		return &url.URL{Path: p}
	default: // an arbitrary RawPath, valid or not for Path
		unescaped, err := url.PathUnescape(p)
		if err != nil || rng.IntN(4) == 0 {
			unescaped = p
		}
		return &url.URL{Path: unescaped, RawPath: p}
	}
}

func TestMatchServeMuxDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for name, patterns := range routePatternSets {
		t.Run(name, func(t *testing.T) {
			m := mustNew(t, patterns)
			mux := newRouteTestMux(t, patterns)
			check := func(r *http.Request) {
				t.Helper()
				want, wantOK := serveMuxRoute(mux, r)
				got, ok := match(m, r)
				require.Equal(t, wantOK, ok, "%s host=%q url.Host=%q path=%q rawpath=%q", r.Method, r.Host, r.URL.Host, r.URL.Path, r.URL.RawPath)
				require.Equal(t, want, got, "%s host=%q url.Host=%q path=%q rawpath=%q", r.Method, r.Host, r.URL.Host, r.URL.Path, r.URL.RawPath)
			}
			// Every pattern's own path, with variations.
			for _, p := range patterns {
				_, host, path := splitPattern(p)
				for _, v := range []string{path, strings.TrimSuffix(path, "/"), path + "/", path + "x", path + "/x/y",
					strings.ReplaceAll(path, "{$}", ""), strings.ReplaceAll(strings.ReplaceAll(path, "{", ""), "}", "")} {
					for _, method := range routeTestMethods {
						for _, h := range []string{"", host, "Other"} {
							check(&http.Request{Method: method, URL: &url.URL{Host: h, Path: v}})
							if u, err := url.Parse(v); err == nil {
								u.Host = h
								check(&http.Request{Method: method, URL: u})
							}
						}
					}
				}
			}
			// Random requests.
			for range 30000 {
				p := randomRoutePath(rng)
				if rng.IntN(2) == 0 {
					p = randomRoutePathFor(rng, patterns)
				}
				u := randomRouteURL(rng, p)
				r := &http.Request{Method: routeTestMethods[rng.IntN(len(routeTestMethods))], URL: u}
				if rng.IntN(2) == 0 {
					u.Host = routeTestHosts[rng.IntN(len(routeTestHosts))]
				} else {
					r.Host = routeTestHosts[rng.IntN(len(routeTestHosts))]
					u.Host = routeTestHosts[rng.IntN(len(routeTestHosts))]
				}
				check(r)
			}
		})
	}
}

func TestCleanPathAndPort(t *testing.T) {
	// isCleanPath(p) == (cleanPath(p) == p), with cleanPath as in net/http.
	cleanPath := func(p string) string {
		if p == "" {
			return "/"
		}
		if p[0] != '/' {
			p = "/" + p
		}
		np := path.Clean(p)
		if p[len(p)-1] == '/' && np != "/" {
			np += "/"
		}
		return np
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		var b strings.Builder
		for range rng.IntN(24) {
			b.WriteString([]string{"/", "/", "/", ".", "..", "a", "b.", "/abcdefgh", "/xy"}[rng.IntN(9)])
		}
		p := b.String()
		require.Equal(t, cleanPath(p) == p, isCleanPath(p), "%q", p)
	}
	// stripPort agrees with net/http's stripHostPort.
	stripHostPort := func(h string) string {
		if !strings.Contains(h, ":") {
			return h
		}
		host, _, err := net.SplitHostPort(h)
		if err != nil {
			return h
		}
		return host
	}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(7) {
			b.WriteString([]string{":", "[", "]", "a", "1", "::", "x.y"}[rng.IntN(7)])
		}
		h := b.String()
		require.Equal(t, stripHostPort(h), stripPort(h), "%q", h)
	}
	for _, h := range routeTestHosts {
		require.Equal(t, stripHostPort(h), stripPort(h), "%q", h)
	}
}

func TestEscapedPath(t *testing.T) {
	// escapedPath splits into the same unescaped segments as
	// u.EscapedPath().
	rng := rand.New(rand.NewPCG(5, 6))
	segs := func(p string, decode bool) []string {
		var out []string
		for _, s := range strings.Split(p, "/") {
			if decode {
				if d, err := url.PathUnescape(s); err == nil {
					s = d
				}
			}
			out = append(out, s)
		}
		return out
	}
	for range 20000 {
		u := randomRouteURL(rng, randomRoutePath(rng))
		p, decode, ok := escapedPath(u)
		require.True(t, ok, "a URL without Opaque always sends its path")
		require.Equal(t, segs(u.EscapedPath(), true), segs(p, decode), "path=%q rawpath=%q", u.Path, u.RawPath)
		require.Equal(t, isCleanPath(u.EscapedPath()), isCleanPath(p))
	}
}

// A client request whose URL has Opaque sends it, and ServeMux serves it
// by the path the server parses from it: the Matcher reads that path.
func TestMatchOpaqueURLs(t *testing.T) {
	m, mux := mustNew(t, routeAPIPatterns), newRouteTestMux(t, routeAPIPatterns)
	tricky, trickyMux := mustNew(t, routeTrickyPatterns), newRouteTestMux(t, routeTrickyPatterns)
	for _, opaque := range []string{
		"//h.test/v1/users/42", "/v1/users/42", "//h.test", "//h.test/",
		"//h.test/a/%2F", "/x%2Fy/z", "/a/b/../c", "//h.test/a/./b",
		"//h.test/files/x/y?q=1", "/p/7/", "//example.com/a/b", "a/b", "/a/%zz",
	} {
		for _, method := range []string{"GET", "POST", "DELETE", "HEAD"} {
			r := &http.Request{Method: method, URL: &url.URL{Scheme: "http", Host: "h.test", Opaque: opaque}}
			got, ok := match(m, r)
			want, wantOK := serveMuxRoute(mux, r)
			require.Equal(t, [2]any{want, wantOK}, [2]any{got, ok}, "%s %q", method, opaque)
			got, ok = match(tricky, r)
			want, wantOK = serveMuxRoute(trickyMux, r)
			require.Equal(t, [2]any{want, wantOK}, [2]any{got, ok}, "tricky: %s %q", method, opaque)
		}
	}
	r := &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: "h.test", Opaque: "//h.test/v1/users/42"}}
	got, _ := match(m, r)
	require.Equal(t, "GET /v1/users/{id}", got)
}

// FuzzMatch: for any method, host, path and raw path, the Matcher picks
// the pattern ServeMux serves the request with, or none where ServeMux
// redirects or answers 404 or 405.
func FuzzMatch(f *testing.F) {
	f.Add("GET", "example.com", "/a/b", "")
	f.Add("HEAD", "EXAMPLE.com:8080", "/a/q", "")
	f.Add("POST", "", "/p/1", "")
	f.Add("CONNECT", "[::1]:80", "/a/../b", "")
	f.Add("GET", "", "/x/y/z", "/x%2Fy/z")
	f.Add("GET", "", "/a//b", "")
	f.Add("", "", "", "")
	f.Add("GET", "other.org", "/files/a/b/", "/files/a%2fb/")
	m := mustNew(f, routeTrickyPatterns)
	mux := newRouteTestMux(f, routeTrickyPatterns)
	m2 := mustNew(f, routeSubtreePatterns)
	mux2 := newRouteTestMux(f, routeSubtreePatterns)
	f.Fuzz(func(t *testing.T, method, host, path, rawPath string) {
		r := &http.Request{Method: method, Host: host, URL: &url.URL{Path: path, RawPath: rawPath}}
		for _, c := range []struct {
			m   *Matcher
			mux *http.ServeMux
		}{{m, mux}, {m2, mux2}} {
			want, wantOK := serveMuxRoute(c.mux, r)
			got, ok := match(c.m, r)
			if got != want || ok != wantOK {
				t.Fatalf("match(%q %q %q %q) = %q, %v; ServeMux: %q, %v", method, host, path, rawPath, got, ok, want, wantOK)
			}
		}
	})
}

// TestNewRefusesWhatServeMuxRefuses: New's errors are ServeMux's own for
// an invalid pattern, name both patterns of a conflict, and say so when
// patterns conflict only once their hosts are lower-cased; every valid
// pattern set of these tests is accepted.
func TestNewRefusesWhatServeMuxRefuses(t *testing.T) {
	_, err := New(nil)
	require.EqualError(t, err, "no patterns")
	muxErr := func(patterns ...string) (err error) {
		defer func() { err, _ = recover().(error) }()
		mux := http.NewServeMux()
		for _, p := range patterns {
			mux.Handle(p, routeTestHandler(p))
		}
		return nil
	}
	for _, p := range []string{"", "GET", "/{a", "/{a}/{a}", "GET //x"} {
		want := muxErr(p)
		require.Error(t, want, p)
		_, err := New([]string{"/ok", p})
		require.EqualError(t, err, want.Error(), p)
	}
	_, err = New([]string{"/a/{x}", "/a/{y}"})
	require.ErrorContains(t, err, "conflicts with")
	_, err = New([]string{"/a//b", "/a/{x}/b"})
	require.Error(t, err, "ServeMux's tree itself refuses this pair")
	require.NoError(t, muxErr("Example.com/x", "example.com/x"))
	_, err = New([]string{"Example.com/x", "example.com/x"})
	require.ErrorContains(t, err, "with hosts compared regardless of case: ")
	require.ErrorContains(t, err, "conflicts with")
	for name, ps := range routePatternSets {
		_, err := New(ps)
		require.NoError(t, err, name)
	}
}

func TestMatchAllocs(t *testing.T) {
	m := mustNew(t, routeAPIPatterns)
	many := mustNew(t, routeManyLiteralPatterns)
	tricky := mustNew(t, routeTrickyPatterns)
	reqs := []struct {
		m *Matcher
		r *http.Request
	}{
		{m, routeRequest("GET", "api.test", "/v1/users/42/orders")},
		{m, routeRequest("HEAD", "api.test:443", "/v1/users/42")},
		{m, routeRequest("GET", "api.test", "/v1/users/a%2Fb/orders")},
		{m, routeRequest("GET", "api.test", "/v1/users/john%20doe")},
		{m, routeRequest("GET", "api.test", "/files/a/b/c")},
		{m, routeRequest("GET", "api.test", "/files")},
		{m, routeRequest("GET", "api.test", "/v1/../x")},
		{m, routeRequest("PATCH", "api.test", "/v1/users/1")},
		{m, routeRequest("GET", "api.test", "")},
		{many, routeRequest("GET", "", "/lit%37/x")},
		{many, routeRequest("GET", "", "/m/l%69t3")},
		{tricky, routeRequest("GET", "[::1]:80", "/v6")},
		{tricky, routeRequest("CONNECT", "h:1", "/a/../b")},
	}
	for _, c := range reqs {
		allocs := testing.AllocsPerRun(100, func() { match(c.m, c.r) })
		require.Zero(t, allocs, "%s %s", c.r.Method, c.r.URL)
	}
}

func BenchmarkMatch(b *testing.B) {
	m := mustNew(b, routeAPIPatterns)
	r := routeRequest("GET", "api.test", "/v1/users/42/orders")
	if p, _ := match(m, r); p != "GET /v1/users/{id}/orders" {
		b.Fatal(p)
	}
	b.ReportAllocs()
	for b.Loop() {
		match(m, r)
	}
}

func BenchmarkMatchServeMux(b *testing.B) {
	mux := newRouteTestMux(b, routeAPIPatterns)
	r := routeRequest("GET", "api.test", "/v1/users/42/orders")
	r.Host = r.URL.Host
	if _, p := mux.Handler(r); p != "GET /v1/users/{id}/orders" {
		b.Fatal(p)
	}
	b.ReportAllocs()
	for b.Loop() {
		mux.Handler(r)
	}
}
