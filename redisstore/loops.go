package redisstore

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/redis/go-redis/v9"
)

// hintScript records a hint under KEYS[1] and publishes it, atomically, so
// that the key and the message cannot tell different stories when two
// instances write at once. ARGV: channel, message, time to live in
// milliseconds: 0, the breaker closed (delete the key); -1, none (an
// operator's trip until Reset: SET without PX also drops any time to live
// the key had).
var hintScript = redis.NewScript(`
if ARGV[3] == '0' then
	redis.call('DEL', KEYS[1])
elseif ARGV[3] == '-1' then
	redis.call('SET', KEYS[1], ARGV[2])
else
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return redis.call('PUBLISH', ARGV[1], ARGV[2])
`)

// publisher sends queued hints, a batch per round trip, and re-publishes
// the open hints of this Store's members when asked (after an outage).
func (s *Store) publisher() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.replay:
			s.sendOwn()
		case h := <-s.queue:
			batch := []outHint{h}
		drain:
			for len(batch) < batchSize {
				select {
				case h := <-s.queue:
					batch = append(batch, h)
				default:
					break drain
				}
			}
			s.send(batch)
		}
	}
}

// send publishes a batch of hints, each tagged with the member that
// published it. While the subscriber is disconnected Redis is down: the
// hints are dropped and counted, as they are when Redis cannot be reached
// (the open ones, the closed ones and operators' Resets are re-published
// when it is back, see sendOwn). A closed hint also gives back the probe
// lease, if a member of this Store holds it: the breaker is closed for
// all of them.
//
// An open hint goes to the open key, with a time to live of its open time
// plus retrySlack; an operator's trip to the trip key, uncapped, or with
// no time to live for one until Reset. A closed hint deletes the open key;
// an operator's Reset deletes both.
func (s *Store) send(batch []outHint) {
	leases := s.takeLeases(batch)
	if !s.subUp.Load() {
		s.errs.Add(uint64(len(batch)))
		s.oweCloses(batch, leases)
		return
	}
	ctx, cancel := s.opCtx()
	defer cancel()
	now := s.now()
	pipe := s.client.Pipeline()
	type operated struct {
		o   outHint
		cmd *redis.Cmd
	}
	var ops []operated // operators' hints, to mark as sent
	n := 0
	for i, o := range batch {
		h := o.h
		w := wireHint{sender: o.by.id, key: h.Key, operator: h.Operator}
		key := s.openPrefix + h.Key
		var ttl int64
		switch {
		case h.State == httpbreaker.StateOpen:
			w.open, w.cycles = true, h.Cycles
			if h.Operator {
				key = s.tripPrefix + h.Key
			}
			if h.Operator && h.RetryAt.IsZero() {
				ttl = -1 // until Reset
				break
			}
			left := h.RetryAt.Sub(now).Milliseconds()
			if left <= 0 {
				continue // stale by now: nothing to say
			}
			w.openFor = left
			ttl = left + retrySlack.Milliseconds()
		default:
			if l := leases[i]; l.kind == leaseMine && now.Before(l.until) {
				releaseScript.Eval(ctx, pipe, []string{s.leasePrefix + h.Key}, l.holder.id)
			}
			if h.Operator {
				pipe.Del(ctx, key) // the open key; the message goes with the trip key's
				key = s.tripPrefix + h.Key
			}
		}
		cmd := hintScript.Eval(ctx, pipe, []string{key}, s.channel, w.encode(), ttl)
		if o.seq != 0 {
			ops = append(ops, operated{o, cmd})
		}
		n++
	}
	if n == 0 {
		return
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil && !isServerError(err) {
		s.fail("publish", err)
		s.oweCloses(batch, leases)
		return
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			s.garbage("publish", err)
		}
	}
	done := s.now() // after Redis ran them (see resync)
	s.mu.Lock()
	for _, op := range ops {
		if op.cmd.Err() != nil {
			continue
		}
		k := op.o.h.Key
		if op.o.h.State == httpbreaker.StateOpen {
			if e, ok := s.trips[k]; ok && e.by != nil && e.seq == op.o.seq {
				e.sent = done
				s.trips[k] = e
			}
		} else if r, ok := s.resets[k]; ok && r.seq == op.o.seq {
			delete(s.resets, k)
		}
	}
	s.mu.Unlock()
}

// takeLeases returns, for each closed hint of batch, the probe lease it
// gives back (the zero leaseState for the others), and forgets it: the
// lease this Store knows a member holds, or else the one a pending close
// of the key owes (see pendingClose), which the hint replaces.
func (s *Store) takeLeases(batch []outHint) []leaseState {
	leases := make([]leaseState, len(batch))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range batch {
		if o.h.State == httpbreaker.StateOpen {
			continue
		}
		k := o.h.Key
		leases[i] = s.leases[k]
		delete(s.leases, k)
		if p, ok := s.closes[k]; ok {
			if leases[i].kind != leaseMine {
				leases[i] = p.lease
			}
			delete(s.closes, k)
		}
	}
	return leases
}

// oweCloses keeps the closed hints of batch, which did not reach Redis,
// with the leases they give back, for sendOwn to send again.
func (s *Store) oweCloses(batch []outHint, leases []leaseState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range batch {
		if o.h.State == httpbreaker.StateOpen {
			continue
		}
		if _, ok := s.closes[o.h.Key]; ok || len(s.closes) < maxHints {
			s.closes[o.h.Key] = pendingClose{o: o, lease: leases[i]}
		}
	}
}

// sendOwn re-publishes the open hints and operators' trips of this
// Store's members that have not expired, and their closed hints and
// Resets that have not reached Redis: a Redis that restarted lost them,
// and instances that were cut off missed them. The closed hints go
// first: a key's later open hint drops its pending close (see
// pendingClose), so one that has both opened again since.
func (s *Store) sendOwn() {
	now := s.now()
	var batch []outHint
	s.mu.Lock()
	for _, p := range s.closes {
		batch = append(batch, p.o)
	}
	for k, o := range s.own {
		if !o.retryAt.After(now) {
			delete(s.own, k)
			continue
		}
		batch = append(batch, outHint{h: httpbreaker.Hint{Key: k, State: httpbreaker.StateOpen, RetryAt: o.retryAt, Cycles: o.cycles}, by: o.by})
	}
	for k, e := range s.trips {
		if e.by != nil && e.live(now) {
			batch = append(batch, outHint{h: e.hint(k), by: e.by, seq: e.seq})
		}
	}
	for k, r := range s.resets {
		if _, ok := s.closes[k]; !ok { // else it went with the closes
			batch = append(batch, outHint{h: httpbreaker.Hint{Key: k, State: httpbreaker.StateClosed, Operator: true}, by: r.by, seq: r.seq})
		}
	}
	s.mu.Unlock()
	for len(batch) > 0 && s.ctx.Err() == nil {
		n := min(len(batch), batchSize)
		s.send(batch[:n])
		batch = batch[n:]
	}
}

// subscriber owns the subscription: it receives hints, queues them for
// delivery to the members, resynchronises periodically and after every
// (re)connection, and tells when Redis is up or down. Everything that
// changes the known hints from Redis runs on it, so they apply in order.
//
// A subscription can die silently (a half-open TCP connection after a
// network partition): nothing arrives, which looks like a quiet fleet. So
// the subscriber PINGs every ResyncInterval, and a subscription that has
// not answered for pingGrace after that is replaced.
func (s *Store) subscriber() {
	defer s.wg.Done()
	ps := s.newPubSub()
	defer func() { ps.Close() }()
	backoff := minBackoff
	var nextSync, lastPing time.Time
	lastRecv := time.Now()
	for s.ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(s.ctx, receiveTick)
		now := time.Now()
		if err != nil && !isTimeout(err) {
			if s.ctx.Err() != nil {
				return
			}
			s.subUp.Store(false)
			s.fail("subscribe", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			lastRecv = time.Now()
			continue
		}
		if err == nil {
			lastRecv = now
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				// (Re)connected: anything may have been missed.
				backoff = minBackoff
				s.subUp.Store(true)
				nextSync = time.Time{}
			}
		case *redis.Message:
			s.handleMessage(m.Payload)
		}
		if s.subUp.Load() {
			if now.Sub(lastRecv) > s.opt.ResyncInterval+pingGrace {
				s.subUp.Store(false)
				s.fail("subscribe", errNoPong)
				ps.Close()
				ps = s.newPubSub()
				lastRecv = time.Now()
				continue
			}
			if now.Sub(lastPing) >= s.opt.ResyncInterval {
				lastPing = now
				ctx, cancel := s.opCtx()
				_ = ps.Ping(ctx) // a failure shows in the next receive
				cancel()
			}
		}
		s.maintain(&nextSync)
	}
}

// errNoPong is why a silent subscription is replaced.
var errNoPong = errors.New("redisstore: subscription did not answer PING")

// newPubSub returns a PubSub on the hints channel. Subscribing records the
// channel even when it fails; every reconnection in ReceiveTimeout
// subscribes to it again.
func (s *Store) newPubSub() *redis.PubSub {
	ps := s.client.Subscribe(s.ctx) // no channel yet: no I/O
	_ = ps.Subscribe(s.ctx, s.channel)
	return ps
}

// maintain resynchronises when it is due: every ResyncInterval, at once
// after a (re)connection (next is zero then), and every unhealthyRetry
// while subscribed but not healthy (a Redis call failed). A successful
// resync makes the Store healthy.
func (s *Store) maintain(next *time.Time) {
	if !s.subUp.Load() {
		return
	}
	now := time.Now()
	due := *next
	if retry := s.lastSync.Add(unhealthyRetry); !s.healthy.Load() && retry.Before(due) {
		due = retry
	}
	if now.Before(due) {
		return
	}
	s.lastSync = now
	if err := s.resync(); err != nil {
		s.fail("resync", err)
		*next = now.Add(unhealthyRetry)
		return
	}
	*next = now.Add(s.opt.ResyncInterval)
	s.recovered()
}

// isTimeout reports whether err is the subscriber's receive timing out
// with nothing to read.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// handleMessage takes one message from the hints channel.
//
// A hint published by one of this Store's members comes back through
// Redis too: see echo. Another instance's open hint (or trip) that a
// resync has learnt already (the resync read its key before the message
// came) is not delivered again, as resync does not deliver one a message
// has brought. Another instance's closed hint that is not an operator's
// is not delivered while an operator's trip holds: only a Reset ends a
// trip early.
func (s *Store) handleMessage(payload string) {
	w, err := s.decode(payload)
	if err != nil {
		s.garbage("message", err)
		return
	}
	if inst, n, _ := splitSender(w.sender); inst == s.id {
		s.echo(w, n)
		return
	}
	now := s.now()
	switch {
	case w.open && w.operator:
		e := tripEntry{cycles: w.cycles, sender: w.sender}
		if !w.forever() {
			e.retryAt = now.Add(msDuration(w.openFor))
		}
		s.mu.Lock()
		old, known := s.trips[w.key]
		s.setTripLocked(w.key, e, now)
		delete(s.resets, w.key) // a later action than this Store's Reset
		s.mu.Unlock()
		if known && old.same(e) {
			return // a resync that ran before this message came has delivered it
		}
		s.post(e.hint(w.key), 0)
	case w.open:
		r, ok := retryAt(msDuration(w.openFor), now, s.opt.MaxOpen)
		if !ok {
			return
		}
		e := hintEntry{retryAt: r, cycles: w.cycles, sender: w.sender, at: now}
		s.mu.Lock()
		old, known := s.hints[w.key]
		same := known && old.same(e)
		if same {
			e.at = old.at
		}
		s.setHintLocked(w.key, e, now)
		s.mu.Unlock()
		if same {
			return // a resync that ran before this message came has delivered it
		}
		s.post(httpbreaker.Hint{Key: w.key, State: httpbreaker.StateOpen, RetryAt: r, Cycles: w.cycles}, 0)
	default:
		deliver := true
		s.mu.Lock()
		delete(s.hints, w.key)
		delete(s.own, w.key)
		if w.operator {
			delete(s.trips, w.key)
			delete(s.resets, w.key)
		} else {
			deliver = !s.trippedLocked(w.key, now)
		}
		s.releaseLocked(w.key)
		s.mu.Unlock()
		if deliver {
			s.post(httpbreaker.Hint{Key: w.key, State: httpbreaker.StateClosed, Operator: w.operator}, 0)
		}
	}
}

// echo takes a message w published by member n of this Store, come back
// through Redis: it is delivered to the other members (they had it in
// process already, and hints are idempotent), never to n, and it changes
// nothing in memory, which Publish updated. It is dropped if a later
// Publish of this Store has superseded it (a close after the open that
// comes back, or the reverse), so that an echo cannot reopen, even for a
// moment, a breaker the fleet has closed since.
func (s *Store) echo(w wireHint, n int) {
	now := s.now()
	s.mu.Lock()
	e, open := s.hints[w.key]
	t, tripped := s.trips[w.key]
	s.mu.Unlock()
	switch {
	case w.open && w.operator:
		if tripped && t.sender == w.sender && t.live(now) {
			s.post(t.hint(w.key), n)
		}
	case w.open:
		if open && e.sender == w.sender {
			s.post(httpbreaker.Hint{Key: w.key, State: httpbreaker.StateOpen, RetryAt: e.retryAt, Cycles: e.cycles}, n)
		}
	case w.operator:
		if !tripped {
			s.post(httpbreaker.Hint{Key: w.key, State: httpbreaker.StateClosed, Operator: true}, n)
		}
	default:
		if !open && !(tripped && t.live(now)) {
			s.post(httpbreaker.Hint{Key: w.key, State: httpbreaker.StateClosed}, n)
		}
	}
}

// resync reads every open key and trip key and makes the known hints
// match: a hint or trip missing from memory is learnt and delivered to
// the members; an open hint that is gone from Redis is forgotten (unless
// there were more than maxScan open keys to read: then one not read may
// be there still). A
// vanished open key is not taken for a close (it may have expired, or
// Redis may have restarted empty): the breakers it opened run out their
// open period and probe, which costs at most MaxOpen.
//
// A trip key, though, is the trip: one that vanished before its time was
// deleted by an operator's Reset whose message this Store missed (or
// Redis lost it), and is delivered as a Reset, so that no instance stays
// tripped, perhaps until a Reset that already happened. That holds for
// the trips of this Store's members too, once written to Redis (before,
// sendOwn writes them when Redis is back). A key with a Reset of this
// Store's members pending is left to that Reset.
func (s *Store) resync() error {
	start := s.now()
	keys, openComplete, err := s.scanKeys(s.openPrefix)
	if err != nil {
		return err
	}
	opens := len(keys)
	tripKeys, complete, err := s.scanKeys(s.tripPrefix)
	if err != nil {
		return err
	}
	keys = append(keys, tripKeys...)
	vals, err := s.getAll(keys)
	if err != nil {
		return err
	}
	now := s.now()
	found := make(map[string]hintEntry, opens)
	foundTrips := make(map[string]tripEntry, len(tripKeys))
	for i, k := range keys {
		v := vals[i]
		if v.err != nil {
			if !errors.Is(v.err, redis.Nil) { // nil: expired since the SCAN
				s.garbage("open key", v.err)
			}
			continue
		}
		trip := i >= opens
		prefix := s.openPrefix
		if trip {
			prefix = s.tripPrefix
		}
		w, err := s.decode(v.val)
		if err == nil && (!w.open || w.operator != trip || w.key != strings.TrimPrefix(k, prefix)) {
			err = errGarbage
		}
		// The key expires retrySlack after its retry-at: Redis's clock
		// says how long is left, whatever ours and the sender's say. Only
		// a trip until Reset has no time to live.
		if err == nil && v.ttl < 0 && !w.forever() {
			err = errNoTTL
		}
		if err != nil {
			s.garbage("open key", err)
			continue
		}
		switch {
		case trip && v.ttl < 0:
			foundTrips[w.key] = tripEntry{cycles: w.cycles, sender: w.sender}
		case trip:
			if left := v.ttl - retrySlack; left > 0 {
				foundTrips[w.key] = tripEntry{retryAt: now.Add(left), cycles: w.cycles, sender: w.sender}
			}
		default:
			if r, ok := retryAt(v.ttl-retrySlack, now, s.opt.MaxOpen); ok {
				found[w.key] = hintEntry{retryAt: r, cycles: w.cycles, sender: w.sender, at: now}
			}
		}
	}
	var news []httpbreaker.Hint
	var resets []string
	s.mu.Lock()
	for k, e := range found {
		if s.local(e.sender) {
			continue // our members' own: s.own has it
		}
		if old, ok := s.hints[k]; ok && old.same(e) {
			continue // known already, give or take the clocks
		}
		if s.setHintLocked(k, e, now) {
			news = append(news, httpbreaker.Hint{Key: k, State: httpbreaker.StateOpen, RetryAt: e.retryAt, Cycles: e.cycles})
		}
	}
	if openComplete { // a SCAN cut short proves nothing
		for k, e := range s.hints {
			if _, ok := found[k]; !ok && !s.local(e.sender) {
				delete(s.hints, k)
			}
		}
	}
	for k, e := range foundTrips {
		if _, ok := s.resets[k]; ok || s.local(e.sender) {
			continue // our members' own, or about to be Reset by one of them
		}
		if old, ok := s.trips[k]; ok && old.same(e) {
			continue
		}
		if s.setTripLocked(k, e, now) {
			news = append(news, e.hint(k))
		}
	}
	for k, e := range s.trips {
		if _, ok := foundTrips[k]; ok || !complete {
			continue // (a SCAN cut short at maxScan proves nothing)
		}
		if e.live(now) && e.by != nil && (e.sent.IsZero() || !e.sent.Before(start)) {
			continue // ours, not in Redis yet (or written since the SCAN began)
		}
		delete(s.trips, k)
		if e.live(now) {
			resets = append(resets, k) // Reset, and this Store missed it
			s.releaseLocked(k)
		}
	}
	news = append(news, s.missedLocked(now)...) // for breakers made while Lookup could not answer
	s.mu.Unlock()
	for _, h := range news {
		s.post(h, 0)
	}
	for _, k := range resets {
		s.post(httpbreaker.Hint{Key: k, State: httpbreaker.StateClosed, Operator: true}, 0)
	}
	return nil
}

// scanKeys returns the names of the keys under prefix (the open or the
// trip keys), at most maxScan of them, on every master of a cluster or
// ring; complete is false when there were more.
func (s *Store) scanKeys(prefix string) (keys []string, complete bool, err error) {
	match := escapeGlob(prefix) + "*"
	complete = true
	var mu sync.Mutex // ForEachMaster and ForEachShard scan the shards at once
	add := func(page []string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range page {
			if len(keys) >= maxScan {
				complete = false
				return false
			}
			if strings.HasPrefix(k, prefix) { // always, unless Redis lies
				keys = append(keys, k)
			}
		}
		return true
	}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			octx, cancel := context.WithTimeout(ctx, s.opt.OpTimeout)
			page, next, err := c.Scan(octx, cursor, match, 512).Result()
			cancel()
			if err != nil {
				return err
			}
			if !add(page) || next == 0 {
				return nil
			}
			cursor = next
		}
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(s.ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	case *redis.Ring:
		err = c.ForEachShard(s.ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	default:
		err = scan(s.ctx, s.client)
	}
	return keys, complete, err
}

// errNoTTL: an open key that never expires, or a trip key for a time
// that never expires, was not written by a Store.
var errNoTTL = errors.New("redisstore: open key without a time to live")

// sameHint is how far apart two retry-ats of the same sender's hint may
// be and still be the same hint: times computed from a message and from a
// key's time to live differ by the message's latency.
const sameHint = time.Second

// getResult is one key's value and time to live.
type getResult struct {
	val string
	ttl time.Duration // negative: no time to live
	err error
}

// getAll reads keys with pipelined GETs and PTTLs, a round trip per 256
// keys.
func (s *Store) getAll(keys []string) ([]getResult, error) {
	out := make([]getResult, 0, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), 256)
		ctx, cancel := s.opCtx()
		pipe := s.client.Pipeline()
		cmds := make([]*redis.StringCmd, n)
		ttls := make([]*redis.DurationCmd, n)
		for i, k := range keys[:n] {
			cmds[i] = pipe.Get(ctx, k)
			ttls[i] = pipe.PTTL(ctx, k)
		}
		_, err := pipe.Exec(ctx)
		cancel()
		if err != nil && !isServerError(err) && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for i, c := range cmds {
			v, err := c.Result()
			ttl, terr := ttls[i].Result()
			if err == nil && terr != nil {
				err = terr
			}
			if ttl == -2 { // gone since the GET
				err = redis.Nil
			}
			out = append(out, getResult{val: v, ttl: ttl, err: err})
		}
		keys = keys[n:]
	}
	return out, nil
}
