package main

// This file holds the recipe itself: what an application copies to put
// httpbreaker under openai-go. The rest of the program is the fake API it
// runs against and the report it prints.

import (
	"errors"
	"net/http"

	"github.com/httpbreaker/httpbreaker"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// newClient returns an openai-go client whose requests go through tr,
// with the SDK's own retries (2, with backoff and Retry-After) as they
// are. That is the whole recipe: the synthetic 503 says X-Should-Retry:
// false, which openai-go obeys over every other rule, so a refused call
// is one attempt and returns at once, as an *openai.Error the caller can
// recognise (isRefused). more adds options (the program sets the fake's
// base URL and key there).
//
// Keep the default synthetic 503 rather than WithRejectAsError:
// openai-go retries every transport error, a refusal included.
func newClient(tr *httpbreaker.Transport, more ...option.RequestOption) openai.Client {
	opts := append([]option.RequestOption{option.WithHTTPClient(&http.Client{Transport: tr})}, more...)
	return openai.NewClient(opts...)
}

// isRefused reports whether err, from an openai-go call, is a breaker's
// refusal: the request never reached the API.
func isRefused(err error) bool {
	var e *openai.Error
	return errors.As(err, &e) && httpbreaker.IsRejected(e.Response)
}
