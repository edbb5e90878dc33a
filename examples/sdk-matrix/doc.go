// Package matrix holds one test of the whole SDK matrix (matrix_test.go):
// for each of six clients — go-github, aws-sdk-go-v2 (DynamoDB),
// stripe-go, openai-go, anthropic-sdk-go and go-retryablehttp — at its
// default retry settings plus its recipe from docs/sdks.md, once the
// breaker is open, a call returns at once, makes at most one attempt
// above the breaker, reaches nothing, and the caller can tell it was
// refused. Every server is an httptest server on 127.0.0.1, every key a
// fake one.
package matrix
