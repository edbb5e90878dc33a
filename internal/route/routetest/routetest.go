// Package routetest holds what the tests of internal/route and of the
// root package's RouteKey share: a realistic pattern set and a way to
// build a request as a server would parse it. It is for tests only.
package routetest

import (
	"net/http"
	"net/url"
)

// APIPatterns is a realistic API pattern set, which the benchmarks of
// the matcher and of RouteKey use. Callers must not modify it.
var APIPatterns = []string{
	"GET /v1/users",
	"POST /v1/users",
	"GET /v1/users/{id}",
	"PUT /v1/users/{id}",
	"DELETE /v1/users/{id}",
	"GET /v1/users/{id}/orders",
	"POST /v1/users/{id}/orders",
	"GET /v1/users/{id}/orders/{order}",
	"POST /v1/charges",
	"GET /v1/charges/{id}",
	"POST /v1/charges/{id}/refunds",
	"GET /v1/invoices",
	"GET /v1/invoices/{id}",
	"POST /v1/invoices/{id}/pay",
	"/files/{path...}",
	"GET /healthz",
	"GET /v2/search",
	"POST /v2/batch",
	"/v2/admin/",
	"GET /repos/{owner}/{repo}/issues",
}

// Request returns a request for target, a path with an optional query,
// as parsed from a request line, with the http scheme and host in its
// URL if host is not empty. It panics if target does not parse.
func Request(method, host, target string) *http.Request {
	u := &url.URL{}
	if target != "" {
		var err error
		if u, err = url.ParseRequestURI(target); err != nil {
			panic(err)
		}
	}
	if host != "" {
		u.Host = host
		u.Scheme = "http"
	}
	return &http.Request{Method: method, URL: u}
}
