//go:build unix

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"
)

// The service's two dependencies, by host name: these are its breaker keys
// (HostKey of their URLs) and the selectors of its settings file. No DNS
// knows them: the service's dialer (see dependencies.transport) sends them
// to loopback listeners.
const (
	inventoryHost = "inventory.internal"
	pricingHost   = "pricing.internal"
)

// The URLs the service calls.
const (
	inventoryURL = "http://" + inventoryHost + "/stock/widget"
	pricingURL   = "http://" + pricingHost + "/price/widget"
)

// dependency is one fake dependency: it answers its own body while up,
// and 500 while failing.
type dependency struct {
	name    string
	body    string
	failing atomic.Bool
}

// ServeHTTP answers body, or 500 while d is failing.
func (d *dependency) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.failing.Load() {
		http.Error(w, d.name+" is down", http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, d.body)
}

// dependencies are the service's two dependencies, each on its own
// 127.0.0.1 port.
type dependencies struct {
	inventory, pricing *dependency
	servers            map[string]*httptest.Server // by host name
}

// startDependencies serves both dependencies on 127.0.0.1, up.
func startDependencies() *dependencies {
	d := &dependencies{
		inventory: &dependency{name: "inventory", body: "42 in stock"},
		pricing:   &dependency{name: "pricing", body: "12.90"},
	}
	d.servers = map[string]*httptest.Server{
		inventoryHost: httptest.NewServer(d.inventory),
		pricingHost:   httptest.NewServer(d.pricing),
	}
	return d
}

// close stops both servers.
func (d *dependencies) close() {
	for _, s := range d.servers {
		s.Close()
	}
}

// transport is the service's next RoundTripper: an *http.Transport whose
// dialer sends each dependency's host name, on any port, to that
// dependency's loopback listener, and refuses every other name.
func (d *dependencies) transport() *http.Transport {
	addrs := make(map[string]string, len(d.servers))
	for host, s := range d.servers {
		addrs[host] = s.Listener.Addr().String()
	}
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	return &http.Transport{ // Proxy is nil: never send this traffic to an HTTP_PROXY
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			to, ok := addrs[host]
			if !ok {
				return nil, &net.DNSError{Err: "not one of the example's dependencies", Name: host, IsNotFound: true}
			}
			return dialer.DialContext(ctx, network, to)
		},
		MaxIdleConnsPerHost: 4,
	}
}
