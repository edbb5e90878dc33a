// Command sdk puts one httpbreaker Transport under an unmodified go-github
// client, with a breaker per GitHub API operation, and shows how a caller
// tells a breaker rejection from an error GitHub itself returned.
//
// It talks only to a fake GitHub API on 127.0.0.1 (an httptest server) in
// which the issues endpoint is broken (500s). The program:
//
//  1. calls Issues.ListByRepo until the breaker of that one route trips,
//     then once more to show the rejection;
//  2. calls Repositories.Get and Users.Get, which keep working: they have
//     breakers of their own;
//  3. gets a real 503 from the fake GitHub, to show that the status code
//     alone cannot tell a rejection from an upstream error.
//
// It does all of that twice: with the default synthetic 503, which
// go-github turns into a *github.ErrorResponse (check
// httpbreaker.IsRejected(resp.Response)), and with WithRejectAsError,
// which go-github returns as a *url.Error (check
// errors.Is(err, httpbreaker.ErrOpen)).
//
// Run it with: go run . (from examples/sdk).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/google/go-github/v93/github"
	"github.com/httpbreaker/httpbreaker"
)

func main() {
	ctx := context.Background()
	for _, asError := range []bool{false, true} {
		if _, err := run(ctx, os.Stdout, asError); err != nil {
			fmt.Fprintln(os.Stderr, "sdk:", err)
			os.Exit(1)
		}
		fmt.Println()
	}
}

// githubRoutes returns the route patterns of the GitHub operations this
// program protects, for paths under prefix.
//
// Mind the prefix: go-github sends "/repos/o/r/issues" to api.github.com,
// but "/api/v3/repos/o/r/issues" to a base URL set with WithEnterpriseURLs
// (GitHub Enterprise Server, and this program's fake on 127.0.0.1). A
// pattern without the prefix would match nothing there, and every call
// would share the host's breaker.
func githubRoutes(prefix string) []string {
	return []string{
		"GET " + prefix + "/repos/{owner}/{repo}/issues",
		"GET " + prefix + "/repos/{owner}/{repo}",
		"GET " + prefix + "/users/{user}",
	}
}

// enterprisePrefix is the path prefix go-github puts before every API path
// for a base URL set with WithEnterpriseURLs.
const enterprisePrefix = "/api/v3"

// Breaker settings, small so that the example trips fast. The defaults
// (20 requests in 10s, 5s open) suit production traffic better.
const (
	minRequests = 4
	openTimeout = 30 * time.Second
)

// Result is what one run observed; the test asserts on it.
type Result struct {
	// Issues describes each Issues.ListByRepo call, in order.
	Issues []string
	// Repo and User are what Repositories.Get and Users.Get returned once
	// the issues breaker was open.
	Repo, User string
	// Upstream503 describes the call the fake GitHub answered with a
	// real 503.
	Upstream503 string
	// Calls counts the requests the fake GitHub received, by operation.
	Calls map[string]int
	// States is the state of every breaker at the end, by key.
	States map[string]string
}

// Kinds of outcome that describe reports, as prefixes of its text.
const (
	kindOK          = "ok"
	kindRejected    = "rejected by breaker"
	kindGitHubError = "GitHub error"
	kindOther       = "other error"
)

// describe tells what a go-github call returned, in the order a caller
// should check:
//
//   - A breaker rejection under WithRejectAsError: go-github returns the
//     transport error wrapped in a *url.Error, with a nil *github.Response;
//     errors.Is(err, httpbreaker.ErrOpen) holds, and errors.As gives the
//     *httpbreaker.RejectedError (whose Key is fine for logs, not for
//     public clients).
//   - The default synthetic 503: go-github sees an ordinary 503 and
//     returns a *github.ErrorResponse, so errors.Is(err, ErrOpen) is false.
//     httpbreaker.IsRejected(resp.Response) (the same *http.Response as
//     the ErrorResponse's) tells it from a 503 that GitHub sent.
//   - Anything else is GitHub's answer or a transport failure.
func describe(resp *github.Response, err error) string {
	if err == nil {
		return kindOK
	}
	if errors.Is(err, httpbreaker.ErrOpen) {
		var rej *httpbreaker.RejectedError
		if errors.As(err, &rej) {
			return fmt.Sprintf("%s (error, %s, retry after %s)", kindRejected, rej.State, time.Until(rej.RetryAt).Round(time.Second))
		}
		return kindRejected + " (error)"
	}
	if resp != nil && httpbreaker.IsRejected(resp.Response) {
		return fmt.Sprintf("%s (synthetic 503, Retry-After: %ss)", kindRejected, resp.Header.Get("Retry-After"))
	}
	var ge *github.ErrorResponse
	if errors.As(err, &ge) && ge.Response != nil {
		return fmt.Sprintf("%s %d: %s", kindGitHubError, ge.Response.StatusCode, ge.Message)
	}
	return kindOther + ": " + err.Error()
}

// run runs the whole scenario against a fresh fake GitHub and Transport,
// printing what happens to w. With asError the Transport uses
// WithRejectAsError.
func run(ctx context.Context, w io.Writer, asError bool) (*Result, error) {
	fake := newFakeGitHub()
	srv := httptest.NewServer(fake)
	defer srv.Close()

	opts := []httpbreaker.Option{
		// One breaker per operation, not per host: the broken issues
		// endpoint must not take repositories and users down with it.
		httpbreaker.WithRoutes(githubRoutes(enterprisePrefix)...),
		httpbreaker.WithMinRequests(minRequests),
		httpbreaker.WithOpenTimeout(openTimeout),
		httpbreaker.WithJitter(0),
	}
	mode := "default: synthetic 503"
	if asError {
		opts = append(opts, httpbreaker.WithRejectAsError())
		mode = "WithRejectAsError"
	}
	tr := httpbreaker.New(nil, opts...)
	defer tr.CloseIdleConnections()

	// go-github used as it is: the breaker goes in as the http.Client's
	// Transport (github.WithTransport(tr) does the same). WithAuthToken
	// wraps tr in go-github's own RoundTripper, which clones each request:
	// IsRejected still works, as the mark rides on the response's Request.
	httpClient := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	gh, err := github.NewClient(
		github.WithHTTPClient(httpClient),
		github.WithEnterpriseURLs(srv.URL+"/", srv.URL+"/"),
		github.WithAuthToken("example-token"),
	)
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(w, "== go-github through httpbreaker (%s)\n", mode)
	res := &Result{}

	// 1. The issues endpoint fails until its breaker trips.
	for i := 1; i <= minRequests+2; i++ {
		_, resp, err := gh.Issues.ListByRepo(ctx, "acme", "widgets", nil)
		d := describe(resp, err)
		res.Issues = append(res.Issues, d)
		fmt.Fprintf(w, "issues call %d: %s\n", i, d)
	}

	// 2. Other operations have their own breakers and keep working.
	repo, resp, err := gh.Repositories.Get(ctx, "acme", "widgets")
	res.Repo = describe(resp, err)
	if err == nil {
		res.Repo += " " + repo.GetFullName()
	}
	fmt.Fprintf(w, "repos.Get: %s\n", res.Repo)

	user, resp, err := gh.Users.Get(ctx, "octocat")
	res.User = describe(resp, err)
	if err == nil {
		res.User += " " + user.GetLogin()
	}
	fmt.Fprintf(w, "users.Get: %s\n", res.User)

	// 3. A real 503 from GitHub: same status code as a rejection, but
	// IsRejected is false (and errors.Is(err, ErrOpen) too).
	_, resp, err = gh.Users.Get(ctx, "unicorn")
	res.Upstream503 = describe(resp, err)
	fmt.Fprintf(w, "users.Get(unicorn): %s\n", res.Upstream503)

	res.Calls = fake.counts()
	fmt.Fprintf(w, "requests that reached GitHub: issues=%d repo=%d user=%d\n",
		res.Calls[opIssues], res.Calls[opRepo], res.Calls[opUser])

	res.States = map[string]string{}
	for _, s := range tr.Snapshot() {
		res.States[s.Key] = s.State.String()
		fmt.Fprintf(w, "breaker %q: %s (requests=%d failures=%d)\n", s.Key, s.State, s.Requests, s.Failures)
	}
	return res, nil
}

// Operations of the fake GitHub, for counting.
const (
	opIssues = "issues"
	opRepo   = "repo"
	opUser   = "user"
)

// fakeGitHub is a tiny stand-in for the GitHub REST API under /api/v3/ (as
// GitHub Enterprise Server serves it). Its issues endpoint always fails
// with 500; user "unicorn" gets a real 503.
type fakeGitHub struct {
	mux *http.ServeMux

	mu    sync.Mutex
	calls map[string]int
}

func newFakeGitHub() *fakeGitHub {
	f := &fakeGitHub{mux: http.NewServeMux(), calls: map[string]int{}}
	p := enterprisePrefix
	f.mux.HandleFunc("GET "+p+"/repos/{owner}/{repo}/issues", func(w http.ResponseWriter, r *http.Request) {
		f.count(opIssues)
		if r.Header.Get("Authorization") != "Bearer example-token" {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Bad credentials"})
			return
		}
		writeJSON(w, http.StatusInternalServerError, map[string]any{"message": "Server Error"})
	})
	f.mux.HandleFunc("GET "+p+"/repos/{owner}/{repo}", func(w http.ResponseWriter, r *http.Request) {
		f.count(opRepo)
		owner, repo := r.PathValue("owner"), r.PathValue("repo")
		writeJSON(w, http.StatusOK, map[string]any{
			"id": 1, "name": repo, "full_name": owner + "/" + repo,
		})
	})
	f.mux.HandleFunc("GET "+p+"/users/{user}", func(w http.ResponseWriter, r *http.Request) {
		f.count(opUser)
		login := r.PathValue("user")
		if login == "unicorn" {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"message": "Service Unavailable"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": 2, "login": login})
	})
	return f
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.mux.ServeHTTP(w, r) }

func (f *fakeGitHub) count(op string) {
	f.mu.Lock()
	f.calls[op]++
	f.mu.Unlock()
}

func (f *fakeGitHub) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]int, len(f.calls))
	for k, v := range f.calls {
		m[k] = v
	}
	return m
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
