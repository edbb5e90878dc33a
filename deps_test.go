package httpbreaker

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The core imports nothing of OpenTelemetry: that lives in the otelbreaker
// module, so that a service that does not use it never builds it. This
// asks the go command for every package the core package depends on.
func TestCoreImportsNothingOfOpenTelemetry(t *testing.T) {
	// go test puts its own GOROOT/bin first on the test's PATH.
	goCmd, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to list the core's dependencies")
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/httpbreaker/httpbreaker", "the list is the core's")
	require.Contains(t, deps, "net/http")
	for _, p := range deps {
		require.False(t, strings.HasPrefix(p, "go.opentelemetry.io/"), "the core depends on %s", p)
	}
}
