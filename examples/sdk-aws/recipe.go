package main

// This file holds the recipe itself: what an application copies to put
// httpbreaker under the AWS SDK for Go v2. The rest of the program is the
// fake AWS it runs against and the report it prints.

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/httpbreaker/httpbreaker"
)

// loadConfig loads the AWS config as config.LoadDefaultConfig does, then
// puts one httpbreaker Transport, made with opts, under every client made
// from the config.
//
// Make the Transport with WithRejectAsError and leave each service's
// retryer as it is: a refusal is then a *httpbreaker.RejectedError, whose
// RetryableError() is false, and the SDK's default retryer asks that
// question before its connection-error rule, so a refused call is one
// attempt and returns at once, while real failures keep their retries.
// (The synthetic 503 is an HTTP 503 to the SDK, which it retries.)
//
// It does not pass the breaker in with config.WithHTTPClient: when a CA
// bundle is configured (AWS_CA_BUNDLE, or ca_bundle in the shared config),
// LoadDefaultConfig refuses any HTTP client but its own BuildableClient
// ("unable to add custom RootCAs HTTPClient, has no WithTransportOptions,
// *http.Client"). It lets the SDK build its own client instead, takes that
// client's *http.Transport, which carries the bundle in
// TLSClientConfig.RootCAs, and hands it to httpbreaker.New. Credentials
// providers resolved while loading keep the SDK's own client: only the
// service clients go through the breaker.
//
// To tune the transport (proxies, dialer, connection pool), pass
// config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(...))
// in load: that client takes the CA bundle too.
func loadConfig(ctx context.Context, opts []httpbreaker.Option, load ...func(*config.LoadOptions) error) (aws.Config, *httpbreaker.Transport, error) {
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return aws.Config{}, nil, err
	}
	var base *http.Transport
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		base = bc.GetTransport() // a copy, with the CA bundle's RootCAs if any
	} else {
		base = awshttp.NewBuildableClient().GetTransport() // the SDK's defaults
	}
	tr := httpbreaker.New(base, opts...)
	cfg.HTTPClient = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return cfg, tr, nil
}

// s3Classifier is DefaultClassifier, except that a 503 from S3 counts as
// throttling (httpbreaker.OutcomeThrottled), not as a failure.
//
// S3 asks callers to slow down with 503 SlowDown (and 503
// ServiceUnavailable, documented with the same "Reduce your request
// rate"), not 429. The error code is only in the XML body, which a
// classifier must not read, and S3 sends no header that names it, so
// every 503 from S3 is read as throttling. (Over HTTP/1.1 S3 is reported
// to send the reason phrase "Slow Down", in resp.Status, but that is not
// documented, and this classifier does not rely on it.) The price: a real S3 outage
// that answers 503 counts toward the failure rate only once the 503s are
// sustained (WithThrottleSustain, 10s by default), not at once. 500s and
// transport errors still count as failures at once.
//
// The request is recognised as S3's by the service ID the SDK puts in the
// request's context, so the rule holds for any S3 endpoint (virtual-hosted
// or path-style, a custom BaseEndpoint) and no other service's 503 is
// affected.
func s3Classifier(req *http.Request, resp *http.Response, err error) httpbreaker.Outcome {
	if resp != nil && resp.StatusCode == http.StatusServiceUnavailable &&
		req != nil && awsmiddleware.GetServiceID(req.Context()) == s3.ServiceID {
		return httpbreaker.OutcomeThrottled
	}
	return httpbreaker.DefaultClassifier(req, resp, err)
}

// isRejection reports whether err, an error from an AWS SDK call or from
// one attempt of it, is a breaker rejection: the request never reached
// AWS.
//
//   - Under WithRejectAsError the rejection is a transport error, and
//     errors.Is(err, httpbreaker.ErrOpen) sees through OperationError →
//     ResponseError → RequestSendError → *url.Error.
//   - With the default synthetic 503 the SDK makes an API error of it
//     (code ServiceUnavailable), and errors.Is is false; the raw
//     *http.Response of the *awshttp.ResponseError is the synthetic one,
//     which httpbreaker.IsRejected recognises. A 503 that AWS sent is not
//     a rejection.
func isRejection(err error) bool {
	if errors.Is(err, httpbreaker.ErrOpen) {
		return true
	}
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.Response != nil && httpbreaker.IsRejected(re.Response.Response)
}
