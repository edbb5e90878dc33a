package httpbreaker

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestZeroTransport: a Transport not made by New is unusable, and says
// so, instead of panicking at request time.
func TestZeroTransport(t *testing.T) {
	var tr Transport
	body := newBody("payload")
	req, err := http.NewRequest(http.MethodPost, testURL, body)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.Nil(t, resp)
	require.ErrorContains(t, err, "New")
	require.True(t, body.closed.Load(), "the request body is closed")

	require.Equal(t, StateClosed, tr.State(testKey))
	require.Empty(t, tr.Snapshot())
	tr.Trip(testKey, time.Minute)
	tr.Reset(testKey)
	require.Equal(t, StateClosed, tr.State(testKey))
	require.NoError(t, tr.Health().Err())
	tr.CloseIdleConnections()
}
