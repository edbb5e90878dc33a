package httpbreaker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testURL is the URL most tests send, and testKey its breaker's key.
const (
	testURL = "http://api.test/v1/things"
	testKey = "api.test"
)

// century is far enough ahead to tell "at the clock's end" from "soon".
const century = 100 * 365 * 24 * time.Hour

// errConnRefused stands for a connection error.
var errConnRefused = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

// loopbackTimeout is the client Timeout of the loopback tests whose calls
// must time out and count: far past minBudget, so that a stall of a
// loaded machine between the client setting its deadline and the breaker
// admitting the call cannot leave the call too short a budget to count.
const loopbackTimeout = 400 * time.Millisecond

// rtFunc is an in-memory RoundTripper.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// stub is the cheapest possible next: one shared response, no allocation
// (the benchmarks' next).
type stub struct{ resp *http.Response }

func newStub() *stub {
	return &stub{resp: &http.Response{StatusCode: 200, Body: http.NoBody}}
}

func (s *stub) RoundTrip(*http.Request) (*http.Response, error) { return s.resp, nil }

// trackedBody is a response or request body that records being closed.
type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

func newBody(s string) *trackedBody { return &trackedBody{Reader: strings.NewReader(s)} }

// response builds a response with a tracked body.
func response(req *http.Request, code int, header http.Header) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{
		StatusCode: code,
		Status:     http.StatusText(code),
		Header:     header,
		Body:       newBody("upstream body"),
		Request:    req,
	}
}

// dep is a fake dependency: an in-memory next RoundTripper whose answer
// the test sets, and which counts the calls that reach it. Like a real
// transport, it fails a request whose context is already done with the
// context's error.
type dep struct {
	calls         atomic.Int64
	nearDeadlines atomic.Int64 // calls that came with a deadline less than a century away

	mu     sync.Mutex
	code   int         // status to answer with, when err is nil
	err    error       // error to answer with
	header http.Header // headers of the response
	hang   bool        // block until the request's context is done
	gate   chan struct{}
	delay  time.Duration // answer after this long

	// Set by holdEach: each call waits for its own gate, by its X-ID.
	held    bool
	arrived []string            // the X-IDs of held calls, in the order they came
	gates   map[string]chan int // the status each held call answers with
}

func newDep(code int) *dep { return &dep{code: code} }

func (d *dep) set(code int, err error) {
	d.mu.Lock()
	d.code, d.err, d.hang = code, err, false
	d.mu.Unlock()
}

func (d *dep) setHeader(h http.Header) {
	d.mu.Lock()
	d.header = h
	d.mu.Unlock()
}

// hangUntilDone makes every call block until its context is done.
func (d *dep) hangUntilDone() {
	d.mu.Lock()
	d.hang = true
	d.mu.Unlock()
}

// block makes calls wait until release is called.
func (d *dep) block() {
	d.mu.Lock()
	d.gate = make(chan struct{})
	d.mu.Unlock()
}

func (d *dep) release() {
	d.mu.Lock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
	d.mu.Unlock()
}

// newHeldDep is a dep whose calls each wait until the test lets them go
// (holdEach).
func newHeldDep() *dep {
	d := newDep(http.StatusOK)
	d.holdEach()
	return d
}

// holdEach makes every call wait until let is called for the X-ID of its
// request, and records the order calls arrive in (order).
func (d *dep) holdEach() {
	d.mu.Lock()
	d.held, d.gates = true, map[string]chan int{}
	d.mu.Unlock()
}

// heldGate is the gate of the held call with X-ID id.
func (d *dep) heldGate(id string) chan int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gates[id] == nil {
		d.gates[id] = make(chan int, 1)
	}
	return d.gates[id]
}

// let lets the held call with X-ID id go, to answer with code.
func (d *dep) let(id string, code int) { d.heldGate(id) <- code }

// order is the X-IDs of the held calls, in the order they arrived.
func (d *dep) order() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.arrived...)
}

func (d *dep) RoundTrip(req *http.Request) (*http.Response, error) {
	d.calls.Add(1)
	if dl, ok := req.Context().Deadline(); ok && dl.Before(time.Now().Add(century)) {
		d.nearDeadlines.Add(1)
	}
	if req.Body != nil {
		defer req.Body.Close()
	}
	d.mu.Lock()
	held := d.held
	if held {
		d.arrived = append(d.arrived, req.Header.Get("X-ID"))
	}
	d.mu.Unlock()
	if held {
		select {
		case code := <-d.heldGate(req.Header.Get("X-ID")):
			return response(req, code, nil), nil
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	if err := req.Context().Err(); err != nil {
		return nil, err // as a real transport does
	}
	d.mu.Lock()
	code, err, hang, gate, header, delay := d.code, d.err, d.hang, d.gate, d.header.Clone(), d.delay
	d.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	if hang {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if err != nil {
		return nil, err
	}
	return response(req, code, header), nil
}

// get sends a GET for url through rt and closes the response body.
func get(t testing.TB, rt http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	return getCtx(t, context.Background(), rt, url)
}

func getCtx(t testing.TB, ctx context.Context, rt http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if resp != nil && err != nil {
		t.Fatalf("RoundTrip returned a response and an error: %v", err)
	}
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// mustReq is a GET request for u.
func mustReq(t testing.TB, u string) *http.Request {
	r, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	return r
}

// transitionLog records the transitions a Transport reports: hook is
// for onStateChange, record for WithOnTransition.
type transitionLog struct {
	mu  sync.Mutex
	got []Transition
}

func (l *transitionLog) hook(key string, from, to State) {
	l.record(Transition{Key: key, From: from, To: to})
}

func (l *transitionLog) record(tr Transition) {
	l.mu.Lock()
	l.got = append(l.got, tr)
	l.mu.Unlock()
}

// list is the transitions as "key: from→to".
func (l *transitionLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, tr := range l.got {
		out = append(out, tr.Key+": "+tr.From.String()+"→"+tr.To.String())
	}
	return out
}

// last returns the latest transition; there must be one.
func (l *transitionLog) last(t *testing.T) Transition {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.NotEmpty(t, l.got, "no transition reported")
	return l.got[len(l.got)-1]
}

// requireNoLock holds mu while f runs on another goroutine, and requires
// that f finish, without error: had f taken mu, it would still be waiting
// when the 10s guard fires. what names f in the failure.
func requireNoLock(t *testing.T, mu *sync.Mutex, what string, f func() error) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for a lock held elsewhere", what)
	}
}

// testCircuit returns a circuit for key with the default policy, made at
// clock time 0, in no Transport.
func testCircuit(key string) *circuit {
	cfg := defaultConfig()
	c := new(circuit)
	c.pol.Store(&cfg.policy)
	c.b.init(key, &cfg.policy.settings, time.Now(), 0, nil)
	return c
}

// onStateChange is WithOnTransition for tests that look only at the key
// and the states.
func onStateChange(f func(key string, from, to State)) Option {
	if f == nil {
		return WithOnTransition(nil)
	}
	return WithOnTransition(func(tr Transition) { f(tr.Key, tr.From, tr.To) })
}

// nopObserver is an Observer that does nothing.
type nopObserver struct{}

func (nopObserver) Transition(Transition)      {}
func (nopObserver) Call(context.Context, Call) {}

// keys returns the keys of tr's live breakers, sorted.
func keys(tr *Transport) []string {
	var out []string
	for _, s := range tr.Snapshot() {
		out = append(out, s.Key)
	}
	return out
}

// step is one row of a state-machine table: after waiting (in fake time),
// a request is sent while the dependency answers code (or err).
type step struct {
	after time.Duration // wait this long before the request
	code  int           // the dependency's status, when err is nil
	err   error         // the dependency's error
	sent  bool          // the request must reach the dependency
	want  State         // the breaker's state after the request
}

// rep repeats a step n times.
func rep(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// steps concatenates rows and groups of rows.
func steps(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch v := p.(type) {
		case step:
			out = append(out, v)
		case []step:
			out = append(out, v...)
		}
	}
	return out
}

// run sends one request per step through tr to d and checks that it
// reached d or not and the state afterwards. Call it inside a synctest
// bubble.
func run(t *testing.T, tr *Transport, d *dep, rows []step) {
	t.Helper()
	for i, s := range rows {
		time.Sleep(s.after)
		d.set(s.code, s.err)
		before := d.calls.Load()
		resp, err := get(t, tr, testURL)
		sent := d.calls.Load() > before
		require.Equal(t, s.sent, sent, "step %d: reached the dependency", i)
		require.Equal(t, s.want, tr.State(testKey), "step %d: state", i)
		if !s.sent {
			require.NoError(t, err, "step %d", i)
			require.True(t, IsRejected(resp), "step %d: rejected with the synthetic 503", i)
		}
	}
}

func with(s step, f func(*step)) step { f(&s); return s }

// tripped returns a Transport over d whose breaker for testKey has just
// opened for exactly 1s.
func tripped(t *testing.T, d *dep, opts ...Option) *Transport {
	tr := New(d, append([]Option{WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second)}, opts...)...)
	d.set(500, nil)
	_, _ = get(t, tr, testURL)
	require.Equal(t, StateOpen, tr.State(testKey))
	return tr
}

func itoaTest(i int) string { return string(rune('a'+i/26)) + string(rune('a'+i%26)) }

// ok200 and fail500 are the commonest steps: an answer that reaches the
// dependency and leaves the breaker closed.
var (
	ok200   = step{code: 200, sent: true, want: StateClosed}
	fail500 = step{code: 500, sent: true, want: StateClosed}
)

// openFor is how long testKey's open breaker stays open from now, as
// Snapshot shows it.
func openFor(t *testing.T, tr *Transport) time.Duration {
	t.Helper()
	s := tr.Snapshot()
	require.Len(t, s, 1)
	require.Equal(t, StateOpen, s[0].State)
	return time.Until(s[0].RetryAt)
}

// requireRefused requires that a call to testURL be refused with the
// synthetic 503 saying Retry-After: want seconds.
func requireRefused(t *testing.T, tr *Transport, want string) {
	t.Helper()
	resp, err := get(t, tr, testURL)
	require.NoError(t, err)
	require.True(t, IsRejected(resp), "refused by the breaker")
	require.Equal(t, want, resp.Header.Get("Retry-After"))
}

// requireAnswers requires that a call to testURL reach the dependency
// and come back with its answer, code.
func requireAnswers(t *testing.T, tr *Transport, code int) {
	t.Helper()
	resp, err := get(t, tr, testURL)
	require.NoError(t, err)
	require.False(t, IsRejected(resp), "answered by the dependency")
	require.Equal(t, code, resp.StatusCode)
}

// memStore is an in-memory Store: a fleet in one process. It delivers a
// member's hints synchronously to every other member.
type memStore struct {
	mu        sync.Mutex
	members   []*memMember
	published []Hint
	latest    map[string]Hint
	lease     Lease // the answer to every ProbeLease
	leaseAsks int
	errors    uint64
}

type memMember struct {
	s *memStore
	f func(Hint)
}

func newMemStore() *memStore { return &memStore{latest: map[string]Hint{}, lease: LeaseUnavailable} }

func (s *memStore) Join(f func(Hint)) Member {
	m := &memMember{s: s, f: f}
	s.mu.Lock()
	s.members = append(s.members, m)
	s.mu.Unlock()
	return m
}

func (m *memMember) Publish(h Hint) {
	s := m.s
	s.mu.Lock()
	s.published = append(s.published, h)
	s.latest[h.Key] = h
	members := append([]*memMember{}, s.members...)
	s.mu.Unlock()
	for _, o := range members {
		if o != m {
			o.f(h)
		}
	}
}

func (s *memStore) Lookup(key string) (Hint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.latest[key]
	return h, ok
}

func (m *memMember) ProbeLease(string, time.Duration) Lease {
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseAsks++
	return s.lease
}

func (s *memStore) Errors() uint64 { return s.errors }

func (s *memStore) hints() []Hint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Hint(nil), s.published...)
}

// publish sends h as if from another instance.
func (s *memStore) publish(h Hint) { (&memMember{s: s}).Publish(h) }

// gaugeValue returns the value of the one series of name whose labels
// contain match.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, match string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var found []float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, lp := range m.GetLabel() {
				parts = append(parts, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			if !strings.Contains(strings.Join(parts, ","), match) {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				found = append(found, m.GetGauge().GetValue())
			case m.GetCounter() != nil:
				found = append(found, m.GetCounter().GetValue())
			}
		}
	}
	require.Len(t, found, 1, "%s{%s}", name, match)
	return found[0]
}

// panicMessage returns what f panics with, as a string.
func panicMessage(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		require.NotNil(t, r, "no panic")
		msg, _ = r.(string)
		require.NotEmpty(t, msg, "panic value %v is not a message", r)
	}()
	f()
	return ""
}

// rawGet sends a GET for path to addr on a connection of its own and
// returns every byte of the response: status line, headers and body.
func rawGet(t *testing.T, addr, path string) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: public\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	return b
}

// closedPort returns the address of a port nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func integrationTransport(t *testing.T, opts ...Option) *Transport {
	next := cleanhttp.DefaultPooledTransport()
	t.Cleanup(next.CloseIdleConnections)
	return New(next, append([]Option{WithMinRequests(3), WithJitter(0)}, opts...)...)
}

// faultNoLeaks makes t check, after every cleanup registered later has
// run, that no goroutine started during the test is still alive. Call it
// first in the test.
func faultNoLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// requireKey checks what every key must be: at most maxKeyLen bytes and
// valid UTF-8 (keys are Prometheus label values, and the client library
// refuses invalid ones, panicking in a scrape).
func requireKey(t *testing.T, what, k string) {
	t.Helper()
	require.LessOrEqual(t, len(k), maxKeyLen, "%s: key of %d bytes", what, len(k))
	require.True(t, utf8.ValidString(k), "%s: key %q is not valid UTF-8", what, k)
}

// requireTurnedOff checks that tr's breaker for key off has
// reject-as-error, body errors and a call timeout of 1s turned off, which
// key on has on, and that a refusal for off is the synthetic 503 (not an
// error, not a fallback's answer).
func requireTurnedOff(t *testing.T, tr *Transport, off, on string) {
	t.Helper()
	ps := tr.policies.Load()
	p, q := ps.of(off), ps.of(on)
	require.False(t, p.rejectAsError)
	require.False(t, p.bodyErrors)
	require.Zero(t, p.callTimeout)
	require.True(t, q.rejectAsError)
	require.True(t, q.bodyErrors)
	require.Equal(t, time.Second, q.callTimeout)

	tr.Trip(off, time.Hour)
	resp, err := get(t, tr, "http://"+off+"/")
	require.NoError(t, err, "not an error: the synthetic 503")
	require.True(t, IsRejected(resp), "not a fallback's answer")
}
