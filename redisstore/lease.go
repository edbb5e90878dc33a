package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/httpbreaker/httpbreaker"
	"github.com/redis/go-redis/v9"
)

// leaseKind is what this Store knows about a key's probe lease.
type leaseKind uint8

const (
	leaseUnknown leaseKind = iota
	leaseMine              // a member of this Store (holder) holds it until the state's until
	leaseOther             // another instance holds it until until
	leasePending           // an acquisition is on its way; no answer by until means Redis is too slow
	leaseBroken            // Redis answered with an error (garbage under the key) until until
)

// leaseState is the local cache of one key's lease.
type leaseState struct {
	kind   leaseKind
	until  time.Time
	holder *member // leaseMine: the member that holds it; leasePending: the one that asked
}

// leaseOp is work for the leaser goroutine.
type leaseOp struct {
	key     string
	ttl     time.Duration
	by      *member // who asks for the lease, or gives it back
	release bool    // give the lease back if by holds it
}

// acquireScript takes the lease KEYS[1] for member ARGV[1] for ARGV[2]
// milliseconds if it is free, and returns {1 if this member holds it, its
// remaining milliseconds, its holder}. A lease without a time to live, or
// with a longer one than asked for (garbage, or a hand-made key), gets the
// asked one, so it cannot block the fleet's probes for ever.
var acquireScript = redis.NewScript(`
local ttl = tonumber(ARGV[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ttl) then
	return {1, ttl, ARGV[1]}
end
local holder = redis.call('GET', KEYS[1])
local left = redis.call('PTTL', KEYS[1])
if left < 0 or left > ttl then
	redis.call('PEXPIRE', KEYS[1], ttl)
	left = ttl
end
if holder == ARGV[1] then
	return {1, left, holder}
end
return {0, left, holder}
`)

// releaseScript deletes the lease KEYS[1] if member ARGV[1] holds it.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
`)

// pendingFor is how long an acquisition may take before ProbeLease stops
// waiting for it and answers LeaseUnavailable.
func (s *Store) pendingFor() time.Duration { return 4 * s.opt.OpTimeout }

// ProbeLease answers from memory whether this member may probe key for
// the fleet:
//
//   - LeaseGranted while this member holds the lease in Redis (until the
//     lease's ttl, capped at Options.MaxOpen, runs out or the breaker
//     closes);
//   - LeaseDenied while another member holds it, of this Store or of
//     another instance, or while the Store is asking Redis for it in the
//     background (the answer usually arrives within a round trip, before
//     the Transport asks again);
//   - LeaseDenied, without asking Redis, while the latest open hint
//     another member published for key says the fleet's open period has
//     not ended (for at most ttl from when this Store learnt it), or an
//     operator's trip by another member holds: the prober that published
//     it backs off as one breaker does, and no other member probes in its
//     place before the period it reached is over;
//   - LeaseUnavailable while Redis is unavailable or too slow to answer,
//     when the lease key holds garbage, or for an invalid key or a ttl
//     that is not positive: the Transport then probes on its own, as
//     without a Store.
//
// A ttl under a millisecond, Redis's resolution, is taken as one.
func (m *member) ProbeLease(key string, ttl time.Duration) httpbreaker.Lease {
	s := m.s
	if !s.healthy.Load() || key == "" || len(key) > MaxKeyLen || ttl <= 0 {
		return httpbreaker.LeaseUnavailable
	}
	ttl = max(min(ttl, s.opt.MaxOpen), time.Millisecond) // Redis counts a lease's life in whole milliseconds, at least 1
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fleetOpenLocked(m, key, ttl, now) {
		return httpbreaker.LeaseDenied
	}
	l, known := s.leases[key]
	if now.Before(l.until) {
		switch l.kind {
		case leaseMine:
			if l.holder == m {
				return httpbreaker.LeaseGranted
			}
			return httpbreaker.LeaseDenied
		case leaseOther, leasePending:
			return httpbreaker.LeaseDenied
		case leaseBroken:
			return httpbreaker.LeaseUnavailable
		}
	}
	if l.kind == leasePending {
		// No answer in time: Redis is too slow to lead the fleet now.
		delete(s.leases, key)
		return httpbreaker.LeaseUnavailable
	}
	if !known && len(s.leases) >= maxLeases {
		for k, old := range s.leases {
			if !now.Before(old.until) {
				delete(s.leases, k)
			}
		}
		if len(s.leases) >= maxLeases {
			return httpbreaker.LeaseUnavailable
		}
	}
	select {
	case s.leaseQ <- leaseOp{key: key, ttl: ttl, by: m}:
		s.leases[key] = leaseState{kind: leasePending, until: now.Add(s.pendingFor()), holder: m}
		return httpbreaker.LeaseDenied
	default:
		s.errs.Add(1)
		return httpbreaker.LeaseUnavailable
	}
}

// fleetOpenLocked reports whether another member than m has said that
// key's open period goes on at now: its latest open hint, learnt less
// than ttl ago, or its operator's trip. A Transport's breaker only learns
// a fleet's open hint while it is closed (and its cycles always), so a
// member whose own open period has ended asks for the lease while the
// prober's backed-off one goes on; without this it would take the lease
// as soon as the prober's ran out (MaxOpenTimeout after it was taken) and
// probe early. Requires mu held.
func (s *Store) fleetOpenLocked(m *member, key string, ttl time.Duration, now time.Time) bool {
	if t, ok := s.trips[key]; ok && t.sender != m.id && t.live(now) {
		return true
	}
	e, ok := s.hints[key]
	return ok && e.sender != m.id && now.Before(e.retryAt) && now.Before(e.at.Add(ttl))
}

// leaser runs lease acquisitions and releases, a batch per round trip.
func (s *Store) leaser() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case op := <-s.leaseQ:
			batch := []leaseOp{op}
		drain:
			for len(batch) < batchSize {
				select {
				case op := <-s.leaseQ:
					batch = append(batch, op)
				default:
					break drain
				}
			}
			s.runLeases(batch)
		}
	}
}

// runLeases sends a batch of lease operations and records the answers.
func (s *Store) runLeases(batch []leaseOp) {
	ctx, cancel := s.opCtx()
	defer cancel()
	sent := s.now()
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, op := range batch {
		k := []string{s.leasePrefix + op.key}
		if op.release {
			cmds[i] = releaseScript.Eval(ctx, pipe, k, op.by.id)
		} else {
			cmds[i] = acquireScript.Eval(ctx, pipe, k, op.by.id, op.ttl.Milliseconds())
		}
	}
	_, err := pipe.Exec(ctx)
	now := s.now()
	if err != nil && !isServerError(err) {
		s.fail("lease", err)
		s.forgetPending(batch)
		return
	}
	for i, op := range batch {
		if op.release {
			if err := cmds[i].Err(); err != nil {
				s.garbage("lease release", err)
			}
			continue
		}
		st, err := s.leaseAnswer(cmds[i], op, sent, now)
		if err != nil {
			s.garbage("lease "+op.key, err)
			st = leaseState{kind: leaseBroken, until: now.Add(s.opt.ResyncInterval)}
		}
		s.mu.Lock()
		if st.kind == leaseUnknown {
			delete(s.leases, op.key)
		} else {
			s.leases[op.key] = st
		}
		s.mu.Unlock()
	}
}

// forgetPending drops the pending states of a batch that failed, so that
// the next ProbeLease asks again (or, while Redis is down, answers
// LeaseUnavailable).
func (s *Store) forgetPending(batch []leaseOp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range batch {
		if !op.release && s.leases[op.key].kind == leasePending {
			delete(s.leases, op.key)
		}
	}
}

// leaseAnswer turns the acquire script's reply to op into a lease state.
// A lease held by a member of this Store (op's, or another one's: its
// state was lost, after an outage) is that member's until sent (before the
// request left) plus what Redis said was left of it, so our idea of it
// never outlives Redis's; another instance's is theirs until now plus what
// is left.
func (s *Store) leaseAnswer(cmd *redis.Cmd, op leaseOp, sent, now time.Time) (leaseState, error) {
	v, err := cmd.Result()
	if err != nil {
		return leaseState{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return leaseState{}, fmt.Errorf("unexpected lease reply %T", v)
	}
	mine, ok1 := a[0].(int64)
	left, ok2 := a[1].(int64)
	holderID, ok3 := a[2].(string)
	if !ok1 || !ok2 || !ok3 || (mine != 0 && mine != 1) {
		return leaseState{}, fmt.Errorf("unexpected lease reply %v", a)
	}
	d := min(max(time.Duration(left)*time.Millisecond, 0), op.ttl)
	holder := op.by
	if mine == 0 {
		holder = s.memberOf(holderID)
	}
	if holder != nil {
		until := sent.Add(d)
		if !until.After(now) {
			return leaseState{}, nil
		}
		return leaseState{kind: leaseMine, until: until, holder: holder}, nil
	}
	if d <= 0 {
		return leaseState{}, nil
	}
	return leaseState{kind: leaseOther, until: now.Add(d)}, nil
}

// releaseLocked forgets key's lease and, if a member of this Store holds
// it, queues its release. Requires mu held.
func (s *Store) releaseLocked(key string) {
	l, ok := s.leases[key]
	if !ok {
		return
	}
	delete(s.leases, key)
	if l.kind == leaseMine && s.now().Before(l.until) {
		select {
		case s.leaseQ <- leaseOp{key: key, by: l.holder, release: true}:
		default:
			s.errs.Add(1) // it expires on its own
		}
	}
}

// releaseAll gives back, best effort, every lease this Store's members
// hold; Close calls it once the goroutines have stopped.
func (s *Store) releaseAll() {
	now := s.now()
	var ops []leaseOp
	s.mu.Lock()
	release := func(k string, l leaseState) {
		if l.kind == leaseMine && now.Before(l.until) {
			ops = append(ops, leaseOp{key: k, by: l.holder, release: true})
		}
	}
	for k, l := range s.leases {
		release(k, l)
	}
	for k, p := range s.closes { // owed by closes that did not reach Redis
		release(k, p.lease)
	}
	clear(s.leases)
	clear(s.closes)
	s.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.OpTimeout)
	defer cancel()
	pipe := s.client.Pipeline()
	for _, op := range ops {
		releaseScript.Eval(ctx, pipe, []string{s.leasePrefix + op.key}, op.by.id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.errs.Add(1)
	}
}

// isServerError reports whether err is an error reply from Redis (the
// command reached it and was refused: garbage under a key, a wrong type),
// as opposed to a failure to reach Redis at all.
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
