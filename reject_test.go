package httpbreaker

import (
	"errors"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

// TestRejectedErrorIsNotRetryable holds the refusal error to the question
// aws-sdk-go-v2's default retryer asks first: a refused call is final.
func TestRejectedErrorIsNotRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := tripped(t, newDep(500), WithRejectAsError())
		req, _ := http.NewRequest(http.MethodGet, testURL, nil)
		resp, err := tr.RoundTrip(req)
		require.Nil(t, resp)
		var rej *RejectedError
		require.ErrorAs(t, err, &rej)
		var retryable interface{ RetryableError() bool }
		require.True(t, errors.As(err, &retryable), "the error answers RetryableError")
		require.False(t, retryable.RetryableError())
	})
}
