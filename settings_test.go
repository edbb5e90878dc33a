package httpbreaker

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTunableTable: every list derived from the table of tunables agrees
// with it — PolicyConfig's JSON fields, Settings' fields, the defaults,
// Update's change log and the status page — in both directions, so that
// a tunable added to one and not the others fails here.
func TestTunableTable(t *testing.T) {
	var names []string
	for _, tu := range tunables {
		name, option, status := tu.about()
		require.NotEmpty(t, name)
		require.Regexp(t, `^With[A-Z]`, option, name)
		require.NotEmpty(t, status, name)
		require.NotContains(t, names, name, "a name is one row's")
		names = append(names, name)
	}
	require.Len(t, tunableFields, len(tunables))

	conf := reflect.TypeFor[PolicyConfig]()
	var confNames []string
	for i := range conf.NumField() {
		confNames = append(confNames, jsonName(conf.Field(i)))
	}
	require.Equal(t, names, confNames, "PolicyConfig: one field per row, in the table's order")

	st := reflect.TypeFor[Settings]()
	var statusFields []string
	for i := range st.NumField() {
		statusFields = append(statusFields, st.Field(i).Name)
	}
	var wantStatus []string
	for _, tu := range tunables {
		_, _, status := tu.about()
		wantStatus = append(wantStatus, status)
	}
	require.Equal(t, wantStatus, statusFields, "Settings: one field per row, in the table's order")

	p := defaultConfig().policy
	var described []string
	for _, s := range describe(&p) {
		described = append(described, s.name)
	}
	require.Equal(t, append(slices.Clone(names), "classifier", "fallback"), described, "Update's change log")

	b, err := json.Marshal(p.effective().file())
	require.NoError(t, err)
	var shown map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &shown))
	require.ElementsMatch(t, names, slices.Collect(maps.Keys(shown)), "the status page shows every tunable")

	// Every row's value goes through the file and back: decoding the
	// status page's settings and applying them gives the same settings.
	var back PolicyConfig
	require.NoError(t, json.Unmarshal(b, &back))
	c := defaultConfig()
	c.applyAll("test", back.options())
	require.Empty(t, c.errs)
	require.Equal(t, p.effective(), c.effective())
}

// TestTunableTableDocs: the docs derived from the table by hand agree
// with it: each row's option is an exported function of the package and
// is in docs/tuning.md, its doc gives its default in brackets, and
// docs/policies.md's list of the file's fields names exactly the table's.
func TestTunableTableDocs(t *testing.T) {
	funcs := map[string]string{} // exported function: its doc
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.IsExported() {
				funcs[fd.Name.Name] = fd.Doc.Text()
			}
		}
	}
	tuning, err := os.ReadFile("docs/tuning.md")
	require.NoError(t, err)
	var names []string
	for _, tu := range tunables {
		name, option, _ := tu.about()
		names = append(names, name)
		doc, ok := funcs[option]
		require.True(t, ok, "%s: %s is not a function of the package", name, option)
		require.Regexp(t, `\[[^]]+\]`, doc, "%s: %s's doc gives no default in brackets (see defaultConfig)", name, option)
		require.Contains(t, string(tuning), "`"+option+"(", "%s: docs/tuning.md does not describe %s", name, option)
	}
	policies, err := os.ReadFile("docs/policies.md")
	require.NoError(t, err)
	_, list, ok := strings.Cut(string(policies), "\nThe fields: ")
	require.True(t, ok, `docs/policies.md has no "The fields:" paragraph`)
	list, _, ok = strings.Cut(list, ", each the option of the same")
	require.True(t, ok, `docs/policies.md's list of fields ends with ", each the option of the same name"`)
	var listed []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(list, -1) {
		if m[1] != "true" && m[1] != "false" { // the forms of body_errors and reject_as_error
			listed = append(listed, m[1])
		}
	}
	require.ElementsMatch(t, names, listed, "docs/policies.md's list of fields")
}

// TestTunableDefaults: the defaults are the table's, and the ones the
// options' docs give.
func TestTunableDefaults(t *testing.T) {
	c := defaultConfig()
	s := c.effective()
	require.Equal(t, Settings{
		Mode: ModeEnforce, FailureRate: 0.5, MinRequests: 20, Window: 10 * time.Second,
		OpenTimeout: 5 * time.Second, MaxOpenTimeout: time.Minute, Jitter: 0.2,
		HalfOpenProbes: 1, ProbesToClose: 3, ThrottleSustain: 10 * time.Second,
	}, s)
	require.Equal(t, defaultConfig().settings, defaultSettings(), "the breaker's defaults are the table's")
}

// TestTunableBoundsSpeakBothTerms: one bound, two wordings: the option's
// name in Go, the file's field in a Config.
func TestTunableBoundsSpeakBothTerms(t *testing.T) {
	require.PanicsWithValue(t, "httpbreaker: WithFailureRate: must be in (0, 1], got 1.5", func() { New(nil, WithFailureRate(1.5)) })
	require.PanicsWithValue(t, "httpbreaker: WithQueue: queue length must not be negative, got -1", func() { New(nil, WithQueue(-1, time.Second)) })
	require.PanicsWithValue(t, "httpbreaker: WithQueue: maximum wait must be positive, got 0s", func() { New(nil, WithQueue(2, 0)) })
	require.PanicsWithValue(t, "httpbreaker: WithMaxOpenTimeout: maximum open timeout 1s is shorter than the open timeout 5s (in WithPolicy(\"pay.test\", ...))",
		func() { New(nil, WithPolicy("pay.test", WithMaxOpenTimeout(time.Second))) })
	_, err := ParseConfig([]byte(`{"policies":{"pay.test":{"failure_rate":1.5}}}`))
	require.EqualError(t, err, `httpbreaker: Config: policies["pay.test"].failure_rate: must be in (0, 1], got 1.5`)
}

// TestTextWritesCompositeValuesAsTheFileDoes: a tunable whose value is
// an object (as a retry budget's {"ratio", "min_per_second"} is) needs no
// path of its own: its log text is its JSON, and a file gives it as an
// object, unknown fields refused, a wrong type told by its form.
func TestTextWritesCompositeValuesAsTheFileDoes(t *testing.T) {
	type pair struct {
		Ratio        float64 `json:"ratio"`
		MinPerSecond float64 `json:"min_per_second"`
	}
	require.Equal(t, `{"ratio":0.2,"min_per_second":10}`, text(reflect.ValueOf(pair{0.2, 10})))
	require.Equal(t, "an object", formOf(reflect.TypeFor[pair]()))
	v, msg := decodeValue(reflect.TypeFor[pair](), []byte(`{"ratio": 0.2, "min_per_second": 10}`))
	require.Empty(t, msg)
	require.Equal(t, pair{0.2, 10}, v.Elem().Interface())
	_, msg = decodeValue(reflect.TypeFor[pair](), []byte(`{"ratio": 0.2, "min_per_secnd": 10}`))
	require.Equal(t, `unknown field "min_per_secnd"`, msg)
	_, msg = decodeValue(reflect.TypeFor[pair](), []byte(`0.2`))
	require.Equal(t, "want an object, got 0.2", msg)
	require.Equal(t, "10s", text(reflect.ValueOf(Duration(10*time.Second))))
	require.Equal(t, "shadow", text(reflect.ValueOf(ModeShadow)))
	require.Equal(t, "0.5", text(reflect.ValueOf(0.5)))
	require.Equal(t, "true", text(reflect.ValueOf(true)))
}
