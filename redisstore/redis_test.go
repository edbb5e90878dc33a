package redisstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial on its own (a global logger); the
	// outage tests cause many on purpose.
	redis.SetLogger(quietLogger{})
	goleak.VerifyTestMain(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// redisServer is a redis-server child process on 127.0.0.1, for one test.
type redisServer struct {
	t    testing.TB
	bin  string
	port int
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// startRedis starts a redis-server on a free loopback port and stops it
// when the test ends. Without a redis-server binary the test is skipped,
// unless HTTPBREAKER_REQUIRE_REDIS is set (as CI does): then it fails.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("HTTPBREAKER_REQUIRE_REDIS") != "" {
			t.Fatalf("redis-server not found and HTTPBREAKER_REQUIRE_REDIS is set: %v", err)
		}
		t.Skip("redis-server not found (apt-get install redis-server); set HTTPBREAKER_REQUIRE_REDIS to fail instead")
	}
	r := &redisServer{t: t, bin: bin, port: freePort(t), dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr is the server's address.
func (r *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Start starts the server (again, on the same port, empty) and waits until
// it answers.
func (r *redisServer) Start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		r.t.Fatal("redis-server already running")
	}
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmd := exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", r.dir, "--loglevel", "warning")
		if err = cmd.Start(); err != nil {
			r.t.Fatalf("start redis-server: %v", err)
		}
		if err = waitReady(r.Addr(), 5*time.Second); err == nil {
			r.cmd = cmd
			return
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s: %v", r.Addr(), err)
		}
		time.Sleep(100 * time.Millisecond) // port still held: try again
	}
}

// waitReady waits until a PING on addr is answered.
func waitReady(addr string, d time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	end := time.Now().Add(d)
	var err error
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %w", d, err)
}

// Stop kills the server (SIGKILL: no goodbye to the clients) and waits for
// it to exit. Stopping a stopped server does nothing.
func (r *redisServer) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// Freeze stops the server process (SIGSTOP): connections stay open but
// nothing is answered, as with a hung or overloaded Redis. Thaw resumes it.
func (r *redisServer) Freeze() { r.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (r *redisServer) Thaw() { r.signal(syscall.SIGCONT) }

func (r *redisServer) signal(sig os.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		if err := r.cmd.Process.Signal(sig); err != nil {
			r.t.Fatalf("signal %v: %v", sig, err)
		}
	}
}

// Client returns a new client of the server, closed when the test ends.
func (r *redisServer) Client(t testing.TB) *redis.Client {
	return newClient(t, r.Addr())
}

// newClient returns a client of addr set up as the package recommends,
// closed when the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// newTestStore makes a Store on c with quick test settings, closed when
// the test ends (before the client, as Cleanup runs last-in first-out).
func newTestStore(t testing.TB, c redis.UniversalClient, opts Options) *Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = "test"
	}
	if opts.ResyncInterval == 0 {
		opts.ResyncInterval = time.Second
	}
	s, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// twoStores starts a redis-server and two Stores on it, as two instances
// of a service, and waits until both are healthy.
func twoStores(t testing.TB) (*redisServer, *Store, *Store) {
	t.Helper()
	r := startRedis(t)
	a := newTestStore(t, r.Client(t), Options{})
	b := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, a, b)
	return r, a, b
}

// waitHealthy waits until every store has synchronised with Redis.
func waitHealthy(t testing.TB, d time.Duration, stores ...*Store) {
	t.Helper()
	end := time.Now().Add(d)
	for _, s := range stores {
		for !s.healthy.Load() {
			if time.Now().After(end) {
				t.Fatalf("store not healthy after %v (errors %d)", d, s.Errors())
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// eventually polls cond every millisecond for up to d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}
