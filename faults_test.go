package httpbreaker

// Real network faults on 127.0.0.1, each through a real *http.Transport.
//
// Every test checks three things:
//
//   - the outcome the breaker recorded (Snapshot counts or State);
//   - that the caller got exactly what the real transport produced: the
//     breaker passes next's error or response through untouched, never
//     both, never neither (faultRig.do checks it at the RoundTripper
//     boundary on every call);
//   - that nothing leaks: each test verifies its own goroutines with
//     goleak once its servers are closed and its idle connections dropped
//     (TestMain checks the whole package again at the end).
//
// Where the fault hits the response body rather than the round trip
// (a truncated Content-Length body, an HTTP/2 stream reset after the
// headers, a body that stalls past the client's Timeout) the breaker
// classifies, by default, when RoundTrip returns, which is when the
// headers have arrived, and by then the call was a 200. Those tests pin
// down that a success is recorded and that the body read fails with the
// transport's own error; and, under WithBodyErrors, that the body's
// failure is what counts.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/stretchr/testify/require"
)

// faultCall is what one RoundTrip returned.
type faultCall struct {
	resp *http.Response
	err  error
}

// faultSpy is a RoundTripper that records what the RoundTripper it wraps
// returned.
type faultSpy struct {
	next http.RoundTripper

	mu    sync.Mutex
	calls []faultCall // guarded by mu
}

func (s *faultSpy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	s.mu.Lock()
	s.calls = append(s.calls, faultCall{resp, err})
	s.mu.Unlock()
	return resp, err
}

func (s *faultSpy) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func (s *faultSpy) last() faultCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[len(s.calls)-1]
}

// faultRig is a client whose Transport is a breaker over a real
// *http.Transport, with spies on both sides of the breaker.
type faultRig struct {
	t      *testing.T
	next   *faultSpy // what the real transport returned to the breaker
	tr     *Transport
	caller *faultSpy // what the breaker returned to the client
	client *http.Client
}

// newFaultRig puts a breaker (MinRequests 3, no jitter, open for an
// hour) over rt inside a client with the given Timeout (0: none).
func newFaultRig(t *testing.T, rt *http.Transport, timeout time.Duration, opts ...Option) *faultRig {
	t.Helper()
	t.Cleanup(rt.CloseIdleConnections)
	next := &faultSpy{next: rt}
	base := []Option{WithMinRequests(3), WithJitter(0), WithOpenTimeout(time.Hour), WithMaxOpenTimeout(time.Hour)}
	tr := New(next, append(base, opts...)...)
	caller := &faultSpy{next: tr}
	return &faultRig{t: t, next: next, tr: tr, caller: caller, client: &http.Client{Transport: caller, Timeout: timeout}}
}

// do sends req through the client and checks the RoundTripper contract at
// the breaker: exactly one of response and error, and, when the request
// went on to the real transport, exactly what that returned.
func (r *faultRig) do(req *http.Request) (*http.Response, error) {
	r.t.Helper()
	before := r.next.n()
	resp, err := r.client.Do(req)
	got := r.caller.last()
	require.True(r.t, (got.resp == nil) != (got.err == nil), "exactly one of response and error: %v", got.err)
	if r.next.n() > before {
		want := r.next.last()
		require.Same(r.t, want.resp, got.resp, "the caller gets the real transport's response")
		require.Equal(r.t, want.err, got.err, "the caller gets the real transport's error, unwrapped")
	}
	return resp, err
}

func (r *faultRig) get(url string) (*http.Response, error) {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(r.t, err)
	return r.do(req)
}

// status returns the Status of key's breaker.
func (r *faultRig) status(key string) Status {
	r.t.Helper()
	for _, s := range r.tr.Snapshot() {
		if s.Key == key {
			return s
		}
	}
	r.t.Fatalf("no breaker for %q", key)
	return Status{}
}

// requireCounts checks the breaker's window.
func (r *faultRig) requireCounts(key string, requests, failures int64) {
	r.t.Helper()
	s := r.status(key)
	require.Equal(r.t, requests, s.Requests, "requests in %s's window", key)
	require.Equal(r.t, failures, s.Failures, "failures in %s's window", key)
}

// requireTripsAndRejects checks that key's breaker is open and that the
// next call is refused with the synthetic 503 without reaching the
// network.
func (r *faultRig) requireTripsAndRejects(url, key string) {
	r.t.Helper()
	require.Equal(r.t, StateOpen, r.tr.State(key))
	before := r.next.n()
	resp, err := r.get(url)
	require.NoError(r.t, err)
	resp.Body.Close()
	require.True(r.t, IsRejected(resp))
	require.Equal(r.t, before, r.next.n(), "an open breaker keeps the call off the network")
}

// faultRawServer listens on 127.0.0.1 and, for each connection, reads one
// request and hands the connection to serve, closing it afterwards. It
// returns the address and the number of requests read.
func faultRawServer(t *testing.T, serve func(c net.Conn)) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var n atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				n.Add(1)
				serve(c)
			})
		}
	})
	return l.Addr().String(), &n
}

// faultServer starts an httptest server (TLS when useTLS is set, HTTP/2
// over it when http2 is set) whose error log is discarded: handshake
// failures are the point of some tests.
func faultServer(t *testing.T, h http.Handler, useTLS, http2 bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.EnableHTTP2 = http2
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

func TestFaultConnectionRefused(t *testing.T) {
	faultNoLeaks(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	rig := newFaultRig(t, cleanhttp.DefaultPooledTransport(), 5*time.Second)
	url := "http://" + addr + "/"
	for i := range int64(3) {
		_, err := rig.get(url)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		require.NotErrorIs(t, err, ErrOpen)
		rig.requireCounts(addr, i+1, i+1)
	}
	rig.requireTripsAndRejects(url, addr)
}

func TestFaultConnectionResetAfterRequestRead(t *testing.T) {
	faultNoLeaks(t)
	addr, read := faultRawServer(t, func(c net.Conn) {
		require.NoError(t, c.(*net.TCPConn).SetLinger(0)) // Close sends RST
	})
	rig := newFaultRig(t, cleanhttp.DefaultPooledTransport(), 5*time.Second)
	url := "http://" + addr + "/"
	for i := range int64(3) {
		_, err := rig.get(url)
		require.ErrorIs(t, err, syscall.ECONNRESET)
		rig.requireCounts(addr, i+1, i+1)
	}
	require.EqualValues(t, 3, read.Load(), "the server read every request before resetting")
	rig.requireTripsAndRejects(url, addr)
}

// TestFaultServerClosesMidBody: the server promises 1000 bytes, sends a
// few and closes. RoundTrip has returned a 200 by then; the caller learns
// of the fault from Body.Read, which returns io.ErrUnexpectedEOF. By
// default the breaker has counted a success, so a dependency that only
// ever truncates bodies never trips it; WithBodyErrors counts the cut
// body as a failure.
func TestFaultServerClosesMidBody(t *testing.T) {
	faultBodyFault(t, 5*time.Second, func(t *testing.T) (*http.Transport, string, string) {
		addr, _ := faultRawServer(t, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: text/plain\r\n\r\npartial")
		})
		return cleanhttp.DefaultPooledTransport(), "http://" + addr + "/", addr
	}, func(t *testing.T, body []byte, err error) {
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		require.Equal(t, "partial", string(body))
	})
}

// faultBodyFault sends three calls to a dependency whose answers are a
// 200 and then a fault in the body, once with the default options and
// once with WithBodyErrors. serve starts the dependency and returns the
// transport to it, a URL and the breaker's key; check checks what
// reading one body gave. By default each call counts as a success at its
// headers and the breaker stays closed; with WithBodyErrors each counts
// as a failure and the breaker trips.
func faultBodyFault(t *testing.T, timeout time.Duration, serve func(t *testing.T) (*http.Transport, string, string), check func(t *testing.T, body []byte, err error)) {
	for _, tc := range []struct {
		name string
		opts []Option
		fail bool
	}{
		{"default", nil, false},
		{"WithBodyErrors", []Option{WithBodyErrors()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faultNoLeaks(t)
			rt, url, key := serve(t)
			rig := newFaultRig(t, rt, timeout, tc.opts...)
			for i := range int64(3) {
				resp, err := rig.get(url)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				body, err := io.ReadAll(resp.Body)
				check(t, body, err)
				require.NoError(t, resp.Body.Close())
				failures := int64(0)
				if tc.fail {
					failures = i + 1
				}
				rig.requireCounts(key, i+1, failures)
			}
			if tc.fail {
				rig.requireTripsAndRejects(url, key)
			} else {
				require.Equal(t, StateClosed, rig.tr.State(key), "body faults are invisible to the breaker")
			}
		})
	}
}

// TestFaultBodyStallsPastClientTimeout: the dependency sends its headers
// at once and then hangs in the body until the client's Timeout passes,
// the hang a breaker most needs to see. By default the call counted as a
// success when its headers came; WithBodyErrors counts the deadline.
func TestFaultBodyStallsPastClientTimeout(t *testing.T) {
	faultBodyFault(t, loopbackTimeout, func(t *testing.T) (*http.Transport, string, string) {
		stop := make(chan struct{})
		srv := faultServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "partial")
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}), false, false)
		t.Cleanup(func() { close(stop) }) // runs before srv.Close, which waits for handlers
		return cleanhttp.DefaultPooledTransport(), srv.URL, srv.Listener.Addr().String()
	}, func(t *testing.T, _ []byte, err error) {
		require.ErrorIs(t, err, context.DeadlineExceeded, "the client's Timeout, while reading the body")
	})
}

func TestFaultHeadersNeverComeClientTimeout(t *testing.T) {
	faultNoLeaks(t)
	stop := make(chan struct{})
	srv := faultServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}), false, false)
	t.Cleanup(func() { close(stop) }) // runs before srv.Close, which waits for handlers
	rig := newFaultRig(t, cleanhttp.DefaultPooledTransport(), loopbackTimeout)
	key := srv.Listener.Addr().String()
	for i := range int64(3) {
		_, err := rig.get(srv.URL)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		require.True(t, ne.Timeout(), "%v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the client's Timeout")
		rig.requireCounts(key, i+1, i+1)
	}
	rig.requireTripsAndRejects(srv.URL, key)
}

func TestFaultResponseHeaderTimeout(t *testing.T) {
	faultNoLeaks(t)
	stop := make(chan struct{})
	srv := faultServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}), false, false)
	t.Cleanup(func() { close(stop) })
	rt := cleanhttp.DefaultPooledTransport()
	rt.ResponseHeaderTimeout = 100 * time.Millisecond
	rig := newFaultRig(t, rt, 0) // no client Timeout: only the transport's own
	key := srv.Listener.Addr().String()
	for i := range int64(3) {
		_, err := rig.get(srv.URL)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		require.True(t, ne.Timeout(), "%v", err)
		require.ErrorContains(t, err, "timeout awaiting response headers")
		rig.requireCounts(key, i+1, i+1)
	}
	rig.requireTripsAndRejects(srv.URL, key)
}

func TestFaultTLSUnknownAuthority(t *testing.T) {
	faultNoLeaks(t)
	var served atomic.Int64
	srv := faultServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }), true, false)
	// The pooled transport trusts the system roots only, not the test CA.
	rig := newFaultRig(t, cleanhttp.DefaultPooledTransport(), 5*time.Second)
	key := srv.Listener.Addr().String()
	for i := range int64(3) {
		_, err := rig.get(srv.URL)
		var cve *tls.CertificateVerificationError
		require.ErrorAs(t, err, &cve)
		var uae x509.UnknownAuthorityError
		require.ErrorAs(t, err, &uae)
		rig.requireCounts(key, i+1, i+1)
	}
	require.Zero(t, served.Load(), "no request got past the handshake")
	rig.requireTripsAndRejects(srv.URL, key)
}

func TestFaultTLSWrongHostname(t *testing.T) {
	// The client trusts the test CA, but the certificate (for example.com,
	// 127.0.0.1 and ::1) does not name the host it asked for.
	newSrv := func(t *testing.T) (*httptest.Server, *http.Transport, *atomic.Int64) {
		var served atomic.Int64
		srv := faultServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }), true, false)
		rt := srv.Client().Transport.(*http.Transport).Clone()
		addr := srv.Listener.Addr().String()
		var d net.Dialer
		rt.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr) // every name resolves to the server
		}
		return srv, rt, &served
	}
	check := func(t *testing.T, rig *faultRig, url, key string, served *atomic.Int64) {
		for i := range int64(3) {
			_, err := rig.get(url)
			var he x509.HostnameError
			require.ErrorAs(t, err, &he)
			rig.requireCounts(key, i+1, i+1)
		}
		require.Zero(t, served.Load())
		rig.requireTripsAndRejects(url, key)
	}
	t.Run("dialled under another name", func(t *testing.T) {
		faultNoLeaks(t)
		srv, rt, served := newSrv(t)
		port := srv.Listener.Addr().(*net.TCPAddr).Port
		rig := newFaultRig(t, rt, 5*time.Second)
		// Control: the name on the certificate works through the same
		// transport, so the failures below are the hostname's alone.
		resp, err := rig.get("https://example.com:" + strconv.Itoa(port) + "/")
		require.NoError(t, err)
		resp.Body.Close()
		require.EqualValues(t, 1, served.Load())
		served.Store(0)
		host := "api.wrong.test:" + strconv.Itoa(port)
		check(t, rig, "https://"+host+"/", host, served)
	})
	t.Run("ServerName of another host", func(t *testing.T) {
		faultNoLeaks(t)
		srv, rt, served := newSrv(t)
		rt.TLSClientConfig.ServerName = "api.wrong.test"
		rig := newFaultRig(t, rt, 5*time.Second)
		check(t, rig, srv.URL, srv.Listener.Addr().String(), served)
	})
}

// faultH2Server starts an HTTP/2 TLS server and returns it with a
// transport that trusts it and has negotiated HTTP/2 with it.
func faultH2Server(t *testing.T, h http.Handler) (*httptest.Server, *http.Transport) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {})
	mux.Handle("/", h)
	srv := faultServer(t, mux, true, true)
	rt := srv.Client().Transport.(*http.Transport).Clone()
	t.Cleanup(rt.CloseIdleConnections)
	resp, err := rt.RoundTrip(mustReq(t, srv.URL+"/ok"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 2, resp.ProtoMajor, "HTTP/2 negotiated")
	return srv, rt
}

func TestFaultHTTP2StreamReset(t *testing.T) {
	t.Run("before the headers", func(t *testing.T) {
		faultNoLeaks(t)
		srv, rt := faultH2Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler) // RST_STREAM(INTERNAL_ERROR), nothing logged
		}))
		rig := newFaultRig(t, rt, 5*time.Second)
		key := srv.Listener.Addr().String()
		for i := range int64(3) {
			_, err := rig.get(srv.URL + "/reset")
			require.ErrorContains(t, err, "INTERNAL_ERROR")
			rig.requireCounts(key, i+1, i+1)
		}
		rig.requireTripsAndRejects(srv.URL+"/reset", key)
	})
	t.Run("after the headers", func(t *testing.T) {
		// The 200 has arrived when RoundTrip returns. The reset surfaces
		// from Body.Read, as the transport's own error.
		faultBodyFault(t, 5*time.Second, func(t *testing.T) (*http.Transport, string, string) {
			srv, rt := faultH2Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "partial")
				http.NewResponseController(w).Flush()
				panic(http.ErrAbortHandler)
			}))
			return rt, srv.URL + "/reset", srv.Listener.Addr().String()
		}, func(t *testing.T, _ []byte, err error) {
			require.ErrorContains(t, err, "INTERNAL_ERROR")
		})
	})
}

// faultGoAway starts an HTTP/2 server, sends a request through rig that
// the handler holds, starts a graceful Shutdown (net/http's HTTP/2
// server then sends GOAWAY on the connection) and returns once the
// client has received the GOAWAY: a new request no longer goes on that
// connection but dials, and the listener is closed. release lets the
// held handler answer; the returned channel yields the held call's
// result, and shutdown Shutdown's.
func faultGoAway(t *testing.T) (rig *faultRig, key string, release func(), srv *httptest.Server, held <-chan faultCall, shutdown <-chan error) {
	t.Helper()
	entered := make(chan struct{})
	rel := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(rel) }) }
	srv, rt := faultH2Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/probe" {
			return
		}
		close(entered)
		select {
		case <-rel:
			_, _ = io.WriteString(w, "done")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(release) // after the server's Close in registration, so it runs before: Close waits for the handler
	rig = newFaultRig(t, rt, 10*time.Second)
	key = srv.Listener.Addr().String()
	res := make(chan faultCall, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/held", nil)
		resp, err := rig.client.Do(req)
		if resp != nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		res <- faultCall{resp, err}
	}()
	<-entered
	sd := make(chan error, 1)
	go func() { sd <- srv.Config.Shutdown(context.Background()) }()
	// Until the client has the GOAWAY, a probe rides the live connection
	// and is served; after, it must dial, and the listener is closed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "the client never received GOAWAY")
		resp, err := rt.RoundTrip(mustReq(t, srv.URL+"/probe"))
		if err != nil {
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
			break
		}
		resp.Body.Close()
	}
	return rig, key, release, srv, res, sd
}

func TestFaultHTTP2GoAway(t *testing.T) {
	t.Run("graceful: the request in flight completes", func(t *testing.T) {
		faultNoLeaks(t)
		rig, key, release, srv, held, shutdown := faultGoAway(t)
		release()
		c := <-held
		require.NoError(t, c.err)
		require.Equal(t, http.StatusOK, c.resp.StatusCode)
		require.NoError(t, <-shutdown)
		rig.requireCounts(key, 1, 0)
		// The server is gone: new calls are refused, and counted.
		for i := range int64(2) {
			_, err := rig.get(srv.URL + "/after")
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
			rig.requireCounts(key, i+2, i+1)
		}
		rig.requireTripsAndRejects(srv.URL+"/after", key)
	})
	t.Run("the connection closes after GOAWAY with the request in flight", func(t *testing.T) {
		faultNoLeaks(t)
		rig, key, _, srv, held, shutdown := faultGoAway(t)
		srv.CloseClientConnections()
		c := <-held
		require.ErrorContains(t, c.err, "server sent GOAWAY and closed the connection")
		require.NoError(t, <-shutdown)
		rig.requireCounts(key, 1, 1)
		got := rig.caller.last()
		require.Equal(t, rig.next.last().err, got.err, "the transport's own error, unwrapped")
	})
}

// echoUpgradeServer is a server on 127.0.0.1 that switches a request
// asking "Upgrade: echo" to a protocol that echoes what it reads, until
// the client closes; it answers any other request 426.
func echoUpgradeServer(t *testing.T) *httptest.Server {
	return faultServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade required", http.StatusUpgradeRequired)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		if brw.Flush() != nil {
			return
		}
		_, _ = io.Copy(c, brw.Reader) // echo until the client closes
	}), false, false)
}

// TestFaultProtocolUpgradePassesThrough: a 101 Switching Protocols
// response reaches the caller untouched, its Body still the transport's
// io.ReadWriteCloser over the connection, and is recorded as a success.
func TestFaultProtocolUpgradePassesThrough(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"default", nil},
		{"WithBodyErrors", []Option{WithBodyErrors()}}, // a 101's body is not watched
		{"WithCallTimeout", []Option{WithCallTimeout(time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faultNoLeaks(t)
			srv := echoUpgradeServer(t)
			rig := newFaultRig(t, cleanhttp.DefaultPooledTransport(), 0, tc.opts...) // a client Timeout would wrap the body
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/ws", nil)
			require.NoError(t, err)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "echo")
			resp, err := rig.do(req)
			require.NoError(t, err)
			require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
			rwc, ok := resp.Body.(io.ReadWriteCloser)
			require.True(t, ok, "the body of a 101 stays writable: %T", resp.Body)
			for _, msg := range []string{"ping\n", "second message\n"} {
				_, err = io.WriteString(rwc, msg)
				require.NoError(t, err)
				buf := make([]byte, len(msg))
				_, err = io.ReadFull(rwc, buf)
				require.NoError(t, err)
				require.Equal(t, msg, string(buf))
			}
			require.NoError(t, rwc.Close())
			rig.requireCounts(srv.Listener.Addr().String(), 1, 0)
		})
	}
}

// TestFaultMalformedResponse: a server that answers with garbage is
// failing, like one that resets.
func TestFaultMalformedResponse(t *testing.T) {
	faultNoLeaks(t)
	addr, _ := faultRawServer(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "HTTP/1.1 abc Nope\r\n\r\n")
	})
	rig := newFaultRig(t, cleanhttp.DefaultPooledTransport(), 5*time.Second)
	url := "http://" + addr + "/"
	for i := range int64(3) {
		_, err := rig.get(url)
		require.ErrorContains(t, err, "malformed HTTP status code")
		rig.requireCounts(addr, i+1, i+1)
	}
	rig.requireTripsAndRejects(url, addr)
}
