package httpbreaker

import (
	"io"
	"net/http"
	"sync/atomic"
)

// watchable reports whether resp has a body whose end WithBodyErrors
// waits for: not http.NoBody, and not the read-write body of a 101
// Switching Protocols, which belongs to the new protocol.
func watchable(resp *http.Response) bool {
	return resp != nil && resp.Body != nil && resp.Body != http.NoBody && resp.StatusCode != http.StatusSwitchingProtocols
}

// watchBody returns body wrapped so that the admitted call tk, whose
// headers the classifier counted as a success, is counted when the body
// ends (see WithBodyErrors).
func (t *Transport) watchBody(req *http.Request, b *breaker, tk ticket, body io.ReadCloser) io.ReadCloser {
	return &watchedBody{body: body, t: t, b: b, req: req, tk: tk}
}

// watchedBody is a response body whose end counts its call, once.
type watchedBody struct {
	body io.ReadCloser
	t    *Transport
	b    *breaker
	req  *http.Request
	tk   ticket

	closing atomic.Bool // Close has begun: a Read error from now on is Close's doing
	counted atomic.Bool // the call has been counted
}

// Read reads from the body; io.EOF counts the call a success, another
// error counts it as the classifier says.
func (w *watchedBody) Read(p []byte) (int, error) {
	n, err := w.body.Read(p)
	switch {
	case err == nil:
	case err == io.EOF:
		w.count(nil)
	case !w.closing.Load():
		w.count(err)
	}
	return n, err
}

// Close closes the body and, unless a Read has counted the call, counts
// it a success.
func (w *watchedBody) Close() error {
	w.closing.Store(true)
	err := w.body.Close()
	w.count(nil)
	return err
}

// count counts the call, the first time it is called: a success when err
// is nil, else the classifier's verdict on err under the deadline rule.
func (w *watchedBody) count(err error) {
	if w.counted.Swap(true) {
		return
	}
	t, now, o := w.t, w.t.now(), OutcomeSuccess
	if err != nil {
		o = t.budgetRule(w.req, w.tk, t.classify(w.req, nil, err), err, now)
	}
	t.notify(w.b.outcome(w.tk, o, now, nil))
}
