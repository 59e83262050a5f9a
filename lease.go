// Leases: Claim, Heartbeat, Complete, Fail, Release, fencing, backoff and the
// claim waker.

package switchboard

import (
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
		var got []Claimed
		var seen string
		err := s.updateLocked(ctx, func(t *txn) error {
			g, qkey, err := s.authorize(t, c, queue, VerbClaim)
			if err != nil {
				return err
			}
			seen = qkey
			got, err = s.claimIn(t, g, qkey, n, o.Lease)
			if err == nil && len(got) == 0 {
				err = ErrQueueEmpty
			}
			return err
		})
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
// It returns none, without error, when nothing is ready.
func (s *Switchboard) claimIn(t *txn, g *grantRec, qkey string, n int, d time.Duration) ([]Claimed, error) {
	if err := t.recoverLeases(qkey); err != nil {
		return nil, err
	}
	if err := t.promote(qkey); err != nil {
		return nil, err
	}
	if d == 0 {
		d = s.leaseFor(g)
	}
	ids, err := t.firstReady(qkey, n)
	if err != nil {
		return nil, err
	}
	out := make([]Claimed, 0, len(ids))
	for _, id := range ids {
		r, err := t.todo(id)
		if err != nil {
			return nil, err
		}
		if r.State != TodoQueued {
			// Only a row-locked transaction can read an index entry its
			// todo has left (the writer that moved it committed after
			// the entry was read): it is not ready, so not claimed.
			continue
		}
		if r.Origin.Grant != "" {
			// A todo whose creating grant was revoked is cancelled, not
			// claimed: Revoke cancels such todos after it commits
			// (cancelQueued), and none may be claimed meanwhile.
			og, err := getHot[grantRec](t, tGrants, r.Origin.Grant, "grant")
			if err != nil && !isNotFound(err) {
				return nil, err
			}
			if err != nil || og.State != GrantActive {
				if err := t.endTodo(r, TodoCancelled, AttemptRevoked, systemActor, "grant revoked"); err != nil {
					return nil, err
				}
				continue
			}
		}
		if err := t.del(tIdx, readyKey(r)); err != nil {
			return nil, err
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
			return nil, err
		}
		if err := t.indexClaim(r, g, trimmed); err != nil {
			return nil, err
		}
		if err := t.putRaw(tIdx, leaseKey(r), ""); err != nil {
			return nil, err
		}
		if err := t.emit(Event{Type: EventTodoClaimed, Actor: agentActor(g.Holder), Persona: g.Holder, Grant: g.ID, Todo: r.ID, Queue: r.address()}); err != nil {
			return nil, err
		}
		out = append(out, Claimed{Todo: r.Todo, Lease: Lease{TodoID: r.ID, Token: r.LeaseToken, Attempt: r.Attempts, ExpiresAt: r.LeaseExpiresAt}})
	}
	return out, nil
}

// firstReady returns the ids of up to n ready todos of the queue, in claim
// order (promote has moved every due one to ready).
//
// On a store whose reads are round trips (store.Prefetcher) it looks ahead
// — up to claimLookahead ids — and fetches their records in one round trip:
// the claims that follow in the same transaction (a ClaimN, or the next
// Claims of a group commit) then read them without one each. In a
// row-locked transaction the look-ahead's index entries are locked too,
// for this transaction's later claims: other claimers skip them until it
// commits.
func (t *txn) firstReady(qkey string, n int) ([]string, error) {
	p, prefetch := t.tx.(store.Prefetcher)
	want := n
	if prefetch {
		want = max(n, claimLookahead)
	}
	var ids []string
	prefix := idxKey(idxReady, qkey, "")
	err := t.scanLocked(tIdx, []byte(prefix), prefixEnd(prefix), want, func(_, v []byte) bool {
		ids = append(ids, string(v))
		return len(ids) < want
	})
	if err != nil || !prefetch || len(ids) == 0 {
		return ids, err
	}
	keys := make([][]byte, len(ids))
	for i, id := range ids {
		keys[i] = []byte(id)
	}
	return ids[:min(n, len(ids))], p.Prefetch(tTodos, keys)
}

// claimLookahead is how many ready ids firstReady reads ahead on a
// prefetching store.
const claimLookahead = 16

// recoverLeases re-queues (or dead-letters) todos in the queue whose lease
// has expired.
func (t *txn) recoverLeases(qkey string) error {
	var ids []string
	prefix := idxKey(idxLease, qkey, "")
	end := prefix + timeKey(t.now.Add(time.Nanosecond))
	if !t.anyIn(tIdx, []byte(prefix), []byte(end)) {
		return nil
	}
	err := t.scanLocked(tIdx, []byte(prefix), []byte(end), 0, func(k, _ []byte) bool {
		ids = append(ids, string(k[len(prefix)+8:]))
		return true
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := t.expireLease(id); err != nil {
			return err
		}
	}
	return nil
}

// expireLease ends the expired lease on todo id: the attempt counts, and the
// todo is queued again or, out of attempts, dead-lettered.
func (t *txn) expireLease(id string) error {
	r, err := t.todo(id)
	if err != nil {
		return err
	}
	if r.State != TodoLeased || t.now.Before(r.LeaseExpiresAt) {
		return nil // moved on since its entry was read (row-locked transactions only)
	}
	if r.Attempts >= r.MaxAttempts {
		return t.endTodo(r, TodoDead, AttemptLeaseExpired, systemActor, "lease expired on the last attempt")
	}
	if err := t.requeue(r, t.now, AttemptLeaseExpired, ""); err != nil {
		return err
	}
	return t.emit(Event{Type: EventTodoLeaseExpired, Actor: systemActor, Todo: r.ID, Queue: r.address()})
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
	var next []Claimed
	update := s.update
	if n > 0 {
		update = s.updateLocked // it claims: see claimIn
	}
	err := update(ctx, func(t *txn) error {
		next = nil
		g, r, err := s.leased(t, c, l, VerbComplete)
		if err != nil {
			return err
		}
		if n > 0 && !g.Scope.Allows(r.Queue, VerbClaim) {
			return fmt.Errorf("%w: grant does not allow %s on this queue", ErrForbidden, VerbClaim)
		}
		res.Queue, res.Held = r.Queue, heldFor(t, r)
		r.Result = result
		if err := t.endTodo(r, TodoDone, AttemptCompleted, agentActor(g.Holder), ""); err != nil {
			return err
		}
		if n > 0 {
			next, err = s.claimIn(t, g, r.QueueKey, n, lease)
		}
		return err
	})
	return next, err
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
