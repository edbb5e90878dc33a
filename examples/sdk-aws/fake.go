package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// The region and account of the fake AWS.
const (
	region    = "us-east-1"
	accountID = "123456789012"
)

// Hosts the SDK sends to in region, as default endpoint resolution makes
// them: virtual-hosted style S3 (one host per bucket) and DynamoDB's
// account-based endpoint (when the credentials carry an account ID) or
// its regional one.
const (
	s3Suffix       = ".s3." + region + ".amazonaws.com"
	s3RegionalHost = "s3." + region + ".amazonaws.com"
	ddbAccountHost = accountID + ".ddb." + region + ".amazonaws.com"
	ddbRegionHost  = "dynamodb." + region + ".amazonaws.com"
)

// bucketHost is the virtual-hosted style host of an S3 bucket in region.
func bucketHost(bucket string) string { return bucket + s3Suffix }

// S3 error codes the fake answers with, and their status codes.
const (
	codeInternalError = "InternalError" // 500
	codeSlowDown      = "SlowDown"      // 503
)

// fakeAWS is a tiny stand-in for S3 (GetObject) and DynamoDB (GetItem) on
// 127.0.0.1, served over TLS with a certificate for the real AWS host
// names, signed by a CA of its own (caPEM, which the SDK must be told
// about: AWS_CA_BUNDLE). dialHere sends every connection of a transport to
// it, whatever the host: the SDK resolves endpoints as it does in
// production, and nothing leaves the machine.
type fakeAWS struct {
	srv   *httptest.Server
	caPEM []byte

	mu        sync.Mutex
	hits      map[string]int    // requests received, by Host
	brokenS3  map[string]string // bucket → S3 error code it answers with
	ddbStatus int               // DynamoDB's answer: 200 or 500
}

// newFakeAWS starts a fake AWS. Close it when done.
func newFakeAWS() (*fakeAWS, error) {
	caPEM, leaf, err := newCertificates()
	if err != nil {
		return nil, err
	}
	f := &fakeAWS{
		caPEM:     caPEM,
		hits:      map[string]int{},
		brokenS3:  map[string]string{},
		ddbStatus: http.StatusOK,
	}
	f.srv = httptest.NewUnstartedServer(f)
	// Quiet: the test of an untrusted CA makes the handshake fail on purpose.
	f.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	f.srv.StartTLS()
	return f, nil
}

// Close shuts the fake down.
func (f *fakeAWS) Close() { f.srv.Close() }

// writeCA writes the fake's CA certificate as a PEM file in dir, for
// AWS_CA_BUNDLE or ca_bundle, and returns its path.
func (f *fakeAWS) writeCA(dir string) (string, error) {
	p := filepath.Join(dir, "fake-aws-ca.pem")
	return p, os.WriteFile(p, f.caPEM, 0o600)
}

// rootCAs returns a pool holding only the fake's CA.
func (f *fakeAWS) rootCAs() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.caPEM)
	return pool
}

// dialHere makes tr connect to the fake for every host, with no proxy.
func (f *fakeAWS) dialHere(tr *http.Transport) {
	addr := f.srv.Listener.Addr().String()
	var d net.Dialer
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}
}

// breakBucket makes bucket answer every GetObject with the S3 error code
// (codeInternalError or codeSlowDown); "" heals it.
func (f *fakeAWS) breakBucket(bucket, code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if code == "" {
		delete(f.brokenS3, bucket)
		return
	}
	f.brokenS3[bucket] = code
}

// setDynamoDB sets the status DynamoDB answers with: 200 or 500.
func (f *fakeAWS) setDynamoDB(status int) {
	f.mu.Lock()
	f.ddbStatus = status
	f.mu.Unlock()
}

// counts returns the requests received so far, by Host.
func (f *fakeAWS) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]int, len(f.hits))
	for k, v := range f.hits {
		m[k] = v
	}
	return m
}

func (f *fakeAWS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(r.Host)
	f.mu.Lock()
	f.hits[host]++
	ddbStatus := f.ddbStatus
	f.mu.Unlock()

	switch {
	case host == ddbAccountHost || host == ddbRegionHost:
		f.serveDynamoDB(w, r, ddbStatus)
	case strings.HasSuffix(host, s3Suffix):
		f.serveS3(w, r, strings.TrimSuffix(host, s3Suffix))
	case host == s3RegionalHost: // path-style
		bucket, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		f.serveS3(w, r, bucket)
	default:
		http.Error(w, "no such fake service: "+host, http.StatusNotFound)
	}
}

func (f *fakeAWS) serveS3(w http.ResponseWriter, r *http.Request, bucket string) {
	f.mu.Lock()
	code := f.brokenS3[bucket]
	f.mu.Unlock()
	w.Header().Set("X-Amz-Request-Id", "FAKE0REQUEST0ID")
	w.Header().Set("X-Amz-Id-2", "fake-host-id")
	if r.Method != http.MethodGet {
		code = "NotImplemented"
	}
	if code != "" {
		status, msg := http.StatusInternalServerError, "We encountered an internal error. Please try again."
		switch code {
		case codeSlowDown:
			status, msg = http.StatusServiceUnavailable, "Please reduce your request rate."
		case "NotImplemented":
			status, msg = http.StatusNotImplemented, "A header you provided implies functionality that is not implemented."
		}
		// S3 names the error only in the XML body: no header says SlowDown.
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
			`<Error><Code>%s</Code><Message>%s</Message><RequestId>FAKE0REQUEST0ID</RequestId><HostId>fake-host-id</HostId></Error>`, code, msg)
		return
	}
	body := "hello from " + bucket + "\n"
	sum := binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE([]byte(body)))
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Header().Set("X-Amz-Checksum-Crc32", base64.StdEncoding.EncodeToString(sum))
	w.Header().Set("ETag", `"fake-etag"`)
	w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	fmt.Fprint(w, body)
}

func (f *fakeAWS) serveDynamoDB(w http.ResponseWriter, r *http.Request, status int) {
	var body any = map[string]any{
		"Item": map[string]any{"id": map[string]string{"S": "1"}, "name": map[string]string{"S": "widget"}},
	}
	switch {
	case r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.GetItem":
		status = http.StatusBadRequest
		body = map[string]string{"__type": "com.amazon.coral.service#UnknownOperationException", "message": "not faked"}
	case status != http.StatusOK:
		body = map[string]string{"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": "Internal server error"}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", "FAKE0DDB0REQUEST0ID")
	// The SDK checks every DynamoDB response body against this header.
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(b)), 10))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// newCertificates makes a CA and a server certificate signed by it for
// the hosts of the fake, and returns the CA as PEM and the server's
// key pair.
func newCertificates() (caPEM []byte, leaf tls.Certificate, err error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, leaf, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "httpbreaker example fake AWS CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, leaf, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, leaf, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, leaf, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: s3RegionalHost},
		DNSNames:     []string{"*" + s3Suffix, s3RegionalHost, "*.ddb." + region + ".amazonaws.com", ddbRegionHost},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, leaf, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	leaf = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return caPEM, leaf, nil
}

// fakeEnv sets every AWS_* variable the SDK reads to a value of this
// program's: static credentials with an account ID, region, no shared
// config but the files in dir, no IMDS, no endpoint overrides, the fake's
// CA as AWS_CA_BUNDLE when caBundle is set. set is os.Setenv in the
// program and t.Setenv in tests. An empty value counts as unset for the
// SDK.
func fakeEnv(set func(key, value string), dir, caBundle string) error {
	configFile := filepath.Join(dir, "config")
	credsFile := filepath.Join(dir, "credentials")
	for _, p := range []string{configFile, credsFile} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return err
		}
	}
	for _, kv := range [][2]string{
		{"AWS_CONFIG_FILE", configFile},
		{"AWS_SHARED_CREDENTIALS_FILE", credsFile},
		{"AWS_PROFILE", ""}, {"AWS_DEFAULT_PROFILE", ""},
		{"AWS_REGION", region}, {"AWS_DEFAULT_REGION", ""},
		{"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"}, {"AWS_ACCESS_KEY", ""},
		{"AWS_SECRET_ACCESS_KEY", "fake-secret"}, {"AWS_SECRET_KEY", ""},
		{"AWS_SESSION_TOKEN", ""},
		{"AWS_ACCOUNT_ID", accountID}, {"AWS_ACCOUNT_ID_ENDPOINT_MODE", ""},
		{"AWS_CA_BUNDLE", caBundle},
		{"AWS_EC2_METADATA_DISABLED", "true"},
		{"AWS_CONTAINER_CREDENTIALS_FULL_URI", ""}, {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", ""},
		{"AWS_WEB_IDENTITY_TOKEN_FILE", ""}, {"AWS_ROLE_ARN", ""},
		{"AWS_ENDPOINT_URL", ""}, {"AWS_ENDPOINT_URL_S3", ""}, {"AWS_ENDPOINT_URL_DYNAMODB", ""},
		{"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", ""},
		{"AWS_USE_FIPS_ENDPOINT", ""}, {"AWS_USE_DUALSTACK_ENDPOINT", ""},
		{"AWS_MAX_ATTEMPTS", ""}, {"AWS_RETRY_MODE", ""}, {"AWS_DEFAULTS_MODE", ""},
		{"AWS_ENABLE_ENDPOINT_DISCOVERY", ""},
		{"AWS_REQUEST_CHECKSUM_CALCULATION", ""}, {"AWS_RESPONSE_CHECKSUM_VALIDATION", ""},
		{"AWS_DISABLE_CLOCK_SKEW_CORRECTION", ""},
	} {
		set(kv[0], kv[1])
	}
	return nil
}

// attemptCounter counts the HTTP requests an SDK client sends (each
// attempt, the rejected ones included) before they reach the breaker.
type attemptCounter struct {
	aws.HTTPClient
	n atomic.Int64
}

// Do counts the request and sends it on.
func (c *attemptCounter) Do(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.HTTPClient.Do(req)
}

// take returns the count and resets it.
func (c *attemptCounter) take() int { return int(c.n.Swap(0)) }
