package main

// This file holds the recipe itself: what an application copies to put
// httpbreaker under anthropic-sdk-go. The rest of the program is the fake
// API it runs against and the report it prints.

import (
	"errors"
	"net/http"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/httpbreaker/httpbreaker"
)

// newClient returns an anthropic-sdk-go client whose requests go through
// tr, with the SDK's own retries (2, with backoff and Retry-After) as
// they are. That is the whole recipe: the synthetic 503 says
// X-Should-Retry: false, which anthropic-sdk-go obeys over every other
// rule, so a refused call is one attempt and returns at once, as an
// *anthropic.Error the caller can recognise (isRefused). more adds
// options (the program sets the fake's base URL and key there).
//
// Keep the default synthetic 503 rather than WithRejectAsError:
// anthropic-sdk-go retries every transport error, a refusal included.
func newClient(tr *httpbreaker.Transport, more ...option.RequestOption) anthropic.Client {
	opts := append([]option.RequestOption{option.WithHTTPClient(&http.Client{Transport: tr})}, more...)
	return anthropic.NewClient(opts...)
}

// isRefused reports whether err, from an anthropic-sdk-go call, is a
// breaker's refusal: the request never reached the API.
func isRefused(err error) bool {
	var e *anthropic.Error
	return errors.As(err, &e) && httpbreaker.IsRejected(e.Response)
}
