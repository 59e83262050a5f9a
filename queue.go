// Queue management: List, Cancel and Redrive.

package switchboard

import (
	"context"
	"fmt"
)

// Cancel ends a queued todo without running it. It needs the cancel verb,
// which only the queue owner's own grants (Vend) can hold. A leased todo
// must finish or fail first: ErrInvalidTransition.
func (s *Switchboard) Cancel(ctx context.Context, c Auth, todoID, reason string) error {
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
// needs the redrive verb (queue owner only). A todo that is not dead is
// ErrInvalidTransition.
func (s *Switchboard) Redrive(ctx context.Context, c Auth, todoID string) error {
	err := s.update(ctx, func(t *txn) error {
		g, r, err := s.todoFor(t, c, todoID, VerbRedrive)
		if err != nil {
			return err
		}
		if r.State != TodoDead {
			return fmt.Errorf("%w: todo is %s", ErrInvalidTransition, r.State)
		}
		return t.redrive(r, agentActor(g.Holder), g.ID)
	})
	if err != nil {
		return fmt.Errorf("switchboard: redrive: %w", err)
	}
	return nil
}

// ListOptions filters List. A nil *ListOptions lists every state.
type ListOptions struct {
	State TodoState `json:"state,omitempty"` // only todos in this state; empty: any
	After string    `json:"after,omitempty"` // continue after this todo id (from a previous page)
	Limit int       `json:"limit,omitempty"` // at most this many; zero: 100; at most 1000
}

// withDefaults is o (nil: every state) with the default limit, or an
// error for a limit over 1000: every listing goes through it.
func (o *ListOptions) withDefaults() (ListOptions, error) {
	var out ListOptions
	if o != nil {
		out = *o
	}
	if out.Limit <= 0 {
		out.Limit = 100
	}
	if out.Limit > 1000 {
		return ListOptions{}, invalid("limit %d over 1000", out.Limit)
	}
	return out, nil
}

// List returns a queue's todos in creation order. Through a friend grant it
// shows only the todos that grant created or claimed; an After cursor the
// grant may not see is ErrNotFound.
func (s *Switchboard) List(ctx context.Context, c Auth, queue string, opts *ListOptions) ([]Todo, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("switchboard: list: %w", err)
	}
	var out []Todo
	err = s.view(ctx, func(t *txn) error {
		g, qkey, err := s.authorize(t, c, queue, VerbList)
		if err != nil {
			return err
		}
		var from uint64
		if o.After != "" {
			r, err := t.todo(o.After)
			if err != nil || r.QueueKey != qkey || !visible(g, r) {
				return notFoundNamed("todo", o.After)
			}
			from = r.Seq + 1
		}
		each := func(id string) (bool, error) {
			r, err := t.todo(id)
			if err != nil {
				return false, err
			}
			if r.QueueKey == qkey && visible(g, r) && (o.State == "" || r.State == o.State) {
				out = append(out, seenBy(g, r))
			}
			return len(out) < o.Limit, nil
		}
		if g.EdgeID != "" {
			// A friend grant sees only what it created or claimed: read
			// those two indexes, not the whole queue's.
			return t.scanBySeq(from, each, idxKey(idxGrant, g.ID, ""), idxKey(idxClaimed, g.ID, ""))
		}
		return t.scanBySeq(from, each, idxKey(idxQueue, qkey, ""))
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: list: %w", err)
	}
	return out, nil
}

// listQueued returns the queued todos of a queue in claim order.
func (t *txn) listQueued(qkey string) ([]Todo, error) {
	var out []Todo
	err := t.scanPrefix(tIdx, idxKey(idxReady, qkey, ""), func(_, id string) (bool, error) {
		r, err := t.todo(id)
		if err != nil {
			return false, err
		}
		out = append(out, r.Todo)
		return true, nil
	})
	return out, err
}
