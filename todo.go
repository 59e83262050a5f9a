package switchboard

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// TodoState is where a todo is in its life.
type TodoState string

// Todo states. queued → leased → done | queued (retry) | dead; queued →
// cancelled. done, dead and cancelled are terminal.
const (
	TodoQueued    TodoState = "queued"
	TodoLeased    TodoState = "leased"
	TodoDone      TodoState = "done"
	TodoDead      TodoState = "dead"
	TodoCancelled TodoState = "cancelled"
)

// Terminal reports whether no further transition is possible.
func (s TodoState) Terminal() bool {
	return s == TodoDone || s == TodoDead || s == TodoCancelled
}

// Outcome says how one attempt at a todo ended.
type Outcome string

// Attempt outcomes.
const (
	AttemptCompleted    Outcome = "completed"
	AttemptFailed       Outcome = "failed"
	AttemptReleased     Outcome = "released"
	AttemptLeaseExpired Outcome = "lease_expired"
	AttemptCancelled    Outcome = "cancelled"
	AttemptRevoked      Outcome = "revoked"
)

// Attempt is one claim of a todo and how it ended.
type Attempt struct {
	N         int       `json:"n"`
	Agent     string    `json:"agent"` // who claimed it
	Grant     string    `json:"grant"` // under which grant
	ClaimedAt time.Time `json:"claimed_at"`
	EndedAt   time.Time `json:"ended_at"` // zero while running
	Outcome   Outcome   `json:"outcome,omitempty"`
	Reason    string    `json:"reason,omitempty"`
}

// maxHistory bounds a todo's attempt history to its latest entries.
const maxHistory = 50

// Origin traces a todo to who made it: the agent, the grant it used, the
// friend edge the grant came from (if any) and the human behind it all.
type Origin struct {
	Agent string `json:"agent"`
	Grant string `json:"grant,omitempty"`
	Edge  string `json:"edge,omitempty"`
	Human Human  `json:"human"`
}

// Todo is the unit of work, and the only way work crosses between agents.
type Todo struct {
	ID             string    `json:"id"`
	Queue          string    `json:"queue"`
	Kind           string    `json:"kind"`
	Title          string    `json:"title"`
	Payload        []byte    `json:"payload,omitempty"`
	Priority       int       `json:"priority"` // higher first
	DedupKey       string    `json:"dedup_key,omitempty"`
	State          TodoState `json:"state"`
	Attempts       int       `json:"attempts"` // claims so far
	MaxAttempts    int       `json:"max_attempts"`
	AvailableAt    time.Time `json:"available_at"` // not claimable before
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitempty"`
	Origin         Origin    `json:"origin"`
	Result         []byte    `json:"result,omitempty"`
	Error          string    `json:"error,omitempty"` // the last failure's reason
	Approval       *Approval `json:"approval,omitempty"`
	History        []Attempt `json:"history,omitempty"` // the latest 50 attempts
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	EndedAt        time.Time `json:"ended_at,omitempty"`
}

// todoRec is the stored form.
type todoRec struct {
	Todo
	QueueKey   string `json:"qkey"`
	Seq        uint64 `json:"seq"`
	LeaseToken string `json:"lease_token,omitempty"`
}

// NewTodo is what CreateFor needs to make a todo.
type NewTodo struct {
	Kind     string // required: what sort of work, e.g. "invoice.review"
	Title    string // a line for humans
	Payload  []byte // opaque to switchboard; at most Limits.MaxPayload
	Priority int    // higher is claimed first; within ±1,000,000
	// DedupKey makes CreateFor idempotent: while a todo created under the
	// same grant with this key is live, and for Config.DedupRetention after
	// it ends, CreateFor returns that todo instead of a new one. Keys are
	// namespaced per grant.
	DedupKey string
	// NotBefore delays the todo; zero means ready now.
	NotBefore time.Time
	// MaxAttempts before the todo is dead-lettered; zero means
	// Config.MaxAttempts.
	MaxAttempts int
}

// Lease is a claim on a todo. Its Token fences the claim: Complete and the
// other lease verbs must present the current token, so a worker whose lease
// expired and was claimed by another can never finish that other's work.
type Lease struct {
	TodoID    string    `json:"todo"`
	Token     string    `json:"token"`
	Attempt   int       `json:"attempt"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ClaimOptions tunes one Claim. A nil *ClaimOptions means the defaults.
type ClaimOptions struct {
	// Lease is the lease length; zero means the grant's default, else
	// Config.DefaultLease. At most Config.MaxLease.
	Lease time.Duration
	// Wait blocks until a todo is ready or ctx ends, instead of returning
	// ErrQueueEmpty. Work created, failed, released or redriven through this
	// Switchboard wakes it at once; work from another process sharing the
	// store is found by polling every Config.PollInterval.
	Wait bool
}

const maxPriority = 1_000_000

func (s *Switchboard) validateNewTodo(n NewTodo) error {
	if n.Kind == "" {
		return invalid("empty kind")
	}
	if err := checkText("kind", n.Kind, s.limits.MaxName, false); err != nil {
		return err
	}
	if err := checkText("title", n.Title, s.limits.MaxTitle, false); err != nil {
		return err
	}
	if len(n.Payload) > s.limits.MaxPayload {
		return invalid("payload is %d bytes, limit %d", len(n.Payload), s.limits.MaxPayload)
	}
	if err := checkText("dedup key", n.DedupKey, s.limits.MaxDedupKey, false); err != nil {
		return err
	}
	if n.Priority < -maxPriority || n.Priority > maxPriority {
		return invalid("priority %d outside ±%d", n.Priority, maxPriority)
	}
	if n.MaxAttempts < 0 || n.MaxAttempts > 100 {
		return invalid("max attempts %d outside 0..100", n.MaxAttempts)
	}
	return nil
}

// CreateFor hands work to the persona a grant targets: it creates a todo in
// queue under the credential's grant, which must be live and hold create_for
// on that queue. A queue outside the grant is ErrNotFound, exactly like one
// that does not exist. created is false when DedupKey matched an existing
// todo, which is returned instead. Every todo records the creating agent,
// grant, edge and human.
func (s *Switchboard) CreateFor(ctx context.Context, c Credential, queue string, n NewTodo) (todo Todo, created bool, err error) {
	if err := s.validateNewTodo(n); err != nil {
		return Todo{}, false, fmt.Errorf("switchboard: create_for: %w", err)
	}
	err = s.update(ctx, func(t *txn) error {
		g, qkey, err := s.authorize(t, c, queue, VerbCreateFor)
		if err != nil {
			return err
		}
		dk := ""
		if n.DedupKey != "" {
			dk = g.ID + sep + n.DedupKey
			id, err := t.lookup(tDedup, dk)
			if err != nil {
				return err
			}
			if id != "" {
				old, err := t.todo(id)
				if err != nil {
					return err
				}
				if !old.State.Terminal() || t.now.Before(old.EndedAt.Add(s.cfg.DedupRetention)) {
					todo, created = old.Todo, false
					return nil
				}
			}
		}
		avail := n.NotBefore.UTC()
		if avail.Before(t.now) {
			avail = t.now
		}
		maxAttempts := n.MaxAttempts
		if maxAttempts == 0 {
			maxAttempts = s.cfg.MaxAttempts
		}
		var human Human = g.Grantor
		if g.EdgeID != "" {
			var e edgeRec
			if err := t.get(tEdges, g.EdgeID, &e, "edge"); err != nil {
				return err
			}
			human = e.Requester
		}
		rec, err := t.insertTodo(todoRec{Todo: Todo{
			Queue: queue, Kind: n.Kind, Title: n.Title, Payload: n.Payload,
			Priority: n.Priority, DedupKey: n.DedupKey, MaxAttempts: maxAttempts, AvailableAt: avail,
			Origin: Origin{Agent: g.Holder, Grant: g.ID, Edge: g.EdgeID, Human: human},
		}, QueueKey: qkey}, agentActor(g.Holder), true)
		if err != nil {
			return err
		}
		if dk != "" {
			if err := t.putRaw(tDedup, dk, rec.ID); err != nil {
				return err
			}
		}
		todo, created = rec.Todo, true
		return nil
	})
	if err != nil {
		return Todo{}, false, fmt.Errorf("switchboard: create_for: %w", err)
	}
	if created {
		s.wake.signal()
	}
	return todo, created, nil
}

// insertTodo stores a new queued todo and its indexes.
func (t *txn) insertTodo(r todoRec, actor string, byGrant bool) (*todoRec, error) {
	seq, err := t.nextSeq()
	if err != nil {
		return nil, err
	}
	r.ID, r.Seq, r.State = newID("todo"), seq, TodoQueued
	r.CreatedAt, r.UpdatedAt = t.now, t.now
	if r.AvailableAt.IsZero() {
		r.AvailableAt = t.now
	}
	if err := t.put(tTodos, r.ID, r); err != nil {
		return nil, err
	}
	if err := t.putRaw(tReady, readyKey(&r), r.ID); err != nil {
		return nil, err
	}
	if err := t.putRaw(tByQueue, r.QueueKey+sep+be64(seq), r.ID); err != nil {
		return nil, err
	}
	if byGrant && r.Origin.Grant != "" {
		if err := t.putRaw(tByGrant, r.Origin.Grant+sep+be64(seq), r.ID); err != nil {
			return nil, err
		}
	}
	return &r, t.emit(Event{Type: EventTodoCreated, Actor: actor, Persona: r.Origin.Agent, Edge: r.Origin.Edge, Grant: r.Origin.Grant, Todo: r.ID})
}

// readyKey orders a queue's ready todos: priority (highest first), then
// available-at, then creation order.
func readyKey(r *todoRec) string {
	var b []byte
	b = append(b, r.QueueKey...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(math.MaxInt32-int64(r.Priority)))
	b = append(b, timeKey(r.AvailableAt)...)
	b = append(b, be64(r.Seq)...)
	return string(b)
}

func leaseKey(r *todoRec) string {
	return r.QueueKey + sep + timeKey(r.LeaseExpiresAt) + r.ID
}

func (t *txn) todo(id string) (*todoRec, error) {
	var r todoRec
	if err := t.get(tTodos, id, &r, "todo"); err != nil {
		return nil, err
	}
	return &r, nil
}

// endTodo moves r to a terminal state, closing its open attempt with how.
func (t *txn) endTodo(r *todoRec, state TodoState, how Outcome, actor, reason string) error {
	if err := t.unindex(r); err != nil {
		return err
	}
	if r.State == TodoLeased {
		r.closeAttempt(t.now, how, reason)
	}
	r.State, r.UpdatedAt, r.EndedAt = state, t.now, t.now
	r.LeaseToken, r.LeaseExpiresAt = "", time.Time{}
	if err := t.put(tTodos, r.ID, r); err != nil {
		return err
	}
	typ := map[TodoState]EventType{TodoDone: EventTodoCompleted, TodoCancelled: EventTodoCancelled, TodoDead: EventTodoDead}[state]
	return t.emit(Event{Type: typ, Actor: actor, Persona: r.Origin.Agent, Grant: r.Origin.Grant, Todo: r.ID, Detail: reason})
}

// unindex removes r from the ready or lease index its state puts it in.
func (t *txn) unindex(r *todoRec) error {
	switch r.State {
	case TodoQueued:
		return t.del(tReady, readyKey(r))
	case TodoLeased:
		return t.del(tLeases, leaseKey(r))
	}
	return nil
}

func (r *todoRec) closeAttempt(now time.Time, how Outcome, reason string) {
	if n := len(r.History); n > 0 && r.History[n-1].EndedAt.IsZero() {
		h := &r.History[n-1]
		h.EndedAt, h.Outcome, h.Reason = now, how, reason
	}
}

// todoFor loads todo id for an id-addressed verb: the credential must be
// live, the todo must be in a queue the grant names (else ErrNotFound, as for
// an id that does not exist), and the verb must be granted. Through a friend
// grant, get and list see only the todos that grant created.
func (s *Switchboard) todoFor(t *txn, c Credential, id string, v Verb) (*grantRec, *todoRec, error) {
	g, err := t.authenticate(c)
	if err != nil {
		return nil, nil, err
	}
	r, err := t.todo(id)
	if err != nil {
		return nil, nil, err
	}
	if !g.Scope.Has(r.Queue) || queueKey(&g.Grant, r.Queue) != r.QueueKey {
		return nil, nil, notFound("todo")
	}
	if g.EdgeID != "" && (v == VerbGet || v == VerbList) && r.Origin.Grant != g.ID {
		return nil, nil, notFound("todo")
	}
	if !g.Scope.Allows(r.Queue, v) {
		return nil, nil, fmt.Errorf("%w: grant does not allow %s on this queue", ErrForbidden, v)
	}
	return g, r, nil
}

// Get returns one todo. Through a friend grant only the todos that grant
// created are visible; any other id is ErrNotFound.
func (s *Switchboard) Get(ctx context.Context, c Credential, todoID string) (Todo, error) {
	var out Todo
	err := s.view(ctx, func(t *txn) error {
		_, r, err := s.todoFor(t, c, todoID, VerbGet)
		if err != nil {
			return err
		}
		out = r.Todo
		return nil
	})
	if err != nil {
		return Todo{}, fmt.Errorf("switchboard: get: %w", err)
	}
	return out, nil
}

// Claim leases the next ready todo in queue: highest priority first, then
// the one available longest. Expired leases in the queue are recovered first
// (counted as an attempt; a todo out of attempts is dead-lettered), so
// correctness never depends on a reaper. When nothing is ready it returns
// ErrQueueEmpty, or with opts.Wait blocks until work arrives or ctx ends.
func (s *Switchboard) Claim(ctx context.Context, c Credential, queue string, opts *ClaimOptions) (Todo, Lease, error) {
	var o ClaimOptions
	if opts != nil {
		o = *opts
	}
	if o.Lease < 0 || o.Lease > s.cfg.MaxLease {
		return Todo{}, Lease{}, fmt.Errorf("switchboard: claim: %w", invalid("lease %s outside (0, %s]", o.Lease, s.cfg.MaxLease))
	}
	for {
		// Take the wake-up channel before looking, so a CreateFor that
		// commits between the look and the wait is not missed.
		woken := s.wake.wait()
		todo, lease, err := s.claimOnce(ctx, c, queue, o)
		if !o.Wait || !errors.Is(err, ErrQueueEmpty) {
			return todo, lease, err
		}
		select {
		case <-ctx.Done():
			return Todo{}, Lease{}, fmt.Errorf("switchboard: claim: %w", ctx.Err())
		case <-woken:
		case <-s.cfg.Clock.After(s.cfg.PollInterval):
		}
	}
}

func (s *Switchboard) claimOnce(ctx context.Context, c Credential, queue string, o ClaimOptions) (Todo, Lease, error) {
	var todo Todo
	var lease Lease
	err := s.update(ctx, func(t *txn) error {
		g, qkey, err := s.authorize(t, c, queue, VerbClaim)
		if err != nil {
			return err
		}
		if err := t.recoverLeases(qkey); err != nil {
			return err
		}
		r, err := t.nextReady(qkey)
		if err != nil {
			return err
		}
		d := o.Lease
		if d == 0 {
			d = s.leaseFor(g)
		}
		if err := t.del(tReady, readyKey(r)); err != nil {
			return err
		}
		r.Attempts++
		r.State, r.UpdatedAt = TodoLeased, t.now
		r.LeaseToken, r.LeaseExpiresAt = newID("lease"), t.now.Add(d)
		r.History = append(r.History, Attempt{N: r.Attempts, Agent: g.Holder, Grant: g.ID, ClaimedAt: t.now})
		if len(r.History) > maxHistory {
			r.History = r.History[len(r.History)-maxHistory:]
		}
		if err := t.put(tTodos, r.ID, r); err != nil {
			return err
		}
		if err := t.putRaw(tLeases, leaseKey(r), ""); err != nil {
			return err
		}
		todo = r.Todo
		lease = Lease{TodoID: r.ID, Token: r.LeaseToken, Attempt: r.Attempts, ExpiresAt: r.LeaseExpiresAt}
		return t.emit(Event{Type: EventTodoClaimed, Actor: agentActor(g.Holder), Persona: g.Holder, Grant: g.ID, Todo: r.ID})
	})
	if err != nil {
		return Todo{}, Lease{}, fmt.Errorf("switchboard: claim: %w", err)
	}
	return todo, lease, nil
}

// nextReady returns the first todo in the queue whose available-at has come.
func (t *txn) nextReady(qkey string) (*todoRec, error) {
	var id string
	now := timeKey(t.now)
	err := t.scanPrefix(tReady, qkey+sep, func(k, v string) (bool, error) {
		at := k[len(qkey)+1+4:][:8]
		if at <= now {
			id = v
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, ErrQueueEmpty
	}
	return t.todo(id)
}

// recoverLeases re-queues (or dead-letters) todos in the queue whose lease
// has expired.
func (t *txn) recoverLeases(qkey string) error {
	var ids []string
	prefix := qkey + sep
	end := prefix + timeKey(t.now.Add(time.Nanosecond))
	err := t.tx.Scan(tLeases, []byte(prefix), []byte(end), func(k, _ []byte) bool {
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
	if r.Attempts >= r.MaxAttempts {
		return t.endTodo(r, TodoDead, AttemptLeaseExpired, systemActor, "lease expired on the last attempt")
	}
	if err := t.requeue(r, t.now, AttemptLeaseExpired, ""); err != nil {
		return err
	}
	return t.emit(Event{Type: EventTodoLeaseExpired, Actor: systemActor, Todo: r.ID})
}

// requeue returns a leased todo to its queue, available at at, closing the
// running attempt with how.
func (t *txn) requeue(r *todoRec, at time.Time, how Outcome, reason string) error {
	if err := t.del(tLeases, leaseKey(r)); err != nil {
		return err
	}
	r.closeAttempt(t.now, how, reason)
	r.State, r.UpdatedAt, r.AvailableAt = TodoQueued, t.now, at
	r.LeaseToken, r.LeaseExpiresAt = "", time.Time{}
	if err := t.put(tTodos, r.ID, r); err != nil {
		return err
	}
	return t.putRaw(tReady, readyKey(r), r.ID)
}

// leased loads the todo a lease names and checks the lease is its current,
// unexpired one: the fencing rule every lease verb shares.
func (s *Switchboard) leased(t *txn, c Credential, l Lease, v Verb) (*grantRec, *todoRec, error) {
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
func (s *Switchboard) Complete(ctx context.Context, c Credential, l Lease, result []byte) error {
	if len(result) > s.limits.MaxResult {
		return fmt.Errorf("switchboard: complete: %w", invalid("result is %d bytes, limit %d", len(result), s.limits.MaxResult))
	}
	err := s.update(ctx, func(t *txn) error {
		g, r, err := s.leased(t, c, l, VerbComplete)
		if err != nil {
			return err
		}
		r.Result = result
		return t.endTodo(r, TodoDone, AttemptCompleted, agentActor(g.Holder), "")
	})
	if err != nil {
		return fmt.Errorf("switchboard: complete: %w", err)
	}
	return nil
}

// listQueued returns the queued todos of a queue in claim order.
func (t *txn) listQueued(qkey string) ([]Todo, error) {
	var out []Todo
	err := t.scanPrefix(tReady, qkey+sep, func(_, id string) (bool, error) {
		r, err := t.todo(id)
		if err != nil {
			return false, err
		}
		out = append(out, r.Todo)
		return true, nil
	})
	return out, err
}
