package httpbreaker

import (
	"bufio"
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
