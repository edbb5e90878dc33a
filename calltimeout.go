package httpbreaker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

// withCallTimeout returns req with a context whose deadline is d after
// its admission at clock time now, and the context's cancel; or req
// itself and nil when req's own deadline is earlier.
func (t *Transport) withCallTimeout(req *http.Request, now int64, d time.Duration) (*http.Request, context.CancelFunc) {
	at := later(now, d)
	if at == never {
		return req, nil // a d the clock cannot reach cuts no call
	}
	deadline := wall(t.epoch, at)
	if own, ok := req.Context().Deadline(); ok && !own.After(deadline) {
		return req, nil
	}
	ctx, cancel := context.WithDeadline(req.Context(), deadline)
	return req.WithContext(ctx), cancel
}

// endCallTimeout hands the call timeout's context of the request sent to
// what next answered: an error releases it at once (and is made to say
// it is a timeout when the call timeout ended it), a response's body
// releases it when it is closed or read to its end.
func (g *guard) endCallTimeout(sent *http.Request, resp *http.Response, err error) (*http.Response, error) {
	cancel := g.cancel
	g.cancel = nil
	switch {
	case err != nil:
		if errors.Is(sent.Context().Err(), context.DeadlineExceeded) && !saysTimeout(err) {
			err = &callTimeoutError{err: err}
		}
		cancel()
	case resp.Body == nil || resp.Body == http.NoBody:
		cancel()
	case resp.StatusCode == http.StatusSwitchingProtocols:
		// The body is the new protocol's connection: it stays writable
		// (and half-closable, as net/http's is), and closing it releases
		// the context.
		rwc, ok := resp.Body.(io.ReadWriteCloser)
		_, half := resp.Body.(closeWriter)
		switch {
		case ok && half:
			resp.Body = &releasingHalfConn{releasingConn{ReadWriteCloser: rwc, release: cancel}}
		case ok:
			resp.Body = &releasingConn{ReadWriteCloser: rwc, release: cancel}
		default:
			resp.Body = &releasingBody{ReadCloser: resp.Body, release: cancel}
		}
	default:
		resp.Body = &releasingBody{ReadCloser: resp.Body, release: cancel}
	}
	return resp, err
}

// saysTimeout reports whether err itself, not an error it wraps, has a
// Timeout method that reports true: url.Error.Timeout, which http.Client
// callers ask, looks no deeper. A next that wraps the context's error
// (fmt.Errorf("...: %w", err), as middleware does) says it only through
// errors.Is.
func saysTimeout(err error) bool {
	t, ok := err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

// callTimeoutError is the error of a call that its call timeout ended,
// when next's own error does not say so itself (see saysTimeout).
type callTimeoutError struct{ err error }

func (e *callTimeoutError) Error() string { return "httpbreaker: call timeout: " + e.err.Error() }

// Unwrap returns next's error and context.DeadlineExceeded.
func (e *callTimeoutError) Unwrap() []error { return []error{e.err, context.DeadlineExceeded} }

// Timeout reports true: the call timed out (see net.Error).
func (e *callTimeoutError) Timeout() bool { return true }

// Temporary reports true, as context.DeadlineExceeded does.
func (e *callTimeoutError) Temporary() bool { return true }

// releasingBody is a response body that releases its call's context when
// it is closed or read to its end.
type releasingBody struct {
	io.ReadCloser
	release context.CancelFunc
}

// Read reads from the body; its end, or an error, releases the context.
func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

// Close closes the body and releases the context.
func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// releasingConn is the body of a 101 Switching Protocols response, the
// new protocol's connection, that releases its call's context when it is
// closed.
type releasingConn struct {
	io.ReadWriteCloser
	release context.CancelFunc
}

// Close closes the connection and releases the context.
func (c *releasingConn) Close() error {
	err := c.ReadWriteCloser.Close()
	c.release()
	return err
}

// closeWriter is a connection that can close its writing side alone, as
// the body net/http gives a 101 can.
type closeWriter interface{ CloseWrite() error }

// releasingHalfConn is a releasingConn whose connection can half-close:
// httputil.ReverseProxy asks for CloseWrite to pass a client's half-close
// on to the backend.
type releasingHalfConn struct{ releasingConn }

// CloseWrite closes the connection's writing side; the context stays
// until Close.
func (c *releasingHalfConn) CloseWrite() error {
	return c.ReadWriteCloser.(closeWriter).CloseWrite()
}
