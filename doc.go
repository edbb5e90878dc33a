// Package httpbreaker is a circuit-breaking http.RoundTripper for outbound
// HTTP clients.
//
// Without a breaker, when a dependency goes down or hangs, every caller
// waits out its full timeout before it can degrade, and retries keep the
// dependency down. Set a Transport as an http.Client's Transport once (or
// hand that client to any SDK that takes an *http.Client) and every
// dependency the client talks to gets its own circuit breaker, which
// refuses calls to a failing dependency at once, without sending them.
// Other dependencies are not affected. The Quick start of the README,
// which builds as a program of its own:
//
//	client := &http.Client{Transport: httpbreaker.New(nil), Timeout: 5 * time.Second}
//
//	resp, err := client.Get("https://example.com/")
//	if err != nil {
//		log.Fatal(err) // the dependency's own failure: DNS, refused, timeout
//	}
//	defer resp.Body.Close()
//	if httpbreaker.IsRejected(resp) {
//		// The breaker refused: the request never left the process.
//		fmt.Println("example.com is failing; retry in", resp.Header.Get("Retry-After"), "s")
//		return
//	}
//
// # The model
//
// A key picks the breaker: HostKey, the default, gives one breaker per
// host and port; WithRoutes gives one per host and net/http.ServeMux
// pattern, never one per raw path.
//
// A breaker is closed, open or half-open. While closed it lets calls
// through and counts their outcomes over a rolling window (10 seconds by
// default). Only the dependency's own faults are failures: connection
// errors, timeouts and 5xx responses. A 4xx is a success, a call its
// caller cancelled counts for nothing, and 429s count only when they go
// on for a while. When the window holds at least MinRequests outcomes (20)
// and the share of failures reaches FailureRate (half), the breaker opens.
// A dependency called less than twice a second never has 20 outcomes in a
// 10-second window, so it never trips with the defaults: for one, lower
// WithMinRequests or lengthen WithWindow in a WithPolicy.
//
// While open, the breaker refuses every call with a synthetic 503 that
// carries Retry-After and X-Should-Retry: false and names nothing
// internal; IsRejected tells it from a real 503. WithRejectAsError returns
// an error wrapping ErrOpen instead, and WithFallback your own answer.
// When the open period ends, the breaker is half-open: it lets one call
// through as a probe of the dependency. Several successful probes in a
// row close it; a failed probe opens it again, for twice as long, up to
// MaxOpenTimeout.
//
// # One Transport, many dependencies
//
// WithPolicy tunes the breakers a selector names (a host, host:port,
// *.suffix or a whole key) over the Transport-wide settings: a call
// timeout, a bulkhead (a limit on calls in flight, with an optional
// queue), a fallback, and a mode (enforce; shadow, which counts but
// refuses nothing; off). Transport.Update changes the settings at run
// time and keeps what every breaker knows; Config is the same settings as
// a JSON file. With a Store (the redisstore module), the instances of a
// fleet share hints: one opens, all open, and one probes for all.
//
// There is no background goroutine: state is computed from the clock when
// it is needed, so a Transport needs no Close and works inside
// testing/synctest bubbles. State shows in Prometheus metrics
// (WithMetrics), in Snapshot and StatusHandler, and never in responses.
//
// The README and the docs directory of the repository hold the guides:
// tuning, fallbacks, policies, observability, fleets, SDK recipes.
package httpbreaker
