package httpbreaker

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// These tests hold the synthetic 503 to its promise: a service that passes
// it on to the public leaks no topology.

// wantRejection is the synthetic 503 on the wire, with the open period set
// so that Retry-After is 1.
const wantRejection = "HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Length: 41\r\n" +
	"Cache-Control: no-store\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"Retry-After: 1\r\n" +
	"X-Should-Retry: false\r\n" +
	"\r\n" +
	"Service Unavailable: please retry later.\n"

// dumpRejection sends a request through rt, requires a synthetic 503 and
// returns it as it would go on the wire.
func dumpRejection(t *testing.T, rt http.RoundTripper, method, target string) string {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"card":"4242"}`)
	}
	req, err := http.NewRequest(method, target, body)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.True(t, IsRejected(resp), "%s %s", method, target)
	b, err := httputil.DumpResponse(resp, true)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

func TestLeakRejectionIdenticalAcrossBreakers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := []Option{WithMinRequests(2), WithJitter(0), WithOpenTimeout(time.Second)}
		d := newDep(200)
		hosts := New(d, opts...)
		routes := New(d, append(opts, WithRoutes("GET /v1/users/{id}", "POST /v1/charges"))...)
		bulkhead := New(d, append(opts, WithMaxConcurrent(1))...)

		// tripWith opens the breaker of rt for the request by failing it
		// twice as set.
		tripWith := func(rt http.RoundTripper, method, target string, code int, err error) {
			d.set(code, err)
			for range 2 {
				req, rerr := http.NewRequest(method, target, nil)
				require.NoError(t, rerr)
				if resp, _ := rt.RoundTrip(req); resp != nil {
					resp.Body.Close()
				}
			}
			d.set(200, nil)
		}
		tripWith(hosts, http.MethodGet, "http://a.test/", 500, nil)
		tripWith(hosts, http.MethodGet, "http://b.test:8443/", 0, errConnRefused)
		tripWith(hosts, http.MethodGet, "http://c.test/", 0, errors.New("tls: failed to verify certificate: x509: certificate is valid for c.internal, not c.test"))
		tripWith(routes, http.MethodGet, "http://d.test/v1/users/1", 502, nil)
		tripWith(routes, http.MethodPost, "http://d.test/v1/charges", 504, nil)
		require.Equal(t, StateOpen, routes.State("d.test POST /v1/charges"))
		require.Equal(t, StateOpen, routes.State("d.test GET /v1/users/{id}"))
		require.Equal(t, StateClosed, routes.State("d.test"))
		hosts.Trip("e.test", time.Second)

		var got []string
		add := func(rt http.RoundTripper, method, target string) {
			got = append(got, dumpRejection(t, rt, method, target))
		}
		add(hosts, http.MethodGet, "http://a.test/")
		add(hosts, http.MethodGet, "http://a.test/some/other/path?q=1")
		add(hosts, http.MethodPost, "http://b.test:8443/v1/charges")
		add(hosts, http.MethodGet, "http://c.test/")
		add(routes, http.MethodGet, "http://d.test/v1/users/2")
		add(routes, http.MethodPost, "http://d.test/v1/charges")
		add(hosts, http.MethodDelete, "http://e.test/x")

		// Bulkhead: one call in flight, the next one refused.
		d.block()
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = get(t, bulkhead, "http://f.test/slow") })
		synctest.Wait()
		add(bulkhead, http.MethodGet, "http://f.test/fast")
		d.release()
		wg.Wait()

		// Half-open with the probe slot taken.
		time.Sleep(time.Second)
		d.block()
		wg.Go(func() { _, _ = get(t, hosts, "http://a.test/probe") })
		synctest.Wait()
		require.Equal(t, StateHalfOpen, hosts.State("a.test"))
		add(hosts, http.MethodGet, "http://a.test/")
		d.release()
		wg.Wait()

		require.Len(t, got, 9)
		for i, g := range got {
			require.Equal(t, wantRejection, g, "rejection %d", i)
		}
	})
}

// statusOf parses the status code of a raw response.
func statusOf(t *testing.T, raw []byte) int {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}

// upstreamSecret is in every answer and error of the failing upstream.
const upstreamSecret = "pg-primary-7 replica lag"

func TestLeakNothingThroughReverseProxy(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-Node", upstreamSecret)
		http.Error(w, "internal error: "+upstreamSecret, http.StatusInternalServerError)
	}))
	defer failing.Close()

	// hanging answers once release is closed, and says when a request
	// arrives.
	arrived, release := make(chan struct{}, 10), make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer hanging.Close()
	defer close(release)

	refused := closedPort(t)
	const route = "GET /v1/users/{id}"

	cases := []struct {
		name    string
		backend string // host:port
		opts    []Option
		// reject drives the breaker to refuse the next request to path
		// and returns a func to call once that request is answered.
		reject func(t *testing.T, tr *Transport, front, path string) func()
	}{{
		name:    "open after upstream 500s",
		backend: failing.Listener.Addr().String(),
		opts:    []Option{WithRoutes(route)},
		reject: func(t *testing.T, tr *Transport, front, path string) func() {
			for range 3 {
				raw := rawGet(t, front, path)
				require.Equal(t, 500, statusOf(t, raw))
				require.Contains(t, string(raw), upstreamSecret, "a real upstream answer passes through as it is")
			}
			require.Equal(t, StateOpen, tr.State(failing.Listener.Addr().String()+" "+route))
			return func() {}
		},
	}, {
		name:    "open after connection refused",
		backend: refused,
		reject: func(t *testing.T, tr *Transport, front, path string) func() {
			for range 3 {
				require.Equal(t, http.StatusBadGateway, statusOf(t, rawGet(t, front, path)))
			}
			require.Equal(t, StateOpen, tr.State(refused))
			return func() {}
		},
	}, {
		name:    "half-open with the probe in flight",
		backend: hanging.Listener.Addr().String(),
		reject: func(t *testing.T, tr *Transport, front, path string) func() {
			tr.Trip(hanging.Listener.Addr().String(), time.Nanosecond)
			var wg sync.WaitGroup
			wg.Go(func() { rawGet(t, front, path) })
			<-arrived
			require.Equal(t, StateHalfOpen, tr.State(hanging.Listener.Addr().String()))
			return func() { release <- struct{}{}; wg.Wait() }
		},
	}, {
		name:    "bulkhead full",
		backend: hanging.Listener.Addr().String(),
		opts:    []Option{WithMaxConcurrent(1)},
		reject: func(t *testing.T, tr *Transport, front, path string) func() {
			var wg sync.WaitGroup
			wg.Go(func() { rawGet(t, front, path) })
			<-arrived
			return func() { release <- struct{}{}; wg.Wait() }
		},
	}}

	// Date and Retry-After are the only lines that may differ between
	// cases.
	varying := regexp.MustCompile(`(?m)^(Date|Retry-After): .*\r\n`)
	public := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := integrationTransport(t, c.opts...)
			target := &url.URL{Scheme: "http", Host: c.backend}
			proxy := &httputil.ReverseProxy{
				Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
				Transport: tr,
				ErrorLog:  log.New(io.Discard, "", 0),
			}
			front := httptest.NewServer(proxy)
			defer front.Close()
			path := "/v1/users/42"
			done := c.reject(t, tr, front.Listener.Addr().String(), path)
			raw := rawGet(t, front.Listener.Addr().String(), path)
			done()

			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, "503 Service Unavailable", resp.Status)
			require.Equal(t, rejectBody, string(body))
			require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
			require.NotEmpty(t, resp.Header.Get("Retry-After"))

			host, port, err := net.SplitHostPort(c.backend)
			require.NoError(t, err)
			forbidden := []string{
				c.backend, host, port, route, "{id}", "/v1/users/",
				StateOpen.String(), StateHalfOpen.String(), StateClosed.String(),
				upstreamSecret, "internal error", "X-Upstream", "refused", "dial", "bulkhead",
				"httpbreaker", "circuit", "breaker", "concurrent",
			}
			lower := strings.ToLower(string(raw))
			for _, f := range forbidden {
				require.NotContains(t, lower, strings.ToLower(f), "the public response names %q:\n%s", f, raw)
			}
			public[varying.ReplaceAllString(string(raw), "")] = true
		})
	}
	require.Len(t, public, 1, "every case looks the same to the public")
}
