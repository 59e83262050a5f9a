// Change notifications: subscriptions that follow the audit log, strictly
// after commit and in commit order.

package switchboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// EventFilter selects the events a subscription delivers. Every field that
// is set must match; the zero filter matches every event.
type EventFilter struct {
	Types   []EventType // any of these types
	Persona string      // Event.Persona
	Edge    string      // Event.Edge
	Grant   string      // Event.Grant
	Todo    string      // Event.Todo
	Queue   string      // Event.Queue: a QueueAddress or ApprovalsAddress
}

// Match reports whether f selects e.
func (f *EventFilter) Match(e Event) bool {
	if f == nil {
		return true
	}
	return (len(f.Types) == 0 || slices.Contains(f.Types, e.Type)) &&
		(f.Persona == "" || f.Persona == e.Persona) &&
		(f.Edge == "" || f.Edge == e.Edge) &&
		(f.Grant == "" || f.Grant == e.Grant) &&
		(f.Todo == "" || f.Todo == e.Todo) &&
		(f.Queue == "" || f.Queue == e.Queue)
}

// ErrFellBehind is wrapped by the error of a subscription whose next events
// are no longer in the log; the error's message names the seq to resume
// after.
var ErrFellBehind = errors.New("subscription fell behind the audit log")

// Subscription delivers committed events to a host. Read C until it is
// closed, then Err says why: nil after Close, the context's error, or an
// error wrapping ErrFellBehind, ErrClosed or ErrAuditBroken (an event in
// the log does not decode). A store that fails to answer (a database
// failing over) does not end it: it reads again every Config.PollInterval,
// logging a warning once, and goes on from where it was.
type Subscription struct {
	// C delivers the matching events in commit order, each exactly once.
	C <-chan Event

	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
	last   uint64
	closed bool
}

// Close ends the subscription and waits until C is closed.
func (sub *Subscription) Close() {
	sub.mu.Lock()
	sub.closed = true
	sub.mu.Unlock()
	sub.cancel()
	<-sub.done
}

// Err returns why C was closed (nil while it is open or after Close).
func (sub *Subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// Last returns the seq of the last event the subscription read from the log
// (delivered or filtered out): resume a new subscription after it.
func (sub *Subscription) Last() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.last
}

// Subscribe follows the audit log from the event after seq `after`,
// delivering the events filter matches on the returned Subscription's
// channel. Pass the Seq of the last event handled to resume; 0 means from
// the oldest event the log still holds (retention may have purged older
// ones: that is not an error). Resuming after a seq whose successors were
// purged ends the subscription with ErrFellBehind.
//
// A nil or zero filter matches every event of every human, persona and
// queue in the store: it is an operator's view, like Events. Never hand an
// unfiltered subscription to an agent or a human; filter by Queue (a
// persona's QueueAddress, a human's ApprovalsAddress) or Persona. Events
// are read from the log, so they are delivered strictly after their commit,
// in log order (on a store with a sequencer, once it has added them: right
// after commit; in the process that sequences, straight from the
// sequencer, without a read of the store), and never block or fail a
// transaction: a slow reader only lags, and loses nothing while the log
// holds the events. A commit in this process wakes the subscription at
// once; one made by another process on the same store too if the store
// announces commits (store.Watcher), and otherwise within
// Config.PollInterval, on Config.Clock.
func (s *Switchboard) Subscribe(ctx context.Context, after uint64, filter *EventFilter) *Subscription {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan Event)
	sub := &Subscription{C: ch, cancel: cancel, done: make(chan struct{}), last: after}
	go s.follow(ctx, sub, ch, filter)
	return sub
}

// followPage is how many events a subscription reads at once.
const followPage = 256

func (s *Switchboard) follow(ctx context.Context, sub *Subscription, ch chan<- Event, filter *EventFilter) {
	defer close(sub.done)
	defer close(ch)
	end := func(err error) {
		sub.mu.Lock()
		if !sub.closed {
			sub.err = err
		}
		sub.mu.Unlock()
	}
	cursor := sub.Last()
	failing := false
	for {
		woken := s.commits.wait(commitsKey) // before reading: no commit is missed
		evs, ok := s.recent.after(cursor, followPage, s.now())
		var err error
		if !ok {
			evs, err = s.Events(ctx, cursor, followPage)
		}
		first := uint64(0) // the log's oldest event, if the page skips ahead from 0
		if err == nil && cursor == 0 && len(evs) > 0 && evs[0].Seq > 1 {
			first, err = s.firstEvent(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				end(ctx.Err())
				return
			}
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrAuditBroken) {
				end(err) // no retry mends these
				return
			}
			// The store failed (a database failing over, a connection
			// cut): read again after PollInterval, from the same place,
			// losing nothing. Said once per run of failures.
			if !failing {
				s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "switchboard: a subscription cannot read the audit log; retrying",
					slog.Uint64("after", cursor), slog.String("error", err.Error()))
			}
			failing = true
			select {
			case <-ctx.Done():
				end(ctx.Err())
				return
			case <-s.cfg.Clock.After(s.cfg.PollInterval):
			}
			continue
		}
		failing = false
		for _, e := range evs {
			if e.Seq != cursor+1 && !(cursor == 0 && e.Seq == first) {
				end(fmt.Errorf("switchboard: subscription: %w: events %d to %d are gone; resume after %d", ErrFellBehind, cursor+1, e.Seq-1, e.Seq-1))
				return
			}
			if filter.Match(e) {
				select {
				case ch <- e:
				case <-ctx.Done():
					end(ctx.Err())
					return
				}
			}
			cursor = e.Seq
			sub.mu.Lock()
			sub.last = cursor
			sub.mu.Unlock()
		}
		if len(evs) == followPage {
			continue // more may follow at once
		}
		// The read reached the log's end: what was sequenced after it
		// wakes woken (armed before the read).
		select {
		case <-ctx.Done():
			end(ctx.Err())
			return
		case <-woken:
		case <-s.cfg.Clock.After(s.cfg.PollInterval):
		}
	}
}

// firstEvent is the seq of the oldest event in the log (0 if empty).
func (s *Switchboard) firstEvent(ctx context.Context) (uint64, error) {
	evs, err := s.Events(ctx, 0, 1)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	return evs[0].Seq, nil
}

// QueueAddress names persona's queue in events (Event.Queue), for filters.
func QueueAddress(persona, queue string) string { return persona + "/" + queue }

// ApprovalsAddress names human's approvals queue in events (Event.Queue):
// subscribe to todo.created there to learn of each new friend request to
// decide on.
func ApprovalsAddress(h Human) string { return "~" + h.key() + "/" + ApprovalsQueue }

// address is r's queue as events name it.
func (r *todoRec) address() string {
	if rest, ok := strings.CutPrefix(r.QueueKey, "p:"); ok {
		return rest
	}
	if r.QueueKey == webhookQueue {
		return "~system/webhooks"
	}
	return "~" + strings.TrimPrefix(r.QueueKey, "h:")
}
