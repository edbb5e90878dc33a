// Package retrybudget shows httpbreaker's retry budget under three real
// SDKs, each at its default retry settings, and proves it against a
// loopback dependency (see README.md and the tests): go-retryablehttp,
// aws-sdk-go-v2 (DynamoDB) and openai-go.
//
// This file holds the recipes: what an application copies. The budget is
// one option of the breaker's Transport; an SDK that numbers its attempts
// (aws-sdk-go-v2's amz-sdk-request, openai-go's X-Stainless-Retry-Count)
// needs nothing more, and go-retryablehttp needs its PrepareRetry hook.
package retrybudget

import (
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/httpbreaker/httpbreaker"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// SuggestedBudget is the retry budget this example suggests for a
// dependency: Finagle's RetryBudget defaults. Within the breaker's window
// (10 s by default) retries may be at most 20 % of first attempts plus 10
// a second (100 a window): a failing dependency takes at most 1.2× its
// first attempts plus 10 retries a second, and a healthy one with little
// traffic still gets the retries of its rare transient errors.
func SuggestedBudget() httpbreaker.Option { return httpbreaker.WithRetryBudget(0.2, 10) }

// NewRetryableClient returns a go-retryablehttp client, at its defaults,
// whose attempts go through tr. Its retries carry no header, so the
// PrepareRetry hook marks them for the budget; and CheckRetry makes a
// refusal final, the budget's included: without it go-retryablehttp
// retries a refusal after its backoff (1 s, 2 s, 4 s, 8 s by default),
// and is refused again.
func NewRetryableClient(tr http.RoundTripper) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: tr}
	c.PrepareRetry = httpbreaker.PrepareRetry                               // retries are marked as such
	c.CheckRetry = httpbreaker.CheckRetry(retryablehttp.DefaultRetryPolicy) // and a refusal is not retried
	return c
}

// NewDynamoDB returns a DynamoDB client, with its default retryer, whose
// attempts go through tr. The SDK numbers them in amz-sdk-request, which
// the budget reads: nothing else is needed. endpoint and creds are for
// the loopback test; in production they come from config.LoadDefaultConfig
// (see examples/sdk-aws for a breaker under a loaded config).
func NewDynamoDB(tr http.RoundTripper, endpoint string, creds aws.CredentialsProvider, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  creds,
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   &http.Client{Transport: tr},
	}, opts...)
}

// StaticCredentials are fake credentials for a loopback DynamoDB.
func StaticCredentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "fake-secret", "")
}

// NewOpenAI returns an openai-go client, with its default retries, whose
// attempts go through tr. The SDK numbers them in X-Stainless-Retry-Count,
// which the budget reads, and it never retries a refusal (the synthetic
// 503 says X-Should-Retry: false): nothing else is needed.
func NewOpenAI(tr http.RoundTripper, baseURL, apiKey string) openai.Client {
	return openai.NewClient(
		option.WithAPIKey(apiKey),
		option.WithBaseURL(baseURL),
		option.WithHTTPClient(&http.Client{Transport: tr}),
	)
}
