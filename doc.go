// Package httpbreaker is a circuit-breaking http.RoundTripper for outbound
// HTTP clients.
//
// Set it as an http.Client's Transport once (or hand the client to any SDK
// that accepts a custom *http.Client) and every dependency the client talks
// to gets its own circuit breaker. When a dependency fails, its breaker
// opens and further requests to it are refused in microseconds instead of
// holding a caller for a full timeout; after a jittered, backed-off pause a
// few probes test it, and several successes in a row close the breaker
// again. Other dependencies are not affected.
//
//	client := &http.Client{
//		Transport: httpbreaker.New(nil, httpbreaker.WithRoutes("POST /v1/charges", "GET /v1/users/{id}")),
//		Timeout:   5 * time.Second,
//	}
//	resp, err := client.Get("https://fraud.internal/v1/users/42")
//	if httpbreaker.IsRejected(resp) { /* degrade: the request never left */ }
//
// # The model
//
// A key picks the breaker (HostKey by default: one breaker per host and
// port; RouteKey for one per host and net/http.ServeMux pattern). A breaker
// counts outcomes over a rolling window: only the dependency's own faults
// count as failures (connection errors, timeouts, 5xx), 4xx are successes,
// caller cancellations are ignored, and 429s count only when sustained. A
// call is judged when its headers arrive, or, with WithBodyErrors, when
// its body has been read, so that a cut or stalled body is a failure. It
// trips when, with at least MinRequests outcomes in the window, the failure
// rate reaches FailureRate. While open it refuses every request with a
// synthetic 503 (or an error, or a fallback); the 503 names nothing
// internal, so it is safe to pass on. When the open period ends it lets at
// most HalfOpenProbes probes through; ProbesToClose consecutive successes
// close it, a failure reopens it for twice as long.
//
// # One Transport, many dependencies
//
// One Transport serves every dependency of a client, each tuned apart:
// WithPolicy applies options to the breakers a selector names (a host,
// host:port, *.suffix or a whole key), over the Transport-wide ones, with
// its own call timeout (WithCallTimeout), bulkhead and queue
// (WithMaxConcurrent, WithQueue), fallback, and mode (WithMode: enforce,
// shadow to watch without refusing, or off). Transport.Update changes
// these settings at run time and keeps what every breaker knows; Config
// is the same settings as a service's JSON file. With a Store, Trip and
// Reset act on every instance of a fleet.
//
// There is no background goroutine: state is computed from the clock when
// it is needed, so a Transport needs no Close and works inside
// testing/synctest bubbles. State is visible through Prometheus
// (WithMetrics), Snapshot and StatusHandler, never through responses.
package httpbreaker
