package matrix

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-github/v93/github"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/httpbreaker/httpbreaker"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v85"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// refusalBound is the most one refused call may take: generous for a
// loaded 2-core machine; the figures measured are logged.
const refusalBound = 50 * time.Millisecond

// measuredCalls is how many refused calls each client makes after its
// first (which may pay a client's one-time set-up: stripe-go runs uname
// for its user agent).
const measuredCalls = 5

// counter is a RoundTripper in front of the breaker: it counts the
// attempts an SDK makes, retries included.
type counter struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(req)
}

// rig is one client's setting: a server that counts what reaches it, a
// Transport whose breaker for that server is open, and the attempts
// into that Transport.
type rig struct {
	srv      *httptest.Server
	hits     atomic.Int64
	tr       *httpbreaker.Transport
	attempts *counter
}

// newRig starts a server answering 500 (never reached once the breaker
// is open) and a Transport made with opts (a func of the server's
// breaker key, for a policy), whose breaker for the server is open.
func newRig(t *testing.T, opts func(key string) []httpbreaker.Option) *rig {
	r := &rig{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.hits.Add(1)
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	t.Cleanup(r.srv.Close)
	key := r.srv.Listener.Addr().String()
	r.tr = httpbreaker.New(nil, opts(key)...)
	t.Cleanup(r.tr.CloseIdleConnections)
	r.tr.Trip(key, time.Hour)
	r.attempts = &counter{next: r.tr}
	return r
}

func (r *rig) client() *http.Client { return &http.Client{Transport: r.attempts} }

func noOptions(string) []httpbreaker.Option { return nil }

// sdk is one client of the matrix: opts and call hold its recipe; call
// builds the client (so the figures include that), makes one call and
// reports whether the caller can tell it was refused.
type sdk struct {
	name   string
	recipe string
	opts   func(key string) []httpbreaker.Option
	call   func(ctx context.Context, r *rig) (refused bool)
}

var matrix = []sdk{
	{
		name:   "go-github",
		recipe: "http.Client with the Transport; IsRejected(ErrorResponse.Response)",
		opts:   noOptions,
		call: func(ctx context.Context, r *rig) bool {
			c, err := github.NewClient(github.WithHTTPClient(r.client()), github.WithEnterpriseURLs(r.srv.URL+"/", r.srv.URL+"/"))
			if err != nil {
				return false
			}
			_, _, err = c.Users.Get(ctx, "octocat")
			var ge *github.ErrorResponse
			return errors.As(err, &ge) && httpbreaker.IsRejected(ge.Response)
		},
	},
	{
		name:   "aws-sdk-go-v2 (DynamoDB)",
		recipe: "WithRejectAsError; the default retryer",
		opts:   func(string) []httpbreaker.Option { return []httpbreaker.Option{httpbreaker.WithRejectAsError()} },
		call: func(ctx context.Context, r *rig) bool {
			c := dynamodb.New(dynamodb.Options{
				Region:       "us-east-1",
				Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "fake-secret", ""),
				BaseEndpoint: aws.String(r.srv.URL),
				HTTPClient:   r.client(),
			})
			_, err := c.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: aws.String("widgets"),
				Key:       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}},
			})
			return errors.Is(err, httpbreaker.ErrOpen)
		},
	},
	{
		name:   "stripe-go",
		recipe: "WithPolicy(api host, WithFallback(JSONRejection))",
		opts: func(key string) []httpbreaker.Option {
			return []httpbreaker.Option{httpbreaker.WithPolicy(key, httpbreaker.WithFallback(httpbreaker.JSONRejection))}
		},
		call: func(ctx context.Context, r *rig) bool {
			sc := stripe.NewClient("sk_test_fake", stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
				HTTPClient:    r.client(),
				URL:           stripe.String(r.srv.URL),
				LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
			})))
			_, err := sc.V1Customers.Retrieve(ctx, "cus_1", nil)
			var se *stripe.Error
			return errors.As(err, &se) && se.HTTPStatusCode == http.StatusServiceUnavailable && se.Code == httpbreaker.JSONRejectionCode
		},
	},
	{
		name:   "openai-go",
		recipe: "http.Client with the Transport; IsRejected(Error.Response)",
		opts:   noOptions,
		call: func(ctx context.Context, r *rig) bool {
			c := openai.NewClient(openaioption.WithHTTPClient(r.client()), openaioption.WithBaseURL(r.srv.URL+"/v1/"), openaioption.WithAPIKey("sk-fake"))
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    "gpt-fake",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			})
			var e *openai.Error
			return errors.As(err, &e) && httpbreaker.IsRejected(e.Response)
		},
	},
	{
		name:   "anthropic-sdk-go",
		recipe: "http.Client with the Transport; IsRejected(Error.Response)",
		opts:   noOptions,
		call: func(ctx context.Context, r *rig) bool {
			c := anthropic.NewClient(anthropicoption.WithHTTPClient(r.client()), anthropicoption.WithBaseURL(r.srv.URL+"/"), anthropicoption.WithAPIKey("sk-ant-fake"))
			_, err := c.Messages.New(ctx, anthropic.MessageNewParams{
				Model:     "claude-fake",
				MaxTokens: 16,
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
			})
			var e *anthropic.Error
			return errors.As(err, &e) && httpbreaker.IsRejected(e.Response)
		},
	},
	{
		name:   "go-retryablehttp",
		recipe: "CheckRetry = httpbreaker.CheckRetry(DefaultRetryPolicy)",
		opts:   noOptions,
		call: func(ctx context.Context, r *rig) bool {
			rc := retryablehttp.NewClient()
			rc.Logger = nil
			rc.HTTPClient = r.client()
			rc.CheckRetry = httpbreaker.CheckRetry(retryablehttp.DefaultRetryPolicy)
			req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, r.srv.URL+"/v1/thing", nil)
			if err != nil {
				return false
			}
			resp, err := rc.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return httpbreaker.IsRejected(resp)
		},
	},
}

// TestEverySDKRefusesAtOnce is the matrix: for each client at its default
// retry settings plus its recipe, on an open breaker, every call is
// refused in under refusalBound, with at most one attempt into the
// breaker and none reaching the server, and the caller can tell.
func TestEverySDKRefusesAtOnce(t *testing.T) {
	for _, s := range matrix {
		t.Run(s.name, func(t *testing.T) {
			r := newRig(t, s.opts)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			// The first call: may pay the client's one-time set-up.
			start := time.Now()
			require.True(t, s.call(ctx, r), "the first refusal is recognised")
			first := time.Since(start)
			require.LessOrEqual(t, r.attempts.n.Load(), int64(1), "attempts into the breaker")

			took := make([]time.Duration, 0, measuredCalls)
			for i := range measuredCalls {
				before := r.attempts.n.Load()
				start := time.Now()
				refused := s.call(ctx, r)
				d := time.Since(start)
				took = append(took, d)
				require.True(t, refused, "call %d: the caller can tell it was refused", i+1)
				require.LessOrEqual(t, r.attempts.n.Load()-before, int64(1), "call %d: attempts into the breaker", i+1)
				require.Less(t, d, refusalBound, "call %d", i+1)
			}
			require.Zero(t, r.hits.Load(), "requests that reached the server")
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			t.Logf("%-25s recipe: %-55s first call %9s; next %d calls: min %9s, median %9s, max %9s; %d attempts in all",
				s.name, s.recipe, first.Round(time.Microsecond), measuredCalls,
				took[0].Round(time.Microsecond), took[measuredCalls/2].Round(time.Microsecond), took[measuredCalls-1].Round(time.Microsecond),
				r.attempts.n.Load())
		})
	}
}
