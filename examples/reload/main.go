//go:build unix

// Command reload shows a service that reads its circuit-breaker settings
// from a JSON file and applies a changed file while it runs: no restart,
// and nothing lost of what its breakers know.
//
// The service calls two dependencies, inventory.internal and
// pricing.internal, through one httpbreaker.Transport. (They are loopback
// listeners on 127.0.0.1 to which the service's dialer sends those names,
// so that the settings file names them as a real one would.) The file is
// an httpbreaker.Config in JSON: Transport-wide settings at the top, a
// policy per selector under "policies", durations as Go strings:
//
//	{
//	  "failure_rate": 0.5,
//	  "min_requests": 10,
//	  "open_timeout": "30s",
//	  "jitter": 0,
//	  "policies": {
//	    "inventory.internal": {"min_requests": 3, "open_timeout": "1m"},
//	    "pricing.internal": {"call_timeout": "500ms", "max_concurrent": 20}
//	  }
//	}
//
// On SIGHUP the service reads the file again and hands it to
// Transport.Update (see service.reload): os.ReadFile, then
// httpbreaker.ParseConfig, which decodes and validates, then
// Config.Options, then Update, which applies all of it or nothing. A file
// that fails any of these is logged at Error and ignored, and the settings
// in force stay. Update keeps every breaker's state: an open breaker keeps
// the open period it has (its Retry-After does not move), and the new
// thresholds decide the next trip.
//
// Update builds the settings from the defaults and the options it is
// given, exactly as New does: the file is the whole truth (a field removed
// from it returns to its default), and the options the code sets beside
// the file (here pricing.internal's fallback) must be passed again on
// every reload.
//
// # Why SIGHUP, and not a watch on the file
//
//   - Watching a file needs a dependency such as fsnotify, or polling; the
//     core module takes no dependency for it, and a service that wants one
//     can still call Update from its own watcher.
//   - Editors and configuration-management tools write a file in several
//     steps: truncate and write, or write a temporary file and rename it
//     over the old one (after which a watch on the old file sees nothing
//     more). A watcher wakes up in between and reads a half-written file,
//     or an empty one; at best the reload refuses it, with an error for
//     the operator to puzzle over.
//   - A signal is the operator's "apply now": edit, check, then apply,
//     several edits at once if need be.
//   - It is how nginx, HAProxy and Prometheus reload, so operators and
//     their tools already know it: kill -HUP <pid>, or systemd's
//     ExecReload=/bin/kill -HUP $MAINPID.
//
// SIGHUP is a Unix signal: the program builds on Unix only.
//
// Usage (from the repository root):
//
//	go run ./examples/reload                        # a sample file in a temporary directory
//	go run ./examples/reload -config breakers.json  # your file: the walkthrough edits it
//
// It runs a walkthrough of well under a second, playing the operator: it
// edits the file and sends itself SIGHUP, as kill -HUP would, and prints
// each answer of the service, the breakers' state, and the log. It exits
// when done, or at SIGINT.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// sampleSettings is the settings file the walkthrough starts from when
// -config names none. Jitter is off so that open periods, and the
// Retry-After the walkthrough prints, are exact.
const sampleSettings = `{
  "failure_rate": 0.5,
  "min_requests": 10,
  "window": "10s",
  "open_timeout": "30s",
  "jitter": 0,
  "policies": {
    "inventory.internal": {"min_requests": 3, "open_timeout": "1m"},
    "pricing.internal": {"call_timeout": "500ms", "max_concurrent": 20}
  }
}
`

// reloadWait bounds how long the walkthrough waits for the reload a SIGHUP
// it sent should cause.
const reloadWait = 5 * time.Second

func main() {
	path := flag.String("config", "", "the breaker settings file (JSON), which the walkthrough edits; default: a sample in a temporary directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Stdout, *path)
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "reload: interrupted")
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reload:", err)
		os.Exit(1)
	}
}

// run is the walkthrough: it starts the dependencies and the service with
// the settings file at path (a sample in a temporary directory if path is
// ""), drives traffic, edits the file and sends SIGHUP, and prints what
// happens to w.
func run(ctx context.Context, w io.Writer, path string) error {
	out := &lockedWriter{w: w}
	if path == "" {
		dir, err := os.MkdirTemp("", "reload-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "breakers.json")
		if err := os.WriteFile(path, []byte(sampleSettings), 0o644); err != nil {
			return err
		}
	}
	good, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "settings file %s:\n%s", filepath.Base(path), good)

	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	deps := startDependencies()
	defer deps.close()
	s, err := newService(path, deps.transport(), log)
	if err != nil {
		return fmt.Errorf("settings file %s: %w", path, err)
	}
	defer s.close()

	results := make(chan error, 1)
	stop := s.reloadOnSIGHUP(func(err error) {
		select {
		case results <- err:
		default: // an unread result: a SIGHUP from outside as well
		}
	})
	defer stop()
	op := &operator{path: path, good: good, results: results, out: out}

	n := 0
	quotes := func(k int) error {
		for range k {
			if err := ctx.Err(); err != nil {
				return err
			}
			n++
			fmt.Fprintf(out, "quote %d: %s\n", n, s.quote(ctx))
		}
		return ctx.Err()
	}

	fmt.Fprintln(out, "\n1. Both dependencies start failing.")
	deps.inventory.failing.Store(true)
	deps.pricing.failing.Store(true)
	if err := quotes(4); err != nil {
		return err
	}
	printStatus(out, s.tr)

	fmt.Fprintln(out, "\n2. The operator lowers pricing.internal's min_requests to 3 and lengthens inventory.internal's open_timeout to 2m, then sends SIGHUP.")
	if err := op.apply(ctx, true, func(c *httpbreaker.Config) {
		c.Policies[pricingHost] = with(c.Policies[pricingHost], func(p *httpbreaker.PolicyConfig) { p.MinRequests = ptr(3) })
		c.Policies[inventoryHost] = with(c.Policies[inventoryHost], func(p *httpbreaker.PolicyConfig) {
			p.OpenTimeout = ptr(httpbreaker.Duration(2 * time.Minute))
		})
	}); err != nil {
		return err
	}
	printStatus(out, s.tr)
	if err := quotes(2); err != nil {
		return err
	}
	printStatus(out, s.tr)

	fmt.Fprintln(out, "\n3. SIGHUP arrives while a tool is halfway through writing the file.")
	if err := op.write(good[:len(good)/2]); err != nil {
		return err
	}
	if err := op.hup(ctx); err == nil {
		return errors.New("a half-written file was applied")
	}

	fmt.Fprintln(out, "\n4. A typo: pricing.internal's failure_rate set to 1.5, then SIGHUP.")
	if err := op.apply(ctx, false, func(c *httpbreaker.Config) {
		c.Policies[pricingHost] = with(c.Policies[pricingHost], func(p *httpbreaker.PolicyConfig) { p.FailureRate = ptr(1.5) })
	}); err == nil {
		return errors.New("a failure rate of 1.5 was applied")
	}
	printStatus(out, s.tr)

	fmt.Fprintln(out, "\n5. The operator puts the last good file back, then SIGHUP: nothing changes.")
	if err := op.apply(ctx, true, func(*httpbreaker.Config) {}); err != nil {
		return err
	}
	if err := quotes(1); err != nil {
		return err
	}
	printStatus(out, s.tr)
	return nil
}

// operator plays the service's operator: it rewrites the settings file
// and sends the process SIGHUP.
type operator struct {
	path    string
	good    []byte       // the file as last applied
	results <-chan error // each reload's result
	out     io.Writer
}

// apply writes the last good file changed by edit and sends SIGHUP. It
// returns the reload's error. If keep is set and the reload succeeds, the
// new file is the last good one.
func (o *operator) apply(ctx context.Context, keep bool, edit func(*httpbreaker.Config)) error {
	var c httpbreaker.Config
	if err := json.Unmarshal(o.good, &c); err != nil {
		return err
	}
	if c.Policies == nil {
		c.Policies = map[string]httpbreaker.PolicyConfig{}
	}
	edit(&c)
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := o.write(append(data, '\n')); err != nil {
		return err
	}
	err = o.hup(ctx)
	if err == nil && keep {
		o.good = append(data, '\n')
	}
	return err
}

// write replaces the settings file with data.
func (o *operator) write(data []byte) error { return os.WriteFile(o.path, data, 0o644) }

// hup sends the process SIGHUP, as kill -HUP would, and returns the
// result of the reload it causes.
func (o *operator) hup(ctx context.Context) error {
	fmt.Fprintln(o.out, "$ kill -HUP", os.Getpid())
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		return err
	}
	select {
	case err := <-o.results:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(reloadWait):
		return fmt.Errorf("no reload %v after SIGHUP", reloadWait)
	}
}

// with returns p changed by edit.
func with(p httpbreaker.PolicyConfig, edit func(*httpbreaker.PolicyConfig)) httpbreaker.PolicyConfig {
	edit(&p)
	return p
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// printStatus prints each breaker of tr: its state, its window and the
// settings it decides by.
func printStatus(w io.Writer, tr *httpbreaker.Transport) {
	for _, st := range tr.Snapshot() {
		state := st.State.String()
		if !st.RetryAt.IsZero() {
			state += fmt.Sprintf(" for %ds more", ceilSeconds(time.Until(st.RetryAt)))
		}
		fmt.Fprintf(w, "  %s: %s; %d failures of %d calls; min_requests %d, open_timeout %v\n",
			st.Key, state, st.Failures, st.Requests, st.Settings.MinRequests, st.Settings.OpenTimeout)
	}
}

// ceilSeconds is d in whole seconds, rounded up, as Retry-After gives it.
func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// dropTime removes the time from log lines, so that the output reads the
// same on every run.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// lockedWriter serializes writes to w: the log and the walkthrough write
// from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write writes p to w, one writer at a time.
func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
