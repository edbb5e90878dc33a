package httpbreaker_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// A dependency that fails trips its breaker; the caller then gets a
// synthetic 503 at once, without the request leaving the process.
func Example() {
	fraud := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer fraud.Close()

	client := &http.Client{
		Transport: httpbreaker.New(nil, httpbreaker.WithMinRequests(3)),
		Timeout:   5 * time.Second,
	}
	for range 4 {
		resp, err := client.Get(fraud.URL)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "rejected:", httpbreaker.IsRejected(resp))
	}
	// Output:
	// 500 rejected: false
	// 500 rejected: false
	// 500 rejected: false
	// 503 rejected: true
}

// With WithRejectAsError, a refused request returns an error that wraps
// ErrOpen, and a *RejectedError says when to try again.
func ExampleWithRejectAsError() {
	tr := httpbreaker.New(nil, httpbreaker.WithRejectAsError())
	tr.Trip("payments.internal", 30*time.Second)

	client := &http.Client{Transport: tr}
	_, err := client.Get("http://payments.internal/v1/charges")
	var rejected *httpbreaker.RejectedError
	if errors.Is(err, httpbreaker.ErrOpen) && errors.As(err, &rejected) {
		fmt.Println("refused by", rejected.Key, "- retry in", time.Until(rejected.RetryAt).Round(time.Second))
	}
	// Output:
	// refused by payments.internal - retry in 30s
}

// What a caller gets from an open breaker by default: a 503 that never
// left the process, the same for every breaker, naming nothing internal.
// Retry-After is the whole seconds until the next probe.
func Example_refusal() {
	tr := httpbreaker.New(nil)
	tr.Trip("payments.internal", 4*time.Second)

	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := client.Get("http://payments.internal/v1/charges")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer resp.Body.Close()
	dump, err := httputil.DumpResponse(resp, true)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Print(strings.ReplaceAll(string(dump), "\r\n", "\n"))
	// Output:
	// HTTP/1.1 503 Service Unavailable
	// Content-Length: 41
	// Cache-Control: no-store
	// Content-Type: text/plain; charset=utf-8
	// Retry-After: 4
	// X-Should-Retry: false
	//
	// Service Unavailable: please retry later.
}

// With WithBodyErrors a call counts when its body ends, so a dependency
// that answers 200 and then cuts its bodies short trips the breaker.
func ExampleWithBodyErrors() {
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, "partial") // then the connection closes
	}))
	defer flaky.Close()

	client := &http.Client{
		Transport: httpbreaker.New(nil, httpbreaker.WithBodyErrors(), httpbreaker.WithMinRequests(3)),
		Timeout:   5 * time.Second,
	}
	for range 4 {
		resp, err := client.Get(flaky.URL)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "rejected:", httpbreaker.IsRejected(resp), "body error:", err)
	}
	// Output:
	// 200 rejected: false body error: unexpected EOF
	// 200 rejected: false body error: unexpected EOF
	// 200 rejected: false body error: unexpected EOF
	// 503 rejected: true body error: <nil>
}

// RouteKey gives each operation its own breaker, never each raw path.
func ExampleRouteKey() {
	key := httpbreaker.RouteKey("GET /v1/users/{id}", "POST /v1/charges", "/files/{path...}")
	for _, u := range []string{
		"https://api.example.com/v1/users/42",
		"https://api.example.com/v1/users/43",
		"https://api.example.com/files/a/b.txt",
		"https://api.example.com/elsewhere",
	} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		fmt.Println(key(req))
	}
	// Output:
	// api.example.com GET /v1/users/{id}
	// api.example.com GET /v1/users/{id}
	// api.example.com /files/{path...}
	// api.example.com
}

// A fallback answers for a refused request, here with a stale copy.
func ExampleWithFallback() {
	stale := "cached profile (stale)"
	tr := httpbreaker.New(nil, httpbreaker.WithFallback(func(req *http.Request, err error) (*http.Response, error) {
		return &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Warning": {`110 - "Response is Stale"`}},
			Body:       io.NopCloser(strings.NewReader(stale)),
			Request:    req,
		}, nil
	}))
	tr.Trip("profiles.internal", time.Minute)

	resp, _ := (&http.Client{Transport: tr}).Get("http://profiles.internal/u/1")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// 200 cached profile (stale)
}

// ParseRetryAfter reads both forms of the Retry-After header.
func ExampleParseRetryAfter() {
	now := time.Date(1994, time.November, 6, 8, 49, 0, 0, time.UTC)
	for _, v := range []string{"120", "Sun, 06 Nov 1994 08:49:37 GMT", "-1", "soon"} {
		d, ok := httpbreaker.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 37s true
	// 0s false
	// 0s false
}

// Snapshot shows every live breaker; StatusHandler serves it as JSON on an
// internal port.
func ExampleTransport_Snapshot() {
	tr := httpbreaker.New(nil)
	tr.Trip("search.internal", time.Minute)
	for _, s := range tr.Snapshot() {
		fmt.Println(s.Key, s.State, s.RetryAt.Sub(s.Since))
	}
	// Output:
	// search.internal open 1m0s
}

// States reads every breaker's state without moving any: what an
// exporter reads at a metrics collection.
func ExampleTransport_States() {
	tr := httpbreaker.New(nil)
	tr.Trip("search.internal", time.Minute)
	tr.Trip("payments.internal", time.Minute)
	tr.Reset("payments.internal")
	got := map[string]httpbreaker.State{}
	for key, state := range tr.States() {
		got[key] = state
	}
	fmt.Println(got)
	// Output:
	// map[payments.internal:closed search.internal:open]
}
