package httpbreaker

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// The tunables: every setting of one breaker that a policy may set, a file
// may hold, Update logs and the status page shows. Each is one row, and
// everything else is derived from the table: the With… function applies
// the row's option (which checks its bounds), the declarative form decodes
// the PolicyConfig field whose JSON name is the row's name, Update's change
// log and Status.Settings read the row's value, and StatusHandler writes
// it as the file writes it.
//
// Adding a tunable is one row below (and in tunables), its field where the
// policy holds it, its fields in PolicyConfig and Settings, its With…
// function and its doc; TestTunableTable fails while any of them is
// missing.
var (
	modeRow = row[Mode]{name: "mode", option: "WithMode", status: "Mode",
		def: ModeEnforce, check: knownMode, at: func(p *policy) *Mode { return &p.mode }}
	failureRateRow = row[float64]{name: "failure_rate", option: "WithFailureRate", status: "FailureRate",
		def: 0.5, check: fraction(false), at: func(p *policy) *float64 { return &p.failureRate }}
	minRequestsRow = row[int64]{name: "min_requests", option: "WithMinRequests", status: "MinRequests",
		def: 20, check: between(1, maxInt), at: func(p *policy) *int64 { return &p.minRequests }}
	windowRow = row[time.Duration]{name: "window", option: "WithWindow", status: "Window",
		def: 10 * time.Second, check: atLeast(minWindow), at: func(p *policy) *time.Duration { return &p.window }}
	slowCallRow = row[time.Duration]{name: "slow_call_threshold", option: "WithSlowCallThreshold", status: "SlowCallThreshold",
		check: atLeast(0), at: func(p *policy) *time.Duration { return &p.slowCall }}
	openTimeoutRow = row[time.Duration]{name: "open_timeout", option: "WithOpenTimeout", status: "OpenTimeout",
		def: 5 * time.Second, check: positive, at: func(p *policy) *time.Duration { return &p.openTimeout }}
	maxOpenTimeoutRow = row[time.Duration]{name: "max_open_timeout", option: "WithMaxOpenTimeout", status: "MaxOpenTimeout",
		def: defaultMaxOpenTimeout, check: positive, at: func(p *policy) *time.Duration { return &p.maxOpenTimeout },
		set: func(p *policy, d time.Duration) { p.maxOpenTimeout, p.maxOpenSet = d, true }}
	jitterRow = row[float64]{name: "jitter", option: "WithJitter", status: "Jitter",
		def: 0.2, check: fraction(true), at: func(p *policy) *float64 { return &p.jitter }}
	halfOpenProbesRow = row[int64]{name: "half_open_probes", option: "WithHalfOpenProbes", status: "HalfOpenProbes",
		def: 1, check: between(1, maxHalfOpenProbes), at: func(p *policy) *int64 { return &p.halfOpenProbes }}
	probesToCloseRow = row[int64]{name: "probes_to_close", option: "WithProbesToClose", status: "ProbesToClose",
		def: 3, check: between(1, maxInt), at: func(p *policy) *int64 { return &p.probesToClose }}
	throttleSustainRow = row[time.Duration]{name: "throttle_sustain", option: "WithThrottleSustain", status: "ThrottleSustain",
		def: 10 * time.Second, check: atLeast(0), at: func(p *policy) *time.Duration { return &p.throttleSustain }}
	maxConcurrentRow = row[int64]{name: "max_concurrent", option: "WithMaxConcurrent", status: "MaxConcurrent",
		check: between(0, maxInt), at: func(p *policy) *int64 { return &p.maxConcurrent }}
	queueRow = row[int64]{name: "queue", option: "WithQueue", arg: "queue length", status: "Queue",
		check: between(0, maxInt), at: func(p *policy) *int64 { return &p.queue }}
	queueWaitRow = row[time.Duration]{name: "queue_wait", option: "WithQueue", arg: "maximum wait", status: "QueueWait",
		check: atLeast(0), at: func(p *policy) *time.Duration { return &p.queueWait }}
	callTimeoutRow = row[time.Duration]{name: "call_timeout", option: "WithCallTimeout", status: "CallTimeout",
		check: atLeast(0), at: func(p *policy) *time.Duration { return &p.callTimeout }}
	bodyErrorsRow = row[bool]{name: "body_errors", option: "WithBodyErrors", off: "WithoutBodyErrors", status: "BodyErrors",
		at: func(p *policy) *bool { return &p.bodyErrors }}
	rejectAsErrorRow = row[bool]{name: "reject_as_error", option: "WithRejectAsError", off: "WithoutRejectAsError", status: "RejectAsError",
		at: func(p *policy) *bool { return &p.rejectAsError }}
	retryBudgetRow = row[RetryBudget]{name: "retry_budget", option: "WithRetryBudget", status: "RetryBudget",
		check: RetryBudget.check, at: func(p *policy) *RetryBudget { return &p.retryBudget }}
)

// tunables is the table, in the order the file, the log and the status
// page show it.
var tunables = []tunable{
	&modeRow, &failureRateRow, &minRequestsRow, &windowRow, &slowCallRow,
	&openTimeoutRow, &maxOpenTimeoutRow, &jitterRow, &halfOpenProbesRow, &probesToCloseRow,
	&throttleSustainRow, &maxConcurrentRow, &queueRow, &queueWaitRow, &callTimeoutRow,
	&bodyErrorsRow, &rejectAsErrorRow, &retryBudgetRow,
}

// relations are the rules between tunables, checked on every breaker's
// resolved settings (at New and Update, for every selector), each blamed
// on one tunable.
var relations = []relation{
	{
		on:    &maxOpenTimeoutRow,
		holds: func(p *policy) bool { return p.maxOpenTimeout >= p.openTimeout },
		goMsg: func(p *policy) string {
			return fmt.Sprintf("maximum open timeout %v is shorter than the open timeout %v", p.maxOpenTimeout, p.openTimeout)
		},
		fileMsg: func(p *policy) string { return fmt.Sprintf("must be at least open_timeout (%v)", p.openTimeout) },
	},
	{
		on:    &queueWaitRow,
		holds: func(p *policy) bool { return p.queue == 0 || p.queueWait > 0 },
		goMsg: func(p *policy) string { return fmt.Sprintf("maximum wait must be positive, got %v", p.queueWait) },
		fileMsg: func(p *policy) string {
			return fmt.Sprintf("must be positive while queue is %d, got %v", p.queue, p.queueWait)
		},
	},
}

// maxInt is the largest int, as the int64 the policy holds.
const maxInt = int64(^uint(0) >> 1)

// row is one tunable whose value is a T.
type row[T comparable] struct {
	name   string // in the file (PolicyConfig's JSON name) and on the status page
	option string // the With… function that sets it
	off    string // for a bool: the function that sets it false
	arg    string // the argument it is in option's errors, when option has several
	status string // its field in Settings
	def    T
	check  func(T) string   // why a value is out of bounds, or ""; nil: every value is in
	at     func(*policy) *T // where a policy holds it
	set    func(*policy, T) // sets it, when that is more than *at(p) = v
}

// tunable is a row of any type, as the table holds it.
type tunable interface {
	about() (name, option, status string)
	setDefault(*policy)
	value(*policy) any     // the value, a T
	optionOf(v any) option // the option that sets v, a T
}

func (r *row[T]) about() (name, option, status string) { return r.name, r.option, r.status }
func (r *row[T]) setDefault(p *policy)                 { *r.at(p) = r.def }
func (r *row[T]) value(p *policy) any                  { return *r.at(p) }
func (r *row[T]) optionOf(v any) option                { return r.with(v.(T)) }

// put sets v in c's policy, or reports it out of bounds.
func (r *row[T]) put(c *config, v T) {
	if r.check != nil {
		if msg := r.check(v); msg != "" {
			goMsg := msg
			if r.arg != "" {
				goMsg = r.arg + " " + msg
			}
			c.errs = append(c.errs, &settingError{row: r, goMsg: goMsg, fileMsg: msg})
			return
		}
	}
	if r.set != nil {
		r.set(&c.policy, v)
	} else {
		*r.at(&c.policy) = v
	}
}

// with is the option that sets v, named as the row's option, or its off
// form for a false bool.
func (r *row[T]) with(v T) option {
	name := r.option
	if b, ok := any(v).(bool); ok && !b && r.off != "" {
		name = r.off
	}
	return tunableOption(name, func(c *config) { r.put(c, v) })
}

// relation is a rule between tunables, blamed on one of them.
type relation struct {
	on      tunable
	holds   func(*policy) bool
	goMsg   func(*policy) string // in the options' terms
	fileMsg func(*policy) string // in the file's terms
}

// checkRelations returns the error of the first relation p breaks, or nil.
func checkRelations(p *policy) error {
	for _, r := range relations {
		if !r.holds(p) {
			return &settingError{row: r.on, goMsg: r.goMsg(p), fileMsg: r.fileMsg(p)}
		}
	}
	return nil
}

// settingError is a tunable's value out of its bounds, or a relation that
// does not hold, told in the options' terms (Error) and in the file's
// (file).
type settingError struct {
	row            tunable
	policy         bool   // it arose in a policy,
	selector       string // this one
	goMsg, fileMsg string
}

// Error is the error in the options' terms.
func (e *settingError) Error() string {
	_, option, _ := e.row.about()
	s := "httpbreaker: " + option + ": " + e.goMsg
	if e.policy {
		s += fmt.Sprintf(" (in WithPolicy(%q, ...))", e.selector)
	}
	return s
}

// file is the error in the file's terms, without a prefix.
func (e *settingError) file() string {
	name, _, _ := e.row.about()
	return fileField(e.policy, e.selector, name) + ": " + e.fileMsg
}

// inPolicy is err, which resolving selector's policy returned, said to
// have arisen there.
func inPolicy(err error, selector string) error {
	if e, ok := err.(*settingError); ok {
		e2 := *e
		e2.policy, e2.selector = true, selector
		return &e2
	}
	return fmt.Errorf("%v (in WithPolicy(%q, ...))", err, selector)
}

// fileField names a field of a Config: name at the top level, or in the
// policy of selector.
func fileField(inPolicy bool, selector, name string) string {
	if !inPolicy {
		return name
	}
	if name == "" {
		return fmt.Sprintf("policies[%q]", selector)
	}
	return fmt.Sprintf("policies[%q].%s", selector, name)
}

// The bounds of the rows: each says why a value is out, or "".

// between is the bounds [least, most].
func between(least, most int64) func(int64) string {
	return func(n int64) string {
		switch {
		case n < least && least == 0:
			return fmt.Sprintf("must not be negative, got %d", n)
		case n < least:
			return fmt.Sprintf("must be at least %d, got %d", least, n)
		case n > most:
			return fmt.Sprintf("must be at most %d, got %d", most, n)
		}
		return ""
	}
}

// atLeast is the bounds [least, ∞).
func atLeast(least time.Duration) func(time.Duration) string {
	return func(d time.Duration) string {
		switch {
		case d < least && least == 0:
			return fmt.Sprintf("must not be negative, got %v", d)
		case d < least:
			return fmt.Sprintf("must be at least %v, got %v", least, d)
		}
		return ""
	}
}

// positive is the bounds (0, ∞).
func positive(d time.Duration) string {
	if d <= 0 {
		return fmt.Sprintf("must be positive, got %v", d)
	}
	return ""
}

// fraction is the bounds [0, 1], or (0, 1] unless zero is allowed.
func fraction(zero bool) func(float64) string {
	return func(f float64) string {
		switch {
		case zero && !(f >= 0 && f <= 1):
			return fmt.Sprintf("must be in [0, 1], got %v", f)
		case !zero && !(f > 0 && f <= 1):
			return fmt.Sprintf("must be in (0, 1], got %v", f)
		}
		return ""
	}
}

// knownMode is the modes there are.
func knownMode(m Mode) string {
	if m < ModeEnforce || m > ModeOff {
		return fmt.Sprintf("unknown mode %d", int(m))
	}
	return ""
}

// The derived forms: a field of PolicyConfig and of Settings per row,
// found by the row's name and status field.

// tunableField is where a row lives in PolicyConfig and in Settings.
type tunableField struct {
	tunable
	name   string
	conf   int // PolicyConfig's field (a pointer to the file's type)
	status int // Settings' field
}

// tunableFields are the table's rows with their fields, in its order.
var tunableFields = fieldsOf(tunables)

// fieldsOf finds each row's fields, and panics when one is missing or of
// a type its value cannot convert to: the table and the structs disagree.
func fieldsOf(ts []tunable) []tunableField {
	conf, status := reflect.TypeFor[PolicyConfig](), reflect.TypeFor[Settings]()
	out := make([]tunableField, 0, len(ts))
	for _, t := range ts {
		name, _, st := t.about()
		f := tunableField{tunable: t, name: name, conf: -1, status: -1}
		for i := range conf.NumField() {
			if jsonName(conf.Field(i)) == name {
				f.conf = i
			}
		}
		if sf, ok := status.FieldByName(st); ok {
			f.status = sf.Index[0]
		}
		v := reflect.TypeOf(t.value(&policy{}))
		if f.conf < 0 || f.status < 0 || conf.Field(f.conf).Type.Kind() != reflect.Pointer ||
			!v.ConvertibleTo(conf.Field(f.conf).Type.Elem()) || status.Field(f.status).Type != v {
			panic(fmt.Sprintf("httpbreaker: tunable %q: PolicyConfig needs a field *T tagged %q and Settings a field %s of type %v", name, name, st, v))
		}
		out = append(out, f)
	}
	return out
}

// jsonName is a struct field's JSON name.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// tunableNamed returns the row called name in the file.
func tunableNamed(name string) (tunableField, bool) {
	for _, f := range tunableFields {
		if f.name == name {
			return f, true
		}
	}
	return tunableField{}, false
}

// fileValue is the value p holds for f, as the file writes it (a value of
// the PolicyConfig field's element type).
func (f tunableField) fileValue(p *policy) reflect.Value {
	return reflect.ValueOf(f.value(p)).Convert(reflect.TypeFor[PolicyConfig]().Field(f.conf).Type.Elem())
}

// confField is the field of c that holds f: a pointer, nil while unset.
func (f tunableField) confField(c *PolicyConfig) reflect.Value {
	return reflect.ValueOf(c).Elem().Field(f.conf)
}

// fileOption returns the option of f's field in c, which is set.
func (f tunableField) fileOption(c *PolicyConfig) Option {
	return f.optionOf(f.confField(c).Elem().Convert(reflect.TypeOf(f.value(&policy{}))).Interface())
}

// setDefaults sets every tunable of p to its default.
func setDefaults(p *policy) {
	for _, t := range tunables {
		t.setDefault(p)
	}
}

// effective returns the Settings p shows.
func (p *policy) effective() Settings {
	var s Settings
	sv := reflect.ValueOf(&s).Elem()
	for _, f := range tunableFields {
		sv.Field(f.status).Set(reflect.ValueOf(f.value(p)))
	}
	return s
}

// file returns s as a PolicyConfig with every field set: what a file
// would say to make a breaker with these settings.
func (s Settings) file() PolicyConfig {
	var c PolicyConfig
	sv := reflect.ValueOf(s)
	for _, f := range tunableFields {
		cf := f.confField(&c)
		v := reflect.New(cf.Type().Elem())
		v.Elem().Set(sv.Field(f.status).Convert(cf.Type().Elem()))
		cf.Set(v)
	}
	return c
}

// text writes v as the file writes it, unquoted: "10s", "0.5", "enforce",
// "true", or the JSON of a composite value.
func text(v reflect.Value) string {
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		if b, err := m.MarshalText(); err == nil {
			return string(b)
		}
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return fmt.Sprint(v.Interface())
	}
	return string(b)
}

// formOf says what the file must give for a value of type t, for errors.
func formOf(t reflect.Type) string {
	if f, ok := reflect.Zero(t).Interface().(interface{ form() string }); ok {
		return f.form()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}
