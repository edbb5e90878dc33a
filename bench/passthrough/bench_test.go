// Package passthrough is the control of the loopback benchmark: a wrapper
// that only calls next. What it measures is the harness's own noise floor,
// the overhead of a RoundTripper that does nothing:
//
//	go test -run '^$' -bench Loopback -benchtime 2s -count 3 ./passthrough
package passthrough

import (
	"net/http"
	"testing"

	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
)

type passThrough struct{ next http.RoundTripper }

func (p passThrough) RoundTrip(r *http.Request) (*http.Response, error) { return p.next.RoundTrip(r) }

func BenchmarkLoopback(b *testing.B) {
	harness.Loopback(b, harness.Lib{
		Name: "pass-through",
		One:  func(next http.RoundTripper, _ harness.Config) http.RoundTripper { return passThrough{next} },
	})
}
