package httpbreaker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Config is the declarative form of a Transport's tunable settings, for a
// service to keep in its own JSON configuration file and hand to New or
// Update through Options:
//
//	{
//	  "failure_rate": 0.5,
//	  "open_timeout": "5s",
//	  "policies": {
//	    "payments.internal": {"failure_rate": 0.25, "open_timeout": "30s", "max_concurrent": 40},
//	    "recs.internal": {"call_timeout": "150ms", "max_concurrent": 10, "mode": "shadow"}
//	  }
//	}
//
// The Transport-wide settings sit at the top level, and Policies holds the
// settings of each selector (see WithPolicy). Field names are snake_case;
// durations are Go duration strings ("800ms", "1m30s"). An unset field
// inherits (from the defaults, or from the wider level); an explicit zero
// is a value ("jitter": 0 means no jitter), and each field inherits on its
// own (a policy naming only "queue" keeps the inherited "queue_wait"). A
// narrower level turns off what a wider one turned on: "body_errors":
// false, "reject_as_error": false, "call_timeout": "0s". Config
// round-trips through encoding/json. Make it a named field of the
// service's own configuration (Breaker httpbreaker.Config
// `json:"breaker"`): embedded without a name, its UnmarshalJSON would
// decode the whole document, and refuse the service's own fields as
// unknown.
//
// Decoding refuses an unknown field, a selector or a field given twice,
// and null for a field, inside retry_budget's object too, where a member
// left out is refused as well (it would be zero: {"ratio": 0,
// "min_per_second": 0} is the off form); a wrong type names the field
// (and the member) and the form it wants, and a number too large for its
// field says it is out of range. Options (and ParseConfig) refuse
// a bad value or a relation that does not hold, naming the selector and
// the field as the file does:
// policies["pricing.internal"].max_open_timeout: must be at least
// open_timeout (30s).
//
// What a Config cannot say — classifiers, fallbacks, the options that
// shape the Transport — is given as options beside it:
// opts, err := cfg.Options(), then New(next, append(opts, WithFallback(f))...).
type Config struct {
	PolicyConfig
	// Policies are the settings of each selector, over the top level.
	Policies map[string]PolicyConfig `json:"policies,omitempty"`
}

// PolicyConfig is one level of a Config: the Transport-wide settings, or
// one selector's. Each field is the option of the same name (see the
// table of tunables in settings.go); nil is unset.
type PolicyConfig struct {
	Mode              *Mode        `json:"mode,omitempty"`                // WithMode: "enforce", "shadow" or "off"
	FailureRate       *float64     `json:"failure_rate,omitempty"`        // WithFailureRate
	MinRequests       *int         `json:"min_requests,omitempty"`        // WithMinRequests
	Window            *Duration    `json:"window,omitempty"`              // WithWindow
	SlowCallThreshold *Duration    `json:"slow_call_threshold,omitempty"` // WithSlowCallThreshold
	OpenTimeout       *Duration    `json:"open_timeout,omitempty"`        // WithOpenTimeout
	MaxOpenTimeout    *Duration    `json:"max_open_timeout,omitempty"`    // WithMaxOpenTimeout
	Jitter            *float64     `json:"jitter,omitempty"`              // WithJitter
	HalfOpenProbes    *int         `json:"half_open_probes,omitempty"`    // WithHalfOpenProbes
	ProbesToClose     *int         `json:"probes_to_close,omitempty"`     // WithProbesToClose
	ThrottleSustain   *Duration    `json:"throttle_sustain,omitempty"`    // WithThrottleSustain
	MaxConcurrent     *int         `json:"max_concurrent,omitempty"`      // WithMaxConcurrent
	Queue             *int         `json:"queue,omitempty"`               // WithQueue's length, on its own
	QueueWait         *Duration    `json:"queue_wait,omitempty"`          // WithQueue's maximum wait, on its own
	CallTimeout       *Duration    `json:"call_timeout,omitempty"`        // WithCallTimeout; "0s": none
	BodyErrors        *bool        `json:"body_errors,omitempty"`         // WithBodyErrors; false: WithoutBodyErrors
	RejectAsError     *bool        `json:"reject_as_error,omitempty"`     // WithRejectAsError; false: WithoutRejectAsError
	RetryBudget       *RetryBudget `json:"retry_budget,omitempty"`        // WithRetryBudget; {"ratio": 0, "min_per_second": 0}: none
}

// Duration is a time.Duration written as a Go duration string ("800ms").
type Duration time.Duration

// MarshalText writes d as time.Duration's String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration string, as time.ParseDuration does.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		if durationShaped.Match(text) {
			return fmt.Errorf("%q is out of range: at most %s", text, time.Duration(math.MaxInt64))
		}
		return fmt.Errorf("want %s, got %q", Duration(0).form(), text)
	}
	*d = Duration(v)
	return nil
}

// durationShaped matches a Go duration as time.ParseDuration reads one,
// whatever its size: a sign, then numbers each with a unit ("1.5h30m").
// One that time.ParseDuration refuses is too large.
var durationShaped = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

// form is what a file gives for a Duration.
func (Duration) form() string { return `a duration such as "800ms"` }

// form is what a file gives for a Mode.
func (Mode) form() string { return `"enforce", "shadow" or "off"` }

// UnmarshalJSON decodes one level of a Config, as Config's decoder does.
func (p *PolicyConfig) UnmarshalJSON(b []byte) error {
	var out PolicyConfig
	if err := out.decode(b, false, ""); err != nil {
		return err
	}
	*p = out
	return nil
}

// UnmarshalJSON decodes a Config, refusing unknown fields, a selector or
// field given twice, null for a field, and a value of the wrong type; an
// error names the selector and the field. A document that is only null
// leaves c as it is, as for every type of encoding/json.
func (c *Config) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	var out Config
	err := eachMember(b, func(key, msg string) error { return configError(false, "", key, msg) },
		func(key string, v json.RawMessage) error {
			if key != "policies" {
				return out.decodeField(false, "", key, v)
			}
			out.Policies = map[string]PolicyConfig{}
			return eachMember(v, func(sel, msg string) error {
				if sel == "" {
					return configError(false, "", "policies", msg)
				}
				return configError(true, sel, "", msg)
			}, func(sel string, pv json.RawMessage) error {
				var p PolicyConfig
				if err := p.decode(pv, true, sel); err != nil {
					return err
				}
				out.Policies[sel] = p
				return nil
			})
		})
	if err != nil {
		return err
	}
	*c = out
	return nil
}

// decode fills p from the JSON object b: the policy of selector, or the
// top level unless inPolicy.
func (p *PolicyConfig) decode(b []byte, inPolicy bool, selector string) error {
	return eachMember(b, func(key, msg string) error { return configError(inPolicy, selector, key, msg) },
		func(key string, v json.RawMessage) error { return p.decodeField(inPolicy, selector, key, v) })
}

// decodeField decodes v into p's field called name.
func (p *PolicyConfig) decodeField(inPolicy bool, selector, name string, v json.RawMessage) error {
	f, ok := tunableNamed(name)
	if !ok {
		return configError(inPolicy, selector, "", fmt.Sprintf("unknown field %q", name))
	}
	field := f.confField(p)
	val, msg := decodeValue(field.Type().Elem(), v)
	if msg != "" {
		return configError(inPolicy, selector, name, msg)
	}
	field.Set(val)
	return nil
}

// decodeValue decodes v as a value of type t, returned as a pointer to
// it, or says what is wrong with v: null, a value of another type (naming
// the form t wants), or a bad value.
func decodeValue(t reflect.Type, v json.RawMessage) (reflect.Value, string) {
	if isNull(v) {
		return reflect.Value{}, fmt.Sprintf("want %s, got null", formOf(t))
	}
	msg, missing := checkMembers(t, v)
	if msg != "" {
		return reflect.Value{}, msg
	}
	val := reflect.New(t)
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields() // in a composite value too, nothing given is ignored
	if err := dec.Decode(val.Interface()); err != nil {
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
			msg := fmt.Sprintf("want %s, got %s", formOf(t), shorten(v))
			if te.Field != "" { // a member of a composite value: name it
				msg = fmt.Sprintf("want %s, got %s", formOf(te.Type), te.Value)
			}
			if lit, ok := strings.CutPrefix(te.Value, "number "); ok && (te.Type.Kind() == reflect.Float64 || isWhole(lit)) {
				msg = lit + " is out of range" // the form it wants, but too large for it
			}
			if te.Field != "" {
				msg = te.Field + ": " + msg
			}
			return reflect.Value{}, msg
		}
		msg := strings.TrimPrefix(err.Error(), "httpbreaker: ")
		return reflect.Value{}, strings.TrimPrefix(msg, "json: ")
	}
	if missing != "" {
		return reflect.Value{}, missing + ": missing"
	}
	return val, ""
}

// isWhole reports whether the JSON number lit is written as a whole
// number.
func isWhole(lit string) bool {
	lit = strings.TrimPrefix(lit, "-")
	return lit != "" && strings.Trim(lit, "0123456789") == ""
}

// checkMembers says what encoding/json would let pass unseen in v, a
// composite value of struct type t: a member given twice (it keeps the
// last) or null (it leaves the field at zero); and it names the first
// member left out (which leaves the field at zero too), for the caller
// to tell once the decoder has had its say. It leaves the rest, unknown
// members and wrong types, to the decoder.
func checkMembers(t reflect.Type, v json.RawMessage) (msg, missing string) {
	if t.Kind() != reflect.Struct || !bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
		return "", ""
	}
	seen := map[string]bool{}
	err := eachMember(v, func(key, msg string) error {
		if key == "" {
			return errors.New(msg)
		}
		return errors.New(key + ": " + msg)
	}, func(key string, m json.RawMessage) error {
		seen[key] = true
		if !isNull(m) {
			return nil
		}
		for i := range t.NumField() {
			if f := t.Field(i); jsonName(f) == key {
				return fmt.Errorf("%s: want %s, got null", key, formOf(f.Type))
			}
		}
		return nil
	})
	if err != nil {
		return err.Error(), ""
	}
	for i := range t.NumField() {
		if name := jsonName(t.Field(i)); name != "" && !seen[name] {
			return "", name
		}
	}
	return "", ""
}

// eachMember calls f for each member of the JSON object b, in order, and
// bad for what is wrong with b itself (with key "") or a key given twice.
func eachMember(b []byte, bad func(key, msg string) error, f func(key string, v json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bad("", "want an object, got "+shorten(b))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("", err.Error())
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return bad("", err.Error())
		}
		if seen[key] {
			return bad(key, "given twice")
		}
		seen[key] = true
		if err := f(key, v); err != nil {
			return err
		}
	}
	return nil
}

// isNull reports whether b is the JSON null.
func isNull(b []byte) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// shorten is the JSON text b, shortened for an error.
func shorten(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 40 {
		return string(b[:37]) + "..."
	}
	return string(b)
}

// configError is an error about the field name of the policy of selector
// (or of the top level unless inPolicy), in the file's terms.
func configError(inPolicy bool, selector, name, msg string) error {
	if where := fileField(inPolicy, selector, name); where != "" {
		msg = where + ": " + msg
	}
	return errors.New("httpbreaker: Config: " + msg)
}

// Options returns the options c stands for, Transport-wide first, then a
// WithPolicy per selector (sorted, so that the result is the same every
// time), or the first bad value: every field in range, every selector
// well-formed and given once, and the relations (a maximum open timeout
// not shorter than the open timeout) holding for every selector. An error
// names the selector and the field as the file does
// ("httpbreaker: Config: policies[\"pay\"].failure_rate: …").
func (c Config) Options() ([]Option, error) {
	sels := make([]string, 0, len(c.Policies))
	for sel := range c.Policies {
		sels = append(sels, sel)
	}
	slices.Sort(sels)
	named := map[selector]string{}
	opts := c.PolicyConfig.options()
	for _, sel := range sels {
		s, err := parseSelector(sel)
		if err != nil {
			return nil, configError(true, sel, "", err.Error())
		}
		canon := selector{kind: s.kind, host: s.host}
		if other, ok := named[canon]; ok {
			return nil, configError(true, sel, "", fmt.Sprintf("names the same breakers as %q: give each selector once", other))
		}
		named[canon] = sel
		p := c.Policies[sel]
		opts = append(opts, WithPolicy(sel, p.options()...))
	}
	cfg := defaultConfig()
	cfg.applyAll("Config", opts)
	if len(cfg.errs) > 0 {
		return nil, fileError(cfg.errs[0])
	}
	if _, err := newPolicies(&cfg); err != nil {
		return nil, fileError(err)
	}
	return opts, nil
}

// fileError is err, from applying a Config's options, in the file's terms.
func fileError(err error) error {
	if e, ok := err.(*settingError); ok {
		return errors.New("httpbreaker: Config: " + e.file())
	}
	return errors.New("httpbreaker: Config: " + strings.TrimPrefix(err.Error(), "httpbreaker: "))
}

// options returns the options of p's set fields.
func (p *PolicyConfig) options() []Option {
	var opts []Option
	for _, f := range tunableFields {
		if !f.confField(p).IsNil() {
			opts = append(opts, f.fileOption(p))
		}
	}
	return opts
}

// ParseConfig decodes a Config from JSON, as json.Unmarshal would
// (trailing data is an error), and checks it as Options does. A document
// that is only null is an error too: it would reset every setting to its
// default.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if isNull(data) {
		return Config{}, errors.New("httpbreaker: Config: null: want an object")
	}
	if err := json.Unmarshal(data, &c); err != nil { // refuses trailing data, as a half-rewritten file may have
		if syntax := (*json.SyntaxError)(nil); errors.As(err, &syntax) { // not JSON: the decoders never ran
			err = fmt.Errorf("httpbreaker: Config: %w", err)
		}
		return Config{}, err
	}
	if _, err := c.Options(); err != nil {
		return Config{}, err
	}
	return c, nil
}
