package httpbreaker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// This file holds what SDKs' own retry loops need to see a refusal as
// final, beside the synthetic 503's X-Should-Retry header (reject.go) and
// RejectedError.RetryableError: each answers one SDK's question in that
// SDK's own terms, without the core importing it. docs/sdks.md has the
// recipe for each SDK.

// NonRetriable marks a refusal as final for the retry policy of the Azure
// SDK for Go (azcore), which stops at any error in the chain that has this
// method (errorinfo.NonRetriable). It does nothing.
func (*RejectedError) NonRetriable() {}

// jsonRejectBody is the body of JSONRejection's 503: Stripe's error shape,
// naming nothing internal, the same for every breaker.
const jsonRejectBody = `{"error":{"type":"api_error","code":"` + JSONRejectionCode + `","message":"Service Unavailable: please retry later."}}` + "\n"

// JSONRejectionCode is the error code in the body of JSONRejection's 503:
// through stripe-go, a refused call's *stripe.Error has this Code (and
// HTTPStatusCode 503), which no answer of Stripe's has; so does the
// *stripe.V2RawError of a call of Stripe's v2 API.
const JSONRejectionCode = "request_refused"

// JSONRejection is a fallback for WithFallback: it answers a refusal with
// the synthetic 503 — the same status, headers, Retry-After and mark
// (IsRejected is true for it) — whose body is JSON in Stripe's error
// shape instead of text:
//
//	{"error":{"type":"api_error","code":"request_refused","message":"Service Unavailable: please retry later."}}
//
// with Content-Type application/json. stripe-go reads that as a final
// API error: it does not retry it, whatever MaxNetworkRetries says, while
// it still retries what the dependency fails (its connection errors, and
// 5xx answers that are not Stripe's JSON). Give it to the policy of
// Stripe's API host only, so that every other breaker keeps the text
// body DESIGN fixes:
//
//	httpbreaker.WithPolicy("api.stripe.com", httpbreaker.WithFallback(httpbreaker.JSONRejection))
//
// Like the text body, it is identical for every breaker and names no key,
// host, state or error. err is the rejection error WithFallback passes; a
// *RejectedError gives Retry-After, anything else 1 second.
func JSONRejection(req *http.Request, err error) (*http.Response, error) {
	retry := time.Second
	var rej *RejectedError
	if errors.As(err, &rej) {
		retry = time.Until(rej.RetryAt)
	}
	resp := rejection(req, retry)
	resp.Header["Content-Type"] = []string{"application/json"}
	resp.Body = io.NopCloser(strings.NewReader(jsonRejectBody))
	resp.ContentLength = int64(len(jsonRejectBody))
	return resp, nil
}

// CheckRetry wraps a retry policy in go-retryablehttp's shape (its
// CheckRetry field; retryablehttp.DefaultRetryPolicy is one) so that it
// never retries a refusal: for the synthetic 503 (IsRejected) it returns
// false and no error, so that the client hands the 503 to its caller, and
// for a rejection error (WithRejectAsError: errors.Is(err, ErrOpen)) false
// and that error. Everything else, the dependency's own failures
// included, is policy's to decide:
//
//	client.CheckRetry = httpbreaker.CheckRetry(retryablehttp.DefaultRetryPolicy)
//
// A nil policy panics.
func CheckRetry(policy func(ctx context.Context, resp *http.Response, err error) (bool, error)) func(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if policy == nil {
		panic("httpbreaker: CheckRetry: nil policy")
	}
	return func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if IsRejected(resp) {
			return false, nil
		}
		if errors.Is(err, ErrOpen) {
			return false, err
		}
		return policy(ctx, resp, err)
	}
}
