package httpbreaker

import (
	"context"
	"log/slog"
	"math"
	"time"
)

// notify reports a transition, if there is one, and those chained to it,
// to the fleet, the logger and the state-change hook. It runs with no
// lock held, on the goroutine that caused the transition. It inlines: the
// request path, which almost never has a transition to report, does not
// call into report.
func (t *Transport) notify(tr *transition) {
	for ; tr != nil; tr = tr.next {
		t.report(tr)
	}
}

// report is notify for one transition.
func (t *Transport) report(tr *transition) {
	if tr.to == StateOpen {
		if c := t.breakers.get(tr.key); c != nil && c.bulk.waiting.Load() > 0 {
			c.bulk.refuseAll() // calls waiting for the bulkhead are refused as open
		}
	}
	if s := t.member; s != nil && !tr.fleet {
		switch tr.to {
		case StateOpen:
			h := Hint{Key: tr.key, State: StateOpen, Cycles: tr.cycles, Operator: tr.operator}
			if tr.retryAt != math.MaxInt64 { // else an operator's "until Reset": the zero time
				h.RetryAt = t.epoch.Add(time.Duration(tr.retryAt))
			}
			s.Publish(h)
		case StateClosed:
			s.Publish(Hint{Key: tr.key, State: StateClosed, Operator: tr.operator})
		}
	}
	if l := t.logger; l != nil {
		logTransition(l, tr)
	}
	if f := t.onStateChange; f != nil {
		f(tr.key, tr.from, tr.to)
	}
}

// logTransition logs opening at Warn and every other transition at Info.
func logTransition(l *slog.Logger, tr *transition) {
	attrs := []slog.Attr{
		slog.String("breaker", tr.key),
		slog.String("from", tr.from.String()),
		slog.String("to", tr.to.String()),
		slog.String("reason", tr.reason),
	}
	level := slog.LevelInfo
	if tr.to == StateOpen {
		level = slog.LevelWarn
		attrs = append(attrs, slog.Duration("open_for", tr.openFor))
		if tr.samples > 0 {
			attrs = append(attrs, slog.Float64("failure_rate", tr.rate), slog.Int64("samples", tr.samples))
		}
	}
	l.LogAttrs(context.Background(), level, "httpbreaker: breaker "+tr.to.String(), attrs...)
}
