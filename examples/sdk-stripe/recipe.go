package main

// This file holds the recipe itself: what an application copies to put
// httpbreaker under stripe-go. The rest of the program is the fake Stripe
// it runs against and the report it prints.

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/stripe/stripe-go/v85"
)

// stripeHost is the host of Stripe's API, whose breaker the recipe's
// policy names.
const stripeHost = "api.stripe.com"

// newTransport is the recipe's Transport: opts, plus a policy for
// Stripe's API host (host) whose refusal is JSONRejection's, the synthetic
// 503 in Stripe's error shape. stripe-go reads it as a final API error,
// so a refused call is one attempt and returns at once, with stripe-go's
// default retries (MaxNetworkRetries 2) left on for real failures:
//
//	httpbreaker.New(nil, httpbreaker.WithPolicy("api.stripe.com", httpbreaker.WithFallback(httpbreaker.JSONRejection)))
//
// Without it, stripe-go retries the text 503 (it is not Stripe's JSON)
// and a WithRejectAsError error (every transport error) twice, sleeping
// 0.5s and then 0.75–1s: 1.25s or more per refused call.
func newTransport(host string, opts ...httpbreaker.Option) *httpbreaker.Transport {
	return httpbreaker.New(nil, append(opts, httpbreaker.WithPolicy(host, httpbreaker.WithFallback(httpbreaker.JSONRejection)))...)
}

// isRefused reports whether err, from a stripe-go call through
// newTransport, is a breaker's refusal: Stripe was not called. The
// refusal is a *stripe.Error with JSONRejectionCode, which no answer of
// Stripe's has; a call of Stripe's v2 API (/v2/...) reads its errors into
// a *stripe.V2RawError instead, with the same code.
func isRefused(err error) bool {
	var se *stripe.Error
	if errors.As(err, &se) {
		return se.HTTPStatusCode == http.StatusServiceUnavailable && se.Code == httpbreaker.JSONRejectionCode
	}
	var v2 *stripe.V2RawError
	return errors.As(err, &v2) && v2.HTTPStatusCode == http.StatusServiceUnavailable && v2.Code == httpbreaker.JSONRejectionCode
}

// newStripeClient returns a stripe-go client whose requests go through
// tr, with stripe-go's own retries set to retries
// (stripe.DefaultMaxNetworkRetries with the recipe), and more applied to
// the backend config last (the program sets the fake's URL and a quiet
// logger there).
//
// The rest of this file is the older way, kept for comparison: tr made
// with WithRejectAsError (a refusal is a *url.Error, errors.Is(err,
// httpbreaker.ErrOpen) holds), retries 0, and callWithRetries at the call
// site, where a refusal is seen and not retried.
func newStripeClient(key string, tr *httpbreaker.Transport, retries int64, more ...func(*stripe.BackendConfig)) *stripe.Client {
	cfg := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Transport: tr, Timeout: 30 * time.Second},
		MaxNetworkRetries: stripe.Int64(retries),
	}
	for _, f := range more {
		f(cfg)
	}
	return stripe.NewClient(key, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg)))
}

// callWithRetries makes call up to attempts times, waiting wait, then
// twice as long, and so on, between attempts. It retries what stripe-go's
// own retries would (transport errors and responses that are not Stripe's
// JSON, and Stripe's 429 lock_timeout), but never a breaker rejection,
// and never once ctx is done.
//
// A call that creates or changes something must set its params'
// IdempotencyKey once, before callWithRetries, so that every attempt
// sends the same key: stripe-go makes a new key for each call otherwise,
// and a retried POST could be applied twice.
func callWithRetries(ctx context.Context, attempts int, wait time.Duration, call func() error) error {
	var err error
	for i := range attempts {
		if i > 0 {
			t := time.NewTimer(wait << (i - 1))
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
		if err = call(); err == nil || !retryable(ctx, err) {
			return err
		}
	}
	return err
}

// retryable reports whether callWithRetries should retry err.
func retryable(ctx context.Context, err error) bool {
	var se *stripe.Error
	switch {
	case errors.Is(err, httpbreaker.ErrOpen):
		return false // refused by the breaker: Stripe was not called
	case ctx.Err() != nil:
		return false
	case errors.As(err, &se):
		return se.HTTPStatusCode == http.StatusTooManyRequests && se.Code == stripe.ErrorCodeLockTimeout
	}
	return true
}
