package httpbreaker

import (
	"errors"
	"slices"
	"strings"
)

// Health is a readiness summary of a Transport's breakers, as
// Transport.Health returns it: which dependencies the breakers are
// refusing, and whether any of them is one the service cannot work
// without. It names keys (hosts, routes): put it in a report served on an
// internal port only, never to the public.
//
// Health is a plain value; it is safe to read from multiple goroutines.
type Health struct {
	// Ready reports that no critical breaker is open: in a Health from
	// Transport.Health it is false exactly when CriticalOpen is not empty.
	Ready bool `json:"ready"`
	// Open lists, sorted, the keys of every breaker that is open or
	// half-open: refusing all, or all but a few probe, requests. A
	// non-empty Open with Ready true means degraded, not down.
	Open []string `json:"open,omitempty"`
	// CriticalOpen lists, sorted, the keys in Open that were named
	// critical.
	CriticalOpen []string `json:"critical_open,omitempty"`
}

// Health reports the breakers' state for a readiness check. It is not
// ready only when the breaker of one of the critical keys is open or
// half-open; any other breaker, however many and for however long, leaves
// it ready and is listed in Open. Critical keys are read as Trip, State
// and Reset read keys (a host lower-cased, without a trailing dot or a
// default port) and then matched whole, never as a prefix: with
// WithRoutes, a route's key is its host key, a space and the pattern (see
// RouteKey), and the host key alone covers only the requests that matched
// no pattern. A critical key without a live
// breaker counts as closed.
//
// Name few critical keys, or none. A readiness probe that fails because a
// dependency is down takes every instance of the service out of rotation
// at once, since they all share that dependency: a partial outage (one
// feature broken) becomes a total one (nothing served), and the
// dependency's recovery is no faster for it. Only a dependency without
// which the service can do nothing useful should be critical, and even
// then a service that answers with a clear error, or from a cache, is
// usually better than one that is gone. Report Open in the readiness
// body, in logs or in metrics instead: it shows what is degraded without
// taking anything out of rotation.
//
// Breakers in ModeShadow are left out of Open and CriticalOpen alike:
// they refuse nothing, so they never make a service unready.
//
// Health reads every live breaker (see Snapshot); it is meant for a probe
// every few seconds, not for the request path.
func (t *Transport) Health(critical ...string) Health {
	h := Health{Ready: true}
	critical = slices.Clone(critical)
	for i, k := range critical {
		critical[i] = canonicalHostKey(k)
	}
	for _, s := range t.Snapshot() {
		if s.State == StateClosed || s.Mode == ModeShadow {
			continue // a shadow breaker refuses nothing
		}
		h.Open = append(h.Open, s.Key)
		if slices.Contains(critical, s.Key) {
			h.CriticalOpen = append(h.CriticalOpen, s.Key)
			h.Ready = false
		}
	}
	return h
}

// Err returns nil when h.Ready, and otherwise an error naming the critical
// keys whose breakers are open, for health-check libraries that take a
// func(context.Context) error. Its message names keys: log it, or serve it
// on an internal port, but do not send it to public clients.
func (h Health) Err() error {
	if h.Ready {
		return nil
	}
	return errors.New("httpbreaker: not ready: circuit open for critical " + strings.Join(h.CriticalOpen, ", "))
}
