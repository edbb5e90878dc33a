package httpbreaker

import (
	"net/http"
	"time"
)

// policy is everything the calls of one breaker run under: the breaker's
// settings, and what the Transport does around the breaker — how it
// judges an answer and how it refuses a call. It is resolved when the
// breaker is made and never changes under a call.
type policy struct {
	settings
	classifier    Classifier // nil: DefaultClassifier
	fallback      func(*http.Request, error) (*http.Response, error)
	rejectAsError bool
	bodyErrors    bool // see WithBodyErrors
}

// classify is the policy's classifier's verdict.
func (p *policy) classify(req *http.Request, resp *http.Response, err error) Outcome {
	if p.classifier == nil {
		return DefaultClassifier(req, resp, err)
	}
	return p.classifier(req, resp, err)
}

// judge is what a call admitted at clock time start, classified as o,
// says about the dependency when it ended with err at clock time end:
// o, except that a failure because a deadline passed which left less
// than minBudget at admission (short) is ignored (see
// Transport.RoundTrip), and a success slower than the slow-call
// threshold is a failure.
func (p *policy) judge(req *http.Request, o Outcome, err error, start, end int64, short bool, epoch time.Time) Outcome {
	switch {
	case o == OutcomeFailure && short && err != nil && callerEnded(req, epoch.Add(time.Duration(end))) == endedByDeadline:
		return OutcomeIgnored
	case o == OutcomeSuccess && p.slowCall > 0 && time.Duration(end-start) > p.slowCall:
		return OutcomeFailure
	}
	return o
}
