package main

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// refusalBound is the most a refused call may take: generous for a
// loaded machine; the figure measured is printed.
const refusalBound = 50 * time.Millisecond

// newFake starts a fake OpenAI for the test.
func newFake(t *testing.T) *fakeOpenAI {
	fake := newFakeOpenAI()
	t.Cleanup(fake.Close)
	return fake
}

// setupT is setup, closing the Transport's connections at the end.
func setupT(t *testing.T, fake *fakeOpenAI, opts ...httpbreaker.Option) (openai.Client, *httpbreaker.Transport, *attempts) {
	c, tr, a := setup(fake, opts...)
	t.Cleanup(tr.CloseIdleConnections)
	return c, tr, a
}

func TestTripThenARefusalInMicroseconds(t *testing.T) {
	var out bytes.Buffer
	res, err := run(context.Background(), &out)
	require.NoError(t, err)
	t.Log("\n" + out.String())
	require.Equal(t, 2, res.TripCalls, "2 calls of 3 attempts make the 5 failures")
	require.EqualValues(t, minRequests, res.TripHits)
	require.True(t, res.Refused.Refused, "errors.As(err, &*openai.Error) && IsRejected(e.Response)")
	require.Equal(t, 503, res.Refused.Status)
	require.EqualValues(t, 1, res.Refused.Attempts, "X-Should-Retry: false stops openai-go's retries")
	require.Zero(t, res.Refused.Hits)
	require.Less(t, res.Refused.Took, refusalBound)
}

// TestRealFailuresAreStillRetried: the recipe keeps openai-go's own
// retries of the dependency's failures.
func TestRealFailuresAreStillRetried(t *testing.T) {
	fake := newFake(t)
	c, _, a := setupT(t, fake, httpbreaker.WithMinRequests(100))
	fake.set(answerBroken)
	_, err := c.Chat.Completions.New(context.Background(), params)
	var e *openai.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 500, e.StatusCode)
	require.False(t, isRefused(err))
	require.EqualValues(t, sdkAttempts, fake.hits.Load())
	require.EqualValues(t, sdkAttempts, a.n.Load())
}

// TestSustained429sTrip: 429s with retry-after-ms, which openai-go
// retries after the wait asked, trip the breaker only once they have
// lasted ThrottleSustain; then a call is refused at once.
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
		_, err := c.Chat.Completions.New(ctx, params)
		var e *openai.Error
		require.ErrorAs(t, err, &e)
		if !isRefused(err) {
			require.Equal(t, 429, e.StatusCode)
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
// after the 200 and a first chunk is a failure under WithBodyErrors, and
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
			stream := c.Chat.Completions.NewStreaming(context.Background(), params)
			chunks := 0
			for stream.Next() {
				chunks++
			}
			require.Error(t, stream.Err(), "the cut reaches the caller")
			require.Equal(t, 1, chunks)
			require.NoError(t, stream.Close())
		}
		require.EqualValues(t, minRequests, fake.hits.Load(), "a 200 stream is never retried")
		st := tr.Snapshot()
		require.Len(t, st, 1)
		if bodyErrors {
			require.Equal(t, httpbreaker.StateOpen, st[0].State, "WithBodyErrors: %+v", st[0])
		} else {
			require.Equal(t, httpbreaker.StateClosed, st[0].State)
			require.Zero(t, st[0].Failures)
			require.EqualValues(t, minRequests, st[0].Requests)
		}
	}
}

func TestIsRefusedIsFalseForOtherErrors(t *testing.T) {
	require.False(t, isRefused(nil))
	require.False(t, isRefused(errors.New("connection reset")))
	require.False(t, isRefused(&openai.Error{StatusCode: 503}))
}
