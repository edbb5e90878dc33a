package redisstore

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// blackholeProxy forwards loopback TCP connections to a target until
// Blackhole is called: then the connections open at that moment stay open
// but carry nothing either way, like connections across a network
// partition (or to a peer that vanished without a RST). Connections made
// afterwards work.
type blackholeProxy struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []*proxied
}

type proxied struct {
	a, b net.Conn
	dead atomic.Bool
}

func newBlackholeProxy(t *testing.T, target string) *blackholeProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackholeProxy{l: l, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *blackholeProxy) Addr() string { return p.l.Addr().String() }

func (p *blackholeProxy) accept() {
	defer p.wg.Done()
	for {
		a, err := p.l.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		c := &proxied{a: a, b: b}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, a, b)
		go p.pipe(c, b, a)
	}
}

// pipe copies src to dst, dropping everything once c is dead.
func (p *blackholeProxy) pipe(c *proxied, src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.dead.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			dst.Close()
			return
		}
	}
}

// Blackhole silences every connection open now.
func (p *blackholeProxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.dead.Store(true)
	}
}

func (p *blackholeProxy) close() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.a.Close()
		c.b.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestSilentSubscriptionReplaced: a subscription that silently stops
// delivering (a partition that leaves the TCP connection open) is noticed
// by its unanswered PING and replaced; the resync then repairs what was
// missed, and hints flow again.
func TestSilentSubscriptionReplaced(t *testing.T) {
	r := startRedis(t)
	proxy := newBlackholeProxy(t, r.Addr())
	behind := newTestStore(t, newClient(t, proxy.Addr()), Options{ResyncInterval: time.Second})
	direct := newTestStore(t, r.Client(t), Options{})
	waitHealthy(t, 5*time.Second, behind, direct)
	got := hintWaiter(behind)
	pd := direct.join(nil)

	proxy.Blackhole()
	start := time.Now()
	pd.Publish(httpbreaker.Hint{Key: "during", State: httpbreaker.StateOpen, RetryAt: time.Now().Add(30 * time.Second)})
	select {
	case h := <-got:
		t.Fatalf("delivered through a black hole: %+v", h)
	case <-time.After(100 * time.Millisecond):
	}
	// The periodic resync (on a fresh connection: the pool drops the one
	// that timed out) repairs the missed hint.
	select {
	case h := <-got:
		if h.Key != "during" {
			t.Fatalf("got %+v", h)
		}
		t.Logf("missed hint repaired by resync %v after the partition", time.Since(start))
	case <-time.After(3 * time.Second):
		t.Fatal("missed hint never repaired")
	}
	// After ResyncInterval + pingGrace the silent subscription is replaced:
	// hints arrive through pub/sub again, in milliseconds, which the 1s
	// resync could not do three times in a row.
	time.Sleep(time.Until(start.Add(time.Second + pingGrace + 500*time.Millisecond)))
	waitHealthy(t, 5*time.Second, behind)
	for i := range 3 {
		key := "after" + string(rune('0'+i))
		sent := time.Now()
		pd.Publish(httpbreaker.Hint{Key: key, State: httpbreaker.StateOpen, RetryAt: time.Now().Add(30 * time.Second)})
		select {
		case h := <-got:
			if h.Key != key {
				t.Fatalf("got %+v, want %s", h, key)
			}
			if d := time.Since(sent); d > 50*time.Millisecond {
				t.Errorf("%s delivered after %v: not through a live subscription", key, d)
			}
		case <-time.After(time.Second):
			t.Fatal("no delivery on the new subscription")
		}
	}
}
