package httpbreaker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Config is the declarative form of a Transport's tunable settings, for a
// service to embed in its own JSON configuration file and hand to New or
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
// is a value ("jitter": 0 means no jitter). Decoding refuses unknown
// fields, naming the selector and the field. Config round-trips through
// encoding/json.
//
// What a Config cannot say — classifiers, fallbacks, the options that
// shape the Transport — is given as options beside it:
// New(next, append(cfg.Options(), WithFallback(f))...) after checking
// cfg.Validate.
type Config struct {
	PolicyConfig
	// Policies are the settings of each selector, over the top level.
	Policies map[string]PolicyConfig `json:"policies,omitempty"`
}

// PolicyConfig is one level of a Config: the Transport-wide settings, or
// one selector's. Each field is the option of the same name; nil is
// unset.
type PolicyConfig struct {
	Mode              *Mode     `json:"mode,omitempty"`                // WithMode: "enforce", "shadow" or "off"
	FailureRate       *float64  `json:"failure_rate,omitempty"`        // WithFailureRate
	MinRequests       *int      `json:"min_requests,omitempty"`        // WithMinRequests
	Window            *Duration `json:"window,omitempty"`              // WithWindow
	SlowCallThreshold *Duration `json:"slow_call_threshold,omitempty"` // WithSlowCallThreshold
	OpenTimeout       *Duration `json:"open_timeout,omitempty"`        // WithOpenTimeout
	MaxOpenTimeout    *Duration `json:"max_open_timeout,omitempty"`    // WithMaxOpenTimeout
	Jitter            *float64  `json:"jitter,omitempty"`              // WithJitter
	HalfOpenProbes    *int      `json:"half_open_probes,omitempty"`    // WithHalfOpenProbes
	ProbesToClose     *int      `json:"probes_to_close,omitempty"`     // WithProbesToClose
	ThrottleSustain   *Duration `json:"throttle_sustain,omitempty"`    // WithThrottleSustain
	MaxConcurrent     *int      `json:"max_concurrent,omitempty"`      // WithMaxConcurrent
	Queue             *int      `json:"queue,omitempty"`               // WithQueue's length
	QueueWait         *Duration `json:"queue_wait,omitempty"`          // WithQueue's maximum wait
	CallTimeout       *Duration `json:"call_timeout,omitempty"`        // WithCallTimeout
	BodyErrors        *bool     `json:"body_errors,omitempty"`         // WithBodyErrors (true only)
	RejectAsError     *bool     `json:"reject_as_error,omitempty"`     // WithRejectAsError (true only)
}

// Duration is a time.Duration written as a Go duration string ("800ms").
type Duration time.Duration

// MarshalText writes d as time.Duration's String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration string, as time.ParseDuration does.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("not a duration such as \"800ms\": %q", text)
	}
	*d = Duration(v)
	return nil
}

// field is one field of a PolicyConfig: its JSON name, a pointer to it,
// and the option it stands for.
type field struct {
	name   string
	ptr    any                   // a pointer to the field (itself a pointer)
	set    func() bool           // the field is set
	option func() (Option, bool) // the option, and whether it applies
}

// fields lists p's fields.
func (p *PolicyConfig) fields() []field {
	dur := func(d *Duration) time.Duration { return time.Duration(*d) }
	return []field{
		{"mode", &p.Mode, func() bool { return p.Mode != nil }, func() (Option, bool) { return WithMode(*p.Mode), true }},
		{"failure_rate", &p.FailureRate, func() bool { return p.FailureRate != nil }, func() (Option, bool) { return WithFailureRate(*p.FailureRate), true }},
		{"min_requests", &p.MinRequests, func() bool { return p.MinRequests != nil }, func() (Option, bool) { return WithMinRequests(*p.MinRequests), true }},
		{"window", &p.Window, func() bool { return p.Window != nil }, func() (Option, bool) { return WithWindow(dur(p.Window)), true }},
		{"slow_call_threshold", &p.SlowCallThreshold, func() bool { return p.SlowCallThreshold != nil }, func() (Option, bool) { return WithSlowCallThreshold(dur(p.SlowCallThreshold)), true }},
		{"open_timeout", &p.OpenTimeout, func() bool { return p.OpenTimeout != nil }, func() (Option, bool) { return WithOpenTimeout(dur(p.OpenTimeout)), true }},
		{"max_open_timeout", &p.MaxOpenTimeout, func() bool { return p.MaxOpenTimeout != nil }, func() (Option, bool) { return WithMaxOpenTimeout(dur(p.MaxOpenTimeout)), true }},
		{"jitter", &p.Jitter, func() bool { return p.Jitter != nil }, func() (Option, bool) { return WithJitter(*p.Jitter), true }},
		{"half_open_probes", &p.HalfOpenProbes, func() bool { return p.HalfOpenProbes != nil }, func() (Option, bool) { return WithHalfOpenProbes(*p.HalfOpenProbes), true }},
		{"probes_to_close", &p.ProbesToClose, func() bool { return p.ProbesToClose != nil }, func() (Option, bool) { return WithProbesToClose(*p.ProbesToClose), true }},
		{"throttle_sustain", &p.ThrottleSustain, func() bool { return p.ThrottleSustain != nil }, func() (Option, bool) { return WithThrottleSustain(dur(p.ThrottleSustain)), true }},
		{"max_concurrent", &p.MaxConcurrent, func() bool { return p.MaxConcurrent != nil }, func() (Option, bool) { return WithMaxConcurrent(*p.MaxConcurrent), true }},
		{"queue", &p.Queue, func() bool { return p.Queue != nil }, func() (Option, bool) { return p.queueOption(), true }},
		{"queue_wait", &p.QueueWait, func() bool { return p.QueueWait != nil }, func() (Option, bool) { return p.queueOption(), p.Queue == nil }},
		{"call_timeout", &p.CallTimeout, func() bool { return p.CallTimeout != nil }, func() (Option, bool) { return WithCallTimeout(dur(p.CallTimeout)), true }},
		{"body_errors", &p.BodyErrors, func() bool { return p.BodyErrors != nil }, func() (Option, bool) { return WithBodyErrors(), *p.BodyErrors }},
		{"reject_as_error", &p.RejectAsError, func() bool { return p.RejectAsError != nil }, func() (Option, bool) { return WithRejectAsError(), *p.RejectAsError }},
	}
}

// queueOption is WithQueue of the queue and queue_wait fields, each
// taken from the other's default when unset (length 0, wait 0).
func (p *PolicyConfig) queueOption() Option {
	n, wait := 0, time.Duration(0)
	if p.Queue != nil {
		n = *p.Queue
	}
	if p.QueueWait != nil {
		wait = time.Duration(*p.QueueWait)
	}
	return WithQueue(n, wait)
}

// UnmarshalJSON decodes a PolicyConfig, refusing unknown fields and
// naming the field of a bad value.
func (p *PolicyConfig) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	fs := p.fields()
	for name, v := range raw {
		i := slices.IndexFunc(fs, func(f field) bool { return f.name == name })
		if i < 0 {
			return fmt.Errorf("unknown field %q", name)
		}
		if err := json.Unmarshal(v, fs[i].ptr); err != nil {
			return fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "httpbreaker: "))
		}
	}
	return nil
}

// UnmarshalJSON decodes a Config, refusing unknown fields; an error names
// the selector and the field.
func (c *Config) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("httpbreaker: Config: %w", err)
	}
	var out Config
	if v, ok := raw["policies"]; ok {
		delete(raw, "policies")
		var pols map[string]json.RawMessage
		if err := json.Unmarshal(v, &pols); err != nil {
			return fmt.Errorf("httpbreaker: Config: policies: %w", err)
		}
		out.Policies = make(map[string]PolicyConfig, len(pols))
		for sel, pv := range pols {
			var p PolicyConfig
			if err := p.UnmarshalJSON(pv); err != nil {
				return fmt.Errorf("httpbreaker: Config: policies[%q]: %w", sel, err)
			}
			out.Policies[sel] = p
		}
	}
	top, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	if err := out.PolicyConfig.UnmarshalJSON(top); err != nil {
		return fmt.Errorf("httpbreaker: Config: %w", err)
	}
	*c = out
	return nil
}

// Options returns the options c stands for, Transport-wide first, then a
// WithPolicy per selector (sorted, so that the result is the same every
// time), or the first bad value: an error naming the selector and the
// field ("httpbreaker: Config: policies[\"pay\"].failure_rate: …").
func (c Config) Options() ([]Option, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := c.PolicyConfig.options()
	sels := make([]string, 0, len(c.Policies))
	for sel := range c.Policies {
		sels = append(sels, sel)
	}
	slices.Sort(sels)
	for _, sel := range sels {
		p := c.Policies[sel]
		opts = append(opts, WithPolicy(sel, p.options()...))
	}
	return opts, nil
}

// Validate reports the first bad value in c, naming the selector and the
// field, or nil: every field in range, every selector well-formed, and
// the relations (a maximum open timeout not shorter than the open
// timeout) holding for every selector.
func (c Config) Validate() error {
	if err := c.PolicyConfig.check(""); err != nil {
		return err
	}
	sels := make([]string, 0, len(c.Policies))
	for sel := range c.Policies {
		sels = append(sels, sel)
	}
	slices.Sort(sels)
	var opts []Option
	opts = append(opts, c.PolicyConfig.options()...)
	for _, sel := range sels {
		p := c.Policies[sel]
		if _, err := parseSelector(sel); err != nil {
			return fmt.Errorf("httpbreaker: Config: policies[%q]: %v", sel, err)
		}
		if err := p.check(sel); err != nil {
			return err
		}
		opts = append(opts, WithPolicy(sel, p.options()...))
	}
	cfg := defaultConfig()
	cfg.applyAll("Config", opts)
	if len(cfg.errs) > 0 {
		return fmt.Errorf("httpbreaker: Config: %s", strings.TrimPrefix(cfg.errs[0], "httpbreaker: "))
	}
	if _, err := newPolicies(&cfg); err != nil {
		return fmt.Errorf("httpbreaker: Config: %s", strings.TrimPrefix(err.Error(), "httpbreaker: "))
	}
	return nil
}

// check applies each set field of p on its own, and reports the first
// that is invalid, for selector ("" for the top level).
func (p *PolicyConfig) check(selector string) error {
	for _, f := range p.fields() {
		if !f.set() {
			continue
		}
		o, ok := f.option()
		if !ok {
			continue
		}
		cfg := defaultConfig()
		o.apply(&cfg)
		if len(cfg.errs) > 0 {
			where := f.name
			if selector != "" {
				where = fmt.Sprintf("policies[%q].%s", selector, f.name)
			}
			msg := cfg.errs[0]
			if i := strings.Index(msg, ": "); i >= 0 {
				if j := strings.Index(msg[i+2:], ": "); j >= 0 {
					msg = msg[i+2+j+2:] // drop "httpbreaker: WithX: "
				}
			}
			return fmt.Errorf("httpbreaker: Config: %s: %s", where, msg)
		}
	}
	return nil
}

// options returns the options of p's set fields.
func (p *PolicyConfig) options() []Option {
	var opts []Option
	for _, f := range p.fields() {
		if !f.set() {
			continue
		}
		if o, ok := f.option(); ok {
			opts = append(opts, o)
		}
	}
	return opts
}

// ParseConfig decodes a Config from JSON, as json.Unmarshal would
// (trailing data is an error), and validates it. A document that is only
// null is an error too: it would reset every setting to its default.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return Config{}, errors.New("httpbreaker: Config: null: want an object")
	}
	if err := json.Unmarshal(data, &c); err != nil { // refuses trailing data, as a half-rewritten file may have
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
