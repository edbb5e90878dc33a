package retrybudget

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/httpbreaker/httpbreaker"
	"github.com/stretchr/testify/require"
)

// sdk is one real client under test, at its default retry settings.
type sdk struct {
	name string
	// opts are the breaker options the recipe for this SDK adds.
	opts []httpbreaker.Option
	// client returns one logical call of the SDK, whose attempts go
	// through tr to the dependency at baseURL.
	client func(t *testing.T, tr http.RoundTripper, baseURL string) func(context.Context) error
	// labelled: the SDK numbers its attempts in a header, so the
	// dependency tells its retries from its first attempts.
	labelled bool
}

// sdks are the three clients, each with its default number of attempts:
// go-retryablehttp 5 (RetryMax 4), DynamoDB 4 (aws-sdk-go-v2 gives
// DynamoDB one more than its usual 3), openai-go 3 (MaxRetries 2).
var sdks = []sdk{
	{
		name: "go-retryablehttp",
		// A refusal as an error: the call fails, as the tables count it.
		opts: []httpbreaker.Option{httpbreaker.WithRejectAsError()},
		client: func(t *testing.T, tr http.RoundTripper, baseURL string) func(context.Context) error {
			c := NewRetryableClient(tr)
			require.Equal(t, 4, c.RetryMax, "the default")
			c.Logger = nil
			// Shorter waits than the defaults (1s to 30s), for a fast
			// test; the number of retries stays the default.
			c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 4*time.Millisecond
			return func(ctx context.Context) error {
				req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/items/1", nil)
				if err != nil {
					return err
				}
				resp, err := c.Do(req)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.Body.Close()
			}
		},
	},
	{
		name: "aws-sdk-go-v2 DynamoDB",
		client: func(t *testing.T, tr http.RoundTripper, baseURL string) func(context.Context) error {
			// The default retryer and its backoff (25 ms base for
			// DynamoDB) are kept as they are.
			c := NewDynamoDB(tr, baseURL, StaticCredentials())
			require.Equal(t, 4, c.Options().Retryer.MaxAttempts(), "the default")
			return func(ctx context.Context) error {
				_, err := c.GetItem(ctx, &dynamodb.GetItemInput{
					TableName: aws.String("widgets"),
					Key:       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}},
				})
				return err
			}
		},
		labelled: true,
	},
	{
		name: "openai-go",
		client: func(t *testing.T, tr http.RoundTripper, baseURL string) func(context.Context) error {
			// Its default MaxRetries (2); the dependency's retry-after-ms:
			// 1 sets its wait, as OpenAI's API does.
			c := NewOpenAI(tr, baseURL+"/v1/", "sk-loopback-fake")
			return func(ctx context.Context) error {
				_, err := c.Models.Get(ctx, "gpt-loopback")
				return err
			}
		},
		labelled: true,
	},
}

// result is what one run measured.
type result struct {
	calls, failedCalls int // logical calls made, and those that returned an error
	// Of the failed calls, those aws-sdk-go-v2 did not retry because its
	// own retry quota (500 tokens, 14 a retry, refunded on success) was
	// spent.
	quotaSpent int

	// At the dependency.
	arrivals, failed              int64 // requests received, and answered 500
	firsts, retries, unlabelled   int64 // by the SDK's attempt header
	admitted, refused, transition int64 // at the breaker: calls admitted, retries refused by the budget, transitions

	state   httpbreaker.State // the breaker's state at the end
	elapsed time.Duration
}

// retriesReached is the retries that reached the dependency: told by
// the dependency's count of first attempts where the SDK labels them, and
// else by the client side's count of logical calls (each made one first
// attempt).
func (r result) retriesReached(labelled bool) int64 {
	if labelled {
		return r.retries
	}
	return r.arrivals - int64(r.calls)
}

// counter is an Observer that counts what the breaker did.
type counter struct {
	admitted, refused, other, transitions atomic.Int64
}

func (c *counter) Transition(httpbreaker.Transition) { c.transitions.Add(1) }

func (c *counter) Call(_ context.Context, call httpbreaker.Call) {
	switch call.Rejected {
	case "":
		c.admitted.Add(1)
	case "retry_budget":
		c.refused.Add(1)
	default:
		c.other.Add(1)
	}
}

// run makes calls logical calls of s, one at a time, through a breaker
// made with a failure rate of 0.5 and budget, against a new dependency
// that fails request n when fails(n).
func run(t *testing.T, s sdk, fails func(int64) bool, calls int, budget ...httpbreaker.Option) result {
	t.Helper()
	dep := newDependency(t, fails)
	obs := &counter{}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	opts := append([]httpbreaker.Option{httpbreaker.WithFailureRate(0.5), httpbreaker.WithObserver(obs)}, s.opts...)
	tr := httpbreaker.New(base, append(opts, budget...)...)
	call := s.client(t, tr, dep.URL())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := result{calls: calls}
	start := time.Now()
	for range calls {
		if err := call(ctx); err != nil {
			r.failedCalls++
			if errors.As(err, new(ratelimit.QuotaExceededError)) {
				r.quotaSpent++
			}
		}
	}
	r.elapsed = time.Since(start)
	require.NoError(t, ctx.Err(), "the run outlived its deadline")

	r.arrivals, r.failed = dep.arrivals.Load(), dep.failed.Load()
	r.firsts, r.retries, r.unlabelled = dep.firsts.Load(), dep.retries.Load(), dep.unlabelled.Load()
	r.admitted, r.refused, r.transition = obs.admitted.Load(), obs.refused.Load(), obs.transitions.Load()
	require.Zero(t, obs.other.Load(), "no refusal but the budget's")
	st := tr.Snapshot()
	require.Len(t, st, 1, "one dependency, one breaker")
	r.state = st[0].State

	// The dependency and the breaker agree, and so does the SDK's header.
	require.Equal(t, r.arrivals, r.admitted, "every admitted attempt reached the dependency, and nothing else did")
	if s.labelled {
		require.Zero(t, r.unlabelled)
		require.EqualValues(t, calls, r.firsts, "one first attempt per logical call, labelled as such")
	} else {
		require.Equal(t, r.arrivals, r.unlabelled)
	}
	return r
}

// Under NewRetryableClient a retry the budget refuses ends the call:
// go-retryablehttp does not retry the refusal (CheckRetry), so the
// breaker sees two attempts, the first and its refused retry, and the
// caller gets the budget's error.
func TestRetryableRecipeDoesNotRetryARefusal(t *testing.T) {
	dep := newDependency(t, func(int64) bool { return true })
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	tr := httpbreaker.New(base, httpbreaker.WithRetryBudget(0.0001, 0), httpbreaker.WithRejectAsError(), httpbreaker.WithMinRequests(1000))
	var attempts atomic.Int64
	c := NewRetryableClient(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		attempts.Add(1)
		return tr.RoundTrip(r)
	}))
	c.Logger = nil
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 4*time.Millisecond
	req, err := retryablehttp.NewRequestWithContext(context.Background(), http.MethodGet, dep.URL()+"/items/1", nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, httpbreaker.ErrRetryBudget)
	require.EqualValues(t, 1, dep.arrivals.Load(), "only the first attempt reached the dependency")
	require.EqualValues(t, 2, attempts.Load(), "the first attempt and its refused retry, not retried")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
