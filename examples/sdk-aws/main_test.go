package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/httpbreaker/httpbreaker"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// caBundleError is what config.LoadDefaultConfig says when a CA bundle is
// configured and the HTTP client is not its own BuildableClient.
const caBundleError = "unable to add custom RootCAs HTTPClient, has no WithTransportOptions, *http.Client"

// startFake starts a fake AWS for t and sets the AWS_* environment to
// fakeEnv's, with the fake's CA as AWS_CA_BUNDLE. It returns the fake and
// the CA file's path.
func startFake(t *testing.T) (*fakeAWS, string) {
	t.Helper()
	fake, err := newFakeAWS()
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	ca, err := fake.writeCA(dir)
	require.NoError(t, err)
	require.NoError(t, fakeEnv(t.Setenv, dir, ca))
	return fake, ca
}

func TestRun(t *testing.T) {
	fake, _ := startFake(t)
	var out bytes.Buffer
	res, err := run(context.Background(), &out, fake)
	require.NoError(t, err)
	t.Log("\n" + out.String())

	// A plain *http.Client cannot be passed in while AWS_CA_BUNDLE is set.
	require.Equal(t, caBundleError, res.PlainClientErr)

	// The broken bucket: the first call's 3 attempts and the second's
	// first reach S3 and fail; that 4th failure trips the breaker, and the
	// second call's retry is rejected and not retried again. The third
	// call is rejected at once.
	require.Equal(t, []string{
		kindAWSError + " 500 InternalError",
		kindRejected + " (error)",
		kindRejected + " (error)",
	}, res.Photos)
	require.Equal(t, []int{3, 2, 1}, res.PhotosAttempts)

	// One breaker per bucket, one per DynamoDB account endpoint: the
	// healthy bucket and DynamoDB keep working.
	require.Equal(t, kindOK, res.Logs)
	require.Equal(t, kindOK, res.Item)
	require.Equal(t, map[string]int{
		bucketHost(bucketPhotos): minRequests,
		bucketHost(bucketLogs):   1,
		ddbAccountHost:           1,
	}, res.Hits)
	require.Equal(t, map[string]string{
		bucketHost(bucketPhotos): "open",
		bucketHost(bucketLogs):   "closed",
		ddbAccountHost:           "closed",
	}, res.States)

	// A call on an open breaker.
	require.Len(t, res.Costs, 4)
	for _, c := range res.Costs {
		name := c.Service + "/" + c.mode()
		require.Zero(t, c.Reached, "%s: a rejected call reached AWS", name)
		// How the rejection surfaces.
		require.Equal(t, c.AsError, c.ErrorsIs, "%s: errors.Is(err, ErrOpen)", name)
		require.Equal(t, !c.AsError, c.RawRejected, "%s: IsRejected on the raw response", name)
		switch {
		case c.AsError:
			require.Equal(t, "transport error", c.SDKError, name)
		case c.Service == svcS3:
			require.Equal(t, "API error ServiceUnavailable", c.SDKError, name)
		default:
			require.Equal(t, "deserialization error", c.SDKError, name)
		}
		// The SDK's default retryers: a rejection error answers
		// RetryableError false, so 1 attempt without a backoff; the
		// synthetic 503 is retried as any 503 (S3 3 attempts, DynamoDB 4,
		// each rejected again after a backoff jittered from zero, so only
		// a total over the calls can be bounded below).
		want := 3
		if c.Service == svcDynamoDB {
			want = 4
		}
		if c.AsError {
			want = 1
			t.Logf("%s: longest refused call %s", name, c.Max)
			require.Less(t, c.Max, 50*time.Millisecond, "%s: a refused call must cost no backoff", name)
		} else {
			require.GreaterOrEqual(t, c.Total, 10*time.Millisecond, "%s: %d calls with the SDK's retries", name, c.Calls)
		}
		require.Equal(t, want*c.Calls, c.Attempts, "%s: attempts", name)
		// DynamoDB checks each response body against X-Amz-Crc32, which
		// the synthetic 503 lacks: one WARN log per rejected attempt.
		if c.Service == svcDynamoDB && !c.AsError {
			require.Equal(t, c.Attempts, c.Warnings, name)
		} else {
			require.Zero(t, c.Warnings, name)
		}
	}

	// config.WithRetryer replaces DynamoDB's 4 attempts with 3; the
	// recipe keeps DynamoDB's own retryer, and its 4.
	require.Equal(t, map[string]int{retryerConfig: 3, retryerDefault: 4}, res.DynamoDBAttempts)

	// S3's SlowDown: DefaultClassifier trips on a burst, s3Classifier
	// does not; a real 503 is never taken for a rejection.
	require.Equal(t, BurstResult{Reached: minRequests, State: "open", Last: kindRejected + " (error)"}, res.Burst[classifierDefault])
	require.Equal(t, BurstResult{Reached: burstCalls, State: "closed", Last: kindAWSError + " 503 SlowDown"}, res.Burst[classifierS3])

	text := out.String()
	require.Contains(t, text, "S3 GetObject photos call 2: rejected by breaker (error) (2 attempts)\n")
	require.Contains(t, text, "requests that reached AWS: photos.s3.us-east-1.amazonaws.com=4 logs.s3.us-east-1.amazonaws.com=1 123456789012.ddb.us-east-1.amazonaws.com=1\n")
}

// TestCABundle pins the CA-bundle trap and its fix, with the bundle in
// the environment and in the shared config.
func TestCABundle(t *testing.T) {
	ctx := context.Background()
	fake, ca := startFake(t)

	withConfigFile := func(t *testing.T) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "config")
		require.NoError(t, os.WriteFile(p, []byte("[default]\nca_bundle = "+ca+"\n"), 0o600))
		t.Setenv("AWS_CONFIG_FILE", p)
		t.Setenv("AWS_CA_BUNDLE", "")
	}
	// getLogs reads an object with c, then calls done.
	getLogs := func(c *s3.Client, done func()) error {
		defer done()
		return getObject(ctx, c, bucketLogs)
	}
	// plainClient is the fix alone: the CA pool on the
	// *http.Transport under the breaker, passed in with WithHTTPClient.
	plainClient := func(t *testing.T) (*s3.Client, func(), error) {
		base := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: fake.rootCAs()}}
		fake.dialHere(base)
		tr := httpbreaker.New(base, httpbreaker.WithRejectAsError())
		cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(&http.Client{Transport: tr}))
		if err != nil {
			return nil, nil, err
		}
		return s3.NewFromConfig(cfg), tr.CloseIdleConnections, nil
	}
	// recipe is loadConfig; maxAttempts 1 spares the retries of a
	// failing call.
	recipe := func(t *testing.T) (*s3.Client, func()) {
		cfg, tr, err := loadFakeConfig(ctx, fake, []httpbreaker.Option{httpbreaker.WithRejectAsError()})
		require.NoError(t, err)
		return s3.NewFromConfig(cfg, func(o *s3.Options) { o.RetryMaxAttempts = 1 }), tr.CloseIdleConnections
	}

	for _, where := range []string{"AWS_CA_BUNDLE", "ca_bundle"} {
		t.Run(where, func(t *testing.T) {
			if where == "ca_bundle" {
				withConfigFile(t)
			}
			// A plain *http.Client is refused, even one whose transport
			// already trusts the CA: the bundle is configured, and only
			// the SDK's own client can take it.
			_, _, err := plainClient(t)
			require.EqualError(t, err, caBundleError)

			// loadConfig lets the SDK build its client, takes its
			// transport (with the bundle) and puts the breaker on it.
			require.NoError(t, getLogs(recipe(t)))
		})
	}

	t.Run("no bundle", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", "")
		// Without a configured bundle the fix works: the CA pool
		// on the transport is what TLS trusts.
		c, done, err := plainClient(t)
		require.NoError(t, err)
		require.NoError(t, getLogs(c, done))

		// And the fake is really checked: the SDK's transport without
		// the bundle does not trust it.
		require.ErrorContains(t, getLogs(recipe(t)), "certificate signed by unknown authority")
	})
}

// TestKeys checks the breaker key HostKey gives each client, by tripping
// it and seeing the next call rejected without reaching the fake.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	fake, _ := startFake(t)

	cases := []struct {
		name string
		key  string
		call func(t *testing.T, trip string) error
	}{
		{"S3 virtual-hosted style: one breaker per bucket", bucketHost(bucketLogs), func(t *testing.T, trip string) error {
			return getObject(ctx, newTestClients(t, fake, trip).s3, bucketLogs)
		}},
		{"S3 path-style: one breaker for the region", s3RegionalHost, func(t *testing.T, trip string) error {
			c := newTestClients(t, fake, trip)
			return getObject(ctx, s3.New(c.s3.Options(), func(o *s3.Options) { o.UsePathStyle = true }), bucketLogs)
		}},
		{"DynamoDB, credentials with an account ID: one breaker per account", ddbAccountHost, func(t *testing.T, trip string) error {
			return getItem(ctx, newTestClients(t, fake, trip).ddb)
		}},
		{"DynamoDB, credentials without an account ID: one breaker for the region", ddbRegionHost, func(t *testing.T, trip string) error {
			t.Setenv("AWS_ACCOUNT_ID", "")
			return getItem(ctx, newTestClients(t, fake, trip).ddb)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fake.counts()[tc.key]
			require.NoError(t, tc.call(t, ""))
			require.Equal(t, before+1, fake.counts()[tc.key], "the call went to %s", tc.key)

			err := tc.call(t, tc.key)
			require.ErrorIs(t, err, httpbreaker.ErrOpen)
			require.Equal(t, before+1, fake.counts()[tc.key], "the rejected call reached AWS")
		})
	}
}

// newTestClients makes clients as the recipe does, on a Transport of
// their own that is cleaned up with t, with trip's breaker open if trip
// is not "".
func newTestClients(t *testing.T, fake *fakeAWS, trip string) clients {
	t.Helper()
	cfg, tr, err := loadFakeConfig(context.Background(), fake, breakerOptions(true))
	require.NoError(t, err)
	t.Cleanup(tr.CloseIdleConnections)
	if trip != "" {
		tr.Trip(trip, time.Minute)
	}
	return newClients(cfg)
}

// TestRejectionChain pins the wrapping errors.Is sees through under
// WithRejectAsError.
func TestRejectionChain(t *testing.T) {
	fake, _ := startFake(t)
	err := getItem(context.Background(), newTestClients(t, fake, ddbAccountHost).ddb)

	var oe *smithy.OperationError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "GetItem", oe.Operation())
	var se *smithyhttp.RequestSendError
	require.ErrorAs(t, err, &se)
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	var re *httpbreaker.RejectedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, ddbAccountHost, re.Key)
	require.True(t, isRejection(err))
}

func TestS3Classifier(t *testing.T) {
	s3req := httptest.NewRequestWithContext(awsmiddleware.SetServiceID(context.Background(), s3.ServiceID),
		http.MethodGet, "https://photos.s3.us-east-1.amazonaws.com/a.txt", nil)
	ddbreq := httptest.NewRequestWithContext(awsmiddleware.SetServiceID(context.Background(), dynamodb.ServiceID),
		http.MethodPost, "https://"+ddbAccountHost+"/", nil)
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }

	require.Equal(t, httpbreaker.OutcomeThrottled, s3Classifier(s3req, resp(http.StatusServiceUnavailable), nil))
	require.Equal(t, httpbreaker.OutcomeFailure, s3Classifier(s3req, resp(http.StatusInternalServerError), nil))
	require.Equal(t, httpbreaker.OutcomeSuccess, s3Classifier(s3req, resp(http.StatusOK), nil))
	require.Equal(t, httpbreaker.OutcomeFailure, s3Classifier(s3req, nil, errors.New("connection reset")))
	require.Equal(t, httpbreaker.OutcomeFailure, s3Classifier(ddbreq, resp(http.StatusServiceUnavailable), nil),
		"another service's 503 is a failure")
	require.Equal(t, httpbreaker.OutcomeFailure, s3Classifier(nil, resp(http.StatusServiceUnavailable), nil))
}
