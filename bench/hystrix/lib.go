// Package hystrix benchmarks github.com/afex/hystrix-go wrapped as an
// http.RoundTripper, with the scenarios of bench/internal/harness.
package hystrix

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"

	hx "github.com/afex/hystrix-go/hystrix"
	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
)

func init() {
	// Defaults for every command, including the per-host ones that are
	// never configured one by one. hystrix-go's own defaults are kept
	// except the timeout (1s), raised so that it never fires here, and the
	// concurrency limit (10). DoC returns as soon as the command's
	// function has returned, but the command's goroutine gives its ticket
	// back only after that, so even one goroutine calling in a loop holds
	// a backlog of tickets: with a limit of 1,000, a sequential benchmark
	// on a loaded 2-core machine got ErrMaxConcurrency. 10,000 tickets
	// (a channel of 80 KB per circuit) made every run pass.
	hx.DefaultMaxConcurrent = 10000
	hx.DefaultTimeout = 60_000
}

var seq atomic.Int64

// RoundTripper runs each request as a hystrix command (DoC, so the
// request context bounds hystrix's wait). A 5xx response is the command's
// error harness.ErrServer and returned to the caller as the response it
// is. prefix+name (or prefix+host) names the circuit in hystrix's global
// registry; every RoundTripper gets a fresh prefix so that benchmarks do
// not share circuits.
type RoundTripper struct {
	next   http.RoundTripper
	prefix string
	name   string // "" means per host
}

func newRT(next http.RoundTripper, cfg harness.Config, perHost bool) *RoundTripper {
	t := &RoundTripper{next: next, prefix: "c" + strconv.FormatInt(seq.Add(1), 10) + "-"}
	if !perHost {
		t.name = t.prefix + "dep"
		hx.ConfigureCommand(t.name, hx.CommandConfig{
			Timeout:                60_000,
			MaxConcurrentRequests:  10000,
			RequestVolumeThreshold: 20,
			ErrorPercentThreshold:  50,
			SleepWindow:            int(cfg.OpenTimeout.Milliseconds()),
		})
	}
	return t
}

// RoundTrip implements http.RoundTripper.
func (t *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	name := t.name
	if name == "" {
		name = t.prefix + req.URL.Host
	}
	// The command runs on a hystrix goroutine and may outlive DoC (on
	// hystrix's timeout or the context's end); its response comes back
	// on ch, and a late one is closed.
	ch := make(chan *http.Response, 1)
	err := hx.DoC(req.Context(), name, func(context.Context) error {
		resp, err := harness.Call(t.next, req)
		ch <- resp
		return err
	}, nil)
	if err == nil || err == harness.ErrServer {
		return <-ch, nil
	}
	select {
	case resp := <-ch:
		if resp != nil {
			resp.Body.Close()
		}
	default:
		go func() {
			if resp := <-ch; resp != nil {
				resp.Body.Close()
			}
		}()
	}
	return nil, err
}

// one is the single-breaker wrapper: every request runs as one command.
func one(next http.RoundTripper, cfg harness.Config) http.RoundTripper {
	return newRT(next, cfg, false)
}

var Lib = harness.Lib{
	Name:    "afex/hystrix-go",
	One:     one,
	PerHost: func(next http.RoundTripper, cfg harness.Config) http.RoundTripper { return newRT(next, cfg, true) },
	Open: map[string]harness.OpenMode{
		"error": {Wrap: one, Rejected: harness.IsErr(hx.ErrCircuitOpen)},
		"503":   harness.As503(one, hx.ErrCircuitOpen),
	},
}
