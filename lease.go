// Leases: Claim, Heartbeat, Complete, Fail, Release, fencing, backoff and the
// claim waker.

package switchboard

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/switchboardhq/switchboard/store"
)

// Lease is a claim on a todo. Its Token fences the claim: Complete and the
// other lease verbs must present the current token, so a worker whose lease
// expired and was claimed by another can never finish that other's work.
// A caller that sends a Lease back (to Heartbeat, Complete, Fail, Release)
// must return TodoID and Token; Attempt and ExpiresAt are informative and
// not read.
type Lease struct {
	TodoID    string    `json:"todo"`                // the leased todo
	Token     string    `json:"token"`               // the fencing token: present it to every lease verb
	Attempt   int       `json:"attempt"`             // which attempt this claim is, from 1
	ExpiresAt time.Time `json:"expires_at,omitzero"` // when the lease lapses unless heartbeated
}

// ClaimOptions tunes one Claim. A nil *ClaimOptions means the defaults.
type ClaimOptions struct {
	// Lease is the lease length; zero means the grant's default, else
	// Config.DefaultLease. At most Config.MaxLease.
	Lease time.Duration `json:"lease,omitempty"`
	// Wait blocks until a todo is ready or ctx ends, instead of returning
	// ErrQueueEmpty. Work created, failed, released or redriven through this
	// Switchboard wakes it at once; work from another process sharing the
	// store too if the store announces commits (store.Watcher), and
	// otherwise is found by polling every Config.PollInterval.
	Wait bool `json:"wait,omitempty"`
}

// Claim leases the next ready todo in queue: highest priority first, then
// the one available longest. Expired leases in the queue are recovered first
// (counted as an attempt; a todo out of attempts is dead-lettered), so
// correctness never depends on a reaper. When nothing is ready it returns
// ErrQueueEmpty, or with opts.Wait blocks until work arrives or ctx ends.
func (s *Switchboard) Claim(ctx context.Context, c Auth, queue string, opts *ClaimOptions) (Todo, Lease, error) {
	ctx, ob := s.observe(ctx, Operation{Verb: VerbClaim, Queue: queue})
	got, err := s.claim(ctx, c, queue, 1, opts)
	if err != nil {
		ob.End(Result{Err: err})
		return Todo{}, Lease{}, fmt.Errorf("switchboard: claim: %w", err)
	}
	ob.End(Result{Todo: got[0].Todo.ID, Waits: s.waits(got)})
	return got[0].Todo, got[0].Lease, nil
}

// Claimed is one todo a claim leased, with its lease.
type Claimed struct {
	Todo  Todo  `json:"todo"`
	Lease Lease `json:"lease"`
}

// MaxClaimN bounds how many todos one ClaimN or CompleteAndClaim leases.
const MaxClaimN = 100

// ClaimN leases up to n ready todos of queue (1 ≤ n ≤ MaxClaimN) in one
// transaction — one commit for all of them — in the order Claim would take
// them one by one. It returns at least one, or ErrQueueEmpty; with
// opts.Wait it blocks until at least one is ready or ctx ends.
func (s *Switchboard) ClaimN(ctx context.Context, c Auth, queue string, n int, opts *ClaimOptions) ([]Claimed, error) {
	if n < 1 || n > MaxClaimN {
		return nil, fmt.Errorf("switchboard: claim: %w", invalid("n is %d, want 1 to %d", n, MaxClaimN))
	}
	ctx, ob := s.observe(ctx, Operation{Verb: VerbClaim, Queue: queue})
	got, err := s.claim(ctx, c, queue, n, opts)
	if err != nil {
		ob.End(Result{Err: err})
		return nil, fmt.Errorf("switchboard: claim: %w", err)
	}
	ob.End(Result{Todo: got[0].Todo.ID, Waits: s.waits(got)})
	return got, nil
}

func (s *Switchboard) claim(ctx context.Context, c Auth, queue string, n int, opts *ClaimOptions) ([]Claimed, error) {
	var o ClaimOptions
	if opts != nil {
		o = *opts
	}
	if err := s.checkLease(o.Lease); err != nil {
		return nil, err
	}
	// The queue key a blocked claim waits on comes from the first look
	// (its authorization). Once known, the wake-up channel is taken
	// before each look, so a CreateFor that commits between a look and
	// the wait is not missed: a claim that finds the queue empty on its
	// first look looks once more with the channel in hand.
	var qk string
	known := false
	for {
		var woken <-chan struct{}
		if known {
			woken = s.wake.wait(qk)
		}
		var r struct {
			got   []Claimed
			seen  string
			held  heldRow
			empty error // ErrQueueEmpty or errHeld, once what the claim changed committed
		}
		rp := &r
		err := s.updateLocked(ctx, func(t *txn) error {
			g, qkey, err := s.authorize(t, c, queue, VerbClaim)
			if err != nil {
				return err
			}
			rp.seen = qkey
			rp.got, err = s.claimIn(t, g, qkey, n, o.Lease)
			if err == nil && len(rp.got) == 0 {
				if rp.held, err = t.heldElsewhere(qkey); err == nil {
					err = ErrQueueEmpty
					if rp.held.key != nil {
						err = errHeld
					}
					if len(t.events) > 0 {
						// It changed what it met (a lease expired, a
						// revoked grant's todo cancelled): that commits,
						// and the answer is given after.
						rp.empty, err = err, nil
					}
				}
			}
			return err
		})
		if err == nil && r.empty != nil {
			err = r.empty
		}
		got, seen, held := r.got, r.seen, r.held
		if errors.Is(err, errHeld) {
			// Nothing was free, but other transactions hold work of
			// the queue: it is not empty until they let go.
			if err := s.waitHeld(ctx, held); err != nil {
				return nil, err
			}
			continue
		}
		if !o.Wait || !errors.Is(err, ErrQueueEmpty) {
			return got, err
		}
		if !known {
			qk, known = seen, true
			continue
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-woken:
		case <-s.cfg.Clock.After(s.cfg.PollInterval):
		}
	}
}

func (s *Switchboard) checkLease(d time.Duration) error {
	if d < 0 || d > s.cfg.MaxLease {
		return invalid("lease %s outside [0, %s] (0: the default)", d, s.cfg.MaxLease)
	}
	return nil
}

// claimIn leases up to n ready todos of the queue qkey under grant g, inside
// t: the one claiming path of Claim, ClaimN and CompleteAndClaim. Expired
// leases of the queue are recovered and due delayed todos promoted first.
// It returns fewer than n only when no more are ready to it (a ready entry
// it passes over — its todo cancelled with its revoked grant — does not
// count), and none, without error, when nothing is; in a row-locked
// transaction, "ready to it" leaves out what other transactions hold (see
// heldElsewhere).
func (s *Switchboard) claimIn(t *txn, g *grantRec, qkey string, n int, d time.Duration) ([]Claimed, error) {
	if p, ok := t.tx.(store.ScanPrefetcher); ok && t.locker != nil {
		// Where reads are round trips, the looks of recoverLeases and
		// promote (anyIn: is a lease expired, a delayed todo due?)
		// travel together; each needs the range's first row.
		for _, kind := range []byte{idxLease, idxDelayed} {
			if err := p.PrefetchScan(tIdx, []byte(idxKey(kind, qkey, "")), 1); err != nil {
				return nil, err
			}
		}
	}
	if err := t.recoverLeases(qkey); err != nil {
		return nil, err
	}
	if err := t.promote(qkey); err != nil {
		return nil, err
	}
	if d == 0 {
		d = s.leaseFor(g)
	}
	out := make([]Claimed, 0, min(n, claimLookahead))
	for first := true; len(out) < n; first = false {
		ready, exhausted, err := t.firstReady(qkey, n-len(out), first)
		if err != nil {
			return nil, err
		}
		for _, e := range ready {
			c, ok, err := s.claimOne(t, g, e, d)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, c)
			}
		}
		if exhausted {
			break
		}
	}
	return out, nil
}

// claimOne leases the todo of ready entry e to g for d, or reports that it
// passed over it: the entry's todo moved on, or came through a grant since
// revoked (then it is cancelled here).
func (s *Switchboard) claimOne(t *txn, g *grantRec, e readyEntry, d time.Duration) (Claimed, bool, error) {
	r, err := t.todo(e.id)
	if errors.Is(err, ErrDamaged) && e.key == "" {
		// Rare: find the entry again rather than keep every entry's key.
		key, kerr := t.readyKeyOf(e.qkey, e.id)
		if kerr != nil {
			return Claimed{}, false, kerr
		}
		e.key = key
	}
	if aside, err := t.setAsideEntry(err, e.id, e.key, e.id); aside || err != nil {
		if t.aside == nil {
			t.aside = map[string]bool{}
		}
		t.aside[e.id] = true
		return Claimed{}, false, err
	}
	if err != nil {
		return Claimed{}, false, err
	}
	if r.State != TodoQueued {
		// Only a row-locked transaction can read an index entry its
		// todo has left (the writer that moved it committed after
		// the entry was read): it is not ready, so not claimed.
		t.pass(e.key)
		return Claimed{}, false, nil
	}
	if r.Origin.Grant != "" && r.Origin.Grant != g.ID { // the claimer's own grant: authenticated live in this transaction
		// A todo whose creating grant was revoked, or expired at its
		// instant, is cancelled, not claimed: Revoke cancels such todos
		// after it commits (cancelQueued), Reap those of an expired
		// grant, and none may be claimed meanwhile. A replaced grant's
		// work is handed out while the grant that replaced it is live.
		live, err := t.originLive(r.Origin.Grant)
		if err != nil {
			return Claimed{}, false, err
		}
		if !live {
			return Claimed{}, false, t.cancelOrphan(r)
		}
	}
	if err := t.del(tIdx, readyKey(r)); err != nil {
		return Claimed{}, false, err
	}
	r.Attempts++
	r.State, r.UpdatedAt = TodoLeased, t.now
	r.LeaseToken, r.LeaseExpiresAt = newID("lease"), t.now.Add(d)
	r.History = append(r.History, Attempt{N: r.Attempts, Agent: g.Holder, Grant: g.ID, ClaimedAt: t.now})
	var trimmed []Attempt
	if len(r.History) > maxHistory {
		trimmed = slices.Clone(r.History[:len(r.History)-maxHistory])
		r.History = r.History[len(r.History)-maxHistory:]
	}
	if err := t.put(tTodos, r.ID, r); err != nil {
		return Claimed{}, false, err
	}
	if err := t.indexClaim(r, g, trimmed); err != nil {
		return Claimed{}, false, err
	}
	if err := t.putRawNew(tIdx, leaseKey(r), ""); err != nil { // its expiry is new
		return Claimed{}, false, err
	}
	if err := t.emit(Event{Type: EventTodoClaimed, Actor: agentActor(g.Holder), Persona: g.Holder, Grant: g.ID, Todo: r.ID, Queue: r.address()}); err != nil {
		return Claimed{}, false, err
	}
	return Claimed{Todo: seenBy(g, r), Lease: Lease{TodoID: r.ID, Token: r.LeaseToken, Attempt: r.Attempts, ExpiresAt: r.LeaseExpiresAt}}, true, nil
}

// cancelOrphan cancels queued todo r, whose creating grant no longer holds
// (see originLive), as Revoke's pass or Reap would: the same state,
// attempt outcome and event; no webhook of that grant hears of it (its
// webhooks go with it).
func (t *txn) cancelOrphan(r *todoRec) error {
	why := "grant revoked"
	if g, err := viewHot[grantRec](t, tGrants, r.Origin.Grant, "grant"); err == nil && g.State == GrantActive {
		why = "grant expired"
	}
	return t.endTodo(r, TodoCancelled, AttemptRevoked, systemActor, why)
}

// readyEntry is one entry of a queue's ready index: its key, and the id of
// the todo it names.
type readyEntry struct {
	key  string // the index key, in row-locked transactions only (see pass)
	id   string
	qkey string // the queue's key, to find the entry again (readyKeyOf)
}

// readyKeyOf returns the key of id's entry in the queue's ready index, or
// "" if it has none.
func (t *txn) readyKeyOf(qkey, id string) (string, error) {
	var key string
	prefix := idxKey(idxReady, qkey, "")
	err := t.tx.Scan(tIdx, []byte(prefix), prefixEnd(prefix), func(k, v []byte) bool {
		if string(v) == id {
			key = string(k)
		}
		return key == ""
	})
	return key, err
}

// firstReady returns up to n entries of the queue's ready index, in claim
// order (promote has moved every due one to ready), passing over those t
// passed before, and whether the index holds no more that t can take now.
//
// In a row-locked transaction it locks exactly the entries it returns,
// and — on a store whose reads are round trips (store.Prefetcher), on the
// first call of a claim (first) in a group-commit batch (store.Grouped) —
// one more for each function after it in the batch,
// which are the batch's next claims as a rule: their scans take them
// from the store's memory of this one, so the batch locks its rows in one
// round trip. Nothing else is locked, so no other claimer skips a row
// nobody will lease — except the few a batch's later function does not
// take after all, which heldElsewhere keeps from passing for an empty
// queue. On a store whose reads are round trips (store.Prefetcher) the
// records of every entry locked are fetched in one round trip too.
func (t *txn) firstReady(qkey string, n int, first bool) (_ []readyEntry, exhausted bool, _ error) {
	want := n
	ahead := 0
	p, prefetch := t.tx.(store.Prefetcher)
	if first && prefetch {
		// Only where reads are round trips: elsewhere the next claim's
		// own read costs less than reading ahead for it.
		if gr, ok := t.tx.(store.Grouped); ok {
			ahead = min(gr.Later(), claimLookahead)
		}
	}
	// The entries passed over are read again (they are locked, not
	// deleted): ask for that many more.
	limit := want + ahead + len(t.passed) + len(t.aside)
	var out []readyEntry
	read := 0
	prefix := idxKey(idxReady, qkey, "")
	locked := t.locker != nil
	if vp, ok := t.tx.(store.ValuePrefetcher); ok && locked && prefetch {
		// The records the entries name (read below, and by claimOne)
		// come with the locked scan, in its round trip.
		if err := vp.PrefetchValues(tIdx, []byte(prefix), tTodos); err != nil {
			return nil, false, err
		}
	}
	err := t.scanBounded(tIdx, []byte(prefix), prefixEnd(prefix), limit, func(k, v []byte) bool {
		read++
		if !locked {
			if !t.aside[string(v)] {
				out = append(out, readyEntry{id: string(v), qkey: qkey}) // key: only pass (row-locked) reads it
			}
		} else if !t.passed[string(k)] {
			out = append(out, readyEntry{key: string(k), id: string(v), qkey: qkey})
		}
		return read < limit
	})
	if err != nil {
		return nil, false, err
	}
	exhausted = read < limit
	if prefetch && len(out) > 1 {
		keys := make([][]byte, len(out))
		for i, e := range out {
			keys[i] = []byte(e.id)
		}
		if err := p.Prefetch(tTodos, keys); err != nil {
			return nil, false, err
		}
	}
	return out[:min(want, len(out))], exhausted, nil
}

// claimLookahead bounds how many entries a claim locks for the claims
// after it in its batch.
const claimLookahead = 16

// pass records that t locked the index entry key and left it.
func (t *txn) pass(key string) {
	if t.passed == nil {
		t.passed = map[string]bool{}
	}
	t.passed[key] = true
}

// heldRow is a row of the todo index another transaction holds.
type heldRow struct{ key []byte }

// errHeld is what a claim's transaction returns (rolling back nothing of
// substance: it leased nothing) when it found no work free but some held
// by other transactions; the claim waits for the holder and looks again.
var errHeld = errors.New("switchboard: work of the queue is held by another transaction")

// heldElsewhere returns, in a row-locked transaction whose claim found
// nothing free, an entry of the queue that is ready (or due, or a lease
// that has lapsed) but that the claim could not lock: another transaction
// holds it — a claimer that will lease it, or may not (it locked it for a
// batch whose function did something else, or its connection is about to
// fail) — or it was committed after the claim's locked reads. Until such
// rows are gone the queue is not empty: the claim must not say so
// (linearizability: a claim answers ErrQueueEmpty only if at some instant
// of the call nothing was ready). It reads the ranges as committed now
// (store.LatestScanner), so its "nothing" is such an instant. Elsewhere
// (serializable transactions, which see everything and skip nothing) it
// returns no row.
func (t *txn) heldElsewhere(qkey string) (heldRow, error) {
	ls, ok := t.locker.(store.LatestScanner)
	if !ok {
		return heldRow{}, nil
	}
	due := timeKey(t.now.Add(time.Nanosecond))
	ready := idxKey(idxReady, qkey, "")
	delayed := idxKey(idxDelayed, qkey, "")
	leased := idxKey(idxLease, qkey, "")
	for _, r := range [][2]string{{ready, string(prefixEnd(ready))}, {delayed, delayed + due}, {leased, leased + due}} {
		var found []byte
		err := ls.ScanLatest(tIdx, []byte(r[0]), []byte(r[1]), len(t.passed)+1, func(k, _ []byte) bool {
			if t.passed[string(k)] {
				return true
			}
			found = bytes.Clone(k)
			return false
		})
		if err != nil || found != nil {
			return heldRow{key: found}, err
		}
	}
	return heldRow{}, nil
}

// waitHeld waits, in a transaction that holds nothing else, until the
// transaction holding h lets go of it, and returns without changing
// anything: the caller then looks at the queue again.
func (s *Switchboard) waitHeld(ctx context.Context, h heldRow) error {
	ls, ok := s.st.(store.LockingStore)
	if !ok {
		return nil
	}
	err := ls.UpdateLocked(store.Alone(ctx), func(tx store.Tx) error {
		if l, ok := tx.(store.Locker); ok {
			if _, err := l.GetLocked(tIdx, h.key); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return errHeld // ends the transaction, and its lock, writing nothing
	})
	if errors.Is(err, errHeld) {
		return nil
	}
	return err
}

// recoverLeases re-queues (or dead-letters) todos in the queue whose lease
// has expired.
func (t *txn) recoverLeases(qkey string) error {
	var keys []string
	prefix := idxKey(idxLease, qkey, "")
	end := prefix + timeKey(t.now.Add(time.Nanosecond))
	pb, eb := []byte(prefix), []byte(end)
	if !t.anyIn(tIdx, pb, eb) {
		return nil
	}
	err := t.scanLocked(tIdx, pb, eb, 0, func(k, _ []byte) bool {
		keys = append(keys, string(k))
		return true
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		ended, err := t.expireLease(k[len(prefix)+8:], k)
		if err != nil {
			return err
		}
		if !ended {
			t.pass(k)
		}
	}
	return nil
}

// expireLease ends the expired lease on todo id, found through its lease
// entry key: the attempt counts, and the todo is queued again or, out of
// attempts, dead-lettered. It reports false if the todo had moved on (its
// lease is not the expired one) or is damaged (set aside).
func (t *txn) expireLease(id, key string) (bool, error) {
	r, err := t.todo(id)
	if aside, err := t.setAsideEntry(err, id, key, ""); aside || err != nil {
		return false, err
	}
	if err != nil {
		return false, err
	}
	if r.State != TodoLeased || t.now.Before(r.LeaseExpiresAt) {
		return false, nil // moved on since its entry was read (row-locked transactions only)
	}
	if r.Attempts >= r.MaxAttempts {
		return true, t.endTodo(r, TodoDead, AttemptLeaseExpired, systemActor, "lease expired on the last attempt")
	}
	if err := t.requeue(r, t.now, AttemptLeaseExpired, ""); err != nil {
		return true, err
	}
	return true, t.emit(Event{Type: EventTodoLeaseExpired, Actor: systemActor, Todo: r.ID, Queue: r.address()})
}

// requeue returns a leased todo to its queue, available at at, closing the
// running attempt with how.
func (t *txn) requeue(r *todoRec, at time.Time, how Outcome, reason string) error {
	if err := t.del(tIdx, leaseKey(r)); err != nil {
		return err
	}
	r.closeAttempt(t.now, how, reason)
	r.State, r.UpdatedAt, r.AvailableAt = TodoQueued, t.now, at
	r.LeaseToken, r.LeaseExpiresAt = "", time.Time{}
	if err := t.put(tTodos, r.ID, r); err != nil {
		return err
	}
	return t.enqueue(r)
}

// leased loads the todo a lease names and checks the lease is its current,
// unexpired one: the fencing rule every lease verb shares.
func (s *Switchboard) leased(t *txn, c Auth, l Lease, v Verb) (*grantRec, *todoRec, error) {
	g, r, err := s.todoFor(t, c, l.TodoID, v)
	if err != nil {
		return nil, nil, err
	}
	if r.State != TodoLeased || subtle.ConstantTimeCompare([]byte(r.LeaseToken), []byte(l.Token)) != 1 || !t.now.Before(r.LeaseExpiresAt) {
		return nil, nil, fmt.Errorf("%w: todo %s", ErrLeaseLost, r.ID)
	}
	return g, r, nil
}

// Complete finishes a leased todo with an optional result. The lease must be
// the todo's current one, else ErrLeaseLost and nothing changes.
func (s *Switchboard) Complete(ctx context.Context, c Auth, l Lease, result []byte) (err error) {
	if s.cfg.Observer == nil {
		// Nothing observes: no Result to fill (it would escape).
		if _, err := s.complete(ctx, c, l, result, 0, 0, nil); err != nil {
			return fmt.Errorf("switchboard: complete: %w", err)
		}
		return nil
	}
	ctx, ob := s.observe(ctx, Operation{Verb: VerbComplete, Todo: l.TodoID})
	res := Result{Todo: l.TodoID}
	defer func() { res.Err = err; ob.End(res) }()
	if _, err := s.complete(ctx, c, l, result, 0, 0, &res); err != nil {
		return fmt.Errorf("switchboard: complete: %w", err)
	}
	return nil
}

// CompleteAndClaim completes a leased todo, exactly as Complete, and in the
// same transaction — one commit — leases up to n (0 ≤ n ≤ MaxClaimN) more
// ready todos of its queue, as ClaimN would with opts (nil: the defaults).
// It is a worker's fast path: finishing one todo and taking the next costs
// one commit instead of two. The credential must hold claim on the queue
// when n > 0, else ErrForbidden and nothing changes. An empty queue is not
// an error: the completion stands and next is empty. It never waits for
// work, so opts.Wait must be false.
func (s *Switchboard) CompleteAndClaim(ctx context.Context, c Auth, l Lease, result []byte, n int, opts *ClaimOptions) (next []Claimed, err error) {
	ctx, ob := s.observe(ctx, Operation{Verb: VerbComplete, Todo: l.TodoID})
	res := Result{Todo: l.TodoID}
	defer func() { res.Err, res.Waits = err, s.waits(next); ob.End(res) }()
	if n < 0 || n > MaxClaimN {
		return nil, fmt.Errorf("switchboard: complete: %w", invalid("n is %d, want 0 to %d", n, MaxClaimN))
	}
	var lease time.Duration
	if opts != nil {
		if opts.Wait {
			return nil, fmt.Errorf("switchboard: complete: %w", invalid("CompleteAndClaim never waits: ClaimOptions.Wait must be false"))
		}
		lease = opts.Lease
	}
	next, err = s.complete(ctx, c, l, result, n, lease, &res)
	if err != nil {
		return nil, fmt.Errorf("switchboard: complete: %w", err)
	}
	return next, nil
}

// complete completes l's todo and, when n > 0, claims up to n more of its
// queue; res learns the todo's queue and how long the lease was held.
func (s *Switchboard) complete(ctx context.Context, c Auth, l Lease, result []byte, n int, lease time.Duration, res *Result) ([]Claimed, error) {
	if len(result) > s.limits.MaxResult {
		return nil, invalid("result is %d bytes, limit %d", len(result), s.limits.MaxResult)
	}
	if err := s.checkLease(lease); err != nil {
		return nil, err
	}
	update, uctx := s.update, ctx // uctx: the completing transaction's alone
	if n > 0 {
		update = s.updateLocked // it claims: see claimIn
		if s.hot.knows(c) {
			// The todo is the first row it locks (todoLocked): a
			// store may lock it with the transaction's first read, and
			// a group-commit batch's todos with one statement. Only
			// for a credential that authenticated before: the lock is
			// taken before the function checks anything, and a made-up
			// credential must not hold up (or lock) anyone's todo.
			uctx = store.LockFirst(ctx, tTodos, []byte(l.TodoID))
		}
	}
	var st struct {
		next  []Claimed
		held  heldRow
		queue string
		dur   time.Duration
	}
	sp := &st
	err := update(uctx, func(t *txn) error {
		sp.next, sp.held = nil, heldRow{}
		g, r, err := s.leased(t, c, l, VerbComplete)
		if err != nil {
			return err
		}
		if n > 0 && !g.Scope.Allows(r.Queue, VerbClaim) {
			return fmt.Errorf("%w: grant does not allow %s on this queue", ErrForbidden, VerbClaim)
		}
		sp.queue, sp.dur = r.Queue, heldFor(t, r)
		r.Result = result
		if err := t.endTodo(r, TodoDone, AttemptCompleted, agentActor(g.Holder), ""); err != nil {
			return err
		}
		if n > 0 {
			if sp.next, err = s.claimIn(t, g, r.QueueKey, n, lease); err == nil && len(sp.next) == 0 {
				sp.held, err = t.heldElsewhere(r.QueueKey)
			}
		}
		return err
	})
	if res != nil {
		res.Queue, res.Held = st.queue, st.dur
	}
	next, held := st.next, st.held
	if err != nil || held.key == nil {
		return next, err
	}
	// The completion stands; the queue's work was held by other
	// transactions, so it is not empty yet: claim as Claim does, which
	// waits for them. What that claim meets (the queue empty after all,
	// the grant revoked since) is no failure of the completion.
	if next, err = s.claim(ctx, c, st.queue, n, &ClaimOptions{Lease: lease}); err != nil {
		return nil, nil
	}
	return next, nil
}

// backoff is the delay before retry number attempt: 30 s × 2^(attempt−1),
// capped at 15 minutes.
func backoff(attempt int) time.Duration {
	const base, ceiling = 30 * time.Second, 15 * time.Minute
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 6 { // 30 s × 2^5 = 16 min already exceeds the cap
		return ceiling
	}
	return min(base<<(attempt-1), ceiling)
}

// Heartbeat extends a lease by d from now (zero: the grant's default lease,
// else Config.DefaultLease), but never past Config.MaxLease after the claim.
// The lease must be current, else ErrLeaseLost. It returns the extended lease;
// the token is unchanged.
func (s *Switchboard) Heartbeat(ctx context.Context, c Auth, l Lease, d time.Duration) (Lease, error) {
	if d < 0 || d > s.cfg.MaxLease {
		return Lease{}, fmt.Errorf("switchboard: heartbeat: %w", invalid("lease %s outside [0, %s] (0: the default)", d, s.cfg.MaxLease))
	}
	var out Lease
	err := s.update(ctx, func(t *txn) error {
		g, r, err := s.leased(t, c, l, VerbHeartbeat)
		if err != nil {
			return err
		}
		if d == 0 {
			d = s.leaseFor(g)
		}
		ceiling := r.History[len(r.History)-1].ClaimedAt.Add(s.cfg.MaxLease)
		exp := t.now.Add(d)
		if exp.After(ceiling) {
			exp = ceiling
		}
		if exp.After(r.LeaseExpiresAt) {
			if err := t.del(tIdx, leaseKey(r)); err != nil {
				return err
			}
			r.LeaseExpiresAt, r.UpdatedAt = exp, t.now
			if err := t.putRaw(tIdx, leaseKey(r), ""); err != nil {
				return err
			}
			if err := t.put(tTodos, r.ID, r); err != nil {
				return err
			}
		}
		out = Lease{TodoID: r.ID, Token: r.LeaseToken, Attempt: r.Attempts, ExpiresAt: r.LeaseExpiresAt}
		return nil
	})
	if err != nil {
		return Lease{}, fmt.Errorf("switchboard: heartbeat: %w", err)
	}
	return out, nil
}

// heldFor is how long r's current lease has been held.
func heldFor(t *txn, r *todoRec) time.Duration {
	if len(r.History) == 0 {
		return 0
	}
	return max(t.now.Sub(r.History[len(r.History)-1].ClaimedAt), 0)
}

func (s *Switchboard) leaseFor(g *grantRec) time.Duration {
	if g.DefaultLease > 0 {
		return g.DefaultLease
	}
	return s.cfg.DefaultLease
}

// Fail gives up on a leased todo. It is retried after a backoff of
// 30 s × 2^(attempt−1), capped at 15 minutes; after its last attempt it is
// dead-lettered (terminal, listable, re-drivable with Redrive). The lease must
// be current, else ErrLeaseLost. reason is kept in the todo's history.
func (s *Switchboard) Fail(ctx context.Context, c Auth, l Lease, reason string) (err error) {
	ctx, ob := s.observe(ctx, Operation{Verb: VerbFail, Todo: l.TodoID})
	res := Result{Todo: l.TodoID}
	defer func() { res.Err = err; ob.End(res) }()
	if err := checkText("reason", reason, s.limits.MaxTitle*4, true); err != nil {
		return fmt.Errorf("switchboard: fail: %w", err)
	}
	err = s.update(ctx, func(t *txn) error {
		g, r, err := s.leased(t, c, l, VerbFail)
		if err != nil {
			return err
		}
		r.Error = reason
		res.Queue, res.Held, res.Dead = r.Queue, heldFor(t, r), r.Attempts >= r.MaxAttempts
		if res.Dead {
			return t.endTodo(r, TodoDead, AttemptFailed, agentActor(g.Holder), reason)
		}
		if err := t.requeue(r, t.now.Add(backoff(r.Attempts)), AttemptFailed, reason); err != nil {
			return err
		}
		if err := t.emit(Event{Type: EventTodoFailed, Actor: agentActor(g.Holder), Grant: g.ID, Todo: r.ID, Queue: r.address(), Detail: reason}); err != nil {
			return err
		}
		return t.notifyWebhooks(r, WebhookTodoFailed)
	})
	if err != nil {
		return fmt.Errorf("switchboard: fail: %w", err)
	}
	return nil
}

// Release hands a leased todo back unfinished, ready at once. The attempt
// does not count against MaxAttempts. The lease must be current, else
// ErrLeaseLost.
func (s *Switchboard) Release(ctx context.Context, c Auth, l Lease) error {
	err := s.update(ctx, func(t *txn) error {
		g, r, err := s.leased(t, c, l, VerbRelease)
		if err != nil {
			return err
		}
		r.Attempts--
		if err := t.requeue(r, t.now, AttemptReleased, ""); err != nil {
			return err
		}
		return t.emit(Event{Type: EventTodoReleased, Actor: agentActor(g.Holder), Grant: g.ID, Todo: r.ID, Queue: r.address()})
	})
	if err != nil {
		return fmt.Errorf("switchboard: release: %w", err)
	}
	return nil
}

// waker lets goroutines of this process sleep until a commit may have
// changed what they wait for: wait(key) returns a channel closed by the next
// signal(key). Waiters re-check the store, so a spurious wake costs one read.
type waker struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (w *waker) wait(key string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = map[string]chan struct{}{}
	}
	c, ok := w.ch[key]
	if !ok {
		c = make(chan struct{})
		w.ch[key] = c
	}
	return c
}

// signalAll wakes every waiter, whatever key it waits on.
func (w *waker) signalAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, c := range w.ch {
		close(c)
		delete(w.ch, k)
	}
}

func (w *waker) signal(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.ch[key]; ok {
		close(c)
		delete(w.ch, key)
	}
}

// commitsKey is the one key of Switchboard.commits.
const commitsKey = ""
