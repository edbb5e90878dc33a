package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/httpbreaker/httpbreaker"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	for _, asError := range []bool{false, true} {
		name := "synthetic503"
		wantRejection := kindRejected + " (synthetic 503, Retry-After: 30s)"
		if asError {
			name = "RejectAsError"
			wantRejection = kindRejected + " (error, open, retry after 30s)"
		}
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			res, err := run(context.Background(), &out, asError)
			require.NoError(t, err)

			// The first MinRequests calls reach GitHub and fail; the
			// breaker trips on the last of them and rejects the rest.
			require.Len(t, res.Issues, minRequests+2)
			for i, d := range res.Issues {
				if i < minRequests {
					require.Equal(t, kindGitHubError+" 500: Server Error", d, "call %d", i+1)
				} else {
					require.Equal(t, wantRejection, d, "call %d", i+1)
				}
			}

			// Other routes keep working while issues is open.
			require.Equal(t, kindOK+" acme/widgets", res.Repo)
			require.Equal(t, kindOK+" octocat", res.User)

			// A real 503 from GitHub is not mistaken for a rejection.
			require.Equal(t, kindGitHubError+" 503: Service Unavailable", res.Upstream503)

			// Rejected calls never reached GitHub.
			require.Equal(t, map[string]int{opIssues: minRequests, opRepo: 1, opUser: 2}, res.Calls)

			// One breaker per operation; only issues is open.
			require.Len(t, res.States, 3)
			for key, state := range res.States {
				if strings.HasSuffix(key, " GET /api/v3/repos/{owner}/{repo}/issues") {
					require.Equal(t, "open", state, key)
				} else {
					require.Equal(t, "closed", state, key)
				}
			}

			// And the program says so.
			text := out.String()
			require.Contains(t, text, "issues call 4: GitHub error 500: Server Error\n")
			require.Contains(t, text, "issues call 5: "+wantRejection+"\n")
			require.Contains(t, text, "repos.Get: ok acme/widgets\n")
			require.Contains(t, text, "requests that reached GitHub: issues=4 repo=1 user=2\n")
			require.Regexp(t, `breaker "127\.0\.0\.1:\d+ GET /api/v3/repos/\{owner\}/\{repo\}/issues": open`, text)
		})
	}
}

// TestRoutePrefix pins the trap githubRoutes documents: go-github's
// enterprise paths start with /api/v3, and patterns without that prefix
// match nothing, leaving every call on the host's breaker.
func TestRoutePrefix(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:8080/api/v3/repos/acme/widgets/issues", nil)
	require.NoError(t, err)

	require.Equal(t, "127.0.0.1:8080 GET /api/v3/repos/{owner}/{repo}/issues",
		httpbreaker.RouteKey(githubRoutes(enterprisePrefix)...)(req))
	require.Equal(t, "127.0.0.1:8080", httpbreaker.RouteKey(githubRoutes("")...)(req),
		"patterns without the /api/v3 prefix must fall back to the host key")

	// Against api.github.com, go-github sends no prefix.
	req, err = http.NewRequest(http.MethodGet, "https://api.github.com/users/octocat", nil)
	require.NoError(t, err)
	require.Equal(t, "api.github.com GET /users/{user}", httpbreaker.RouteKey(githubRoutes("")...)(req))
}

func TestDescribe(t *testing.T) {
	require.Equal(t, kindOK, describe(nil, nil))
	require.Equal(t, kindRejected+" (error)", describe(nil, httpbreaker.ErrOpen))
	require.True(t, strings.HasPrefix(describe(nil, context.Canceled), kindOther+": "))
}
