// Command outage shows what a circuit breaker buys a service when one of
// its dependencies stops answering.
//
// It starts, on 127.0.0.1, a "checkout" service whose handler asks a
// "fraud" service to score each order, through an http.Client with a
// timeout (1s by default). The fraud service works, then hangs every call
// until the caller gives up, then recovers. The same closed-loop load (100
// callers by default, each sending a request, pausing briefly, and sending
// the next) runs against two copies of this pair at the same time: one
// whose checkout calls fraud through a plain client, one whose client has
// an httpbreaker.Transport. Both copies answer the same way when fraud is
// unavailable; only how fast they find out differs.
//
// It prints, per phase, the checkout latency (measured in the checkout
// handler, as the service's own metrics would), the requests served, the
// calls that reached the fraud service and the checkout workers held, and
// the breaker's transitions; and it writes an SVG timeline of every
// request's latency (-svg, default outage.svg).
//
// Usage:
//
//	go run ./examples/outage            # about 20s
//	go run ./examples/outage -quick     # under 5s
//	go run ./examples/outage -duration 30s -concurrency 200 -timeout 2s -svg /tmp/o.svg
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

// config describes one demonstration: the load, the fraud client's
// timeout, and the breaker's options. Both runs use the same config.
type config struct {
	// Duration is the length of each run; both runs go at once, each
	// against its own checkout and fraud service.
	Duration time.Duration
	// Healthy, Outage are the fractions of Duration that the fraud service
	// spends healthy before the outage and down; the rest is recovery.
	Healthy, Outage float64
	// Concurrency is the number of callers looping on checkout.
	Concurrency int
	// Think is the pause of each caller between two requests.
	Think time.Duration
	// Timeout is the Timeout of checkout's http.Client for fraud calls.
	Timeout time.Duration
	// FraudLatency is how long a healthy fraud service takes to score.
	FraudLatency time.Duration

	// MinRequests, Window, OpenTimeout and MaxOpenTimeout are the
	// breaker's WithMinRequests, WithWindow, WithOpenTimeout and
	// WithMaxOpenTimeout.
	MinRequests    int
	Window         time.Duration
	OpenTimeout    time.Duration
	MaxOpenTimeout time.Duration

	// SVGPath is where the timeline goes; empty writes none.
	SVGPath string
}

// defaultConfig is the full demonstration: about 20s, 100 callers, a 1s
// fraud timeout.
func defaultConfig() config {
	c := config{
		Duration:     20 * time.Second,
		Healthy:      0.15,
		Outage:       0.60,
		Concurrency:  100,
		Think:        40 * time.Millisecond,
		Timeout:      time.Second,
		FraudLatency: 2 * time.Millisecond,
		MinRequests:  10,
		SVGPath:      "outage.svg",
	}
	c.deriveBreaker()
	return c
}

// quickConfig is the short demonstration that the test runs: under 5s for
// both runs. Fewer callers pausing less send as many orders per caller
// in a shorter outage, which still spans several fraud timeouts.
func quickConfig() config {
	c := defaultConfig()
	c.Duration = 4500 * time.Millisecond
	c.Healthy = 0.09
	c.Outage = 0.78
	c.Concurrency = 10
	c.Think = 5 * time.Millisecond
	c.quickBreaker()
	return c
}

// quickBreaker adapts the breaker to the quick run's few callers: a trip
// must not wait for the 10th timeout when there are 10 callers, because by
// then the first ones have sent their next orders into the hang. 3
// outcomes in the window are enough.
func (c *config) quickBreaker() {
	c.deriveBreaker()
	c.MinRequests = 3
}

// deriveBreaker sets the breaker's timings from the fraud timeout.
//
// The window is half a timeout. When a dependency hangs, successes stop at
// once but failures only show up a full timeout later, all together (the
// callers are stuck until then). A window longer than the timeout would
// still hold the successes of the last healthy moments when that first
// wave of timeouts lands, and the breaker would wait for more waves: with
// the default 10s window, the full demo trips about 7s into the outage
// instead of 1s. Half a timeout holds nothing but the wave.
//
// The breaker stays open for half a timeout at first, doubling per failed
// probe up to two timeouts. A demo outage lasts seconds, not minutes, so
// the defaults (5s, 60s) would never show a probe; in production, keep
// open timeouts well above the time a dependency takes to restart. The
// maximum must stay above the client timeout: it is also how long a
// half-open probe may take before the breaker gives up on it, and a
// shorter bound would let a second probe join the first one, still hung.
func (c *config) deriveBreaker() {
	c.Window = c.Timeout / 2
	c.OpenTimeout = c.Timeout / 2
	c.MaxOpenTimeout = 2 * c.Timeout
}

// healthyEnd returns when the outage starts, from the start of a run.
func (c config) healthyEnd() time.Duration {
	return time.Duration(float64(c.Duration) * c.Healthy).Round(time.Millisecond)
}

// outageEnd returns when the fraud service recovers, from the start of a
// run.
func (c config) outageEnd() time.Duration {
	return time.Duration(float64(c.Duration) * (c.Healthy + c.Outage)).Round(time.Millisecond)
}

// validate reports a config that cannot run.
func (c config) validate() error {
	switch {
	case c.Duration <= 0:
		return fmt.Errorf("-duration must be positive, got %v", c.Duration)
	case c.Concurrency < 1:
		return fmt.Errorf("-concurrency must be at least 1, got %d", c.Concurrency)
	case c.Timeout < 20*time.Millisecond:
		return fmt.Errorf("-timeout must be at least 20ms, got %v", c.Timeout)
	case c.Healthy <= 0 || c.Outage <= 0 || c.Healthy+c.Outage >= 1:
		return fmt.Errorf("phase fractions %v and %v leave no recovery", c.Healthy, c.Outage)
	}
	return nil
}

// main runs the demonstration with the command-line flags.
func main() {
	if err := mainErr(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outage:", err)
		os.Exit(1)
	}
}

// mainErr parses the flags and runs the demonstration.
func mainErr(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("outage", flag.ContinueOnError)
	def := defaultConfig()
	duration := fs.Duration("duration", def.Duration, "length of each run (both runs go at once)")
	concurrency := fs.Int("concurrency", def.Concurrency, "callers looping on checkout in each run")
	timeout := fs.Duration("timeout", def.Timeout, "checkout's http.Client Timeout for fraud calls")
	quick := fs.Bool("quick", false, "short run (under 5s): 4.5s, 10 callers, 3 outcomes to trip, unless set")
	svg := fs.String("svg", def.SVGPath, "where to write the SVG timeline (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := def
	if *quick {
		cfg = quickConfig()
	}
	// Flags given explicitly win over -quick's choices.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "duration":
			cfg.Duration = *duration
		case "concurrency":
			cfg.Concurrency = *concurrency
		case "timeout":
			cfg.Timeout = *timeout
			if *quick {
				cfg.quickBreaker()
			} else {
				cfg.deriveBreaker()
			}
		}
	})
	cfg.SVGPath = *svg

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err := run(ctx, cfg, stdout)
	return err
}
