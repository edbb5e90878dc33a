// Package counter is the second control of the loopback benchmark: no
// breaker, only what every breaker that counts successes must do per
// call at the least, as issue #4 budgets it — one clock read, to pick
// the time bucket, and one atomic add to that bucket's counter. Next to
// the pass-through control it shows the floor that counting alone puts
// under any breaker's loopback overhead:
//
//	go test -run '^$' -bench Loopback -benchtime 2s -count 3 ./counter
package counter

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
)

// counter counts successful calls in ten one-second buckets.
type counter struct {
	next    http.RoundTripper
	epoch   time.Time
	buckets [10]atomic.Int64
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		c.buckets[time.Since(c.epoch)/time.Second%10].Add(1)
	}
	return resp, err
}

func TestCounterCounts(t *testing.T) {
	c := &counter{next: new(harness.Stub), epoch: time.Now()}
	req := harness.Req(t, "http://127.0.0.1/x")
	for range 3 {
		resp, err := c.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var n int64
	for i := range c.buckets {
		n += c.buckets[i].Load()
	}
	if n != 3 {
		t.Fatalf("counted %d calls, want 3", n)
	}
}

func BenchmarkLoopback(b *testing.B) {
	harness.Loopback(b, harness.Lib{
		Name: "counter",
		One: func(next http.RoundTripper, _ harness.Config) http.RoundTripper {
			return &counter{next: next, epoch: time.Now()}
		},
	})
}
