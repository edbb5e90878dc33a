package httpbreaker

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrOpen is wrapped by every rejection error: errors.Is(err, ErrOpen)
// tells a request the breaker refused from one the dependency failed.
var ErrOpen = errors.New("httpbreaker: circuit open")

// ErrBulkheadFull is wrapped, beside ErrOpen, by the error of a request
// refused because its key already had WithMaxConcurrent calls in flight.
var ErrBulkheadFull = errors.New("httpbreaker: too many concurrent requests")

// RejectedError is the error of a refused request: returned by RoundTrip
// under WithRejectAsError and passed to the fallback of WithFallback. It
// wraps ErrOpen, and ErrBulkheadFull for a bulkhead rejection or
// ErrRetryBudget for a retry over its budget. Its message
// names the breaker's key: log it, but do not send it to public clients.
type RejectedError struct {
	// Key is the key of the breaker that refused the request.
	Key string
	// State is the breaker's state when it refused: StateOpen, or
	// StateHalfOpen with every probe slot taken, or StateClosed or
	// StateHalfOpen for a full bulkhead (an open breaker refuses as open
	// even when its bulkhead is full), or StateClosed for a retry over
	// its budget (an open or half-open breaker refuses by its state
	// first).
	State State
	// RetryAt is when the breaker may admit a probe: the end of the open
	// period, or a second after the rejection when half-open, for a full
	// bulkhead or for a retry over its budget.
	RetryAt time.Time

	cause error // ErrBulkheadFull or ErrRetryBudget; nil when refused by state
	at    int64 // the breaker's retryAt clock this error was made for
}

// Error describes the rejection, naming the key. The RejectedErrors of one
// open period are one shared value: do not modify one.
func (e *RejectedError) Error() string {
	switch e.cause {
	case ErrBulkheadFull:
		return "httpbreaker: too many concurrent requests for " + e.Key
	case ErrRetryBudget:
		return "httpbreaker: retry budget exhausted for " + e.Key
	}
	if e.at == never { // an operator's trip until Reset
		return "httpbreaker: circuit " + e.State.String() + " for " + e.Key + " (until reset)"
	}
	return "httpbreaker: circuit " + e.State.String() + " for " + e.Key + " (retry after " + max(time.Until(e.RetryAt), 0).Round(time.Millisecond).String() + ")"
}

// RetryableError reports false: a refusal is an answer, not a transient
// fault, and retrying it inside one call only waits for the same answer.
// aws-sdk-go-v2's default retryer asks errors this question first
// (aws/retry.IsErrorRetryable), so a refused call returns after one
// attempt, in microseconds, through every AWS client.
func (e *RejectedError) RetryableError() bool { return false }

// Unwrap returns ErrOpen, and ErrBulkheadFull for a bulkhead rejection or
// ErrRetryBudget for a retry over its budget.
func (e *RejectedError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrOpen, e.cause}
	}
	return []error{ErrOpen}
}

// rejectBody is the body of every synthetic 503. It names nothing
// internal: a service that passes it on to the public leaks nothing.
const rejectBody = "Service Unavailable: please retry later.\n"

// rejectedKey marks the context of a synthetic 503's Request.
type rejectedKey struct{}

// rejectedCtx is the context of the Request of a synthetic 503. Its
// mark is that response: a context derived from it, as a retry of the
// refused request may make, marks no other response.
type rejectedCtx struct {
	context.Context
	resp *http.Response
}

func (c *rejectedCtx) Value(key any) any {
	if key == (rejectedKey{}) {
		return c.resp
	}
	return c.Context.Value(key)
}

// IsRejected reports whether resp is this package's synthetic 503: a
// request refused by a breaker or bulkhead, never sent to the dependency.
// It is false for a real 503 from upstream, for nil, and for any other
// response. It keeps working through http.Client, which may replace the
// response body (with a Timeout set), because the mark is on the
// response's Request, not its body. Its Retry-After is the whole seconds
// until the next probe may go, at least 1 and at most 3600. The mark names
// the response itself:
// a copy of it, or a response to a request whose context was derived
// from the rejected one's, is not rejected.
func IsRejected(resp *http.Response) bool {
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Request == nil {
		return false
	}
	return resp.Request.Context().Value(rejectedKey{}) == resp
}

// reject answers a request that circuit c refused for reason at clock
// time now, under policy p, whose body the caller has closed: the
// fallback, the error or the synthetic 503.
func (t *Transport) reject(req *http.Request, c *circuit, p *policy, reason rejectReason, now int64) (*http.Response, error) {
	err := t.rejectedError(c, reason, now)
	if f := p.fallback; f != nil {
		resp, ferr := f(req, err)
		if resp != nil && ferr != nil {
			if resp.Body != nil {
				resp.Body.Close()
			}
			return nil, ferr
		}
		if resp != nil || ferr != nil {
			return resp, ferr
		}
	}
	if p.rejectAsError {
		return nil, err
	}
	return rejection(req, c.retryIn(reason, now)), nil
}

// retryIn is how long after clock time now a call c refused for reason
// may be admitted, as the synthetic 503 says it: the rest of the open
// period, at most maxAdvertisedRetry, or a second when half-open or for
// a full bulkhead.
func (c *circuit) retryIn(reason rejectReason, now int64) time.Duration {
	if reason == rejectOpen {
		return min(time.Duration(c.b.retryAt.Load()-now), maxAdvertisedRetry)
	}
	return time.Second
}

// refusedState is the breaker's state at clock time now as a refusal for
// reason shows it. A full bulkhead, or a spent retry budget, refuses
// whatever the state, and shows it as State would: an open breaker whose
// open period has ended, which no call has moved yet, is half-open.
func (c *circuit) refusedState(reason rejectReason, now int64) State {
	switch reason {
	case rejectOpen:
		return StateOpen
	case rejectHalfOpen:
		return StateHalfOpen
	}
	return c.b.displayed(now)
}

// maxAdvertisedRetry caps the Retry-After of a synthetic 503: a breaker
// opened until Reset, or for days, says to come back in an hour, when
// the operator may well have reset it.
const maxAdvertisedRetry = time.Hour

// rejection builds the synthetic 503. Retry-After is in whole seconds,
// rounded up, at least 1 and at most 3600.
func rejection(req *http.Request, retry time.Duration) *http.Response {
	retry = min(retry, maxAdvertisedRetry)
	secs := int64((retry + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	r := new(synthetic)
	r.vals = [...]string{"text/plain; charset=utf-8", "no-store", strconv.FormatInt(secs, 10), "false"}
	r.body.Reader = *strings.NewReader(rejectBody)
	r.resp = http.Response{
		Status:     "503 Service Unavailable",
		StatusCode: http.StatusServiceUnavailable,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":  r.vals[0:1:1],
			"Cache-Control": r.vals[1:2:2],
			"Retry-After":   r.vals[2:3:3],
			// The SDKs generated by Stainless (openai-go, anthropic-sdk-go
			// and many more) otherwise sleep out Retry-After and retry
			// inside one call; a refusal is final for this call.
			"X-Should-Retry": r.vals[3:4:4],
		},
		Body:          &r.body,
		ContentLength: int64(len(rejectBody)),
	}
	r.ctx = rejectedCtx{Context: req.Context(), resp: &r.resp}
	r.req = *req.WithContext(&r.ctx)
	r.resp.Request = &r.req
	return &r.resp
}

// synthetic is a synthetic 503 with what it holds — its body, its
// Request (a copy of the rejected one), the context that marks it, its
// header values — in one allocation.
// Each response has its own: a caller may change it.
type synthetic struct {
	resp http.Response
	req  http.Request // the rejected request, with ctx for its context
	body rejectReader
	ctx  rejectedCtx
	vals [4]string
}

// rejectedError returns the error of a request c refused for reason at
// clock time now. An open breaker's rejections share one error per open
// period, so refusing costs no allocation; the others are made afresh,
// valid for a second.
func (t *Transport) rejectedError(c *circuit, reason rejectReason, now int64) *RejectedError {
	switch reason {
	case rejectOpen:
		ra := c.b.retryAt.Load()
		if e := c.openErr.Load(); e != nil && e.at == ra {
			return e
		}
		e := &RejectedError{Key: c.key(), State: StateOpen, RetryAt: wall(t.epoch, ra), at: ra}
		c.openErr.Store(e)
		return e
	case rejectBulkhead, rejectRetryBudget:
		cause := ErrBulkheadFull
		if reason == rejectRetryBudget {
			cause = ErrRetryBudget
		}
		return &RejectedError{Key: c.key(), State: c.refusedState(reason, now), RetryAt: wall(t.epoch, later(now, time.Second)), cause: cause}
	}
	return &RejectedError{Key: c.key(), State: StateHalfOpen, RetryAt: wall(t.epoch, later(now, time.Second))}
}

// rejectReader is the body of a synthetic 503.
type rejectReader struct{ strings.Reader }

// Close does nothing: the body holds no resource.
func (*rejectReader) Close() error { return nil }
