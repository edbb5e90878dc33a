package retrybudget

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// dependency is a loopback stand-in for DynamoDB (GetItem), the OpenAI API
// (GET /v1/models/{id}) and a plain HTTP service (anything else). It
// numbers the requests it receives from 0 in arrival order and fails
// request n when fails(n), with a 500 in each API's own error format. The
// tests send one request at a time, so the failures fall in a fixed
// pattern.
type dependency struct {
	srv   *httptest.Server
	fails func(n int64) bool

	arrivals atomic.Int64 // requests received
	failed   atomic.Int64 // of which answered 500
	// By the SDK's own attempt header, where it sends one: first
	// attempts (amz-sdk-request attempt=1, X-Stainless-Retry-Count: 0)
	// and retries (attempt=N ≥ 2, count N ≥ 1). go-retryablehttp sends
	// none: its requests are unlabelled.
	firsts, retries, unlabelled atomic.Int64
}

// threeInTen fails requests 0, 3 and 6 of every 10: 30 % of what
// arrives, and never two in a row, so every retry of a failure succeeds.
func threeInTen(n int64) bool { m := n % 10; return m == 0 || m == 3 || m == 6 }

// oneInHundred fails request 50 of every 100, once: a healthy dependency
// with a rare transient error, whose retry (the next request) succeeds.
func oneInHundred(n int64) bool { return n%100 == 50 }

// newDependency starts a dependency on 127.0.0.1 that fails request n
// when fails(n).
func newDependency(t *testing.T, fails func(n int64) bool) *dependency {
	t.Helper()
	d := &dependency{fails: fails}
	d.srv = httptest.NewUnstartedServer(d)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	d.srv.Listener.Close()
	d.srv.Listener = l
	d.srv.Start()
	t.Cleanup(d.srv.Close)
	return d
}

// URL is the dependency's base URL.
func (d *dependency) URL() string { return d.srv.URL }

func (d *dependency) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := d.arrivals.Add(1) - 1
	d.label(r)
	fail := d.fails(n)
	if fail {
		d.failed.Add(1)
		// What OpenAI's API sends to set the SDK's wait; the other SDKs
		// do not read it.
		w.Header().Set("Retry-After-Ms", "1")
	}
	switch {
	case r.Header.Get("X-Amz-Target") != "":
		d.serveDynamoDB(w, r, fail)
	case strings.HasPrefix(r.URL.Path, "/v1/models/"):
		d.serveOpenAI(w, r, fail)
	default:
		if fail {
			http.Error(w, "transient failure", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// label counts r by its SDK's attempt header.
func (d *dependency) label(r *http.Request) {
	if v := r.Header.Get("Amz-Sdk-Request"); v != "" {
		for _, part := range strings.Split(v, ";") {
			if a, ok := strings.CutPrefix(strings.TrimSpace(part), "attempt="); ok {
				if n, _ := strconv.Atoi(a); n >= 2 {
					d.retries.Add(1)
				} else {
					d.firsts.Add(1)
				}
				return
			}
		}
	}
	if v := r.Header.Get("X-Stainless-Retry-Count"); v != "" {
		if n, _ := strconv.Atoi(v); n >= 1 {
			d.retries.Add(1)
		} else {
			d.firsts.Add(1)
		}
		return
	}
	d.unlabelled.Add(1)
}

func (d *dependency) serveDynamoDB(w http.ResponseWriter, r *http.Request, fail bool) {
	status := http.StatusOK
	var body any = map[string]any{"Item": map[string]any{"id": map[string]string{"S": "1"}}}
	switch {
	case r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.GetItem":
		status, body = http.StatusBadRequest, map[string]string{"__type": "com.amazon.coral.service#UnknownOperationException", "message": "not faked"}
	case fail:
		status, body = http.StatusInternalServerError, map[string]string{"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": "Internal server error"}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", "FAKE0DDB0REQUEST0ID")
	// The SDK checks every DynamoDB response body against this header.
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(b)), 10))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (d *dependency) serveOpenAI(w http.ResponseWriter, r *http.Request, fail bool) {
	w.Header().Set("Content-Type", "application/json")
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	b, _ := json.Marshal(map[string]any{"id": id, "object": "model", "created": 1700000000, "owned_by": "loopback"})
	_, _ = w.Write(b)
}
