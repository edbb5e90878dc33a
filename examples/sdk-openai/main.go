// Command sdk-openai puts an httpbreaker Transport under an unmodified
// openai-go client, at its default retry settings, and shows what a
// caller sees: the trip, and a refused call (one attempt, microseconds,
// recognised through *openai.Error); its tests add sustained 429s and a
// stream cut mid-body under WithBodyErrors.
//
// It talks only to a fake OpenAI API on 127.0.0.1 (an httptest server)
// with a fake key. Run it with: go run . (from examples/sdk-openai).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sdk-openai:", err)
		os.Exit(1)
	}
}

// minRequests is the breaker's WithMinRequests, small so that the
// example trips fast.
const minRequests = 5

// sdkAttempts is what openai-go makes of one call by default: the first
// attempt and 2 retries.
const sdkAttempts = 3

// params is the chat completion every call asks for.
var params = openai.ChatCompletionNewParams{
	Model:    "gpt-fake",
	Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
}

// attempts counts the attempts an openai-go client makes, as a
// middleware: once per attempt, retries included.
type attempts struct{ n atomic.Int64 }

func (a *attempts) option() option.RequestOption {
	return option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		a.n.Add(1)
		return next(req)
	})
}

// setup returns a client of fake through a new Transport made with opts,
// counting its attempts.
func setup(fake *fakeOpenAI, opts ...httpbreaker.Option) (openai.Client, *httpbreaker.Transport, *attempts) {
	tr := httpbreaker.New(nil, opts...)
	a := &attempts{}
	c := newClient(tr, option.WithBaseURL(fake.baseURL()), option.WithAPIKey(apiKey), a.option())
	return c, tr, a
}

// Result is what one run observed; the test asserts on it.
type Result struct {
	// TripCalls is how many calls to a broken API it took to open the
	// breaker, TripHits how many requests reached the API meanwhile.
	TripCalls int
	TripHits  int64
	// Refused is one call on the open breaker: how long it took, the
	// attempts openai-go made, the requests that reached the API, and
	// whether the caller could tell it was refused.
	Refused Refusal
}

// Refusal is one call on an open breaker.
type Refusal struct {
	Took     time.Duration
	Attempts int64
	Hits     int64
	Refused  bool
	Status   int
}

// run trips the breaker of a broken fake API with openai-go's default
// retries, then makes one call on the open breaker, printing to w.
func run(ctx context.Context, w io.Writer) (*Result, error) {
	fake := newFakeOpenAI()
	defer fake.Close()
	c, tr, a := setup(fake, httpbreaker.WithMinRequests(minRequests))
	defer tr.CloseIdleConnections()

	res := &Result{}
	fake.set(answerBroken)
	for tr.State(fake.key()) != httpbreaker.StateOpen {
		if res.TripCalls == minRequests {
			return nil, fmt.Errorf("breaker still %s after %d calls", tr.State(fake.key()), res.TripCalls)
		}
		// The call that trips the breaker may end refused: the breaker
		// opens under one of its retries, which is then refused.
		if _, err := c.Chat.Completions.New(ctx, params); err == nil {
			return nil, fmt.Errorf("call to a broken API succeeded")
		}
		res.TripCalls++
	}
	res.TripHits = fake.hits.Load()
	fmt.Fprintf(w, "breaker open after %d calls (%d requests reached the API: openai-go retries a 500 twice)\n", res.TripCalls, res.TripHits)

	res.Refused = refuse(ctx, c, fake, a)
	fmt.Fprintf(w, "a call on the open breaker: %s, %d attempt, %d requests reached the API, refused: %t (HTTP %d)\n",
		res.Refused.Took, res.Refused.Attempts, res.Refused.Hits, res.Refused.Refused, res.Refused.Status)
	return res, nil
}

// refuse makes one call with c, whose breaker for fake is open, and
// measures it.
func refuse(ctx context.Context, c openai.Client, fake *fakeOpenAI, a *attempts) Refusal {
	hits, n := fake.hits.Load(), a.n.Load()
	start := time.Now()
	_, err := c.Chat.Completions.New(ctx, params)
	r := Refusal{Took: time.Since(start), Attempts: a.n.Load() - n, Hits: fake.hits.Load() - hits, Refused: isRefused(err)}
	var e *openai.Error
	if r.Refused && errors.As(err, &e) {
		r.Status = e.StatusCode
	}
	return r
}
