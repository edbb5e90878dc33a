package httpbreaker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// scriptedBody is a response body that returns data, then err, and
// records being closed.
type scriptedBody struct {
	data   *strings.Reader
	err    error // after data; io.EOF for a whole body
	closed bool
}

func (b *scriptedBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("read on closed body")
	}
	if b.data.Len() > 0 {
		return b.data.Read(p)
	}
	return 0, b.err
}

func (b *scriptedBody) Close() error { b.closed = true; return nil }

// bodyDep answers every request with a 200 whose body body makes.
func bodyDep(body func() io.ReadCloser) rtFunc {
	return func(req *http.Request) (*http.Response, error) {
		resp := response(req, http.StatusOK, nil)
		resp.Body = body()
		return resp, nil
	}
}

// totals is every outcome ever counted by key's breaker.
func totals(t *testing.T, tr *Transport, key string) counts {
	t.Helper()
	b := tr.breakers.get(key)
	require.NotNil(t, b, "no breaker for %s", key)
	return b.b.win.totals()
}

// oneOutcome returns c's only outcome, failing unless c counts exactly
// one call.
func oneOutcome(t *testing.T, c counts) Outcome {
	t.Helper()
	var n int64
	o := Outcome(-1)
	for i, v := range c {
		n += v
		if v > 0 {
			o = Outcome(i)
		}
	}
	require.EqualValues(t, 1, n, "the call counts exactly once: %v", c)
	return o
}

func TestBodyErrorsCountWhenTheBodyEnds(t *testing.T) {
	cut := errors.New("unexpected EOF in the middle of the body")
	for _, tc := range []struct {
		name string
		err  error // what the body's Read returns after its data
		// read drives the body: it returns what the caller does
		read func(t *testing.T, body io.ReadCloser, cancel context.CancelFunc)
		want Outcome
	}{
		{"read to EOF", io.EOF, readAllClose, OutcomeSuccess},
		{"read to EOF, never closed", io.EOF, func(t *testing.T, body io.ReadCloser, _ context.CancelFunc) {
			_, err := io.ReadAll(body)
			require.NoError(t, err)
		}, OutcomeSuccess},
		{"cut short", cut, readAllClose, OutcomeFailure},
		{"closed unread", cut, func(t *testing.T, body io.ReadCloser, _ context.CancelFunc) {
			require.NoError(t, body.Close())
		}, OutcomeSuccess},
		{"read error, then a second read and Close", cut, func(t *testing.T, body io.ReadCloser, _ context.CancelFunc) {
			readAllClose(t, body, nil)
			_, err := body.Read(make([]byte, 1))
			require.Error(t, err)
			require.NoError(t, body.Close())
		}, OutcomeFailure},
		{"caller cancels while reading", context.Canceled, func(t *testing.T, body io.ReadCloser, cancel context.CancelFunc) {
			cancel()
			readAllClose(t, body, nil)
		}, OutcomeIgnored},
		{"deadline passes while reading", context.DeadlineExceeded, func(t *testing.T, body io.ReadCloser, _ context.CancelFunc) {
			time.Sleep(time.Hour) // synctest: the request's deadline passes
			readAllClose(t, body, nil)
		}, OutcomeFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := New(bodyDep(func() io.ReadCloser {
					return &scriptedBody{data: strings.NewReader("partial"), err: tc.err}
				}), WithBodyErrors())
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://dep.test/x", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				require.Equal(t, counts{}, totals(t, tr, "dep.test"), "nothing counts before the body ends")
				tc.read(t, resp.Body, cancel)
				require.Equal(t, tc.want, oneOutcome(t, totals(t, tr, "dep.test")))
			})
		})
	}
}

// readAllClose reads body to its end and closes it.
func readAllClose(t *testing.T, body io.ReadCloser, _ context.CancelFunc) {
	_, _ = io.ReadAll(body)
	require.NoError(t, body.Close())
}

func TestBodyErrorsShortBudgetDeadlineIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(bodyDep(func() io.ReadCloser {
			return &scriptedBody{data: strings.NewReader(""), err: context.DeadlineExceeded}
		}), WithBodyErrors())
		ctx, cancel := context.WithTimeout(context.Background(), minBudget/2)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://dep.test/x", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		time.Sleep(minBudget)
		readAllClose(t, resp.Body, nil)
		require.Equal(t, OutcomeIgnored, oneOutcome(t, totals(t, tr, "dep.test")),
			"a deadline that left under 50ms at admission is the caller's")
	})
}

func TestBodyErrorsTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(bodyDep(func() io.ReadCloser {
			return &scriptedBody{data: strings.NewReader("partial"), err: io.ErrUnexpectedEOF}
		}), WithBodyErrors(), WithMinRequests(3))
		for range 3 {
			req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.Equal(t, StateClosed, tr.State("dep.test"), "the headers alone decide nothing")
			_, err = io.ReadAll(resp.Body)
			require.ErrorIs(t, err, io.ErrUnexpectedEOF)
			resp.Body.Close()
		}
		require.Equal(t, StateOpen, tr.State("dep.test"))
		resp, err := get(t, tr, "http://dep.test/x")
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
	})
}

// TestBodyErrorsSlowBodyIsASlowCall: under WithBodyErrors a call lasts
// until its body ends, so a body read to its end after the slow-call
// threshold makes the call a failure, as slow headers do; a body read
// within it keeps the success.
func TestBodyErrorsSlowBodyIsASlowCall(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // the body's end, after the headers
		want  Outcome
	}{
		{"within the threshold", 50 * time.Millisecond, OutcomeSuccess},
		{"past the threshold", 6 * time.Second, OutcomeFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := New(bodyDep(func() io.ReadCloser {
					return &scriptedBody{data: strings.NewReader("whole"), err: io.EOF}
				}), WithBodyErrors(), WithSlowCallThreshold(100*time.Millisecond))
				resp, err := tr.RoundTrip(mustReq(t, "http://dep.test/x"))
				require.NoError(t, err)
				time.Sleep(tc.after) // synctest: the caller reads the body this late
				readAllClose(t, resp.Body, nil)
				require.Equal(t, tc.want, oneOutcome(t, totals(t, tr, "dep.test")))
			})
		})
	}
}

func TestBodyErrorsWithoutTheOption(t *testing.T) {
	body := &scriptedBody{data: strings.NewReader("partial"), err: io.ErrUnexpectedEOF}
	tr := New(bodyDep(func() io.ReadCloser { return body }))
	req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.Same(t, body, resp.Body, "the body is next's own")
	require.Equal(t, OutcomeSuccess, oneOutcome(t, totals(t, tr, "dep.test")), "counted at the headers")
	resp.Body.Close()
}

func TestBodyErrorsLeaveSomeBodiesAlone(t *testing.T) {
	rw := &rwBody{}
	for _, tc := range []struct {
		name string
		code int
		body io.ReadCloser
		want Outcome
	}{
		{"no body", http.StatusOK, http.NoBody, OutcomeSuccess},
		{"101's read-write body", http.StatusSwitchingProtocols, rw, OutcomeSuccess},
		{"a 5xx", http.StatusBadGateway, newBody("bad gateway"), OutcomeFailure},
		{"a 429", http.StatusTooManyRequests, newBody("slow down"), OutcomeThrottled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(rtFunc(func(req *http.Request) (*http.Response, error) {
				resp := response(req, tc.code, nil)
				resp.Body = tc.body
				return resp, nil
			}), WithBodyErrors())
			req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.True(t, resp.Body == tc.body, "not wrapped: %T", resp.Body)
			require.Equal(t, tc.want, oneOutcome(t, totals(t, tr, "dep.test")), "counted at the headers")
			resp.Body.Close()
		})
	}
}

// rwBody is the read-write body of a 101 response.
type rwBody struct{ io.ReadCloser }

func (rwBody) Write(p []byte) (int, error) { return len(p), nil }
func (rwBody) Read([]byte) (int, error)    { return 0, io.EOF }
func (rwBody) Close() error                { return nil }

// blockingBody's Read waits until Close, then fails, as a transport's
// body does when another goroutine closes it. Its Close returns only
// once that Read has returned and every goroutine has settled (run it in
// a synctest bubble), so the failed Read is seen before Close ends.
type blockingBody struct {
	entered chan struct{}
	closed  chan struct{}
}

func (b *blockingBody) Read([]byte) (int, error) {
	close(b.entered)
	<-b.closed
	return 0, errors.New("http: read on closed response body")
}

func (b *blockingBody) Close() error {
	close(b.closed)
	time.Sleep(time.Millisecond) // synctest: the reader runs first
	return nil
}

func TestBodyErrorsCloseDuringReadIsTheCallersDoing(t *testing.T) {
	// A Close from one goroutine makes a Read blocked in another fail:
	// the caller stopped reading, the dependency did nothing wrong.
	synctest.Test(t, func(t *testing.T) {
		body := &blockingBody{entered: make(chan struct{}), closed: make(chan struct{})}
		tr := New(bodyDep(func() io.ReadCloser { return body }), WithBodyErrors())
		req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := resp.Body.Read(make([]byte, 8))
			done <- err
		}()
		<-body.entered
		require.NoError(t, resp.Body.Close())
		require.Error(t, <-done)
		require.Equal(t, OutcomeSuccess, oneOutcome(t, totals(t, tr, "dep.test")))
	})
}

func TestBodyErrorsConcurrentEndsCountOnce(t *testing.T) {
	// Read to EOF and Close race on every body: each call counts once.
	tr := New(bodyDep(func() io.ReadCloser { return newBody("ok") }), WithBodyErrors())
	const calls = 200
	var wg sync.WaitGroup
	for range calls {
		req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, resp.Body) }()
		go func() { defer wg.Done(); resp.Body.Close() }()
	}
	wg.Wait()
	require.Equal(t, counts{OutcomeSuccess: calls}, totals(t, tr, "dep.test"))
}

func TestBodyErrorsProbeHoldsItsSlotUntilTheBodyEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want State
	}{
		{"whole body closes", io.EOF, StateClosed},
		{"cut body reopens", io.ErrUnexpectedEOF, StateOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(http.StatusOK)
				var body *scriptedBody
				tr := New(rtFunc(func(req *http.Request) (*http.Response, error) {
					resp, err := d.RoundTrip(req)
					if err == nil {
						body = &scriptedBody{data: strings.NewReader("probe"), err: tc.err}
						resp.Body = body
					}
					return resp, err
				}), WithBodyErrors(), WithOpenTimeout(time.Second), WithJitter(0), WithHalfOpenProbes(1), WithProbesToClose(1))
				tr.Trip("dep.test", time.Second)
				time.Sleep(time.Second)
				req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
				require.NoError(t, err)
				probe, err := tr.RoundTrip(req)
				require.NoError(t, err)
				require.Equal(t, StateHalfOpen, tr.State("dep.test"), "the probe's headers alone decide nothing")
				resp, err := get(t, tr, "http://dep.test/x")
				require.NoError(t, err)
				require.True(t, IsRejected(resp), "the probe still holds the only slot")
				require.EqualValues(t, 1, d.calls.Load())
				readAllClose(t, probe.Body, nil)
				require.Equal(t, tc.want, tr.State("dep.test"))
			})
		})
	}
}

func TestBodyErrorsLateBodyOfAnEarlierStateCountsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(bodyDep(func() io.ReadCloser {
			return &scriptedBody{data: strings.NewReader("partial"), err: io.ErrUnexpectedEOF}
		}), WithBodyErrors())
		req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		tr.Trip("dep.test", time.Minute)
		tr.Reset("dep.test") // closed again, a newer generation
		readAllClose(t, resp.Body, nil)
		require.Equal(t, StateClosed, tr.State("dep.test"))
		require.Zero(t, tr.Snapshot()[0].Requests, "admitted before the trip: says nothing now")
		require.Equal(t, counts{OutcomeFailure: 1}, totals(t, tr, "dep.test"), "but breaker_requests_total counts every admitted call")
	})
}

func TestBodyErrorsBulkheadPlaceFreedAtTheHeaders(t *testing.T) {
	tr := New(bodyDep(func() io.ReadCloser { return newBody("ok") }), WithBodyErrors(), WithMaxConcurrent(1))
	req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
	require.NoError(t, err)
	first, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp, err := get(t, tr, "http://dep.test/x")
	require.NoError(t, err)
	require.False(t, IsRejected(resp), "a body being read holds no bulkhead place")
	readAllClose(t, first.Body, nil)
	require.Equal(t, counts{OutcomeSuccess: 2}, totals(t, tr, "dep.test"))
}

// errBody is a response body whose reads fail.
type errBody struct{}

func (errBody) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }
func (errBody) Close() error             { return nil }

// brokenBodyAfter500s answers 500 while *fail is set, then 200s whose
// body fails to read.
func brokenBodyAfter500s(fail *bool) rtFunc {
	return func(req *http.Request) (*http.Response, error) {
		if *fail {
			return response(req, http.StatusInternalServerError, nil), nil
		}
		resp := response(req, http.StatusOK, nil)
		resp.Body = errBody{}
		return resp, nil
	}
}

// TestBodyClassifierPanicFreesTheProbe: under WithBodyErrors, a
// classifier that panics while judging a probe's body gives the probe
// slot back, and the probe counts for nothing.
func TestBodyClassifierPanicFreesTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fail := true
		next := brokenBodyAfter500s(&fail)
		tr := New(next, WithMinRequests(1), WithJitter(0), WithOpenTimeout(time.Second), WithBodyErrors(),
			WithClassifier(func(req *http.Request, resp *http.Response, err error) Outcome {
				if resp == nil && err != nil {
					panic("classifier bug")
				}
				return DefaultClassifier(req, resp, err)
			}))
		_, _ = get(t, tr, testURL)
		require.Equal(t, StateOpen, tr.State(testKey))
		time.Sleep(time.Second)
		fail = false
		resp, err := tr.RoundTrip(mustReq(t, testURL)) // the probe
		require.NoError(t, err)
		require.PanicsWithValue(t, "classifier bug", func() { _, _ = io.ReadAll(resp.Body) })
		resp, err = tr.RoundTrip(mustReq(t, testURL))
		require.NoError(t, err)
		require.False(t, IsRejected(resp), "the slot was given back: the next call probes")
		resp.Body.Close()
		require.Equal(t, StateHalfOpen, tr.State(testKey), "the panicking probe decided nothing")
	})
}
