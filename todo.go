// Todos: the record, CreateFor, Get, and the todo indexes written on creation
// and end.

package switchboard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/switchboardhq/switchboard/store"
)

// TodoState is where a todo is in its life.
type TodoState string

// Todo states: queued → leased → done | queued (retry) | dead; queued →
// cancelled. done, dead and cancelled are terminal.
const (
	// TodoQueued: waiting to be claimed. A todo enters it when CreateFor
	// makes it (claimable from its AvailableAt: NotBefore, or the backoff
	// after a failed attempt), when Fail or Release returns it, when its
	// lease lapses with attempts left (Claim or Reap notice), and when
	// its owner redrives it from dead. Claim moves it on.
	TodoQueued TodoState = "queued"
	// TodoLeased: a worker holds it under a lease (Claim, ClaimN,
	// CompleteAndClaim, Work) until LeaseExpiresAt, extended by
	// Heartbeat. The holder moves it on with Complete, Fail or Release;
	// if the lease lapses it is queued again, or dead on its last attempt.
	TodoLeased TodoState = "leased"
	// TodoDone: Complete recorded its Result. Terminal; Reap deletes it
	// after Config.TodoRetention (handing it to Config.ArchiveTodos).
	TodoDone TodoState = "done"
	// TodoDead: its last attempt failed or lapsed (MaxAttempts). Its owner
	// can Redrive it back to queued; otherwise Reap deletes it after
	// retention, as done ones.
	TodoDead TodoState = "dead"
	// TodoCancelled: its owner cancelled it while queued, or the grant that
	// created it was revoked (or expired) before anyone claimed it, or its
	// approval's friend request ended. Terminal.
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
	N         int       `json:"n"`                   // the attempt number, from 1
	Agent     string    `json:"agent"`               // who claimed it
	Grant     string    `json:"grant"`               // under which grant
	ClaimedAt time.Time `json:"claimed_at,omitzero"` // when it was claimed
	EndedAt   time.Time `json:"ended_at,omitzero"`   // zero while running
	Outcome   Outcome   `json:"outcome,omitempty"`   // how it ended; empty while running
	Reason    string    `json:"reason,omitempty"`    // the reason given on failure or cancellation
}

// maxHistory bounds a todo's attempt history to its latest entries.
const maxHistory = 50

// Origin traces a todo to who made it: the agent, the grant it used, the
// friend edge the grant came from (if any) and the human behind it all.
// Through a friend grant, the Origin of a todo that grant did not create
// is zero: friends learn nothing of one another (see the package
// documentation, "Rules on every edge").
type Origin struct {
	Agent string `json:"agent"`           // the agent that created the todo
	Grant string `json:"grant,omitempty"` // the grant it used
	Edge  string `json:"edge,omitempty"`  // the friend edge the grant came from, if any
	Human Human  `json:"human"`           // the human behind the agent: the requester of a friend grant, else the grantor
}

// Todo is the unit of work, and the only way work crosses between agents.
type Todo struct {
	ID             string    `json:"id"`                        // the todo's id
	Queue          string    `json:"queue"`                     // the queue name, as the grant names it
	Kind           string    `json:"kind"`                      // what sort of work
	Title          string    `json:"title"`                     // a line for humans
	Payload        []byte    `json:"payload,omitempty"`         // opaque bytes from the creator
	Priority       int       `json:"priority"`                  // higher first
	DedupKey       string    `json:"dedup_key,omitempty"`       // the creator's dedup key, if any
	State          TodoState `json:"state"`                     // where the todo is in its life
	Attempts       int       `json:"attempts"`                  // claims so far
	MaxAttempts    int       `json:"max_attempts"`              // attempts before it is dead-lettered
	AvailableAt    time.Time `json:"available_at,omitzero"`     // not claimable before
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"` // when the current lease lapses; zero unless leased
	Origin         Origin    `json:"origin"`                    // who created it, through which grant and edge
	Result         []byte    `json:"result,omitempty"`          // what Complete recorded
	Error          string    `json:"error,omitempty"`           // the last failure's reason
	Approval       *Approval `json:"approval,omitempty"`        // for an approval todo, the friend request to decide
	Trace          Trace     `json:"trace,omitzero"`            // the creator's trace context, if it gave one
	History        []Attempt `json:"history,omitempty"`         // the latest 50 attempts (through a friend grant, others' without Agent and Grant)
	CreatedAt      time.Time `json:"created_at,omitzero"`       // when it was created
	UpdatedAt      time.Time `json:"updated_at,omitzero"`       // when it last changed
	EndedAt        time.Time `json:"ended_at,omitzero"`         // when it reached a terminal state; zero before
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
	Kind     string `json:"kind"`               // required: what sort of work, e.g. "invoice.review"
	Title    string `json:"title,omitempty"`    // a line for humans
	Payload  []byte `json:"payload,omitempty"`  // opaque to switchboard; at most Limits.MaxPayload (base64 in JSON)
	Priority int    `json:"priority,omitempty"` // higher is claimed first; within ±1,000,000
	// DedupKey makes CreateFor idempotent: while a todo created under the
	// same grant with this key is live, and for Config.DedupRetention after
	// it ends, CreateFor returns that todo instead of a new one. Keys are
	// namespaced per grant.
	DedupKey string `json:"dedup_key,omitempty"`
	// NotBefore delays the todo; zero means ready now. A non-zero time
	// must lie in [1970, 2200) UTC.
	NotBefore time.Time `json:"not_before,omitzero"`
	// MaxAttempts before the todo is dead-lettered; zero means
	// Config.MaxAttempts.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Trace is the creator's W3C trace context, handed to whoever claims
	// the todo (see Trace).
	Trace Trace `json:"trace,omitzero"`
}

// CreateFor hands work to the persona a grant targets: it creates a todo in
// queue under the credential's grant, which must be live and hold create_for
// on that queue. A queue outside the grant is ErrNotFound, exactly like one
// that does not exist. created is false when DedupKey matched an existing
// todo, which is returned instead — as it is: the new payload, title and
// priority are ignored. Every todo records the creating agent, grant, edge
// and human.
func (s *Switchboard) CreateFor(ctx context.Context, c Auth, queue string, n NewTodo) (todo Todo, created bool, err error) {
	ctx, ob := s.observe(ctx, Operation{Verb: VerbCreateFor, Queue: queue})
	defer func() { ob.End(Result{Todo: todo.ID, Err: err, Existing: err == nil && !created}) }()
	if err := s.validateNewTodo(n); err != nil {
		return Todo{}, false, fmt.Errorf("switchboard: create_for: %w", err)
	}
	trace := n.Trace
	if trace.IsZero() && s.cfg.Observer != nil {
		trace = s.cfg.Observer.Trace(ctx)
	}
	// The closure captures these small locals by value: NewTodo itself is
	// over 128 bytes, so capturing n would move it to the heap.
	kind, title, payloadIn, priority, dedup, notBefore, maxAtt := n.Kind, n.Title, n.Payload, n.Priority, n.DedupKey, n.NotBefore, n.MaxAttempts
	err = s.update(ctx, func(t *txn) error {
		g, qkey, err := s.authorize(t, c, queue, VerbCreateFor)
		if err != nil {
			return err
		}
		dk := ""
		if dedup != "" {
			dk = g.ID + sep + dedup
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
					todo, created = seenBy(g, old), false
					return nil
				}
			}
		}
		avail := notBefore.UTC()
		if avail.Before(t.now) {
			avail = t.now
		}
		maxAttempts := maxAtt
		if maxAttempts == 0 {
			maxAttempts = s.cfg.MaxAttempts
		}
		var human Human = g.Grantor
		if g.EdgeID != "" {
			r, err := getHot[edgeRequester](t, tEdges, g.EdgeID, "edge")
			if err != nil {
				return err
			}
			human = r.Requester
		}
		var payload []byte // an empty payload is stored, and returned, as none
		if len(payloadIn) > 0 {
			payload = payloadIn
		}
		rec, err := t.insertTodo(todoRec{Todo: Todo{
			Queue: queue, Kind: kind, Title: title, Payload: payload,
			Priority: priority, DedupKey: dedup, MaxAttempts: maxAttempts, AvailableAt: avail, Trace: trace,
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
		todo, created = seenBy(g, rec), true
		return nil
	})
	if err != nil {
		return Todo{}, false, fmt.Errorf("switchboard: create_for: %w", err)
	}
	if created {
		// The record holds the caller's payload slice; the Todo returned
		// must not change if the caller reuses it.
		todo.Payload = bytes.Clone(todo.Payload)
	}
	return todo, created, nil
}

// edgeRequester is the one field of an edge record CreateFor reads, and
// all the hot cache keeps of it.
type edgeRequester struct {
	Requester Human `json:"requester"`
}

func (e edgeRequester) clone() edgeRequester { return e }

// insertTodo stores a new queued todo and its indexes.
func (t *txn) insertTodo(r todoRec, actor string, byGrant bool) (*todoRec, error) {
	seq, err := t.nextTodoSeq()
	if err != nil {
		return nil, err
	}
	r.ID, r.Seq, r.State = newOrderedID("todo", t.now), seq, TodoQueued
	r.CreatedAt, r.UpdatedAt = t.now, t.now
	if r.AvailableAt.IsZero() {
		r.AvailableAt = t.now
	}
	// A new id and seq: every key below is new, the record's too (an
	// INSERT on PostgreSQL, not an upsert: no look for a row to update,
	// no confirmation record in the WAL).
	b, err := t.encode(tTodos, r)
	if err != nil {
		return nil, err
	}
	if err := t.insertNew(tTodos, []byte(r.ID), b); err != nil {
		return nil, err
	}
	if err := t.enqueueNew(&r); err != nil {
		return nil, err
	}
	if err := t.putRawNew(tIdx, idxKey(idxQueue, r.QueueKey, be64(seq)), r.ID); err != nil {
		return nil, err
	}
	if byGrant && r.Origin.Grant != "" {
		if err := t.putRawNew(tIdx, idxKey(idxGrant, r.Origin.Grant, be64(seq)), r.ID); err != nil {
			return nil, err
		}
	}
	if err := t.emit(Event{Type: EventTodoCreated, Actor: actor, Persona: r.Origin.Agent, Edge: r.Origin.Edge, Grant: r.Origin.Grant, Todo: r.ID, Queue: r.address()}); err != nil {
		return nil, err
	}
	return &r, t.notifyArrival(&r)
}

// The todo index (table tIdx) holds every secondary index of todos in one
// B+tree, so a commit that touches several of them dirties few pages. A key
// is one kind byte, then:
const (
	idxReady   = 'r' // queue key \x00 priority(4) available-at(8) seq(8) → id: queued and due, in claim order
	idxDelayed = 'd' // queue key \x00 available-at(8) seq(8) → id: queued, not due yet
	idxLease   = 'l' // queue key \x00 lease expiry(8) id → "": leased
	idxQueue   = 'q' // queue key \x00 seq(8) → id: a queue's todos in creation order
	idxGrant   = 'g' // grant id \x00 seq(8) → id: the todos a grant created
	idxClaimed = 'c' // grant id \x00 seq(8) → id: todos a friend grant claimed but did not create (see claimedBy)
	idxEnded   = 'e' // ended-at(8) id → "": ended todos, oldest first (for purging)
)

// idxKey builds a todo index key: kind, scope (a queue key or grant id),
// \x00, rest.
func idxKey(kind byte, scope, rest string) string {
	return string(kind) + scope + sep + rest
}

// readyKey orders a queue's due todos: priority (highest first), then
// available-at, then creation order.
func readyKey(r *todoRec) string {
	var b []byte
	b = append(b, idxReady)
	b = append(b, r.QueueKey...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(math.MaxInt32-int64(r.Priority)))
	b = append(b, timeKey(r.AvailableAt)...)
	b = append(b, be64(r.Seq)...)
	return string(b)
}

// delayedKey orders a queue's todos that are not due yet by when they are.
func delayedKey(r *todoRec) string {
	return idxKey(idxDelayed, r.QueueKey, timeKey(r.AvailableAt)+be64(r.Seq))
}

func leaseKey(r *todoRec) string {
	return idxKey(idxLease, r.QueueKey, timeKey(r.LeaseExpiresAt)+r.ID)
}

func endedKey(r *todoRec) string { return string(idxEnded) + timeKey(r.EndedAt) + r.ID }

// enqueue indexes a queued todo: ready if due, else delayed until it is.
func (t *txn) enqueue(r *todoRec) error {
	if r.AvailableAt.After(t.now) {
		return t.putRaw(tIdx, delayedKey(r), r.ID)
	}
	return t.putRaw(tIdx, readyKey(r), r.ID)
}

// enqueueNew is enqueue for a todo just created: its index keys are new.
func (t *txn) enqueueNew(r *todoRec) error {
	if r.AvailableAt.After(t.now) {
		return t.putRawNew(tIdx, delayedKey(r), r.ID)
	}
	return t.putRawNew(tIdx, readyKey(r), r.ID)
}

// maxPromote bounds how many delayed todos one claim moves to ready.
const maxPromote = 1000

// promote moves a queue's delayed todos that are due to ready. A claim
// calls it first, so its cost follows what became due, never how much
// waits further ahead.
func (t *txn) promote(qkey string) error {
	prefix := idxKey(idxDelayed, qkey, "")
	end := prefix + timeKey(t.now.Add(time.Nanosecond))
	pb, eb := []byte(prefix), []byte(end)
	if !t.anyIn(tIdx, pb, eb) {
		return nil
	}
	var due []readyEntry
	err := t.scanBounded(tIdx, pb, eb, maxPromote, func(k, v []byte) bool {
		due = append(due, readyEntry{key: string(k), id: string(v)})
		return len(due) < maxPromote
	})
	if err != nil {
		return err
	}
	for _, e := range due {
		r, err := t.todo(e.id)
		if aside, err := t.setAsideEntry(err, e.id, e.key, e.id); aside || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if r.State != TodoQueued {
			t.pass(e.key)
			continue // moved on since its entry was read (row-locked transactions only)
		}
		if err := t.del(tIdx, delayedKey(r)); err != nil {
			return err
		}
		if err := t.putRaw(tIdx, readyKey(r), r.ID); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) todo(id string) (*todoRec, error) {
	var r todoRec
	if err := t.get(tTodos, id, &r, "todo"); err != nil {
		return nil, err
	}
	return &r, nil
}

// todoLocked is todo for a record the transaction changes, and decides on,
// without holding the index entry its writers must remove first: in a
// row-locked transaction (see updateLocked) it locks the record, waiting
// for a transaction that holds it. (The claim path holds the ready, delayed
// or lease entry it found the todo by — every writer of a queued or leased
// todo removes or moves that entry — so it reads the record plainly.)
func (t *txn) todoLocked(id string) (*todoRec, error) {
	if t.locker == nil {
		return t.todo(id)
	}
	var r todoRec
	b, err := t.locker.GetLocked(tTodos, []byte(id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("todo")
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", tTodos, err)
	}
	if err := decodeRecord(b, &r); err != nil {
		return nil, fmt.Errorf("decode %s %q: %w", tTodos, id, err)
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
	if err := t.putRawNew(tIdx, endedKey(r), ""); err != nil { // a todo ends once (a redrive deletes it)
		return err
	}
	typ, hook := EventTodoCompleted, WebhookTodoCompleted
	switch state {
	case TodoCancelled:
		typ, hook = EventTodoCancelled, WebhookTodoCancelled
	case TodoDead:
		typ, hook = EventTodoDead, WebhookTodoDead
	}
	if err := t.emit(Event{Type: typ, Actor: actor, Persona: r.Origin.Agent, Grant: r.Origin.Grant, Todo: r.ID, Queue: r.address(), Detail: reason}); err != nil {
		return err
	}
	return t.notifyWebhooks(r, hook)
}

// unindex removes r from the ready, delayed or lease index its state puts
// it in.
func (t *txn) unindex(r *todoRec) error {
	switch r.State {
	case TodoQueued:
		if err := t.del(tIdx, readyKey(r)); err != nil {
			return err
		}
		return t.del(tIdx, delayedKey(r))
	case TodoLeased:
		return t.del(tIdx, leaseKey(r))
	}
	return nil
}

func (r *todoRec) closeAttempt(now time.Time, how Outcome, reason string) {
	if n := len(r.History); n > 0 && r.History[n-1].EndedAt.IsZero() {
		h := &r.History[n-1]
		h.EndedAt, h.Outcome, h.Reason = now, how, reason
	}
}

// todoFor loads todo id for an id-addressed verb. It is the one visibility
// rule every id verb goes through: the credential must be live, and a todo
// the grant may not address with v — in a queue it does not name, on which
// it does not hold v, or (through a friend grant) neither created nor
// claimed by that grant — is ErrNotFound with the same words as an id that
// does not exist, so no answer tells a caller which ids exist.
func (s *Switchboard) todoFor(t *txn, c Auth, id string, v Verb) (*grantRec, *todoRec, error) {
	g, err := t.authenticate(c)
	if err != nil {
		return nil, nil, err
	}
	r, err := t.todoLocked(id)
	if err != nil {
		return nil, nil, named(err, "todo", id)
	}
	if !g.Scope.Allows(r.Queue, v) || !visible(g, r) {
		return nil, nil, notFoundNamed("todo", id)
	}
	return g, r, nil
}

// visible reports whether grant g may see todo r at all: r must be in a
// queue g names and, through a friend grant, be one g created or claimed.
// A human's own grant (Vend) sees every todo of its queues.
func visible(g *grantRec, r *todoRec) bool {
	if !g.Scope.Has(r.Queue) || queueKey(&g.Grant, r.Queue) != r.QueueKey {
		return false
	}
	if g.EdgeID == "" || r.Origin.Grant == g.ID {
		return true
	}
	for _, a := range r.History {
		if a.Grant == g.ID {
			return true
		}
	}
	return false
}

// seenBy is todo r as grant g sees it: the one place a todo is shaped for
// an agent, so every entry point that hands one out (CreateFor, Get, List,
// Claim, ClaimN, CompleteAndClaim, hence Work and the MCP tools, and a
// friend's webhook deliveries) goes through it. The queue owner's own
// grants (Vend) see it whole. A friend grant sees nothing that names
// another party — friending B tells A nothing about B's friends or B's
// other agents: a todo it did not create comes without its Origin (no
// creating agent, grant, edge or human), its DedupKey (the creator's, in
// the creator's namespace) or its trace's tracestate (the creator's
// vendor data; the traceparent stays, so the trace goes on), and every
// attempt in History by another grant — whoever made it — without its
// Agent and Grant. What the work is (kind, title, payload, priority),
// where it stands and how each attempt went stay.
func seenBy(g *grantRec, r *todoRec) Todo {
	td := r.Todo
	if g.EdgeID == "" {
		return td
	}
	if td.Origin.Grant != g.ID {
		td.Origin, td.DedupKey, td.Trace.State, td.Approval = Origin{}, "", "", nil
	}
	for i, a := range td.History {
		if a.Grant != g.ID {
			h := slices.Clone(td.History)
			for j := i; j < len(h); j++ {
				if h[j].Grant != g.ID {
					h[j].Agent, h[j].Grant = "", ""
				}
			}
			td.History = h
			break
		}
	}
	return td
}

// Get returns one todo. Through a friend grant only the todos that grant
// created or claimed are visible; any other id is ErrNotFound, exactly as an
// unknown one.
func (s *Switchboard) Get(ctx context.Context, c Auth, todoID string) (todo Todo, err error) {
	ctx, ob := s.observe(ctx, Operation{Verb: VerbGet, Todo: todoID})
	defer func() { ob.End(Result{Todo: todoID, Err: err}) }()
	var out Todo
	err = s.view(ctx, func(t *txn) error {
		g, r, err := s.todoFor(t, c, todoID, VerbGet)
		if err != nil {
			return err
		}
		out = seenBy(g, r)
		return nil
	})
	if err != nil {
		return Todo{}, fmt.Errorf("switchboard: get: %w", err)
	}
	return out, nil
}

// claimedBy lists the grants r's history holds, other than the one that
// created it, once each: the grants whose idxClaimed entries r may have. A
// grant only has one if it is a friend grant (the owner's own grants see
// the whole queue and are never listed there), but deleting an entry that
// is not there is harmless, so the callers that delete need not know.
func claimedBy(r *todoRec) []string {
	var out []string
	for _, a := range r.History {
		if a.Grant != "" && a.Grant != r.Origin.Grant && !slices.Contains(out, a.Grant) {
			out = append(out, a.Grant)
		}
	}
	return out
}

// indexClaim records, as claimIn appends attempt a by grant g to r, that
// g may list r: a friend grant that did not create r sees it from its
// first claim on (see visible). Attempts trimmed from r's history take
// their grants' entries with them when no attempt of theirs is left.
func (t *txn) indexClaim(r *todoRec, g *grantRec, trimmed []Attempt) error {
	if g.EdgeID != "" && r.Origin.Grant != g.ID {
		if err := t.putRaw(tIdx, idxKey(idxClaimed, g.ID, be64(r.Seq)), r.ID); err != nil {
			return err
		}
	}
	left := claimedBy(r)
	for _, a := range trimmed {
		if a.Grant != r.Origin.Grant && !slices.Contains(left, a.Grant) {
			if err := t.del(tIdx, idxKey(idxClaimed, a.Grant, be64(r.Seq))); err != nil {
				return err
			}
		}
	}
	return nil
}
