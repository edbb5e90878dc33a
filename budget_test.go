package httpbreaker

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// attempt sends one GET through rt, a retry when retry is set, and
// returns the response (closed) and error.
func attempt(t *testing.T, rt http.RoundTripper, retry bool) (*http.Response, error) {
	t.Helper()
	ctx := context.Background()
	if retry {
		ctx = MarkRetry(ctx)
	}
	return getCtx(t, ctx, rt, testURL)
}

func TestRetryBudgetArithmetic(t *testing.T) {
	// Window 10s; a retry is admitted while retries+1 ≤
	// floor(ratio × first attempts + minPerSecond × 10).
	for _, tc := range []struct {
		name          string
		ratio, floor  float64
		firsts, tries int // first attempts, then retries, all at once
		admitted      int // of the retries
	}{
		{"ratio only", 0.2, 0, 10, 5, 2},
		{"floor only", 0, 0.3, 0, 5, 3},
		{"both", 0.1, 0.1, 10, 5, 2},
		{"fraction rounds down", 0.25, 0, 7, 5, 1},
		{"nothing earned", 0.5, 0, 1, 3, 0},
		{"generous", 1, 0, 4, 4, 4},
		{"a whole product is whole", 0.7, 0, 90, 64, 63}, // 0.7 × 90 computes as 62.99999999999999
		{"another whole product", 0.29, 0, 100, 30, 29},  // 28.999999999999996
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDep(200)
				tr := New(d, WithRetryBudget(tc.ratio, tc.floor))
				for range tc.firsts {
					resp, err := attempt(t, tr, false)
					require.NoError(t, err)
					require.False(t, IsRejected(resp), "a first attempt is never refused by the budget")
				}
				admitted := 0
				for range tc.tries {
					resp, err := attempt(t, tr, true)
					require.NoError(t, err)
					if !IsRejected(resp) {
						admitted++
					}
				}
				require.Equal(t, tc.admitted, admitted)
				require.EqualValues(t, tc.firsts+tc.admitted, d.calls.Load(), "refused retries never reach next")
			})
		})
	}
}

func TestRetryBudgetRollsWithTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithRetryBudget(0.5, 0), WithWindow(10*time.Second))
		for range 4 {
			_, _ = attempt(t, tr, false)
		}
		ok := func() bool { resp, _ := attempt(t, tr, true); return !IsRejected(resp) }
		require.True(t, ok())
		require.True(t, ok())
		require.False(t, ok(), "2 of 4 × 0.5 spent")
		time.Sleep(11 * time.Second) // the window has moved on: nothing earned, nothing spent
		require.False(t, ok())
		_, _ = attempt(t, tr, false)
		_, _ = attempt(t, tr, false)
		require.True(t, ok())
		// Refused retries count for nothing in the breaker's window.
		st := tr.Snapshot()[0]
		require.EqualValues(t, 3, st.Requests)
	})
}

func TestRetryBudgetRecognisesSDKRetries(t *testing.T) {
	for _, tc := range []struct {
		header, value string
		retry         bool
	}{
		{"amz-sdk-request", "attempt=1; max=3", false},
		{"amz-sdk-request", "attempt=2; max=3", true},
		{"amz-sdk-request", "max=3; attempt=3", true},
		{"amz-sdk-request", "attempt=; max=3", false},
		{"amz-sdk-request", "attempt=99999999999999999999999", false},
		{"amz-sdk-request", "attempt=-2", false},
		{"amz-sdk-request", "garbage", false},
		{"X-Stainless-Retry-Count", "0", false},
		{"X-Stainless-Retry-Count", "1", true},
		{"X-Stainless-Retry-Count", " 2 ", true},
		{"X-Stainless-Retry-Count", "1e3", false},
		{"X-Stainless-Retry-Count", "184467440737095516160", false},
		{"X-Stainless-Retry-Count", "", false},
		{"X-Other", "1", false},
	} {
		req := mustReq(t, testURL)
		req.Header.Set(tc.header, tc.value)
		require.Equal(t, tc.retry, isRetry(req), "%s: %q", tc.header, tc.value)
	}
	req := mustReq(t, testURL)
	require.False(t, isRetry(req))
	require.True(t, isRetry(req.WithContext(MarkRetry(req.Context()))))

	// PrepareRetry marks the copy it is given, which go-retryablehttp
	// makes for each retry.
	cp := *req
	require.NoError(t, PrepareRetry(&cp))
	require.True(t, isRetry(&cp))
	require.False(t, isRetry(req), "the original is untouched")
}

func TestRetryBudgetRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		d := newDep(200)
		tr := New(d, WithRetryBudget(0, 0.1), WithMetrics(reg)) // 1 retry per 10s window
		_, _ = attempt(t, tr, true)
		resp, err := attempt(t, tr, true)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_rejections_total", `reason="retry_budget"`))

		te := New(d, WithRetryBudget(0, 0.1), WithRejectAsError())
		_, _ = attempt(t, te, true)
		_, err = attempt(t, te, true)
		require.ErrorIs(t, err, ErrOpen)
		require.ErrorIs(t, err, ErrRetryBudget)
		require.False(t, errors.Is(err, ErrBulkheadFull))
		var rej *RejectedError
		require.ErrorAs(t, err, &rej)
		require.Equal(t, StateClosed, rej.State)
		require.Contains(t, rej.Error(), "retry budget")

		var got error
		tf := New(d, WithRetryBudget(0, 0.1), WithFallback(func(_ *http.Request, err error) (*http.Response, error) {
			got = err
			return nil, nil
		}))
		_, _ = attempt(t, tf, true)
		resp, err = attempt(t, tf, true)
		require.NoError(t, err)
		require.True(t, IsRejected(resp))
		require.ErrorIs(t, got, ErrRetryBudget, "the fallback sees the budget refusal")
	})
}

// TestRetryBudgetHoldsForConcurrentRetries: retries that pass the
// budget together cannot all pass on the same allowance. Here a bulkhead
// of 1 with a queue keeps them in flight between the budget's decision
// and next: of five concurrent retries with an allowance of one, one goes
// on and four are refused at once.
func TestRetryBudgetHoldsForConcurrentRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newHeldDep()
		tr := New(d, WithRetryBudget(0, 0.1), WithMaxConcurrent(1), WithQueue(10, time.Minute))
		ctx := context.Background()
		first := send(t, ctx, tr, "first")
		var retries []chan result
		for _, id := range []string{"r1", "r2", "r3", "r4", "r5"} {
			retries = append(retries, send(t, MarkRetry(ctx), tr, id))
		}
		refused := 0
		for _, r := range retries[1:] {
			select {
			case got := <-r:
				require.NoError(t, got.err)
				require.True(t, IsRejected(got.resp))
				refused++
			default:
			}
		}
		require.Equal(t, 4, refused, "one retry of the allowance waits for its place; the others are refused")
		d.let("first", 200)
		synctest.Wait()
		require.Equal(t, []string{"first", "r1"}, d.order())
		d.let("r1", 200)
		requireAnswered(t, first, retries[0])
	})
}

func TestRetryBudgetAfterTheState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(500)
		tr := tripped(t, d, WithRetryBudget(10, 10), WithRejectAsError())
		_, err := attempt(t, tr, true)
		require.ErrorIs(t, err, ErrOpen)
		require.False(t, errors.Is(err, ErrRetryBudget), "an open breaker refuses as open, retries included")
	})
}

func TestRetryBudgetShadow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		d := newDep(200)
		tr := New(d, WithRetryBudget(0, 0.1), WithMode(ModeShadow), WithMetrics(reg))
		_, _ = attempt(t, tr, true)
		resp, err := attempt(t, tr, true)
		require.NoError(t, err)
		require.False(t, IsRejected(resp), "shadow refuses nothing")
		require.EqualValues(t, 2, d.calls.Load())
		require.Equal(t, 1.0, gaugeValue(t, reg, "breaker_shadow_rejections_total", `reason="retry_budget"`))
		require.Equal(t, 0.0, gaugeValue(t, reg, "breaker_rejections_total", `reason="retry_budget"`))
	})
}

func TestRetryBudgetPolicyAndUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(200)
		tr := New(d, WithRetryBudget(0, 0.1), WithPolicy("api.test", WithRetryBudget(0, 0)))
		for range 3 {
			resp, _ := attempt(t, tr, true)
			require.False(t, IsRejected(resp), "the policy turned the budget off")
		}
		require.Error(t, tr.Update(WithRetryBudget(-1, 0)))
		require.Error(t, tr.Update(WithRetryBudget(0, 1/zero())))

		// Update keeps what the budget has counted.
		tu := New(d, WithRetryBudget(0.5, 0))
		for range 2 {
			_, _ = attempt(t, tu, false)
		}
		require.NoError(t, tu.Update(WithRetryBudget(0.5, 0)))
		resp, _ := attempt(t, tu, true)
		require.False(t, IsRejected(resp), "first attempts earned before the Update still count")
		resp, _ = attempt(t, tu, true)
		require.True(t, IsRejected(resp))
	})
}

func zero() float64 { return 0 }

func TestRetryBudgetInTheFile(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"retry_budget": {"ratio": 0.2, "min_per_second": 10},
		"policies": {"api.test": {"retry_budget": {"ratio": 0, "min_per_second": 0}}, "other.test": {"min_requests": 5}}}`))
	require.NoError(t, err)
	opts, err := cfg.Options()
	require.NoError(t, err)
	tr := New(newDep(200), opts...)
	_, _ = get(t, tr, testURL)
	_, _ = get(t, tr, "http://other.test/")
	st := tr.Snapshot()
	require.Equal(t, RetryBudget{}, st[0].Settings.RetryBudget, "the policy's zeros turn the budget off")
	require.Equal(t, RetryBudget{Ratio: 0.2, MinPerSecond: 10}, st[1].Settings.RetryBudget, "inherited")

	_, err = ParseConfig([]byte(`{"retry_budget": {"ratio": -1, "min_per_second": 0}}`))
	require.ErrorContains(t, err, "retry_budget: ratio must be finite and not negative, got -1")
	_, err = ParseConfig([]byte(`{"retry_budget": 0.2}`))
	require.ErrorContains(t, err, `retry_budget: want an object such as {"ratio": 0.2, "min_per_second": 10}`)
	_, err = ParseConfig([]byte(`{"retry_budget": {"ratio": 0.2, "floor": 1}}`))
	require.Error(t, err, "unknown fields inside are refused")
}
