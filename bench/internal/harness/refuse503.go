package harness

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// As503 is the open-path mode "503" of a library that refuses only with
// an error: what its user writes to answer a refusal as httpbreaker's
// synthetic 503 does. The wrapper turns openErr into a fresh 503 with
// the same status line, headers (Content-Type, Cache-Control,
// Retry-After in whole seconds of the open timeout, X-Should-Retry),
// body, length and Request, built the plain way. It has no mark that
// tells it from an upstream 503 (httpbreaker's IsRejected), which it
// would cost more to add.
func As503(wrap Wrap, openErr error) OpenMode {
	return OpenMode{
		Wrap: func(next http.RoundTripper, cfg Config) http.RoundTripper {
			return &refuse503{next: wrap(next, cfg), openErr: openErr, retry: cfg.OpenTimeout}
		},
		Rejected: func(resp *http.Response, err error) bool {
			return err == nil && resp != nil && resp.StatusCode == http.StatusServiceUnavailable
		},
	}
}

// refuse503 answers next's refusals (openErr) with a synthetic 503.
type refuse503 struct {
	next    http.RoundTripper
	openErr error
	retry   time.Duration
}

// refusedBody is httpbreaker's synthetic 503 body, for the same length.
const refusedBody = "Service Unavailable: please retry later.\n"

// RoundTrip implements http.RoundTripper.
func (t *refuse503) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil || !errors.Is(err, t.openErr) {
		return resp, err
	}
	secs := max(int64((t.retry+time.Second-1)/time.Second), 1)
	return &http.Response{
		Status:     "503 Service Unavailable",
		StatusCode: http.StatusServiceUnavailable,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":   {"text/plain; charset=utf-8"},
			"Cache-Control":  {"no-store"},
			"Retry-After":    {strconv.FormatInt(secs, 10)},
			"X-Should-Retry": {"false"},
		},
		Body:          io.NopCloser(strings.NewReader(refusedBody)),
		ContentLength: int64(len(refusedBody)),
		Request:       req,
	}, nil
}
