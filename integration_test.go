package httpbreaker

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// These tests use real servers on 127.0.0.1 and a real pooled transport.

// resetServer accepts connections, reads a request and resets the
// connection without answering.
func resetServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = http.ReadRequest(bufio.NewReader(c))
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	})
	return l.Addr().String()
}

func TestIntegrationConnectionRefused(t *testing.T) {
	addr := closedPort(t)
	tr := integrationTransport(t)
	c := &http.Client{Transport: tr}
	for range 3 {
		_, err := c.Get("http://" + addr + "/")
		require.ErrorContains(t, err, "refused")
	}
	require.Equal(t, StateOpen, tr.State(addr))
	resp, err := c.Get("http://" + addr + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.True(t, IsRejected(resp))
}

func TestIntegrationConnectionReset(t *testing.T) {
	addr := resetServer(t)
	tr := integrationTransport(t)
	c := &http.Client{Transport: tr}
	for range 3 {
		_, err := c.Get("http://" + addr + "/")
		require.Error(t, err)
	}
	require.Equal(t, StateOpen, tr.State(addr))
	s := tr.Snapshot()[0]
	require.EqualValues(t, 3, s.Failures)
}

func TestIntegrationHandlerSlowerThanClientTimeout(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)
	tr := integrationTransport(t)
	c := &http.Client{Transport: tr, Timeout: loopbackTimeout}
	for range 3 {
		_, err := c.Get(srv.URL)
		require.Error(t, err)
	}
	key := srv.Listener.Addr().String()
	require.Equal(t, StateOpen, tr.State(key))
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	require.True(t, IsRejected(resp), "the client's Timeout wrapped the body; the mark survives")
}

func TestIntegrationUpstream503WithRetryAfter(t *testing.T) {
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.URL.Path, true)
		w.Header().Set("Retry-After", "30")
		http.Error(w, "upstream overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	tr := integrationTransport(t)
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for range 3 {
		resp, err := c.Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 503, resp.StatusCode)
		require.False(t, IsRejected(resp), "a real upstream 503 is not a rejection")
	}
	s := tr.Snapshot()[0]
	require.Equal(t, StateOpen, s.State)
	require.InDelta(t, 30, time.Until(s.RetryAt).Seconds(), 1, "upstream Retry-After raised the open period")
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	require.True(t, IsRejected(resp))
	require.Equal(t, "30", resp.Header.Get("Retry-After"))
}
