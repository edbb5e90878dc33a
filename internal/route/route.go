// Package route matches HTTP requests against net/http.ServeMux patterns,
// as ServeMux would, without allocating: a Matcher picks the pattern that
// ServeMux would serve a request with, and answers no pattern where
// ServeMux would redirect or answer 405. Its tests check it against
// ServeMux itself.
package route

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/httpbreaker/httpbreaker/internal/swar"
)

// A Matcher matches requests against a fixed set of ServeMux patterns
// with ServeMux's semantics, without allocating. It mirrors the decision
// tree of net/http's routing_tree.go: host, then method, then one level
// per path segment, searched in the same order (literal, then single
// wildcard, then multi wildcard), so that it selects the same pattern.
// It is immutable after construction and safe for concurrent use.
type Matcher struct {
	patterns []string      // as given
	info     []patternInfo // per pattern
	hosts    []hostRoutes  // patterns with a host, one entry per lower-cased host
	anyHost  *methodRoutes // patterns without a host; nil if none
}

// patternInfo is what exactMatch needs to know about a pattern.
type patternInfo struct {
	nsegs     int  // number of segments, as in net/http's pattern.segments
	lastMulti bool // last segment is a multi wildcard (or a trailing slash)
}

type hostRoutes struct {
	host    string // ASCII lower-cased
	methods *methodRoutes
}

// methodRoutes is the method level of the tree.
type methodRoutes struct {
	methods []methodRoute
	any     *node // patterns without a method
}

type methodRoute struct {
	method string
	root   *node
}

// node is a node of the path levels of the tree.
type node struct {
	pat    int              // index of the pattern ending here, or -1
	lits   []edge           // literal children, keyed by unescaped literal ("/" for {$})
	litMap map[string]*node // the same as lits, when there are many
	wild   *node            // single-wildcard child (also the child for an empty literal, as in ServeMux)
	multi  int              // pattern of the multi-wildcard child, or -1
}

type edge struct {
	lit  string
	node *node
	// word is lit's bytes, little-endian, if it has at most eight: a
	// segment read as one word then compares without a call.
	word uint64
}

func newEdge(lit string, child *node) edge {
	e := edge{lit: lit, node: child}
	if len(lit) <= 8 {
		for i := len(lit) - 1; i >= 0; i-- {
			e.word = e.word<<8 | uint64(lit[i])
		}
	}
	return e
}

// litMapMin is the number of literal children from which a node also
// indexes them in a map.
const litMapMin = 8

// segment is a parsed pattern segment, as in net/http's pattern.go.
type segment struct {
	s     string // unescaped literal, "/" for {$}, or wildcard name
	wild  bool
	multi bool
}

func newNode() *node { return &node{pat: -1, multi: -1} }

// New returns the Matcher of patterns, or an error if the list is empty,
// if a pattern is invalid or if two patterns conflict. It registers every
// pattern on a fresh http.ServeMux, and an invalid pattern's error is
// ServeMux's own verdict, which names the pattern. Hosts are compared
// without regard to ASCII case (ServeMux compares them exactly), so
// patterns that conflict once their hosts are lower-cased are refused
// too, with an error that says so.
func New(patterns []string) (*Matcher, error) {
	if len(patterns) == 0 {
		return nil, errors.New("no patterns")
	}
	if err := validate(patterns); err != nil {
		return nil, err
	}
	// Hosts are compared without regard to ASCII case here, unlike in
	// ServeMux: check that the patterns still do not conflict when their
	// hosts are lower-cased.
	lowered := make([]string, len(patterns))
	anyUpper := false
	for i, p := range patterns {
		_, host, path := splitPattern(p)
		lh := asciiLower(host)
		if lh != host {
			anyUpper = true
		}
		lowered[i] = p[:len(p)-len(host)-len(path)] + lh + path
	}
	if anyUpper {
		if err := validate(lowered); err != nil {
			return nil, fmt.Errorf("with hosts compared regardless of case: %w", err)
		}
	}

	m := &Matcher{
		patterns: append([]string(nil), patterns...),
		info:     make([]patternInfo, len(patterns)),
	}
	for i, p := range patterns {
		method, host, path := splitPattern(p)
		segs, err := parseSegments(path)
		if err != nil {
			// ServeMux accepted the pattern, which happens only with
			// GODEBUG=httpmuxgo121=1, where it does not parse patterns.
			return nil, fmt.Errorf("parsing %q: %w", p, err)
		}
		m.info[i] = patternInfo{nsegs: len(segs), lastMulti: segs[len(segs)-1].multi}
		ms := m.methodsFor(asciiLower(host))
		var root *node
		if method == "" {
			if ms.any == nil {
				ms.any = newNode()
			}
			root = ms.any
		} else {
			for _, e := range ms.methods {
				if e.method == method {
					root = e.root
				}
			}
			if root == nil {
				root = newNode()
				ms.methods = append(ms.methods, methodRoute{method, root})
			}
		}
		if !root.add(segs, i) {
			return nil, fmt.Errorf("pattern %q conflicts with pattern %q", p, patterns[root.leafFor(segs)])
		}
	}
	return m, nil
}

// validate registers patterns on a fresh http.ServeMux and returns its
// panic, if any, as an error.
func validate(patterns []string) (err error) {
	mux := http.NewServeMux()
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	defer func() {
		switch v := recover().(type) {
		case nil:
		case error:
			err = v
		default:
			err = fmt.Errorf("%v", v)
		}
	}()
	for _, p := range patterns {
		mux.Handle(p, h)
	}
	return nil
}

// splitPattern splits a pattern into method, host and path as
// net/http's parsePattern does. The pattern must be valid.
func splitPattern(s string) (method, host, path string) {
	rest := s
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		method, rest = s[:i], strings.TrimLeft(s[i+1:], " \t")
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return method, rest[:i], rest[i:]
	}
	return method, rest, ""
}

// parseSegments parses the path of a pattern into segments as
// net/http's parsePattern does.
func parseSegments(rest string) ([]segment, error) {
	if rest == "" {
		return nil, errors.New("host/path missing /")
	}
	var segs []segment
	for len(rest) > 0 {
		rest = rest[1:]
		if len(rest) == 0 {
			segs = append(segs, segment{wild: true, multi: true})
			break
		}
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			i = len(rest)
		}
		var seg string
		seg, rest = rest[:i], rest[i:]
		if strings.IndexByte(seg, '{') < 0 {
			if u, err := url.PathUnescape(seg); err == nil {
				seg = u
			}
			segs = append(segs, segment{s: seg})
			continue
		}
		if seg[0] != '{' || seg[len(seg)-1] != '}' {
			return nil, errors.New("bad wildcard segment")
		}
		name := seg[1 : len(seg)-1]
		if name == "$" {
			if rest != "" {
				return nil, errors.New("{$} not at end")
			}
			segs = append(segs, segment{s: "/"})
			break
		}
		name, multi := strings.CutSuffix(name, "...")
		if multi && rest != "" {
			return nil, errors.New("{...} wildcard not at end")
		}
		segs = append(segs, segment{s: name, wild: true, multi: multi})
	}
	return segs, nil
}

func (m *Matcher) methodsFor(host string) *methodRoutes {
	if host == "" {
		if m.anyHost == nil {
			m.anyHost = &methodRoutes{}
		}
		return m.anyHost
	}
	for _, h := range m.hosts {
		if h.host == host {
			return h.methods
		}
	}
	ms := &methodRoutes{}
	m.hosts = append(m.hosts, hostRoutes{host, ms})
	return ms
}

// add adds the path segments of pattern i below n, as net/http's
// routingNode.addSegments does. It reports false if another pattern
// already ends at the same node.
func (n *node) add(segs []segment, i int) bool {
	for ; len(segs) > 0; segs = segs[1:] {
		s := segs[0]
		switch {
		case s.multi:
			if n.multi >= 0 {
				return false
			}
			n.multi = i
			return true
		case s.wild || s.s == "":
			if n.wild == nil {
				n.wild = newNode()
			}
			n = n.wild
		default:
			c := n.literal(s.s, s.s)
			if c == nil {
				c = newNode()
				n.lits = append(n.lits, newEdge(s.s, c))
				if n.litMap != nil || len(n.lits) >= litMapMin {
					if n.litMap == nil {
						n.litMap = make(map[string]*node, len(n.lits))
						for _, e := range n.lits {
							n.litMap[e.lit] = e.node
						}
					}
					n.litMap[s.s] = c
				}
			}
			n = c
		}
	}
	if n.pat >= 0 {
		return false
	}
	n.pat = i
	return true
}

// leafFor returns the pattern that ends where segs would end below n.
// It is used only to explain a failed add.
func (n *node) leafFor(segs []segment) int {
	for ; len(segs) > 0; segs = segs[1:] {
		s := segs[0]
		switch {
		case s.multi:
			return n.multi
		case s.wild || s.s == "":
			n = n.wild
		default:
			n = n.literal(s.s, s.s)
		}
	}
	return n.pat
}

// literal returns the literal child of n with the unescaped key lit.
// rest is lit and what follows it in the path.
func (n *node) literal(lit, rest string) *node {
	if n.litMap != nil {
		return n.litMap[lit]
	}
	if len(lit) <= 8 && len(rest) >= 8 {
		// Compare the segment as one word, without a call.
		w := swar.Load64(rest)
		if len(lit) < 8 {
			w &= 1<<(8*len(lit)) - 1
		}
		for i := range n.lits {
			if e := &n.lits[i]; e.word == w && len(e.lit) == len(lit) {
				return e.node
			}
		}
		return nil
	}
	for i := range n.lits {
		// Most literals differ in length or first byte: skip the call
		// that compares strings.
		if l := n.lits[i].lit; len(l) == len(lit) && l[0] == lit[0] && l == lit {
			return n.lits[i].node
		}
	}
	return nil
}

// literalEscaped returns the literal child of n whose key is the
// unescaping of seg, which contains only valid %XX escapes.
func (n *node) literalEscaped(seg string) *node {
	if n.litMap != nil {
		var buf [128]byte
		if len(seg) <= len(buf) {
			k := 0
			for i := 0; i < len(seg); k++ {
				if seg[i] == '%' {
					buf[k] = unhexByte(seg[i+1])<<4 | unhexByte(seg[i+2])
					i += 3
				} else {
					buf[k] = seg[i]
					i++
				}
			}
			return n.litMap[string(buf[:k])]
		}
	}
	for i := range n.lits {
		if unescapedEqual(seg, n.lits[i].lit) {
			return n.lits[i].node
		}
	}
	return nil
}

// Match returns the index in New's patterns of the pattern that
// http.ServeMux would serve r with, or -1 if there is none, including
// where ServeMux would redirect or answer 405 Method Not Allowed. It
// follows net/http's ServeMux.findHandler and matchOrRedirect, with these
// differences: the host matched is r.Host if set, else r.URL.Host, and
// is compared without regard to ASCII case; an empty r.Method is GET and
// an empty path "/"; a CONNECT request's host loses its port like any
// other's, and a CONNECT path that does not start with "/" matches
// nothing. A URL with Opaque, which a client sends as it is, is matched
// by the path of that request line, and by nothing if its escapes are
// invalid (no server parses it). It does not allocate.
func (m *Matcher) Match(r *http.Request) int {
	if r == nil || r.URL == nil {
		return -1
	}
	path, decode, ok := escapedPath(r.URL)
	if !ok {
		return -1 // a request line no server parses: no handler
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	if method != http.MethodConnect {
		// ServeMux matches the cleaned path, then redirects if the path
		// was not clean: either way, no handler.
		if path == "" {
			path, decode = "/", false
		} else if !isCleanPath(path) {
			return -1
		}
	} else if path != "" && path[0] != '/' {
		// ServeMux does not clean CONNECT paths, and matches one without
		// a leading slash after dropping its first byte (of the escaped
		// path). We match it to nothing.
		return -1
	}
	host := ""
	if len(m.hosts) > 0 {
		host = r.Host
		if host == "" {
			host = r.URL.Host
		}
		host = stripPort(host)
	}

	i := m.lookup(host, method, path, decode, false)
	if i >= 0 && !m.info[i].lastMulti {
		return i // an exact match, whatever the path (see exactMatch)
	}
	if !m.exactMatch(i, path, false) && path != "" && path[len(path)-1] != '/' {
		// ServeMux redirects to path + "/" if that matches exactly.
		if j := m.lookup(host, method, path, decode, true); m.exactMatch(j, path, true) {
			return -1
		}
	}
	return i
}

// exactMatch is net/http's exactMatch for pattern i and the path, with a
// slash appended if slash is set.
func (m *Matcher) exactMatch(i int, path string, slash bool) bool {
	if i < 0 {
		return false
	}
	info := &m.info[i]
	if !info.lastMulti {
		return true
	}
	if slash {
		return info.nsegs == strings.Count(path, "/")+1
	}
	if len(path) > 0 && path[len(path)-1] != '/' {
		return false
	}
	return info.nsegs == strings.Count(path, "/")
}

// lookup is net/http's routingNode.match: the pattern matching host,
// method and path (with a slash appended if slash is set), or -1. decode
// tells whether path segments are to be unescaped.
func (m *Matcher) lookup(host, method, path string, decode, slash bool) int {
	if host != "" {
		for k := range m.hosts {
			if asciiEqualFold(m.hosts[k].host, host) {
				if i := m.hosts[k].methods.lookup(method, path, decode, slash); i >= 0 {
					return i
				}
				break
			}
		}
	}
	if m.anyHost == nil {
		return -1
	}
	return m.anyHost.lookup(method, path, decode, slash)
}

func (ms *methodRoutes) lookup(method, path string, decode, slash bool) int {
	var get *node
	for k := range ms.methods {
		e := &ms.methods[k]
		if e.method == method {
			if i := e.root.lookup(path, decode, slash); i >= 0 {
				return i
			}
		}
		if e.method == http.MethodGet {
			get = e.root
		}
	}
	if method == http.MethodHead && get != nil {
		if i := get.lookup(path, decode, slash); i >= 0 {
			return i
		}
	}
	if ms.any == nil {
		return -1
	}
	return ms.any.lookup(path, decode, slash)
}

// lookup is net/http's routingNode.matchPath. The path to match is path
// followed by a "/" if slash is set; path is empty or starts with '/'.
func (n *node) lookup(path string, decode, slash bool) int {
	if path == "" && !slash {
		return n.pat
	}
	// Split off the first segment. A lone "/" is the trailing-slash
	// segment, whose key is "/".
	var seg, rest string // rest is seg and the path after it
	escaped := false
	if path == "" || (path == "/" && !slash) {
		seg, rest, path, slash = "/", "/", "", false
	} else {
		// A loop beats strings.IndexByte on short segments.
		i := 1
		for i < len(path) && path[i] != '/' {
			i++
		}
		rest = path[1:]
		seg, path = path[1:i], path[i:]
		// ServeMux unescapes the segment unless it is invalidly escaped.
		escaped = decode && strings.IndexByte(seg, '%') >= 0 && validEscapes(seg)
	}
	// Literal children first. (An empty segment finds the wildcard child
	// in ServeMux, which is tried next anyway.)
	if seg != "" {
		var c *node
		if escaped {
			c = n.literalEscaped(seg)
		} else {
			c = n.literal(seg, rest)
		}
		if c != nil {
			if i := c.lookup(path, decode, slash); i >= 0 {
				return i
			}
		}
	}
	// Then the single wildcard, which does not match a trailing slash (nor
	// a segment that unescapes to "/").
	if n.wild != nil && seg != "/" && !(escaped && (seg == "%2F" || seg == "%2f")) {
		if i := n.wild.lookup(path, decode, slash); i >= 0 {
			return i
		}
	}
	// Last, the multi wildcard takes the rest.
	return n.multi
}

// escapedPath returns the escaped path a client sends for u, without
// allocating. For most URLs it is u.EscapedPath(): either u.RawPath,
// whose segments are then to be unescaped (decode), or u.Path, whose
// segments are what unescaping the segments of u.EscapedPath() would give
// back. A URL with u.Opaque sends that instead (see url.URL.RequestURI),
// "//host/path" as an absolute URL: its path, escaped, and not ok if its
// escapes are invalid, which no server parses.
func escapedPath(u *url.URL) (path string, decode, ok bool) {
	if o := u.Opaque; o != "" {
		if strings.HasPrefix(o, "//") {
			if i := strings.IndexByte(o[2:], '/'); i >= 0 {
				o = o[2+i:]
			} else {
				o = "" // "//host" alone: the path is empty
			}
		}
		if i := strings.IndexByte(o, '?'); i >= 0 {
			o = o[:i] // the server reads a query there
		}
		return o, true, validEscapes(o)
	}
	if u.RawPath != "" && validEncodedPath(u.RawPath) && unescapedEqual(u.RawPath, u.Path) {
		return u.RawPath, true, true
	}
	return u.Path, false, true
}

// validEncodedPath is net/url's validEncoded(s, encodePath).
func validEncodedPath(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		default:
			switch c {
			case '-', '.', '_', '~', // unreserved
				'!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', // sub-delims
				':', '@', '/', '[', ']', '%':
			default:
				return false
			}
		}
	}
	return true
}

// validEscapes reports whether every '%' in s starts a %XX escape.
func validEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 >= len(s) || !isHexByte(s[i+1]) || !isHexByte(s[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

// unescapedEqual reports whether s is validly %-escaped and unescapes to
// t, without allocating.
func unescapedEqual(s, t string) bool {
	j := 0
	for i := 0; i < len(s); j++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || !isHexByte(s[i+1]) || !isHexByte(s[i+2]) {
				return false
			}
			c = unhexByte(s[i+1])<<4 | unhexByte(s[i+2])
			i += 3
		} else {
			i++
		}
		if j >= len(t) || t[j] != c {
			return false
		}
	}
	return j == len(t)
}

func isHexByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhexByte(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

// isCleanPath reports whether net/http's cleanPath(p) == p: p starts
// with '/' and has no empty, "." or ".." segment (but may end in '/').
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if !swar.HasSlashPair(p) {
		return true // no "//" nor "/.": most paths
	}
	start := 1 // of the current segment
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch i - start {
		case 0: // empty: only as the last segment
			if i < len(p) {
				return false
			}
		case 1:
			if p[start] == '.' {
				return false
			}
		case 2:
			if p[start] == '.' && p[start+1] == '.' {
				return false
			}
		}
		start = i + 1
	}
	return true
}

// stripPort is net/http's stripHostPort: h without a port, if
// net.SplitHostPort accepts it, else h. It does not allocate.
func stripPort(h string) string {
	i := strings.LastIndexByte(h, ':')
	if i < 0 {
		return h
	}
	host, j, k := "", 0, 0
	if h[0] == '[' {
		end := strings.IndexByte(h, ']')
		if end < 0 || end+1 != i {
			return h
		}
		host, j, k = h[1:end], 1, end+1
	} else {
		host = h[:i]
		if strings.IndexByte(host, ':') >= 0 {
			return h
		}
	}
	if strings.IndexByte(h[j:], '[') >= 0 || strings.IndexByte(h[k:], ']') >= 0 {
		return h
	}
	return host
}

// asciiLower returns s with ASCII upper-case letters lower-cased.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// asciiEqualFold reports whether lower, which has no ASCII upper-case
// letter, equals s with ASCII upper-case letters lower-cased.
func asciiEqualFold(lower, s string) bool {
	if len(lower) != len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
