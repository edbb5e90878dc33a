package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/httpbreaker/httpbreaker"
)

// The three phases of a run, in order.
const (
	phaseHealthy = iota
	phaseOutage
	phaseRecovery
	numPhases
)

// phaseNames are the phases' names as the table and the SVG show them.
var phaseNames = [numPhases]string{"healthy", "outage", "recovery"}

// phaseAt returns the phase at offset at from the start of a run.
func (c config) phaseAt(at time.Duration) int {
	switch {
	case at < c.healthyEnd():
		return phaseHealthy
	case at < c.outageEnd():
		return phaseOutage
	}
	return phaseRecovery
}

// phaseBounds returns the start and end of phase p.
func (c config) phaseBounds(p int) (start, end time.Duration) {
	bounds := [numPhases + 1]time.Duration{0, c.healthyEnd(), c.outageEnd(), c.Duration}
	return bounds[p], bounds[p+1]
}

// outcome is how checkout answered one order.
type outcome uint8

// The outcomes.
const (
	// checked: the fraud service scored the order; it is accepted.
	checked outcome = iota
	// deferredSlow: the fraud call failed (timeout, error) and checkout
	// degraded only after it gave up.
	deferredSlow
	// deferredFast: the breaker refused the fraud call and checkout
	// degraded at once.
	deferredFast
)

// sample is one checkout request as its handler saw it.
type sample struct {
	// At is when the handler started, from the start of the run.
	At time.Duration
	// Latency is the handler's time from start to response written.
	Latency time.Duration
	// Outcome is how checkout answered.
	Outcome outcome
	// Probe is true for a fraud call the breaker let through while
	// half-open.
	Probe bool
	// Phase is the phase the request counts in: the phase of the fraud
	// service it met, or when it met none, the phase it started in. (An
	// order placed a moment before the outage whose fraud call lands in
	// it met the outage.)
	Phase int

	id uint64 // checkout's request number, sent to fraud
}

// transitionEvent is one breaker transition, as WithOnTransition reported
// it.
type transitionEvent struct {
	// At is when it happened, from the start of the run.
	At time.Duration
	// From and To are the states before and after.
	From, To httpbreaker.State
}

// phaseStats sums up one phase of one run.
type phaseStats struct {
	// Name is the phase's name; Start and End its bounds from the start
	// of the run.
	Name       string
	Start, End time.Duration
	// P50 and P99 are percentiles of checkout handler latency over the
	// requests that started in the phase.
	P50, P99 time.Duration
	// Served counts checkout requests that started in the phase;
	// Deferred those among them answered without a fraud score.
	Served, Deferred int
	// FraudCalls counts calls that reached the fraud service in the
	// phase.
	FraudCalls int64
	// HeldAvg is the mean number of checkout handlers in flight over the
	// phase; HeldMax the most at once.
	HeldAvg float64
	HeldMax int64
}

// runResult is one run: the plain client or the breaker.
type runResult struct {
	// Name labels the run in the table and the SVG.
	Name string
	// Phases sums up each phase.
	Phases [numPhases]phaseStats
	// Samples holds every checkout request, in order of start.
	Samples []sample
	// Transitions holds the breaker's transitions (none for the plain
	// client).
	Transitions []transitionEvent
	// LoadErrors counts load requests that failed or got an answer other
	// than 200 or 202; checkout should always answer.
	LoadErrors int64
}

// result is what run found.
type result struct {
	// Config is the configuration the runs used.
	Config config
	// Plain and Breaker are the two runs.
	Plain, Breaker runResult
}

// run starts two copies of the checkout and fraud services, one whose
// fraud client is plain and one whose client has a breaker, drives both at
// once with the same load through the same fraud outage, prints the
// comparison to stdout, and writes the SVG timeline to cfg.SVGPath unless
// it is empty.
func run(ctx context.Context, cfg config, stdout io.Writer) (result, error) {
	if err := cfg.validate(); err != nil {
		return result{}, err
	}
	printIntro(stdout, cfg)

	// Phases count from t0 in both runs, so their timelines line up.
	t0 := time.Now()
	plain, err := newEnv(cfg, "plain http.Client", false, t0)
	if err != nil {
		return result{}, err
	}
	defer plain.close()
	brk, err := newEnv(cfg, "httpbreaker", true, t0)
	if err != nil {
		return result{}, err
	}
	defer brk.close()

	var wg sync.WaitGroup
	wg.Go(func() { plain.load(ctx) })
	wg.Go(func() { brk.load(ctx) })
	wg.Wait()
	plain.close()
	brk.close()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}

	res := result{Config: cfg, Plain: plain.result(), Breaker: brk.result()}
	printTable(stdout, res)
	if cfg.SVGPath != "" {
		if err := os.WriteFile(cfg.SVGPath, []byte(renderSVG(res)), 0o644); err != nil {
			return res, err
		}
		fmt.Fprintf(stdout, "\ntimeline written to %s\n", cfg.SVGPath)
	}
	return res, nil
}

// env is one copy of the system: a fraud service, a checkout service that
// calls it, and the load that calls checkout.
type env struct {
	name string
	cfg  config
	t0   time.Time // start of the run

	fraud    *fraudService
	checkout *checkoutService
	fraudSrv *server
	shopSrv  *server
	breaker  *httpbreaker.Transport // nil for the plain run

	loadErrors atomic.Int64

	mu          sync.Mutex
	transitions []transitionEvent // guarded by mu

	closeOnce sync.Once
}

// newEnv starts the fraud and checkout services of one run on loopback;
// withBreaker gives checkout's fraud client an httpbreaker.Transport. The
// run's phases count from t0.
func newEnv(cfg config, name string, withBreaker bool, t0 time.Time) (*env, error) {
	e := &env{name: name, cfg: cfg, t0: t0}
	e.fraud = &fraudService{env: e, probes: map[uint64]bool{}, moved: map[uint64]int{}}
	var err error
	if e.fraudSrv, err = startServer(e.fraud); err != nil {
		return nil, err
	}
	fraudURL := e.fraudSrv.url + "/score"

	var rt http.RoundTripper
	if withBreaker {
		// See config.deriveBreaker for why these values.
		e.breaker = httpbreaker.New(nil,
			// Fraud is called on every checkout, so a window fills in
			// milliseconds: a few outcomes are plenty to judge by.
			httpbreaker.WithMinRequests(cfg.MinRequests),
			httpbreaker.WithWindow(cfg.Window),
			httpbreaker.WithOpenTimeout(cfg.OpenTimeout),
			httpbreaker.WithMaxOpenTimeout(cfg.MaxOpenTimeout),
			httpbreaker.WithOnTransition(e.noteTransition),
		)
		rt = e.breaker
		u, _ := url.Parse(fraudURL)
		key := httpbreaker.HostKey(&http.Request{URL: u})
		e.fraud.isProbe = func() bool { return e.breaker.State(key) == httpbreaker.StateHalfOpen }
	} else {
		// The same pooled transport httpbreaker.New(nil) wraps, so the
		// breaker is the only difference.
		rt = cleanhttp.DefaultPooledTransport()
	}
	e.checkout = &checkoutService{
		env:      e,
		client:   &http.Client{Transport: rt, Timeout: cfg.Timeout},
		fraudURL: fraudURL,
	}
	if e.shopSrv, err = startServer(e.checkout); err != nil {
		e.fraudSrv.close(cfg.Timeout)
		return nil, err
	}
	return e, nil
}

// since returns the offset of now from the start of the run.
func (e *env) since() time.Duration { return time.Since(e.t0) }

// noteTransition is the breaker's WithOnTransition hook.
func (e *env) noteTransition(tr httpbreaker.Transition) {
	at := e.since()
	e.mu.Lock()
	e.transitions = append(e.transitions, transitionEvent{At: at, From: tr.From, To: tr.To})
	e.mu.Unlock()
}

// close shuts both services down and closes idle connections. It is safe
// to call more than once.
func (e *env) close() {
	e.closeOnce.Do(func() {
		e.shopSrv.close(e.cfg.Timeout)
		e.checkout.client.CloseIdleConnections()
		e.fraudSrv.close(e.cfg.Timeout)
	})
}

// load runs cfg.Concurrency callers against checkout until the run ends
// or ctx is done. Each caller sends an order, waits for the answer, pauses
// cfg.Think and sends the next: a closed loop, like a fixed pool of
// upstream workers.
func (e *env) load(ctx context.Context) {
	c := e.cfg
	tr := &http.Transport{MaxIdleConns: c.Concurrency, MaxIdleConnsPerHost: c.Concurrency}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	end := e.t0.Add(c.Duration)
	shopURL := e.shopSrv.url + "/checkout"
	var wg sync.WaitGroup
	for i := range c.Concurrency {
		wg.Go(func() {
			// Stagger the callers over one pause so they do not move in
			// lockstep.
			if !pause(ctx, c.Think*time.Duration(i)/time.Duration(c.Concurrency)) {
				return
			}
			for time.Now().Before(end) {
				e.order(ctx, client, shopURL)
				if !pause(ctx, c.Think) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// order sends one order to checkout and reads the answer.
func (e *env) order(ctx context.Context, client *http.Client, shopURL string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, shopURL, strings.NewReader(`{"cart":"c-42","amount_cents":4999}`))
	if err != nil {
		e.loadErrors.Add(1)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			e.loadErrors.Add(1)
		}
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		e.loadErrors.Add(1)
	}
}

// pause waits d, or until ctx is done; it reports whether ctx is still
// live.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// result sums the run up. Call it after close.
func (e *env) result() runResult {
	c := e.cfg
	ch := e.checkout
	ch.mu.Lock()
	samples := slices.Clone(ch.samples)
	ch.mu.Unlock()
	e.fraud.mu.Lock()
	for i := range samples {
		samples[i].Probe = e.fraud.probes[samples[i].id]
		if p, ok := e.fraud.moved[samples[i].id]; ok {
			samples[i].Phase = p
		}
	}
	e.fraud.mu.Unlock()
	slices.SortFunc(samples, func(a, b sample) int { return cmp.Compare(a.At, b.At) })
	e.mu.Lock()
	trs := slices.Clone(e.transitions)
	e.mu.Unlock()
	r := runResult{Name: e.name, Samples: samples, Transitions: trs, LoadErrors: e.loadErrors.Load()}
	var lat [numPhases][]time.Duration
	for _, s := range samples {
		p := s.Phase
		lat[p] = append(lat[p], s.Latency)
		r.Phases[p].Served++
		if s.Outcome != checked {
			r.Phases[p].Deferred++
		}
	}
	for p := range numPhases {
		ps := &r.Phases[p]
		ps.Name = phaseNames[p]
		ps.Start, ps.End = c.phaseBounds(p)
		slices.Sort(lat[p])
		ps.P50 = percentile(lat[p], 0.50)
		ps.P99 = percentile(lat[p], 0.99)
		ps.FraudCalls = e.fraud.calls[p].Load()
		ps.HeldMax = ch.heldMax[p].Load()
		ps.HeldAvg = float64(ch.busy[p].Load()) / float64(ps.End-ps.Start)
	}
	return r
}

// percentile returns the nearest-rank q-quantile of sorted, or 0 when it
// is empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// fraudService scores orders. While the run is in its outage phase it
// takes each call and never answers: the handler waits until the caller
// gives up, as a wedged service behind a load balancer does.
type fraudService struct {
	env *env
	// isProbe reports whether a call arriving now is a half-open probe;
	// nil for the plain run.
	isProbe func() bool
	// calls counts calls that reached the service, per phase.
	calls [numPhases]atomic.Int64

	mu     sync.Mutex
	probes map[uint64]bool // checkout request numbers of probes; guarded by mu
	moved  map[uint64]int  // request number → phase, for calls that arrived in a later phase than their order; guarded by mu
}

// ServeHTTP scores an order, or hangs during the outage.
func (f *fraudService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	phase := f.env.cfg.phaseAt(f.env.since())
	f.calls[phase].Add(1)
	probe := f.isProbe != nil && f.isProbe()
	orderPhase, _ := strconv.Atoi(r.Header.Get("X-Order-Phase"))
	if probe || orderPhase != phase {
		id, _ := strconv.ParseUint(r.Header.Get("X-Request-Id"), 10, 64)
		f.mu.Lock()
		if probe {
			f.probes[id] = true
		}
		if orderPhase != phase {
			f.moved[id] = phase
		}
		f.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r.Body)
	if phase == phaseOutage {
		<-r.Context().Done() // hang until the caller gives up
		return
	}
	if !pause(r.Context(), f.env.cfg.FraudLatency) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"score":0.02,"decision":"approve"}`)
}

// checkoutService takes orders. It asks fraud to score each one; when
// fraud cannot answer it degrades (see ServeHTTP).
type checkoutService struct {
	env      *env
	client   *http.Client
	fraudURL string

	nextID   atomic.Uint64
	inflight atomic.Int64
	heldMax  [numPhases]atomic.Int64 // most handlers in flight at once, per phase
	busy     [numPhases]atomic.Int64 // handler-nanoseconds spent in each phase

	mu      sync.Mutex
	samples []sample // guarded by mu
}

// ServeHTTP takes an order.
//
// Degraded answer: when the fraud check is unavailable — the call failed,
// or the breaker refused it — checkout accepts the order as pending
// review (202) instead of failing it: nothing ships until a deferred fraud
// check, run when the service is back, clears it. Whether to fail open
// like this is a business decision about risk (many shops cap it by order
// value); a breaker only makes it possible to take it in microseconds
// instead of after a timeout.
func (s *checkoutService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := s.env
	at := e.since()
	start := time.Now()
	n := s.inflight.Add(1)
	phase := e.cfg.phaseAt(at)
	for {
		m := s.heldMax[phase].Load()
		if n <= m || s.heldMax[phase].CompareAndSwap(m, n) {
			break
		}
	}
	_, _ = io.Copy(io.Discard, r.Body)

	id := s.nextID.Add(1)
	o := s.score(r.Context(), id, phase)
	w.Header().Set("Content-Type", "application/json")
	if o == checked {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"order":"accepted","fraud_check":"passed"}`)
	} else {
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"order":"pending_review","fraud_check":"deferred"}`)
	}

	lat := time.Since(start)
	s.inflight.Add(-1)
	s.addBusy(at, at+lat)
	if r.Context().Err() != nil {
		return // the run ended under it: not a measurement
	}
	s.mu.Lock()
	s.samples = append(s.samples, sample{At: at, Latency: lat, Outcome: o, Phase: phase, id: id})
	s.mu.Unlock()
}

// score asks fraud about order id, placed in phase, and says how checkout
// should answer.
func (s *checkoutService) score(ctx context.Context, id uint64, phase int) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.fraudURL, strings.NewReader(`{"order":`+strconv.FormatUint(id, 10)+`}`))
	if err != nil {
		return deferredSlow
	}
	req.Header.Set("Content-Type", "application/json")
	// Bookkeeping for the demo's tables, not something fraud needs.
	req.Header.Set("X-Request-Id", strconv.FormatUint(id, 10))
	req.Header.Set("X-Order-Phase", strconv.Itoa(phase))
	resp, err := s.client.Do(req)
	if err != nil {
		return deferredSlow
	}
	defer resp.Body.Close()
	if httpbreaker.IsRejected(resp) {
		return deferredFast
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return deferredSlow
	}
	return checked
}

// addBusy adds the handler time [from, to) to the phases it overlaps.
func (s *checkoutService) addBusy(from, to time.Duration) {
	for p := range numPhases {
		ps, pe := s.env.cfg.phaseBounds(p)
		if d := min(to, pe) - max(from, ps); d > 0 {
			s.busy[p].Add(int64(d))
		}
	}
}

// server is an http.Server on a loopback port.
type server struct {
	srv  *http.Server
	url  string
	done chan struct{} // closed when Serve returns
}

// startServer serves h on 127.0.0.1 on a free port.
func startServer(h http.Handler) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          log.New(io.Discard, "", 0),
		},
		url:  "http://" + l.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("outage: serve %s: %v", s.url, err)
		}
	}()
	return s, nil
}

// close shuts the server down, waiting up to grace for handlers to
// finish before closing their connections.
func (s *server) close(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace+time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
}
