package httpbreaker

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// watchable reports whether resp has a body whose end WithBodyErrors
// waits for: not http.NoBody, and not the read-write body of a 101
// Switching Protocols, which belongs to the new protocol.
func watchable(resp *http.Response) bool {
	return resp != nil && resp.Body != nil && resp.Body != http.NoBody && resp.StatusCode != http.StatusSwitchingProtocols
}

// watchBody returns body wrapped so that the admitted call tk of c,
// under policy p, whose headers the classifier counted as a success, is
// counted when the body ends (see WithBodyErrors). A shadow breaker's
// pass, which it would have refused for reason shadow (admitted for
// none), is told to the observers then instead, and counts for nothing.
func (t *Transport) watchBody(req *http.Request, c *circuit, p *policy, tk ticket, shadow rejectReason, queued time.Duration, body io.ReadCloser) io.ReadCloser {
	return &watchedBody{body: body, t: t, c: c, p: p, req: req, tk: tk, shadow: shadow, queued: queued}
}

// watchedBody is a response body whose end counts its call, once.
type watchedBody struct {
	body   io.ReadCloser
	t      *Transport
	c      *circuit
	p      *policy
	req    *http.Request
	tk     ticket
	shadow rejectReason  // a shadow breaker's pass, that it would have refused for this reason: observed, not counted
	queued time.Duration // the call's time in the bulkhead's line, for observers

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
// is nil, else the classifier's verdict on err under the deadline rule,
// and in both cases a failure if the call, to the body's end, outlived
// the slow-call threshold.
// If the classifier panics, the call counts for nothing (its probe slot
// is freed) and the panic goes on.
func (w *watchedBody) count(err error) {
	if w.counted.Swap(true) {
		return
	}
	t, now, o := w.t, w.t.now(), OutcomeIgnored
	defer func() {
		if w.shadow != admitted {
			t.observeShadow(w.req.Context(), w.c, w.shadow, o, w.tk.start, now, w.queued)
			return
		}
		tr := t.settle(w.c, w.tk, o, now, 0)
		defer t.notify(tr) // after the observers, even if one panics
		if len(t.observers) > 0 {
			t.observeCall(w.req.Context(), w.c, w.tk, o, now, w.queued, tr)
		}
	}()
	o = OutcomeSuccess
	if err != nil {
		o = w.p.classify(w.req, nil, err)
	}
	o = w.p.judge(w.req, o, err, nil, w.tk.start, now, t.epoch) // a success slower than the slow-call threshold fails
}
