// Command sdk-aws puts one httpbreaker Transport under unmodified AWS SDK
// for Go v2 clients (S3 and DynamoDB) and measures what a caller sees: how
// a rejection surfaces, what the SDK's retries make of it, which breaker
// each request uses, and what S3's throttling does to a breaker.
//
// It talks only to a fake S3 and DynamoDB on 127.0.0.1, served over TLS
// under the real AWS host names with a certificate from a CA of its own,
// which the SDK trusts through AWS_CA_BUNDLE (set by the program in its own
// process). The SDK resolves endpoints as in production; its transport
// dials the fake whatever the host. The program:
//
//  1. shows that config.WithHTTPClient with a plain *http.Client fails
//     when a CA bundle is configured, and that loadConfig (recipe.go)
//     does not;
//  2. breaks one S3 bucket (500 InternalError) until its breaker trips,
//     while another bucket and DynamoDB keep working: HostKey gives one
//     breaker per bucket and one per DynamoDB account endpoint;
//  3. measures a rejected call on an open breaker, in both rejection modes,
//     with each service's own default retryer, which stops at the first
//     rejection error (*httpbreaker.RejectedError answers RetryableError
//     false) but retries the synthetic 503;
//  4. counts DynamoDB's attempts under config.WithRetryer and under its
//     own default retryer, which the recipe keeps;
//  5. sends a burst of calls that S3 answers with 503 SlowDown, under
//     DefaultClassifier and under s3Classifier.
//
// Run it with: go run . (from examples/sdk-aws).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/httpbreaker/httpbreaker"
)

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "sdk-aws:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	fake, err := newFakeAWS()
	if err != nil {
		return err
	}
	defer fake.Close()
	dir, err := os.MkdirTemp("", "sdk-aws-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ca, err := fake.writeCA(dir)
	if err != nil {
		return err
	}
	// This process only: the SDK reads nothing of the machine's AWS setup.
	if err := fakeEnv(func(k, v string) { os.Setenv(k, v) }, dir, ca); err != nil {
		return err
	}
	_, err = run(context.Background(), os.Stdout, fake)
	return err
}

// Breaker settings, small so that the example trips fast.
const (
	minRequests = 4
	openTimeout = 30 * time.Second
)

// Buckets of the fake S3 the program uses.
const (
	bucketPhotos = "photos" // broken: 500 InternalError
	bucketLogs   = "logs"   // healthy
	bucketBurst  = "burst"  // throttled: 503 SlowDown
)

// Services, as the program names them.
const (
	svcS3       = "S3"
	svcDynamoDB = "DynamoDB"
)

// costCalls is how many rejected calls each row of the cost table makes.
const costCalls = 5

// Kinds of outcome that describe reports, as prefixes of its text.
const (
	kindOK       = "ok"
	kindRejected = "rejected by breaker"
	kindAWSError = "AWS error"
	kindOther    = "other error"
)

// breakerOptions are the options of the program's Transports: S3's
// throttling read as such, small MinRequests, and the rejection mode.
func breakerOptions(asError bool) []httpbreaker.Option {
	opts := []httpbreaker.Option{
		httpbreaker.WithClassifier(s3Classifier),
		httpbreaker.WithMinRequests(minRequests),
		httpbreaker.WithOpenTimeout(openTimeout),
	}
	if asError {
		opts = append(opts, httpbreaker.WithRejectAsError())
	}
	return opts
}

// loadFakeConfig is loadConfig against the fake: the SDK's own
// BuildableClient, told to dial the fake, is the one it builds on (and
// takes the CA bundle).
func loadFakeConfig(ctx context.Context, fake *fakeAWS, opts []httpbreaker.Option, load ...func(*config.LoadOptions) error) (aws.Config, *httpbreaker.Transport, error) {
	load = append([]func(*config.LoadOptions) error{
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(fake.dialHere)),
	}, load...)
	return loadConfig(ctx, opts, load...)
}

// clients are an S3 and a DynamoDB client made from one config, each
// counting its attempts.
type clients struct {
	s3          *s3.Client
	ddb         *dynamodb.Client
	s3Attempts  *attemptCounter
	ddbAttempts *attemptCounter
}

// newClients makes the clients, each with its service's own default
// retryer. more is applied to both clients' retryer and
// RetryMaxAttempts after that.
func newClients(cfg aws.Config, more ...func(*aws.Retryer, *int)) clients {
	c := clients{
		s3Attempts:  &attemptCounter{HTTPClient: cfg.HTTPClient},
		ddbAttempts: &attemptCounter{HTTPClient: cfg.HTTPClient},
	}
	s3Extra := func(o *s3.Options) {
		for _, f := range more {
			f(&o.Retryer, &o.RetryMaxAttempts)
		}
		o.HTTPClient = c.s3Attempts
	}
	ddbExtra := func(o *dynamodb.Options) {
		for _, f := range more {
			f(&o.Retryer, &o.RetryMaxAttempts)
		}
		o.HTTPClient = c.ddbAttempts
	}
	c.s3 = s3.NewFromConfig(cfg, s3Extra)
	c.ddb = dynamodb.NewFromConfig(cfg, ddbExtra)
	return c
}

// getObject reads one object of bucket to its end.
func getObject(ctx context.Context, c *s3.Client, bucket string) error {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("a.txt")})
	if err != nil {
		return err
	}
	defer out.Body.Close()
	_, err = io.Copy(io.Discard, out.Body)
	return err
}

// getItem reads one item of the widgets table.
func getItem(ctx context.Context, c *dynamodb.Client) error {
	_, err := c.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("widgets"),
		Key:       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}},
	})
	return err
}

// describe tells what an SDK call returned, in the order a caller should
// check: a rejection (either mode, see isRejection), then AWS's own error,
// then anything else.
func describe(err error) string {
	switch {
	case err == nil:
		return kindOK
	case errors.Is(err, httpbreaker.ErrOpen):
		return kindRejected + " (error)"
	case isRejection(err):
		return kindRejected + " (synthetic 503)"
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		status := 0
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			status = re.HTTPStatusCode()
		}
		return fmt.Sprintf("%s %d %s", kindAWSError, status, ae.ErrorCode())
	}
	return kindOther + ": " + err.Error()
}

// Result is what one run observed; the test asserts on it.
type Result struct {
	// PlainClientErr is LoadDefaultConfig's error for a plain *http.Client
	// while AWS_CA_BUNDLE is set ("" if it did not fail).
	PlainClientErr string
	// Photos describes each GetObject call on the broken bucket, in
	// order, and PhotosAttempts the attempts the SDK made for each.
	Photos         []string
	PhotosAttempts []int
	// Logs and Item are what the healthy bucket and DynamoDB returned
	// once the broken bucket's breaker was open.
	Logs, Item string
	// Hits counts the requests that reached the fake, by host.
	Hits map[string]int
	// States is the state of the breakers of the three hosts.
	States map[string]string
	// Costs are the rows of the rejected-call table.
	Costs []Cost
	// DynamoDBAttempts counts the attempts of one GetItem against a
	// DynamoDB answering 500: under config.WithRetryer and per client.
	DynamoDBAttempts map[string]int
	// Burst is what a burst of S3 SlowDowns did, by classifier.
	Burst map[string]BurstResult
}

// run runs the whole scenario against fake, printing what happens to w.
// The AWS_* environment must be fakeEnv's, with the fake's CA as
// AWS_CA_BUNDLE.
func run(ctx context.Context, w io.Writer, fake *fakeAWS) (*Result, error) {
	res := &Result{}
	fmt.Fprintln(w, "== AWS SDK v2 through httpbreaker (WithRejectAsError, s3Classifier, each service's own default retryer)")

	// 1. The CA bundle.
	plain := &http.Client{Transport: httpbreaker.New(nil)}
	if _, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(plain)); err != nil {
		res.PlainClientErr = err.Error()
	}
	fmt.Fprintf(w, "LoadDefaultConfig(WithHTTPClient(*http.Client)) with AWS_CA_BUNDLE set: %s\n", orOK(res.PlainClientErr))

	cfg, tr, err := loadFakeConfig(ctx, fake, breakerOptions(true))
	if err != nil {
		return nil, err
	}
	defer tr.CloseIdleConnections()
	fmt.Fprintln(w, "loadConfig with AWS_CA_BUNDLE set: ok (the SDK's transport, with the bundle, under the breaker)")

	// 2. One broken bucket.
	c := newClients(cfg)
	fake.breakBucket(bucketPhotos, codeInternalError)
	defer fake.breakBucket(bucketPhotos, "")
	for i := 1; i <= 3; i++ {
		d := describe(getObject(ctx, c.s3, bucketPhotos))
		n := c.s3Attempts.take()
		res.Photos = append(res.Photos, d)
		res.PhotosAttempts = append(res.PhotosAttempts, n)
		fmt.Fprintf(w, "S3 GetObject %s call %d: %s (%s)\n", bucketPhotos, i, d, plural(n, "attempt"))
	}
	res.Logs = describe(getObject(ctx, c.s3, bucketLogs))
	fmt.Fprintf(w, "S3 GetObject %s: %s\n", bucketLogs, res.Logs)
	res.Item = describe(getItem(ctx, c.ddb))
	fmt.Fprintf(w, "DynamoDB GetItem: %s\n", res.Item)

	res.Hits = fake.counts()
	fmt.Fprintf(w, "requests that reached AWS: %s=%d %s=%d %s=%d\n",
		bucketHost(bucketPhotos), res.Hits[bucketHost(bucketPhotos)],
		bucketHost(bucketLogs), res.Hits[bucketHost(bucketLogs)],
		ddbAccountHost, res.Hits[ddbAccountHost])
	res.States = map[string]string{}
	for _, key := range []string{bucketHost(bucketPhotos), bucketHost(bucketLogs), ddbAccountHost} {
		res.States[key] = tr.State(key).String()
		fmt.Fprintf(w, "breaker %q: %s\n", key, res.States[key])
	}

	// 3. What a rejected call costs.
	fmt.Fprintf(w, "\n== a call on an open breaker (%d calls per row)\n", costCalls)
	fmt.Fprintf(w, "%-8s  %-17s  %-18s  %-13s  %-9s  %-24s  %-28s  %s\n", "service", "mode", "retries", "attempts/call", "mean", "recognised by", "the SDK's error", "SDK WARN logs")
	for _, asError := range []bool{true, false} {
		for _, svc := range []string{svcS3, svcDynamoDB} {
			cost, err := measureRejected(ctx, fake, svc, asError, costCalls)
			if err != nil {
				return nil, err
			}
			res.Costs = append(res.Costs, cost)
			fmt.Fprintf(w, "%-8s  %-17s  %-18s  %-13d  %-9s  %-24s  %-28s  %d\n", cost.Service, cost.mode(), "the SDK's own",
				cost.Attempts/cost.Calls, (cost.Total / time.Duration(cost.Calls)).Round(10*time.Microsecond),
				cost.recognisedBy(), cost.SDKError, cost.Warnings)
		}
	}

	// 4. DynamoDB's own retry defaults.
	res.DynamoDBAttempts = map[string]int{}
	fmt.Fprintln(w, "\n== DynamoDB answering 500: attempts of one GetItem")
	for _, how := range []string{retryerConfig, retryerDefault} {
		n, err := dynamoDBAttempts(ctx, fake, how)
		if err != nil {
			return nil, err
		}
		res.DynamoDBAttempts[how] = n
		fmt.Fprintf(w, "%s: %d\n", how, n)
	}

	// 5. S3 throttling.
	res.Burst = map[string]BurstResult{}
	fmt.Fprintf(w, "\n== S3 answering 503 SlowDown to %d calls, one attempt each (MinRequests %d)\n", burstCalls, minRequests)
	for _, name := range []string{classifierDefault, classifierS3} {
		b, err := slowDownBurst(ctx, fake, name, burstCalls)
		if err != nil {
			return nil, err
		}
		res.Burst[name] = b
		fmt.Fprintf(w, "%s: %d reached S3, breaker %s, last call: %s\n", name, b.Reached, b.State, b.Last)
	}
	fmt.Fprintln(w)
	return res, nil
}

// Cost is what costCalls rejected calls cost, for one service, rejection
// mode and retry policy.
type Cost struct {
	Service string
	AsError bool // WithRejectAsError
	Calls   int
	// Attempts is the total number of attempts the SDK made.
	Attempts int
	// Total and Max are the calls' total and longest durations.
	Total, Max time.Duration
	// Reached counts the requests that reached the fake.
	Reached int
	// Desc describes the last call's error.
	Desc string
	// ErrorsIs is errors.Is(err, httpbreaker.ErrOpen) for every call;
	// RawRejected is httpbreaker.IsRejected on the raw response of the
	// *awshttp.ResponseError for every call.
	ErrorsIs, RawRejected bool
	// SDKError is what the SDK made of the last rejection: "transport
	// error", "API error CODE" or "deserialization error".
	SDKError string
	// Warnings counts the WARN lines the SDK logged.
	Warnings int
}

func (c Cost) mode() string {
	if c.AsError {
		return "WithRejectAsError"
	}
	return "synthetic 503"
}

func (c Cost) recognisedBy() string {
	switch {
	case c.ErrorsIs:
		return "errors.Is(err, ErrOpen)"
	case c.RawRejected:
		return "IsRejected(raw response)"
	}
	return c.Desc
}

// measureRejected trips the breaker of svc's host, then makes calls calls
// and measures them.
func measureRejected(ctx context.Context, fake *fakeAWS, svc string, asError bool, calls int) (Cost, error) {
	cost := Cost{Service: svc, AsError: asError, Calls: calls, ErrorsIs: true, RawRejected: true}
	var warnings atomic.Int64
	logger := logging.LoggerFunc(func(c logging.Classification, _ string, _ ...any) {
		if c == logging.Warn {
			warnings.Add(1)
		}
	})
	cfg, tr, err := loadFakeConfig(ctx, fake, breakerOptions(asError), config.WithLogger(logger))
	if err != nil {
		return cost, err
	}
	defer tr.CloseIdleConnections()
	c := newClients(cfg)
	key, call, attempts := bucketHost(bucketLogs), func() error { return getObject(ctx, c.s3, bucketLogs) }, c.s3Attempts
	if svc == svcDynamoDB {
		key, call, attempts = ddbAccountHost, func() error { return getItem(ctx, c.ddb) }, c.ddbAttempts
	}
	tr.Trip(key, openTimeout)
	before := fake.counts()[key]
	for range calls {
		start := time.Now()
		err := call()
		d := time.Since(start)
		cost.Total += d
		cost.Max = max(cost.Max, d)
		cost.Desc = describe(err)
		cost.ErrorsIs = cost.ErrorsIs && errors.Is(err, httpbreaker.ErrOpen)
		var re *awshttp.ResponseError
		cost.RawRejected = cost.RawRejected && errors.As(err, &re) && httpbreaker.IsRejected(re.Response.Response)
		cost.SDKError = sdkErrorKind(err)
	}
	cost.Warnings = int(warnings.Load())
	cost.Attempts = attempts.take()
	cost.Reached = fake.counts()[key] - before
	return cost, nil
}

// How dynamoDBAttempts sets the retryer.
const (
	retryerConfig  = "config.WithRetryer(retry.NewStandard(...))"
	retryerDefault = "each service's own (the default)"
)

// configRetryer is the retryer this README used to recommend, through
// config.WithRetryer: a standard retryer that does not retry ErrOpen. It
// is kept here to measure what it does to DynamoDB: it replaces
// DynamoDB's own retryer (4 attempts, 25ms base backoff) with
// retry.NewStandard's defaults (3 attempts, 50ms).
func configRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.Retryables = append([]retry.IsErrorRetryable{
			retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
				if errors.Is(err, httpbreaker.ErrOpen) {
					return aws.FalseTernary
				}
				return aws.UnknownTernary
			}),
		}, o.Retryables...)
	})
}

// dynamoDBAttempts counts the attempts of one GetItem against a DynamoDB
// that answers 500, with the retryer set as how says. Its breaker has a
// MinRequests too high to trip.
func dynamoDBAttempts(ctx context.Context, fake *fakeAWS, how string) (int, error) {
	opts := []httpbreaker.Option{httpbreaker.WithRejectAsError(), httpbreaker.WithMinRequests(100)}
	var load []func(*config.LoadOptions) error
	if how == retryerConfig {
		load = append(load, config.WithRetryer(configRetryer))
	}
	cfg, tr, err := loadFakeConfig(ctx, fake, opts, load...)
	if err != nil {
		return 0, err
	}
	defer tr.CloseIdleConnections()
	c := newClients(cfg)
	fake.setDynamoDB(http.StatusInternalServerError)
	defer fake.setDynamoDB(http.StatusOK)
	if err := getItem(ctx, c.ddb); !strings.HasPrefix(describe(err), kindAWSError+" 500") {
		return 0, fmt.Errorf("GetItem against a broken DynamoDB: want a 500, got %s", describe(err))
	}
	return c.ddbAttempts.take(), nil
}

// The classifiers slowDownBurst compares.
const (
	classifierDefault = "DefaultClassifier"
	classifierS3      = "s3Classifier"
)

// burstCalls is how many calls slowDownBurst makes.
const burstCalls = 6

// BurstResult is what a burst of calls that S3 throttles did.
type BurstResult struct {
	// Reached counts the requests that reached S3.
	Reached int
	// State is the state of the bucket's breaker afterwards.
	State string
	// Last describes the last call's error.
	Last string
}

// slowDownBurst makes calls GetObject calls, one attempt each, to a bucket
// that S3 answers with 503 SlowDown, under the classifier named.
func slowDownBurst(ctx context.Context, fake *fakeAWS, classifier string, calls int) (BurstResult, error) {
	var res BurstResult
	c := httpbreaker.Classifier(httpbreaker.DefaultClassifier)
	if classifier == classifierS3 {
		c = s3Classifier
	}
	opts := []httpbreaker.Option{
		httpbreaker.WithRejectAsError(),
		httpbreaker.WithClassifier(c),
		httpbreaker.WithMinRequests(minRequests),
		httpbreaker.WithOpenTimeout(openTimeout),
	}
	cfg, tr, err := loadFakeConfig(ctx, fake, opts)
	if err != nil {
		return res, err
	}
	defer tr.CloseIdleConnections()
	// One attempt per call: the SDK retries SlowDown itself, as a
	// throttling error with a 1s base backoff, which would only slow the
	// example down.
	cl := newClients(cfg, func(_ *aws.Retryer, maxAttempts *int) { *maxAttempts = 1 })
	fake.breakBucket(bucketBurst, codeSlowDown)
	defer fake.breakBucket(bucketBurst, "")
	key := bucketHost(bucketBurst)
	before := fake.counts()[key]
	for range calls {
		res.Last = describe(getObject(ctx, cl.s3, bucketBurst))
	}
	res.Reached = fake.counts()[key] - before
	res.State = tr.State(key).String()
	return res, nil
}

// sdkErrorKind tells what the SDK made of a rejection: the transport
// error itself (WithRejectAsError), or, from the synthetic 503, an API
// error (S3's XML deserializer falls back to the status text) or a
// deserialization error (DynamoDB's JSON deserializer fails on the plain
// text body).
func sdkErrorKind(err error) string {
	var ae smithy.APIError
	var de *smithy.DeserializationError
	var se *smithyhttp.RequestSendError
	switch {
	case errors.As(err, &se):
		return "transport error"
	case errors.As(err, &ae):
		return "API error " + ae.ErrorCode()
	case errors.As(err, &de):
		return "deserialization error"
	}
	return fmt.Sprintf("%T", err)
}

func orOK(errText string) string {
	if errText == "" {
		return kindOK
	}
	return errText
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
