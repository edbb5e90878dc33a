package httpbreaker

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
)

// uploadBody is a request body that remembers whether reading it failed:
// the caller's upload (a file that cannot be read, a client that sent a
// malformed chunk through a proxy, a MaxBytesReader's limit, a body
// shorter or longer than the request's ContentLength) is the caller's
// fault, never the dependency's.
type uploadBody struct {
	io.ReadCloser
	want int64 // the request's ContentLength when it is known (> 0); else 0
	read int64 // bytes read so far, by next's one reader
	err  atomic.Bool
}

// Read reads from the caller's body, remembering an error other than
// io.EOF, and a body that turns out shorter or longer than its
// ContentLength (net/http then fails the call).
func (u *uploadBody) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	u.read += int64(n)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		u.err.Store(true)
	case u.want > 0 && (u.read > u.want || err != nil && u.read < u.want):
		u.err.Store(true)
	}
	return n, err
}

// failed reports whether reading the body failed; false for nil.
func (u *uploadBody) failed() bool { return u != nil && u.err.Load() }

// watchUpload returns the request to send for req: req itself when it
// has no body, else a shallow copy whose Body is req's wrapped to tell
// whether reading it failed. The caller's request is never modified.
func watchUpload(req *http.Request) (*http.Request, *uploadBody) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	u := &uploadBody{ReadCloser: req.Body, want: max(req.ContentLength, 0)}
	sent := new(http.Request)
	*sent = *req
	sent.Body = u
	return sent, u
}
