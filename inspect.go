// Operator views: what a host's operator (the command line in
// cmd/switchboard) reads and repairs directly, outside any grant.

package switchboard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// QueueStats is one queue's todo counts.
type QueueStats struct {
	Queue     string `json:"queue"`     // its address: "persona/queue"; "~…" for approvals and system queues
	Ready     int    `json:"ready"`     // queued and available now
	Delayed   int    `json:"delayed"`   // queued, available later (NewTodo.Delay, a retry's backoff)
	Leased    int    `json:"leased"`    // claimed, under a lease
	Done      int    `json:"done"`      // completed, kept until retention purges them
	Dead      int    `json:"dead"`      // failed their last attempt: Redrive or RedriveDead puts them back
	Cancelled int    `json:"cancelled"` // cancelled (by their creator, an owner, or a revocation)
}

// InspectQueues counts the todos of every queue, by state, sorted by
// address. It is the operator's view, through no grant, and reads every
// todo the store keeps: for a command line, not a hot path.
func (s *Switchboard) InspectQueues(ctx context.Context) ([]QueueStats, error) {
	byQueue := map[string]*QueueStats{}
	err := s.view(ctx, func(t *txn) error {
		var bad error
		err := t.tx.Scan(tTodos, nil, nil, func(k, v []byte) bool {
			var r todoRec
			if err := decodeRecord(v, &r); err != nil {
				bad = fmt.Errorf("todo %s: %w", k, err)
				return false
			}
			a := r.address()
			q := byQueue[a]
			if q == nil {
				q = &QueueStats{Queue: a}
				byQueue[a] = q
			}
			switch r.State {
			case TodoQueued:
				if r.AvailableAt.After(t.now) {
					q.Delayed++
				} else {
					q.Ready++
				}
			case TodoLeased:
				q.Leased++
			case TodoDone:
				q.Done++
			case TodoDead:
				q.Dead++
			case TodoCancelled:
				q.Cancelled++
			}
			return true
		})
		if err != nil {
			return err
		}
		return bad
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: inspect queues: %w", err)
	}
	out := make([]QueueStats, 0, len(byQueue))
	for _, q := range byQueue {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b QueueStats) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}

// queueKeyOf is the store key of a queue address (QueueAddress,
// ApprovalsAddress, or the system queue's).
func queueKeyOf(address string) (string, error) {
	switch {
	case address == "~system/webhooks":
		return webhookQueue, nil
	case strings.HasPrefix(address, "~"):
		return "h:" + address[1:], nil
	case strings.Count(address, "/") == 1 && !strings.HasPrefix(address, "/") && !strings.HasSuffix(address, "/"):
		return "p:" + address, nil
	}
	return "", invalid("queue address %q is not persona/queue", clip(address, 200))
}

// InspectTodos lists a queue's todos by address (as InspectQueues names
// it) in creation order, filtered as List filters: the operator's view,
// through no grant.
func (s *Switchboard) InspectTodos(ctx context.Context, address string, opts *ListOptions) ([]Todo, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("switchboard: inspect todos: %w", err)
	}
	qkey, err := queueKeyOf(address)
	if err != nil {
		return nil, fmt.Errorf("switchboard: inspect todos: %w", err)
	}
	var out []Todo
	err = s.view(ctx, func(t *txn) error {
		var from uint64
		if o.After != "" {
			r, err := t.todo(o.After)
			if err != nil {
				return err
			}
			from = r.Seq + 1
		}
		return t.scanBySeq(from, func(id string) (bool, error) {
			r, err := t.todo(id)
			if err != nil {
				return false, err
			}
			if o.State == "" || r.State == o.State {
				out = append(out, r.Todo)
			}
			return len(out) < o.Limit, nil
		}, idxKey(idxQueue, qkey, ""))
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: inspect todos: %w", err)
	}
	return out, nil
}

// InspectTodo reads one todo by id: the operator's view, through no grant.
func (s *Switchboard) InspectTodo(ctx context.Context, id string) (Todo, error) {
	var out Todo
	err := s.view(ctx, func(t *txn) error {
		r, err := t.todo(id)
		if err == nil {
			out = r.Todo
		}
		return err
	})
	if err != nil {
		return Todo{}, fmt.Errorf("switchboard: inspect todo: %w", err)
	}
	return out, nil
}

// RedriveDead puts dead todos of a queue back in it, attempts reset: the
// ids given, or every dead todo of the queue when none is. It is the
// operator's repair, through no grant, audited as the system's; it returns
// how many it re-queued. An id that is not a todo of the queue is
// ErrNotFound, one that is not dead ErrInvalidTransition, and then nothing
// changes.
func (s *Switchboard) RedriveDead(ctx context.Context, address string, ids ...string) (int, error) {
	qkey, err := queueKeyOf(address)
	if err != nil {
		return 0, fmt.Errorf("switchboard: redrive dead: %w", err)
	}
	n := 0
	err = s.update(ctx, func(t *txn) error {
		n = 0
		if len(ids) == 0 {
			if err := t.scanBySeq(0, func(id string) (bool, error) {
				r, err := t.todo(id)
				if err != nil {
					return false, err
				}
				if r.State == TodoDead {
					ids = append(ids, id)
				}
				return true, nil
			}, idxKey(idxQueue, qkey, "")); err != nil {
				return err
			}
		}
		for _, id := range ids {
			r, err := t.todo(id)
			if err != nil {
				return err
			}
			if r.QueueKey != qkey {
				return fmt.Errorf("%w: todo %s is not in %s", ErrNotFound, id, address)
			}
			if r.State != TodoDead {
				return fmt.Errorf("%w: todo %s is %s", ErrInvalidTransition, id, r.State)
			}
			if err := t.redrive(r, systemActor, ""); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("switchboard: redrive dead: %w", err)
	}
	return n, nil
}

// redrive puts a dead todo back in its queue, attempts reset.
func (t *txn) redrive(r *todoRec, actor, grant string) error {
	if err := t.del(tIdx, endedKey(r)); err != nil {
		return err
	}
	r.State, r.Attempts, r.AvailableAt, r.UpdatedAt, r.EndedAt = TodoQueued, 0, t.now, t.now, time.Time{}
	if err := t.put(tTodos, r.ID, r); err != nil {
		return err
	}
	if err := t.enqueue(r); err != nil {
		return err
	}
	return t.emit(Event{Type: EventTodoRedriven, Actor: actor, Grant: grant, Todo: r.ID, Queue: r.address()})
}
