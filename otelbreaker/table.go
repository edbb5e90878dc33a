package otelbreaker

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/httpbreaker/httpbreaker"
)

// maxTracked bounds the breakers the table remembers. The core bounds live
// breakers per Transport (WithMaxBreakers, 1000 by default) but evicts idle
// ones, so the keys seen over a process's life are not bounded. When the
// table is full it forgets its closed breakers (as the core evicts idle
// closed ones first); a key it cannot remember is still counted, and its
// state reported, with attributes made each time.
const maxTracked = 10_000

// nOutcomes is the number of httpbreaker.Outcome values.
const nOutcomes = int(httpbreaker.OutcomeIgnored) + 1

// table holds, per breaker key, the attribute sets of its measurements,
// made once per key and outcome so that recording a call allocates
// nothing of its own, and the state its transitions put it in, which
// tells the table what it may forget (the state gauge reads the
// Transports' breakers instead: see observer.observeStates).
type table struct {
	extra []attribute.KeyValue // WithAttributes
	limit int64                // maxTracked, or less in tests

	m sync.Map // key string → *breaker
	n atomic.Int64
	// full is set when making room found no closed breaker to forget, and
	// cleared when a breaker closes: until then a new key is not looked
	// for room again, so no call pays for a sweep that cannot succeed.
	full atomic.Bool
	// sweep serializes making room; lookups never take it.
	sweep sync.Mutex
}

// breaker is what the table knows of one key.
type breaker struct {
	key   string
	state atomic.Int32 // httpbreaker.State, as its last transition left it: closed ones may be forgotten

	admitted [nOutcomes]callAttrs    // not refused, not shadow
	span     [3][]attribute.KeyValue // by state: breaker, state
	gauge    [3]metric.ObserveOption // by state: breaker, state, extra
	mu       sync.RWMutex            // guards other
	other    map[otherKey]*callAttrs // refused and shadow calls, made on first use
	t        *table                  // for callAttrs
}

// callAttrs are the attribute options of one kind of call.
type callAttrs struct {
	add    []metric.AddOption    // httpbreaker.calls
	record []metric.RecordOption // the duration histograms: breaker, outcome
}

type otherKey struct {
	reason  string
	outcome httpbreaker.Outcome
	shadow  bool
}

// get returns key's breaker, remembering it if there is room (it starts
// closed), or nil if there is none.
func (t *table) get(key string) *breaker { return t.getIn(key, httpbreaker.StateClosed) }

// getIn is get for a key whose breaker is known to be in state st: if the
// table remembers it only now (it had no room when the key last moved),
// it starts in st.
func (t *table) getIn(key string, st httpbreaker.State) *breaker {
	if v, ok := t.m.Load(key); ok {
		return v.(*breaker)
	}
	return t.add(key, st)
}

func (t *table) add(key string, st httpbreaker.State) *breaker {
	if t.full.Load() {
		return nil
	}
	t.sweep.Lock()
	defer t.sweep.Unlock()
	if v, ok := t.m.Load(key); ok {
		return v.(*breaker)
	}
	if t.n.Load() >= t.limit {
		t.m.Range(func(k, v any) bool {
			if httpbreaker.State(v.(*breaker).state.Load()) == httpbreaker.StateClosed {
				t.m.Delete(k)
				t.n.Add(-1)
			}
			return true
		})
		if t.n.Load() >= t.limit {
			t.full.Store(true)
			return nil
		}
	}
	b := t.newBreaker(key)
	b.state.Store(int32(st))
	t.m.Store(key, b)
	t.n.Add(1)
	return b
}

func (t *table) newBreaker(key string) *breaker {
	b := &breaker{key: key, other: map[otherKey]*callAttrs{}, t: t}
	for o := range nOutcomes {
		b.admitted[o] = *t.callAttrs(key, otherKey{outcome: httpbreaker.Outcome(o)})
	}
	for _, st := range states {
		b.span[st] = stateAttrs(key, st)
	}
	b.gauge = t.stateSeries(key)
	return b
}

// set makes an attribute set of kv and the extra attributes.
func (t *table) set(kv ...attribute.KeyValue) attribute.Set {
	return attribute.NewSet(append(kv, t.extra...)...)
}

// callAttrs makes the attribute options of calls of kind k on key.
func (t *table) callAttrs(key string, k otherKey) *callAttrs {
	outcome := outcomeRejected
	if k.reason == "" || k.shadow {
		outcome = outcomeText(k.outcome)
	}
	kv := []attribute.KeyValue{keyBreaker.String(key), keyOutcome.String(outcome)}
	record := metric.WithAttributeSet(t.set(kv...))
	if k.reason != "" {
		kv = append(kv, keyReason.String(k.reason))
	}
	if k.shadow {
		kv = append(kv, keyShadow.Bool(true))
	}
	return &callAttrs{
		add:    []metric.AddOption{metric.WithAttributeSet(t.set(kv...))},
		record: []metric.RecordOption{record},
	}
}

// outcomeText is the httpbreaker.outcome of an admitted call.
func outcomeText(o httpbreaker.Outcome) string {
	if o < 0 || int(o) >= nOutcomes {
		o = httpbreaker.OutcomeIgnored
	}
	return o.String()
}

// uncached makes c's attribute options for a key the table has no room for.
func (t *table) uncached(c httpbreaker.Call) *callAttrs {
	return t.callAttrs(c.Key, kindOf(c))
}

func kindOf(c httpbreaker.Call) otherKey {
	o := c.Outcome
	if o < 0 || int(o) >= nOutcomes {
		o = httpbreaker.OutcomeIgnored
	}
	return otherKey{reason: c.Rejected, outcome: o, shadow: c.Shadow}
}

// call returns the attribute options of c, a call on b.
func (b *breaker) call(c httpbreaker.Call) *callAttrs {
	k := kindOf(c)
	if k.reason == "" && !k.shadow {
		return &b.admitted[k.outcome]
	}
	b.mu.RLock()
	a := b.other[k]
	b.mu.RUnlock()
	if a != nil {
		return a
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a = b.other[k]; a == nil {
		a = b.t.callAttrs(b.key, k)
		b.other[k] = a
	}
	return a
}

// moved records that tr happened, if the table has room for its key.
func (t *table) moved(tr httpbreaker.Transition) {
	if b := t.getIn(tr.Key, tr.To); b != nil {
		b.state.Store(int32(tr.To))
	}
	if tr.To == httpbreaker.StateClosed {
		t.full.Store(false) // there may be room again
	}
}

// states are the three states, in the order of their values.
var states = [3]httpbreaker.State{httpbreaker.StateClosed, httpbreaker.StateHalfOpen, httpbreaker.StateOpen}

// gaugeOptions returns the options of the three httpbreaker.state series
// of key, whose breaker is in state st, by state: made once if the table
// has room for key, else made now.
func (t *table) gaugeOptions(key string, st httpbreaker.State) [3]metric.ObserveOption {
	if b := t.getIn(key, st); b != nil {
		return b.gauge
	}
	return t.stateSeries(key)
}

// stateSeries makes the options of key's three httpbreaker.state series,
// by state.
func (t *table) stateSeries(key string) [3]metric.ObserveOption {
	var opts [3]metric.ObserveOption
	for _, st := range states {
		opts[st] = metric.WithAttributeSet(t.set(stateAttrs(key, st)...))
	}
	return opts
}

// stateAttrs are the attributes of key in state st: on a span, and with
// the extra ones, of a state series.
func stateAttrs(key string, st httpbreaker.State) []attribute.KeyValue {
	return []attribute.KeyValue{keyBreaker.String(key), keyState.String(st.String())}
}
