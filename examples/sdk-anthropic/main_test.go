package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/httpbreaker/httpbreaker"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// refusalBound is the most a refused call may take: generous for a
// loaded machine; the figure measured is printed.
const refusalBound = 50 * time.Millisecond

// newFake starts a fake Anthropic API for the test.
func newFake(t *testing.T) *fakeAnthropic {
	fake := newFakeAnthropic()
	t.Cleanup(fake.Close)
	return fake
}

// setupT is setup, closing the Transport's connections at the end.
func setupT(t *testing.T, fake *fakeAnthropic, opts ...httpbreaker.Option) (anthropic.Client, *httpbreaker.Transport, *attempts) {
	c, tr, a := setup(fake, opts...)
	t.Cleanup(tr.CloseIdleConnections)
	return c, tr, a
}

// TestOverloadedTripsThenARefusalInMicroseconds: 529 Overloaded is a
// failure for DefaultClassifier (a 5xx), so the breaker trips on it; then
// a call is refused in one attempt and recognised through *anthropic.Error.
func TestOverloadedTripsThenARefusalInMicroseconds(t *testing.T) {
	var out bytes.Buffer
	res, err := run(context.Background(), &out)
	require.NoError(t, err)
	t.Log("\n" + out.String())
	require.Equal(t, 2, res.TripCalls, "2 calls of 3 attempts make the 5 failures")
	require.EqualValues(t, minRequests, res.TripHits)
	require.True(t, res.Refused.Refused, "errors.As(err, &*anthropic.Error) && IsRejected(e.Response)")
	require.Equal(t, http.StatusServiceUnavailable, res.Refused.Status)
	require.EqualValues(t, 1, res.Refused.Attempts, "X-Should-Retry: false stops anthropic-sdk-go's retries")
	require.Zero(t, res.Refused.Hits)
	require.Less(t, res.Refused.Took, refusalBound)
}

func TestOverloadedIsAFailure(t *testing.T) {
	req, err := http.NewRequest(http.MethodPost, "https://api.anthropic.com/v1/messages", nil)
	require.NoError(t, err)
	got := httpbreaker.DefaultClassifier(req, &http.Response{StatusCode: statusOverloaded, Request: req}, nil)
	require.Equal(t, httpbreaker.OutcomeFailure, got)
}

// TestRealFailuresAreStillRetried: the recipe keeps anthropic-sdk-go's
// own retries of the dependency's failures.
func TestRealFailuresAreStillRetried(t *testing.T) {
	fake := newFake(t)
	c, tr, a := setupT(t, fake, httpbreaker.WithMinRequests(100))
	fake.set(answerOverloaded)
	_, err := c.Messages.New(context.Background(), params)
	var e *anthropic.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, statusOverloaded, e.StatusCode)
	require.False(t, isRefused(err))
	require.EqualValues(t, sdkAttempts, fake.hits.Load())
	require.EqualValues(t, sdkAttempts, a.n.Load())
	require.EqualValues(t, sdkAttempts, tr.Snapshot()[0].Failures, "each 529 a failure")
}

// TestSustained429sTrip: 429s with retry-after-ms, which
// anthropic-sdk-go retries after the wait asked, trip the breaker only
// once they have lasted ThrottleSustain; then a call is refused at once.
func TestSustained429sTrip(t *testing.T) {
	const sustain = 200 * time.Millisecond
	fake := newFake(t)
	c, tr, a := setupT(t, fake, httpbreaker.WithMinRequests(minRequests), httpbreaker.WithThrottleSustain(sustain))
	fake.set(answerThrottled)
	ctx := context.Background()
	start := time.Now()
	calls := 0
	for tr.State(fake.key()) != httpbreaker.StateOpen {
		require.Less(t, calls, 2000, "429s for %s did not trip", time.Since(start))
		_, err := c.Messages.New(ctx, params)
		var e *anthropic.Error
		require.ErrorAs(t, err, &e)
		if !isRefused(err) {
			require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
		}
		calls++
	}
	require.GreaterOrEqual(t, time.Since(start), sustain, "a burst shorter than ThrottleSustain never trips")
	t.Logf("sustained 429s tripped after %d calls, %d attempts, %s", calls, a.n.Load(), time.Since(start).Round(time.Millisecond))

	r := refuse(ctx, c, fake, a)
	t.Logf("refused call after the 429 trip: %s", r.Took)
	require.True(t, r.Refused)
	require.EqualValues(t, 1, r.Attempts)
	require.Zero(t, r.Hits)
	require.Less(t, r.Took, refusalBound)
}

// TestCutStreamIsAFailureUnderBodyErrors: a stream whose connection drops
// after the 200 and message_start is a failure under WithBodyErrors, and
// a success without it (the status said all was well).
func TestCutStreamIsAFailureUnderBodyErrors(t *testing.T) {
	for _, bodyErrors := range []bool{true, false} {
		fake := newFake(t)
		opts := []httpbreaker.Option{httpbreaker.WithMinRequests(minRequests)}
		if bodyErrors {
			opts = append(opts, httpbreaker.WithBodyErrors())
		}
		c, tr, _ := setupT(t, fake, opts...)
		fake.set(answerCutStream)
		for range minRequests {
			events := readStream(t, c)
			require.Equal(t, 1, events)
		}
		require.EqualValues(t, minRequests, fake.hits.Load(), "a 200 stream is never retried")
		st := tr.Snapshot()
		require.Len(t, st, 1)
		if bodyErrors {
			require.Equal(t, httpbreaker.StateOpen, st[0].State, "WithBodyErrors: %+v", st[0])
		} else {
			require.Equal(t, httpbreaker.StateClosed, st[0].State)
			require.Zero(t, st[0].Failures)
		}
	}
}

// TestInBandOverloadedEventIsInvisible: a 200 stream that ends with an
// overloaded_error event is a success for the breaker, even under
// WithBodyErrors: the body ended cleanly, and the breaker reads no
// body. The caller sees the error; the breaker never trips on it.
func TestInBandOverloadedEventIsInvisible(t *testing.T) {
	fake := newFake(t)
	c, tr, _ := setupT(t, fake, httpbreaker.WithMinRequests(minRequests), httpbreaker.WithBodyErrors())
	fake.set(answerStreamErr)
	for range 2 * minRequests {
		stream := c.Messages.NewStreaming(context.Background(), params)
		for stream.Next() {
		}
		var e *anthropic.Error
		require.ErrorAs(t, stream.Err(), &e, "the caller sees the in-band error")
		require.NoError(t, stream.Close())
	}
	st := tr.Snapshot()
	require.Len(t, st, 1)
	require.Equal(t, httpbreaker.StateClosed, st[0].State)
	require.Zero(t, st[0].Failures)
	require.EqualValues(t, 2*minRequests, st[0].Requests)
}

// readStream reads one streamed message to its end and returns how many
// events it had; the stream must end in an error.
func readStream(t *testing.T, c anthropic.Client) int {
	t.Helper()
	stream := c.Messages.NewStreaming(context.Background(), params)
	events := 0
	for stream.Next() {
		events++
	}
	require.Error(t, stream.Err(), "the cut reaches the caller")
	require.NoError(t, stream.Close())
	return events
}

func TestIsRefusedIsFalseForOtherErrors(t *testing.T) {
	require.False(t, isRefused(nil))
	require.False(t, isRefused(errors.New("connection reset")))
	require.False(t, isRefused(&anthropic.Error{StatusCode: http.StatusServiceUnavailable}))
}
