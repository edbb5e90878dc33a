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

// newStripeClient returns a stripe-go client whose requests go through
// tr, with stripe-go's own retries set to retries, and more applied to
// the backend config last (the program sets the fake's URL and a quiet
// logger there).
//
// tr should be made with WithRejectAsError: stripe-go never hands the
// *http.Response to the caller, so the default synthetic 503 cannot be
// told from a proxy's 503, and, its body not being Stripe's JSON,
// stripe-go retries it. With WithRejectAsError a rejection is a
// *url.Error, errors.Is(err, httpbreaker.ErrOpen) holds, and retries
// should be 0: stripe-go retries every transport error, a rejection
// included, sleeping 0.5s and then 0.75–1s before its two default retries.
// Retry at the call site instead (callWithRetries), where a rejection is
// seen and not retried.
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
