package httpbreaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/stretchr/testify/require"
)

// TestCallTimeoutDeadline: the call goes to next with a deadline d after
// admission, on a copy of the request; a request whose own deadline is
// earlier, and a Transport without the option, send the caller's request
// itself.
func TestCallTimeoutDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen *http.Request
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			seen = req
			return response(req, http.StatusOK, nil), nil
		})
		tr := New(next, WithCallTimeout(150*time.Millisecond))
		req := mustReq(t, testURL)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.NotSame(t, req, seen, "req.WithContext")
		d, ok := seen.Context().Deadline()
		require.True(t, ok)
		require.Equal(t, time.Now().Add(150*time.Millisecond), d)
		_, ok = req.Context().Deadline()
		require.False(t, ok, "the caller's request is untouched")
		resp.Body.Close()

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		early := req.WithContext(ctx)
		resp, err = tr.RoundTrip(early)
		require.NoError(t, err)
		require.Same(t, early, seen, "its own earlier deadline is kept")
		resp.Body.Close()

		resp, err = New(next).RoundTrip(req)
		require.NoError(t, err)
		require.Same(t, req, seen, "without the option nothing is wrapped")
		resp.Body.Close()
	})
}

// TestCallTimeoutReleasesItsContext: when the body is closed, when it is
// read to its end, and at once on an error.
func TestCallTimeoutReleasesItsContext(t *testing.T) {
	var sent context.Context
	fail := false
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		sent = req.Context()
		if fail {
			return nil, errors.New("refused")
		}
		resp := response(req, http.StatusOK, nil)
		resp.Body = io.NopCloser(strings.NewReader("hello"))
		return resp, nil
	})
	tr := New(next, WithCallTimeout(time.Hour))

	resp, err := tr.RoundTrip(mustReq(t, testURL))
	require.NoError(t, err)
	require.NoError(t, sent.Err(), "held while the body is open")
	resp.Body.Close()
	require.ErrorIs(t, sent.Err(), context.Canceled)

	resp, err = tr.RoundTrip(mustReq(t, testURL))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
	require.ErrorIs(t, sent.Err(), context.Canceled, "read to its end")

	fail = true
	_, err = get(t, tr, testURL)
	require.Error(t, err)
	require.ErrorIs(t, sent.Err(), context.Canceled, "released at once on an error")
}

// TestCallTimeoutIsAFailure: a call that its call timeout ends is a
// failure however short the timeout, and says it timed out even when
// next's own error does not.
func TestCallTimeoutIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			<-req.Context().Done()
			return nil, errors.New("upstream went quiet") // not a context error
		})
		tr := New(next, WithMinRequests(3), WithPolicy(testKey, WithCallTimeout(10*time.Millisecond)))
		for range 3 {
			_, err := get(t, tr, testURL)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			var ne net.Error
			require.ErrorAs(t, err, &ne)
			require.True(t, ne.Timeout())
		}
		require.Equal(t, StateOpen, tr.State(testKey), "10ms is under the 50ms budget rule, and still a failure")
	})
}

// TestCallTimeoutIsATimeoutWhenNextWrapsTheContextError: a next that
// wraps the context's error, as middleware does, still gives the caller
// of http.Client an error whose Timeout reports true (url.Error.Timeout
// asks only the error it holds).
func TestCallTimeoutIsATimeoutWhenNextWrapsTheContextError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			<-req.Context().Done()
			return nil, fmt.Errorf("middleware: %w", req.Context().Err())
		})
		client := &http.Client{Transport: New(next, WithCallTimeout(100*time.Millisecond))}
		_, err := client.Get(testURL)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "middleware: context deadline exceeded", "next's error is kept")
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		require.True(t, ne.Timeout(), "net.Error's Timeout through http.Client: %v", err)
	})
}

// TestCallTimeoutThroughAClient: over a real connection, the body stays
// readable until it is closed, and calls the call timeout ends trip the
// breaker and reach the caller as timeouts.
func TestCallTimeoutThroughAClient(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Write([]byte("first "))
		w.(http.Flusher).Flush()
		w.Write([]byte("second"))
	}))
	defer srv.Close()
	defer close(release)
	tr := New(nil, WithMinRequests(3), WithCallTimeout(300*time.Millisecond))
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	resp, err := client.Get(srv.URL + "/")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "first second", string(b))
	require.NoError(t, resp.Body.Close())

	key := strings.TrimPrefix(srv.URL, "http://")
	for range 2 {
		_, err := client.Get(srv.URL + "/hang")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		require.True(t, ne.Timeout(), "net.Error's Timeout through http.Client")
	}
	require.Equal(t, StateOpen, tr.State(key))
	resp, err = client.Get(srv.URL + "/")
	require.NoError(t, err)
	require.True(t, IsRejected(resp))
	resp.Body.Close()
}

// TestCallTimeoutAppliesInShadowWhenItWouldRefuse: in ModeShadow a call
// the breaker would refuse still goes to next under the call timeout, not
// for the caller's whole deadline.
func TestCallTimeoutAppliesInShadowWhenItWouldRefuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithCallTimeout(100*time.Millisecond), WithMode(ModeShadow))
		d.hangUntilDone()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		_, _ = getCtx(t, ctx, tr, testURL)
		require.Equal(t, 100*time.Millisecond, time.Since(start), "admitted: call timeout applies")
		tr.Trip(testKey, time.Minute)
		start = time.Now()
		_, _ = getCtx(t, ctx, tr, testURL)
		require.Equal(t, 100*time.Millisecond, time.Since(start), "would-be-refused: call timeout skipped")
	})
}

// TestCallerDeadlinePastAtAdmissionIsIgnored: a caller deadline already
// past when the call is admitted — the zero time.Time, one far in the
// past, one an hour ago — left the dependency no budget: the call's
// context.DeadlineExceeded from next is ignored, so such calls never
// trip the breaker, also under a call timeout (which keeps the earlier
// deadline). A failure with no deadline still trips it afterwards.
func TestCallerDeadlinePastAtAdmissionIsIgnored(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline func() time.Time
	}{
		{"zero time", func() time.Time { return time.Time{} }},
		{"far past", func() time.Time { return time.Unix(-1<<62, 0) }},
		{"an hour ago", func() time.Time { return time.Now().Add(-time.Hour) }},
	} {
		for _, callTimeout := range []time.Duration{0, time.Minute, longest} {
			t.Run(tc.name+"/call timeout "+callTimeout.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					d := newDep(http.StatusInternalServerError)
					tr := New(d, WithMinRequests(1), WithCallTimeout(callTimeout))
					time.Sleep(time.Second) // the clock is past zero: deadline - now must not wrap
					for i := range 10 {
						ctx, cancel := context.WithDeadline(context.Background(), tc.deadline())
						resp, err := getCtx(t, ctx, tr, testURL)
						cancel()
						require.Nil(t, resp)
						require.ErrorIs(t, err, context.DeadlineExceeded)
						require.Equal(t, StateClosed, tr.State(testKey), "call %d", i+1)
					}
					require.EqualValues(t, 10, d.calls.Load(), "every call reached next")
					s := tr.Snapshot()[0]
					require.Zero(t, s.Requests, "ignored: not in the window")
					require.Zero(t, s.Failures)

					requireAnswers(t, tr, http.StatusInternalServerError)
					require.Equal(t, StateOpen, tr.State(testKey), "a real failure still trips it")
				})
			})
		}
	}
}

// TestCallerDeadlineFarFutureCountsFailures: a caller deadline too far
// ahead for the clock (time.Unix(1<<62, 0)) is a budget like any ample
// one: a connection error counts as a failure and trips the breaker, and
// so does a call its (shorter) call timeout ended.
func TestCallerDeadlineFarFutureCountsFailures(t *testing.T) {
	far := time.Unix(1<<62, 0)
	for _, tc := range []struct {
		name string
		opts []Option
		hang bool  // the dependency hangs until the call's context ends
		want error // what each call returns
		why  string
	}{
		{"connection error", nil, false, errConnRefused, "three failures trip it"},
		{"call timeout", []Option{WithCallTimeout(time.Second)}, true, context.DeadlineExceeded, "three call timeouts trip it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(http.StatusOK)
				if tc.hang {
					d.hangUntilDone()
				} else {
					d.set(0, tc.want)
				}
				tr := New(d, append([]Option{WithMinRequests(3)}, tc.opts...)...)
				time.Sleep(time.Second)
				ctx, cancel := context.WithDeadline(context.Background(), far)
				defer cancel()
				for i := range 3 {
					require.Equal(t, StateClosed, tr.State(testKey), "before call %d", i+1)
					_, err := getCtx(t, ctx, tr, testURL)
					require.ErrorIs(t, err, tc.want)
				}
				require.Equal(t, StateOpen, tr.State(testKey), tc.why)
			})
		})
	}
}

func TestDeadlineBudgetRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.hangUntilDone()
		tr := New(d, WithMinRequests(1))
		// 10ms left at admission: the caller's own budget ran out.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err := getCtx(t, ctx, tr, testURL)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, StateClosed, tr.State(testKey))
		require.Zero(t, tr.Snapshot()[0].Requests)
		// A full second: the dependency's fault.
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		_, err = getCtx(t, ctx, tr, testURL)
		cancel()
		require.Error(t, err)
		require.Equal(t, StateOpen, tr.State(testKey))
	})
}

// TestDeadlineSuccessCountsAtAdmission: a success through a request with
// a deadline counts at the time it was admitted (so the request path reads
// the clock once). One that outlived its bucket's turn in the window
// counts in the totals only, not in the bucket that took its place.
func TestDeadlineSuccessCountsAtAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			if d, err := time.ParseDuration(strings.TrimPrefix(r.URL.Path, "/v1/things/sleep/")); err == nil {
				time.Sleep(d)
			}
			return response(r, http.StatusOK, nil), nil
		})
		tr := New(next, WithWindow(10*time.Second)) // 1s buckets
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		call := func(path string) {
			_, err := getCtx(t, ctx, tr, testURL+path)
			require.NoError(t, err)
		}
		call("/") // t=0: bucket 0
		b := &tr.breakers.get(testKey).b

		time.Sleep(1500 * time.Millisecond)
		call("/sleep/700ms") // admitted at 1.5s, ends at 2.2s
		require.Equal(t, uint32(1), b.win.buckets[1].counts[OutcomeSuccess].Load())
		require.Zero(t, b.win.buckets[2].counts[OutcomeSuccess].Load())

		done := make(chan struct{})
		go func() { call("/sleep/15s"); close(done) }() // bucket 2, ends at 17.2s
		time.Sleep(10300 * time.Millisecond)
		call("/") // 12.5s: bucket 12 takes bucket 2's place
		<-done
		require.Equal(t, uint32(1), b.win.buckets[2].counts[OutcomeSuccess].Load(), "bucket 12 holds its own call only")
		require.Equal(t, int64(1), tr.Snapshot()[0].Requests, "in the window at 17.2s: the call at 12.5s")
		require.Equal(t, int64(4), b.win.totals()[OutcomeSuccess])
	})
}

func TestClientTimeoutIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.hangUntilDone()
		tr := New(d, WithMinRequests(2))
		c := &http.Client{Transport: tr, Timeout: 500 * time.Millisecond}
		for range 2 {
			_, err := c.Get(testURL)
			require.Error(t, err)
		}
		require.Equal(t, StateOpen, tr.State(testKey))
	})
}

func TestCallerCancellationIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		d.hangUntilDone()
		tr := New(d, WithMinRequests(1))
		for range 5 {
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() {
				time.Sleep(100 * time.Millisecond)
				cancel(errors.New("client hung up"))
			}()
			_, err := getCtx(t, ctx, tr, testURL)
			require.Error(t, err)
		}
		require.Equal(t, StateClosed, tr.State(testKey))
		require.Zero(t, tr.Snapshot()[0].Requests)
	})
}

// TestCallTimeoutReleasedWhenAnUpgradeIsClosed: a 101's body, the new
// protocol's connection, stays writable under a call timeout, and
// closing it releases the call timeout's context and timer at once, not
// when the timeout passes.
func TestCallTimeoutReleasedWhenAnUpgradeIsClosed(t *testing.T) {
	faultNoLeaks(t)
	srv := echoUpgradeServer(t)
	var sent context.Context
	rt := cleanhttp.DefaultPooledTransport()
	t.Cleanup(rt.CloseIdleConnections)
	tr := New(rtFunc(func(r *http.Request) (*http.Response, error) {
		sent = r.Context()
		return rt.RoundTrip(r)
	}), WithCallTimeout(time.Hour))
	req := mustReq(t, srv.URL+"/ws")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "%T", resp.Body)
	_, err = io.WriteString(rwc, "ping")
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(rwc, buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))
	require.NoError(t, sent.Err(), "live while the connection is")
	require.NoError(t, rwc.Close())
	require.ErrorIs(t, sent.Err(), context.Canceled, "released when it is closed")
}

// TestCallTimeoutUpgradeKeepsCloseWrite: under a call timeout, a 101's
// body keeps the half-close net/http gives it (CloseWrite), as it has
// without the option: httputil.ReverseProxy asks for it to pass a
// client's half-close on to the backend, and without it ends the tunnel
// before the backend's last answer.
func TestCallTimeoutUpgradeKeepsCloseWrite(t *testing.T) {
	for name, opts := range map[string][]Option{
		"without the option": nil,
		"WithCallTimeout":    {WithCallTimeout(time.Hour)},
	} {
		t.Run(name, func(t *testing.T) {
			faultNoLeaks(t)
			srv := echoUpgradeServer(t)
			rt := cleanhttp.DefaultPooledTransport()
			t.Cleanup(rt.CloseIdleConnections)
			req := mustReq(t, srv.URL+"/ws")
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "echo")
			resp, err := New(rt, opts...).RoundTrip(req)
			require.NoError(t, err)
			require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
			defer resp.Body.Close()
			cw, ok := resp.Body.(interface {
				io.ReadWriter
				CloseWrite() error
			})
			require.True(t, ok, "the 101's body can half-close: %T", resp.Body)
			_, err = io.WriteString(cw, "ping")
			require.NoError(t, err)
			require.NoError(t, cw.CloseWrite())
			got, err := io.ReadAll(cw) // the server echoes, sees our EOF, and closes
			require.NoError(t, err)
			require.Equal(t, "ping", string(got))
		})
	}
}
