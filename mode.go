package httpbreaker

import (
	"fmt"
	"strconv"
)

// Mode says what a breaker does with the calls it would refuse (see
// WithMode).
type Mode int

const (
	// ModeEnforce refuses calls while the breaker is open: the default.
	ModeEnforce Mode = iota
	// ModeShadow runs the breaker as usual — counts, transitions,
	// metrics, logs, hooks — but refuses nothing: a call it would refuse
	// goes through, counted in breaker_shadow_rejections_total, and its
	// outcome counts for nothing.
	ModeShadow
	// ModeOff means no breaker: requests go straight to next, with no
	// bulkhead and no call timeout, and nothing is counted.
	ModeOff
)

// String returns "enforce", "shadow" or "off".
func (m Mode) String() string {
	switch m {
	case ModeEnforce:
		return "enforce"
	case ModeShadow:
		return "shadow"
	case ModeOff:
		return "off"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText encodes the mode as its String form.
func (m Mode) MarshalText() ([]byte, error) {
	if m < ModeEnforce || m > ModeOff {
		return nil, fmt.Errorf("httpbreaker: invalid Mode %d", int(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText decodes "enforce", "shadow" or "off", exactly: anything
// else, upper case included, is an error.
func (m *Mode) UnmarshalText(text []byte) error {
	for _, v := range []Mode{ModeEnforce, ModeShadow, ModeOff} {
		if string(text) == v.String() {
			*m = v
			return nil
		}
	}
	return fmt.Errorf("httpbreaker: unknown mode %q: want \"enforce\", \"shadow\" or \"off\"", text)
}

// WithMode sets what the breakers do [ModeEnforce]: enforce, watch
// without refusing (ModeShadow, for rolling breakers out on live
// traffic), or nothing at all (ModeOff). Set per dependency with
// WithPolicy. An unknown mode panics.
func WithMode(m Mode) Option {
	return modeRow.with(m)
}
