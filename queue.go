package switchboard

import (
	"context"
	"fmt"
	"sync"
	"time"
)

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
func (s *Switchboard) Heartbeat(ctx context.Context, c Credential, l Lease, d time.Duration) (Lease, error) {
	if d < 0 || d > s.cfg.MaxLease {
		return Lease{}, fmt.Errorf("switchboard: heartbeat: %w", invalid("lease %s outside (0, %s]", d, s.cfg.MaxLease))
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
			if err := t.del(tLeases, leaseKey(r)); err != nil {
				return err
			}
			r.LeaseExpiresAt, r.UpdatedAt = exp, t.now
			if err := t.putRaw(tLeases, leaseKey(r), ""); err != nil {
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
func (s *Switchboard) Fail(ctx context.Context, c Credential, l Lease, reason string) error {
	if err := checkText("reason", reason, s.limits.MaxTitle*4, true); err != nil {
		return fmt.Errorf("switchboard: fail: %w", err)
	}
	err := s.update(ctx, func(t *txn) error {
		g, r, err := s.leased(t, c, l, VerbFail)
		if err != nil {
			return err
		}
		r.Error = reason
		if r.Attempts >= r.MaxAttempts {
			return t.endTodo(r, TodoDead, AttemptFailed, agentActor(g.Holder), reason)
		}
		if err := t.requeue(r, t.now.Add(backoff(r.Attempts)), AttemptFailed, reason); err != nil {
			return err
		}
		return t.emit(Event{Type: EventTodoFailed, Actor: agentActor(g.Holder), Grant: g.ID, Todo: r.ID, Detail: reason})
	})
	if err != nil {
		return fmt.Errorf("switchboard: fail: %w", err)
	}
	s.wake.signal()
	return nil
}

// Release hands a leased todo back unfinished, ready at once. The attempt
// does not count against MaxAttempts. The lease must be current, else
// ErrLeaseLost.
func (s *Switchboard) Release(ctx context.Context, c Credential, l Lease) error {
	err := s.update(ctx, func(t *txn) error {
		g, r, err := s.leased(t, c, l, VerbRelease)
		if err != nil {
			return err
		}
		r.Attempts--
		if err := t.requeue(r, t.now, AttemptReleased, ""); err != nil {
			return err
		}
		return t.emit(Event{Type: EventTodoReleased, Actor: agentActor(g.Holder), Grant: g.ID, Todo: r.ID})
	})
	if err != nil {
		return fmt.Errorf("switchboard: release: %w", err)
	}
	s.wake.signal()
	return nil
}

// Cancel ends a queued todo without running it. It needs the cancel verb,
// which only the queue owner's own grants (Vend) can hold. A leased todo
// must finish or fail first: ErrInvalidTransition.
func (s *Switchboard) Cancel(ctx context.Context, c Credential, todoID, reason string) error {
	if err := checkText("reason", reason, s.limits.MaxTitle*4, true); err != nil {
		return fmt.Errorf("switchboard: cancel: %w", err)
	}
	err := s.update(ctx, func(t *txn) error {
		g, r, err := s.todoFor(t, c, todoID, VerbCancel)
		if err != nil {
			return err
		}
		if r.State != TodoQueued {
			return fmt.Errorf("%w: todo is %s", ErrInvalidTransition, r.State)
		}
		return t.endTodo(r, TodoCancelled, AttemptCancelled, agentActor(g.Holder), reason)
	})
	if err != nil {
		return fmt.Errorf("switchboard: cancel: %w", err)
	}
	return nil
}

// Redrive puts a dead todo back in its queue with its attempts reset. It
// needs the redrive verb (queue owner only).
func (s *Switchboard) Redrive(ctx context.Context, c Credential, todoID string) error {
	err := s.update(ctx, func(t *txn) error {
		g, r, err := s.todoFor(t, c, todoID, VerbRedrive)
		if err != nil {
			return err
		}
		if r.State != TodoDead {
			return fmt.Errorf("%w: todo is %s", ErrInvalidTransition, r.State)
		}
		r.State, r.Attempts, r.AvailableAt, r.UpdatedAt, r.EndedAt = TodoQueued, 0, t.now, t.now, time.Time{}
		if err := t.put(tTodos, r.ID, r); err != nil {
			return err
		}
		if err := t.putRaw(tReady, readyKey(r), r.ID); err != nil {
			return err
		}
		return t.emit(Event{Type: EventTodoRedriven, Actor: agentActor(g.Holder), Grant: g.ID, Todo: r.ID})
	})
	if err != nil {
		return fmt.Errorf("switchboard: redrive: %w", err)
	}
	s.wake.signal()
	return nil
}

// ListOptions filters List. A nil *ListOptions lists every state.
type ListOptions struct {
	State TodoState // only todos in this state; empty: any
	After string    // continue after this todo id (from a previous page)
	Limit int       // at most this many; zero: 100; at most 1000
}

// List returns a queue's todos in creation order. Through a friend grant it
// shows only the todos that grant created.
func (s *Switchboard) List(ctx context.Context, c Credential, queue string, opts *ListOptions) ([]Todo, error) {
	var o ListOptions
	if opts != nil {
		o = *opts
	}
	if o.Limit <= 0 {
		o.Limit = 100
	}
	if o.Limit > 1000 {
		return nil, fmt.Errorf("switchboard: list: %w", invalid("limit %d over 1000", o.Limit))
	}
	var out []Todo
	err := s.view(ctx, func(t *txn) error {
		g, qkey, err := s.authorize(t, c, queue, VerbList)
		if err != nil {
			return err
		}
		start := qkey + sep
		if o.After != "" {
			r, err := t.todo(o.After)
			if err != nil || r.QueueKey != qkey {
				return notFound("todo")
			}
			start += be64(r.Seq + 1)
		}
		var ferr error
		err = t.tx.Scan(tByQueue, []byte(start), prefixEnd(qkey+sep), func(_, v []byte) bool {
			r, err := t.todo(string(v))
			if err != nil {
				ferr = err
				return false
			}
			if g.EdgeID != "" && r.Origin.Grant != g.ID {
				return true
			}
			if o.State == "" || r.State == o.State {
				out = append(out, r.Todo)
			}
			return len(out) < o.Limit
		})
		if err != nil {
			return err
		}
		return ferr
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: list: %w", err)
	}
	return out, nil
}

// ReapStats counts what one Reap did.
type ReapStats struct {
	LeasesExpired int // leases past expiry: re-queued or dead-lettered
	EdgesExpired  int // pending friend requests past their expiry
	GrantsExpired int // grants past their expiry, revoked
	TokensPurged  int // remembered ID token hashes whose tokens expired
}

// reapBatch bounds the work of one Reap transaction per kind.
const reapBatch = 500

// Reap does the time-driven work in one transaction: it re-delivers expired
// leases (dead-lettering todos out of attempts), expires pending friend
// requests past their expiry (cancelling their approval todos) and revokes
// grants past their expiry (cancelling their queued todos), and forgets the
// hashes of used ID tokens that have expired. Each kind is
// bounded per call; call again while it reports work. Correctness never
// depends on it — Claim recovers expired leases and every check compares
// expiry times — but it keeps queues and approval lists tidy.
func (s *Switchboard) Reap(ctx context.Context) (ReapStats, error) {
	var st ReapStats
	err := s.update(ctx, func(t *txn) error {
		st = ReapStats{}
		now := timeKey(t.now)
		var leases []string
		err := t.scanPrefix(tLeases, "", func(k, _ string) (bool, error) {
			// queue key \x00 expiry(8) todo id
			i := len(k) - len("todo_") - 24 - 8
			if i >= 0 && k[i:i+8] <= now {
				leases = append(leases, k[i+8:])
			}
			return len(leases) < reapBatch, nil
		})
		if err != nil {
			return err
		}
		for _, id := range leases {
			if err := t.expireLease(id); err != nil {
				return err
			}
		}
		st.LeasesExpired = len(leases)

		var edges []string
		err = t.scanPrefix(tEdgePending, "", func(_, id string) (bool, error) {
			edges = append(edges, id)
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, id := range edges {
			var e edgeRec
			if err := t.get(tEdges, id, &e, "edge"); err != nil {
				return err
			}
			if t.now.Before(e.ExpiresAt) {
				continue
			}
			if err := t.expireEdge(id); err != nil {
				return err
			}
			if st.EdgesExpired++; st.EdgesExpired >= reapBatch {
				break
			}
		}

		var grants []string
		err = t.tx.Scan(tGrantExp, nil, []byte(timeKey(t.now.Add(time.Nanosecond))), func(k, _ []byte) bool {
			grants = append(grants, string(k[8:]))
			return len(grants) < reapBatch
		})
		if err != nil {
			return err
		}
		for _, id := range grants {
			g, e, err := t.grantWithEdge(id)
			if err != nil {
				return err
			}
			if err := t.revokeGrant(g, e, systemActor, "expired", true); err != nil {
				return err
			}
		}
		st.GrantsExpired = len(grants)
		st.TokensPurged, err = t.forgetTokens(reapBatch)
		return err
	})
	if err != nil {
		return ReapStats{}, fmt.Errorf("switchboard: reap: %w", err)
	}
	if st.LeasesExpired > 0 {
		s.wake.signal()
	}
	return st, nil
}

// Run calls Reap every Config.ReapInterval, on Config.Clock, until ctx
// ends, and returns ctx's error. When a Reap hits its batch bound it runs
// again at once. Reap errors other than a closed store are retried at the
// next tick; a closed store ends Run with ErrClosed.
//
// Run is optional: Claim recovers expired leases by itself and lapsed
// requests and grants are refused when used. Run keeps queues and the
// approvals inbox tidy and re-delivers work without waiting for a claim.
func (s *Switchboard) Run(ctx context.Context) error {
	for {
		for {
			st, err := s.Reap(ctx)
			if err != nil {
				if isClosed(err) {
					return fmt.Errorf("switchboard: run: %w", err)
				}
				break
			}
			if st.LeasesExpired < reapBatch && st.EdgesExpired < reapBatch && st.GrantsExpired < reapBatch && st.TokensPurged < reapBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.cfg.Clock.After(s.cfg.ReapInterval):
		}
	}
}

// waker lets blocked claims in this process sleep until something may have
// become ready. signal wakes every waiter; waiters re-check the store.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

func (w *waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *waker) signal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}
