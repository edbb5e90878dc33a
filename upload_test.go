package httpbreaker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// failingUpload is a request body whose read fails, as a file on a bad
// disk does.
type failingUpload struct{ n int }

func (f *failingUpload) Read(p []byte) (int, error) {
	if f.n > 0 {
		f.n--
		return copy(p, "part"), nil
	}
	return 0, errors.New("read /uploads/big.bin: input/output error")
}

func (f *failingUpload) Close() error { return nil }

// TestCallerUploadErrorsNeverTrip: a caller whose own request body fails
// to read cannot open a healthy dependency's breaker for everyone.
func TestCallerUploadErrorsNeverTrip(t *testing.T) {
	requireUploadsIgnored(t, func() io.Reader { return &failingUpload{n: 3} }, -1, "")
}

// requireUploadsIgnored sends 10 uploads of body with contentLength
// through a Transport to a healthy loopback server, requires each to fail
// (with an error containing wantErr), and requires the breaker to have
// counted none of them as the dependency's failure.
func requireUploadsIgnored(t *testing.T, body func() io.Reader, contentLength int64, wantErr string) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	tr := New(nil, WithMinRequests(5))
	defer tr.CloseIdleConnections()
	for range 10 {
		req, err := http.NewRequest(http.MethodPost, up.URL, body())
		require.NoError(t, err)
		req.ContentLength = contentLength
		_, err = tr.RoundTrip(req)
		require.ErrorContains(t, err, wantErr, "the upload failed")
	}
	key := strings.TrimPrefix(up.URL, "http://")
	require.Equal(t, StateClosed, tr.State(key))
	s := tr.Snapshot()
	require.Len(t, s, 1)
	require.Zero(t, s[0].Failures, "ignored, not the dependency's failures")
}

// TestHostileUploadsThroughAProxy: clients that send a malformed chunk
// through a real httputil.ReverseProxy get their 502s, and the healthy
// upstream's breaker never opens for the honest client after them.
func TestHostileUploadsThroughAProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	target, err := url.Parse(up.URL)
	require.NoError(t, err)
	tr := New(nil, WithMinRequests(5))
	defer tr.CloseIdleConnections()
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = tr
	proxy.ErrorLog = log.New(io.Discard, "", 0) // each broken upload logs a proxy error
	front := httptest.NewServer(proxy)
	defer front.Close()

	for i := range 8 {
		conn, err := net.Dial("tcp", front.Listener.Addr().String())
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		// A first chunk, then a chunk-size line that is not hex.
		_, err = io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: shop.test\r\nTransfer-Encoding: chunked\r\n\r\n4\r\npart\r\nzz\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, "upload %d", i)
		resp.Body.Close()
		conn.Close()
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, "upload %d: the proxy's answer to a broken upload", i)
	}
	resp, err := http.Post(front.URL+"/upload", "text/plain", strings.NewReader("honest"))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the next honest client is served")
	require.Equal(t, "ok", string(body))
	require.Equal(t, StateClosed, tr.State(target.Host))
	require.Zero(t, tr.Snapshot()[0].Failures)
}

// TestCallerContentLengthMismatchNeverTrips: a request whose body is
// shorter or longer than its ContentLength fails in next ("http:
// ContentLength=10 with Body length 4") without the dependency's doing:
// the caller's upload is wrong, and it cannot open a healthy dependency's
// breaker for everyone.
func TestCallerContentLengthMismatchNeverTrips(t *testing.T) {
	t.Run("shorter, through net/http", func(t *testing.T) {
		requireUploadsIgnored(t, func() io.Reader { return strings.NewReader("part") }, 10, "ContentLength=10 with Body length 4")
	})
	t.Run("longer", func(t *testing.T) {
		// net/http reads past ContentLength to find a longer body, and
		// fails the call when the dependency has not answered first.
		tr := New(rtFunc(func(r *http.Request) (*http.Response, error) {
			n, _ := io.Copy(io.Discard, r.Body)
			r.Body.Close()
			return nil, fmt.Errorf("http: ContentLength=%d with Body length %d", r.ContentLength, n)
		}), WithMinRequests(5))
		for range 10 {
			req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader("part"))
			require.NoError(t, err)
			req.ContentLength = 2
			_, err = tr.RoundTrip(req)
			require.Error(t, err)
		}
		require.Equal(t, StateClosed, tr.State(testKey))
		require.Zero(t, tr.Snapshot()[0].Failures, "ignored, not the dependency's failures")
	})
}

// TestRewoundUploadErrorsNeverTrip: a body next gets again through
// GetBody, to send the request once more, is watched as the first one
// is: when it fails to read, or GetBody itself fails, the call is the
// caller's fault. The control: a rewound body that reads fine, and a
// dependency that then fails, counts.
func TestRewoundUploadErrorsNeverTrip(t *testing.T) {
	// rewinding is what http.Transport does when a reused connection
	// fails before an answer: it reads the body, then sends it again.
	rewinding := rtFunc(func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		body, err := r.GetBody()
		if err != nil {
			return nil, err
		}
		defer body.Close()
		if _, err := io.Copy(io.Discard, body); err != nil {
			return nil, err
		}
		return nil, errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: connection reset by peer")
	})
	for _, tc := range []struct {
		name     string
		getBody  func() (io.ReadCloser, error)
		failures int64
	}{
		{"the rewound body fails to read", func() (io.ReadCloser, error) { return &failingUpload{n: 1}, nil }, 0},
		{"GetBody fails", func() (io.ReadCloser, error) { return nil, errors.New("open /uploads/big.bin: no such file") }, 0},
		{"GetBody gives NoBody, shorter than ContentLength", func() (io.ReadCloser, error) { return http.NoBody, nil }, 0},
		{"GetBody gives nil, shorter than ContentLength", func() (io.ReadCloser, error) { return nil, nil }, 0},
		{"control: the rewound body reads, the dependency fails", func() (io.ReadCloser, error) {
			return io.NopCloser(strings.NewReader("part")), nil
		}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(rewinding, WithMinRequests(5))
			for range 4 {
				req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader("part"))
				require.NoError(t, err)
				req.GetBody = tc.getBody
				_, err = tr.RoundTrip(req)
				require.Error(t, err)
			}
			require.Equal(t, tc.failures, tr.Snapshot()[0].Failures)
		})
	}
}

// TestTransportRetryUploadErrorsNeverTrip: through a real http.Transport
// that sends a replayable upload again on a new connection, after the
// server closed the reused one, a body that then fails to read is the
// caller's fault.
func TestTransportRetryUploadErrorsNeverTrip(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for first := true; ; first = false {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			r := bufio.NewReader(conn)
			if first { // answer the warm-up call, then close on the upload
				if req, err := http.ReadRequest(r); err == nil {
					_, _ = io.Copy(io.Discard, req.Body)
					_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
				}
				if req, err := http.ReadRequest(r); err == nil {
					_, _ = io.Copy(io.Discard, req.Body)
				}
			} else {
				_, _ = io.Copy(io.Discard, r) // the retry, until the client gives up on it
			}
			conn.Close()
		}
	}()
	tr := New(nil, WithMinRequests(1), WithFailureRate(0.01))
	url := "http://" + ln.Addr().String() + "/upload"
	warm, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(warm)
	require.NoError(t, err)
	resp.Body.Close()

	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("part"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "upload-1") // replayable: http.Transport may send it again
	req.GetBody = func() (io.ReadCloser, error) { return &failingUpload{}, nil }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure, not a hang, if the transport ever sends it on a new connection
	defer cancel()
	_, err = tr.RoundTrip(req.WithContext(ctx))
	require.ErrorContains(t, err, "input/output error", "the retry read the rewound body")
	require.Equal(t, StateClosed, tr.State(ln.Addr().String()))
	require.Zero(t, tr.Snapshot()[0].Failures, "the caller's upload, not the dependency's failure")

	tr.CloseIdleConnections()
	ln.Close()
	<-done
}

// TestUploadClosedByNextCountsTheDependency: a read of the body that
// fails because next closed it — as HTTP/2 does when the dependency
// resets the stream while the upload streams — is next's doing: the
// call counts as the dependency's failure, not as the caller's upload.
func TestUploadClosedByNextCountsTheDependency(t *testing.T) {
	reset := rtFunc(func(r *http.Request) (*http.Response, error) {
		_, _ = io.ReadFull(r.Body, make([]byte, 4))
		r.Body.Close() // the stream was reset
		if _, err := r.Body.Read(make([]byte, 4)); err == nil {
			return nil, errors.New("read after close succeeded")
		}
		return nil, errors.New("stream error: stream ID 1; INTERNAL_ERROR; received from peer")
	})
	tr := New(reset, WithMinRequests(5))
	for range 4 {
		pr, pw := io.Pipe()
		go func() { _, _ = pw.Write([]byte("part")); _, _ = pw.Write([]byte("more")) }() // the second write ends when the body is closed
		req, err := http.NewRequest(http.MethodPost, testURL, pr)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.ErrorContains(t, err, "INTERNAL_ERROR")
	}
	require.EqualValues(t, 4, tr.Snapshot()[0].Failures, "the dependency's failures")
}

// TestHTTP2StreamResetDuringUploadCounts: over a real HTTP/2 connection, a
// dependency that resets the stream while a streamed upload is being
// sent fails the call, and the failure counts: the body's read error
// after net/http closed it is not the caller's.
func TestHTTP2StreamResetDuringUploadCounts(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadFull(r.Body, make([]byte, 4))
		panic(http.ErrAbortHandler) // resets the stream
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	tr := New(client.Transport, WithMinRequests(3), WithFailureRate(0.5))
	for range 3 {
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write([]byte("part"))
			_, _ = pw.Write([]byte("more")) // ends when net/http closes the body
		}()
		req, err := http.NewRequest(http.MethodPost, srv.URL, pr)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		require.Error(t, err, "the stream was reset")
	}
	require.Equal(t, StateOpen, tr.State(strings.TrimPrefix(srv.URL, "https://")), "the dependency's failures open it")
	client.CloseIdleConnections()
}

// TestInMemoryUploadIsSentAsNetHTTPSendsIt: a body http.NewRequest makes
// from a strings, bytes.Reader or bytes.Buffer reader reaches next as it
// is, so that net/http sends it with the headers in one write, as it does
// without a breaker (a wrapper costs a second write, one for the headers
// alone); a body of another kind, or of another length than the request
// says, is still watched.
func TestInMemoryUploadIsSentAsNetHTTPSendsIt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	var writes atomic.Int64
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return &countingConn{Conn: c, writes: &writes}, err
	}}
	defer base.CloseIdleConnections()
	send := func(rt http.RoundTripper, body io.Reader) int64 {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", body)
		require.NoError(t, err)
		before := writes.Load()
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return writes.Load() - before
	}
	tr := New(base)
	payload := strings.Repeat("x", 200)
	for name, body := range map[string]func() io.Reader{
		"strings.Reader": func() io.Reader { return strings.NewReader(payload) },
		"bytes.Reader":   func() io.Reader { return bytes.NewReader([]byte(payload)) },
		"bytes.Buffer":   func() io.Reader { return bytes.NewBufferString(payload) },
	} {
		send(base, body()) // a connection to reuse
		bare := send(base, body())
		require.Equal(t, int64(1), bare, "%s: the control: net/http sends a small in-memory request in one write", name)
		require.Equal(t, bare, send(tr, body()), name)
	}

	seen := make(chan io.ReadCloser, 2)
	watch := New(rtFunc(func(r *http.Request) (*http.Response, error) {
		seen <- r.Body
		_ = r.Body.Close()
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}))
	req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(payload))
	require.NoError(t, err)
	_, err = watch.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, req.Body, <-seen, "an in-memory body is sent as it is")
	req, err = http.NewRequest(http.MethodPost, testURL, strings.NewReader(payload))
	require.NoError(t, err)
	req.ContentLength = 10 // shorter than the body: net/http fails the call, the caller's fault
	_, err = watch.RoundTrip(req)
	require.NoError(t, err)
	require.IsType(t, &uploadBody{}, <-seen, "a body of another length than the request says is watched")
}

// countingConn counts the writes on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestInMemoryUploadOfANilReaderIsNotOne: a body that wraps a nil
// in-memory reader is watched, never read for its length (which would
// panic in RoundTrip).
func TestInMemoryUploadOfANilReaderIsNotOne(t *testing.T) {
	for _, body := range []io.ReadCloser{
		io.NopCloser((*strings.Reader)(nil)), io.NopCloser((*bytes.Reader)(nil)),
		io.NopCloser((*bytes.Buffer)(nil)), io.NopCloser(nil),
	} {
		require.NotPanics(t, func() { require.False(t, inMemory(body, 4)) }, "%T", body)
	}
	require.True(t, inMemory(io.NopCloser(strings.NewReader("part")), 4))
	require.False(t, inMemory(io.NopCloser(strings.NewReader("part")), 5))
	require.False(t, inMemory(io.NopCloser(strings.NewReader("")), 0), "no length: net/http reads it to learn")
}
