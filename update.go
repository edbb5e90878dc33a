package httpbreaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
)

// Update replaces the Transport's tunable settings with opts applied to
// the defaults — exactly what New would make of the same options,
// WithPolicy included — and keeps every breaker's state: its window (a
// breaker whose window length changes starts a fresh window, in the state
// it is in), its open period and backoff, its probes and its generation.
// Settings are of two kinds. A breaker's own decisions — the trip rule
// (window, min requests, failure rate, throttle sustain), its open
// periods (open and maximum open timeout, jitter, backoff), its probes,
// its bulkhead and queue, its retry budget — are taken by the settings it
// holds at the moment of the decision, whichever call's outcome triggers
// it: a window that already holds enough failures for a lowered minimum
// trips on its next outcome, even one of a call admitted before the
// Update, and the next open period lasts the new open timeout; an open
// breaker keeps the open period it has. A call's own handling —
// classifier, body errors, slow-call threshold, call timeout, fallback,
// reject-as-error — stays as it was admitted. A key switched to ModeOff loses its
// breaker and its bulkhead: the calls waiting in its line go on at once,
// and no outcome of its calls in flight is counted; a key switched back
// from it starts closed. A key switched to ModeShadow refuses nothing from
// then on: the calls waiting in its line go on at once, as shadow passes
// of a full bulkhead (counted in breaker_shadow_rejections_total, their
// outcomes counted for nothing). A bulkhead resized
// applies at once: a larger one admits its waiters, oldest first, before
// any newcomer; a smaller one admits nobody until the calls in flight
// fall below it; no call in flight is cut. A bulkhead added to a key
// that had none counts the calls admitted from then on: a key without a
// bulkhead does not count its calls in flight (that would cost every
// call), so those already in flight hold no place in it.
//
// The options that shape the Transport (WithKeyFunc, WithRoutes,
// WithMaxBreakers, WithMetrics, WithLogger, WithOnTransition, WithObserver, WithStore)
// stay as New set them. Passing one, or any invalid value, makes Update
// return an error naming the option, and then nothing changes.
//
// Update is safe during traffic: a request sees the old settings or the
// new ones, never a mix, and never waits for Update. With a logger, it
// logs at Info each setting whose value changed, and for which selector;
// with metrics, breaker_config_updates_total counts its calls by result.
func (t *Transport) Update(opts ...Option) error {
	err := t.update(opts)
	if err != nil {
		t.updateErrors.Add(1)
		if l := t.logger; l != nil {
			l.Warn("httpbreaker: Update refused; the settings stay as they were", "error", err)
		}
		return err
	}
	t.updates.Add(1)
	return nil
}

// update is Update without its accounting.
func (t *Transport) update(opts []Option) error {
	old := t.policies.Load()
	if old == nil {
		return errNotNew
	}
	c := defaultConfig()
	for _, o := range opts {
		switch o := o.(type) {
		case nil:
			return errors.New("httpbreaker: Update: nil Option")
		case option:
			if o.transport && o.name != "WithPolicy" {
				return fmt.Errorf("httpbreaker: Update: %s shapes the Transport and stays as New set it", o.name)
			}
		}
	}
	c.applyAll("Update", opts)
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	ps, err := newPolicies(&c)
	if err != nil {
		return err
	}
	t.mu.Lock() // no breaker is made while the policies change under it
	t.policies.Store(ps)
	var gone []*circuit
	t.breakers.each(func(k *circuit) bool {
		from, to := k.pol.Load(), ps.of(k.key())
		if (from.mode == ModeOff) != (to.mode == ModeOff) {
			gone = append(gone, k) // to off: no breaker; from off: a closed one, made anew
			return true
		}
		k.pol.Store(to)
		k.b.configure(&to.settings)
		k.wake() // a larger bulkhead admits its waiters at once
		if to.mode == ModeShadow {
			k.bulk.passAll() // after the Store: a call that joins later sees shadow (see Transport.wait)
		}
		return true
	})
	for key, o := range t.telling {
		if o.quiet() {
			delete(t.telling, key)
		}
	}
	for _, k := range gone {
		t.breakers.remove(k)
		k.b.mu.Lock()
		k.b.evicted.Store(true)
		k.b.mu.Unlock()
		k.bulk.letGo() // after evicted: what they answer counts nowhere
		if !k.b.out.quiet() {
			// Its hooks may still run: the key's next breaker tells its
			// transitions through the same outbox, after these.
			if t.telling == nil {
				t.telling = make(map[string]*outbox)
			}
			t.telling[k.key()] = k.b.out
		}
	}
	// Breakers gone, or made evictable (a key off, a shorter window): the
	// next new key looks for room at once.
	t.nextEvict.Store(0)
	t.mu.Unlock()
	if l := t.logger; l != nil {
		logChanges(l, old, ps)
	}
	return nil
}

// logChanges logs at Info each setting whose value differs between the
// policies from and to: Transport-wide, and for each selector either
// names, unless the selector only inherits the Transport-wide change.
func logChanges(l *slog.Logger, from, to *policies) {
	logDiff(l, "*", from.base, to.base, nil)
	var sels []string
	for _, ps := range []*policies{from, to} {
		for _, r := range ps.rules {
			if !slices.Contains(sels, r.sel.text) {
				sels = append(sels, r.sel.text)
			}
		}
	}
	for _, sel := range sels {
		s, _ := parseSelector(sel)
		logDiff(l, sel, from.of(s.example()), to.of(s.example()), []*policy{from.base, to.base})
	}
}

// logDiff logs each setting that differs between a and b, for selector,
// but one that changed exactly as it did between the Transport-wide
// policies in wide (when given).
func logDiff(l *slog.Logger, selector string, a, b *policy, wide []*policy) {
	va, vb := describe(a), describe(b)
	var wa, wb []setting
	if wide != nil {
		wa, wb = describe(wide[0]), describe(wide[1])
	}
	for i := range va {
		if va[i].value != vb[i].value && (wide == nil || va[i] != wa[i] || vb[i] != wb[i]) {
			l.LogAttrs(context.Background(), slog.LevelInfo, "httpbreaker: setting changed",
				slog.String("selector", selector), slog.String("setting", va[i].name),
				slog.String("from", va[i].value), slog.String("to", vb[i].value))
		}
	}
}

// setting is one named value of a policy, as logs show it.
type setting struct{ name, value string }

// describe lists p's settings: every tunable by its name and value in the
// file (see Config), then the functions, which show as "default" or
// "set": two different functions set one after the other show no change.
func describe(p *policy) []setting {
	out := make([]setting, 0, len(tunableFields)+2)
	for _, f := range tunableFields {
		out = append(out, setting{f.name, text(f.fileValue(p))})
	}
	return append(out, setting{"classifier", isSet(p.classifier != nil)}, setting{"fallback", isSet(p.fallback != nil)})
}

// isSet shows whether a function is set.
func isSet(set bool) string {
	if set {
		return "set"
	}
	return "default"
}
