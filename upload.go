package httpbreaker

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
)

// uploadBody is a request body that remembers whether reading it failed:
// the caller's upload (a file that cannot be read, a client that sent a
// malformed chunk through a proxy, a MaxBytesReader's limit, a body
// shorter or longer than the request's ContentLength) is the caller's
// fault, never the dependency's. A read that fails after next closed the
// body (as HTTP/2 does when the dependency resets the stream during a
// read) is next's doing, not the caller's.
type uploadBody struct {
	io.ReadCloser
	want   int64       // the request's ContentLength when it is known (> 0); else 0
	read   int64       // bytes read so far, by next's one reader
	closed atomic.Bool // next closed it
	upload *upload     // what every body of the call reports to
}

// upload is what the bodies of one call report to: the request's own,
// and each one next gets again through GetBody to send it once more (as
// http.Transport does when a reused connection fails before an answer).
type upload struct{ err atomic.Bool }

// Read reads from the caller's body, remembering an error other than
// io.EOF, and a body that turns out shorter or longer than its
// ContentLength (net/http then fails the call), unless next closed the
// body first.
func (u *uploadBody) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	u.read += int64(n)
	if u.closed.Load() {
		return n, err
	}
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		u.upload.err.Store(true)
	case u.want > 0 && (u.read > u.want || err != nil && u.read < u.want):
		u.upload.err.Store(true)
	}
	return n, err
}

// Close closes the caller's body; reads from then on are next's concern.
func (u *uploadBody) Close() error {
	u.closed.Store(true)
	return u.ReadCloser.Close()
}

// failed reports whether reading a body of the call, or getting one
// again, failed; false for nil.
func (u *upload) failed() bool { return u != nil && u.err.Load() }

// watchUpload returns the request to send for req, and what its bodies
// report to. It is req itself when there is nothing to watch: no body, or
// one that cannot fail (see inMemory) and no GetBody. Otherwise it is a
// shallow copy of req in which each body that can fail is wrapped to
// tell whether reading it failed: req's Body, unless it cannot fail,
// and every body its GetBody returns. The caller's request is never
// modified.
func watchUpload(req *http.Request) (*http.Request, *upload) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	fixed := inMemory(req.Body, req.ContentLength)
	if fixed && req.GetBody == nil {
		return req, nil // nothing to watch
	}
	w := &watched{req: *req} // one allocation for the copy, its body and the flag
	want := max(req.ContentLength, 0)
	if !fixed {
		w.body = uploadBody{ReadCloser: req.Body, want: want, upload: &w.upload}
		w.req.Body = &w.body
	}
	if get := req.GetBody; get != nil {
		w.req.GetBody = func() (io.ReadCloser, error) {
			body, err := get()
			if err != nil {
				w.upload.err.Store(true) // the caller's GetBody failed: so did its upload
				return body, err
			}
			if body == nil {
				body = http.NoBody // net/http would read a nil one, and panic
			}
			return &uploadBody{ReadCloser: body, want: want, upload: &w.upload}, nil // NoBody too: it may be shorter than ContentLength
		}
	}
	return &w.req, &w.upload
}

// watched is the request watchUpload sends, with its body and the flag
// its bodies report to.
type watched struct {
	req    http.Request
	body   uploadBody
	upload upload
}

// inMemory reports whether body is one that http.NewRequest makes for a
// *bytes.Buffer, *bytes.Reader or *strings.Reader (io.NopCloser of it)
// holding exactly n bytes. Reading it cannot fail, nor end short of or
// past the request's ContentLength, so it is not watched (the bodies its
// GetBody gives are). A wrapper would also cost every such call a
// write: net/http sends a body it knows to be in memory with the
// headers, and flushes the headers on their own before any other body.
// It is net/http's own test (transfer.go, isKnownInMemoryReader), with
// the length checked as well.
func inMemory(body io.ReadCloser, n int64) bool {
	if t := reflect.TypeOf(body); n <= 0 || t != nopCloserType && t != nopCloserWriterToType {
		return false
	}
	switch r := reflect.ValueOf(body).Field(0).Interface().(type) {
	case *bytes.Reader, *bytes.Buffer, *strings.Reader:
		return !reflect.ValueOf(r).IsNil() && int64(r.(interface{ Len() int }).Len()) == n // a nil reader is not one
	}
	return false
}

// The two types io.NopCloser returns: for a reader with WriteTo, and
// for one without.
var (
	nopCloserType         = reflect.TypeOf(io.NopCloser(struct{ io.Reader }{}))
	nopCloserWriterToType = reflect.TypeOf(io.NopCloser(strings.NewReader("")))
)
