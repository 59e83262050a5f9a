// The sequencer: on a store whose writers run concurrently (store.Appender)
// events commit pending, and one sequencer at a time — in whichever process
// holds its lease — moves them into the audit log after commit, in batches.

package switchboard

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
)

const (
	// pendingKey is the waker key (and store notification) that says
	// events wait for the sequencer. Queue keys start "p:" or "h:", so it
	// is no queue's.
	pendingKey = "s:pending"
	// sequencerKey is the tMeta key of the sequencer's lease: the holder's
	// id and when the lease ends.
	sequencerKey = "sequencer"
)

// sequencer is a Switchboard's part in sequencing: the log's sequencer
// (its lease, its copy of the tree's frontier) and the loop that runs it.
type sequencer struct {
	q    auditlog.Sequencer
	stop context.CancelFunc
	done chan struct{}
}

// startSequencer runs the sequencing loop until Close.
func (s *Switchboard) startSequencer() {
	ctx, cancel := context.WithCancel(context.Background())
	s.seq = &sequencer{stop: cancel, done: make(chan struct{}), q: auditlog.Sequencer{
		ID: newID("seq"), Lease: s.cfg.SequencerLease, Layout: &logLayout, LeaseKey: sequencerKey,
		Update: func(ctx context.Context, fn func(auditlog.PassTx) error) error {
			// Alone: not grouped with other writes of this process, so
			// the sequencing commit does not wait for a whole batch of
			// them.
			return s.updateLocked(store.Alone(ctx), func(t *txn) error { return fn(t) })
		},
		View: func(ctx context.Context, fn func(auditlog.PassTx) error) error {
			return s.view(ctx, func(t *txn) error { return fn(t) })
		},
		Now: s.now, Mark: &s.seen, Retention: s.cfg.EventRetention,
		Wake: func() <-chan struct{} { return s.commits.wait(pendingKey) },
		// A pass's commit may have run: subscriptions waiting at what
		// this process holds of the log's end look in the store.
		Unsure: func() {
			s.recent.reset()
			s.commits.signal(commitsKey)
		},
	}}
	go s.sequenceLoop(ctx)
}

// Log, Now and Add make a txn the transaction of a sequencing pass
// (auditlog.PassTx): Add decodes the pending rows' events and adds them
// to the log; once the pass commits they go to the Switchboard's
// recentLog, before subscriptions are woken.
func (t *txn) Log() *auditlog.Tx { return &t.lg }

// Now is the transaction's time.
func (t *txn) Now() time.Time { return t.now }

// Add adds the events of pending rows to the log (auditlog.PassTx).
func (t *txn) Add(rows [][]byte, soleUntil time.Time) error {
	var evs []Event
	for _, r := range rows {
		some, err := parsePending(r)
		if err != nil {
			return fmt.Errorf("pending audit events: %w", err)
		}
		evs = append(evs, some...)
	}
	if err := t.integrate(evs); err != nil {
		return err
	}
	t.logged, t.sequenced, t.soleUntil = len(evs), evs, soleUntil
	return nil
}

// sequenceLoop sequences whenever events are committed pending — in this
// process (a local wake) or another (a store notification) — and at least
// every PollInterval or SequencerLease, whichever is shorter, so a lease
// left by a process that died is taken over soon after it runs out.
func (s *Switchboard) sequenceLoop(ctx context.Context) {
	defer close(s.seq.done)
	for {
		woken := s.commits.wait(pendingKey) // before looking: no commit is missed
		n, other, err := s.seq.q.Sequence(ctx)
		err = wrapErr("sequence audit events", err)
		switch {
		case ctx.Err() != nil || isClosed(err):
			return
		case err != nil:
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "switchboard: sequencing the audit log failed; retrying",
				slog.String("error", err.Error()), slog.Duration("retry_in", s.cfg.PollInterval))
		case n > 0:
			select {
			case <-woken:
				continue // more were committed meanwhile
			default:
				// Sequence moved what was pending when its last pass
				// looked (it goes on while a pass finds a full batch):
				// wait for more.
			}
		}
		wait := min(s.cfg.PollInterval, s.cfg.SequencerLease)
		if other > 0 {
			// Another process sequences: sleep until its lease may have
			// run out, not at every commit (the holder is woken too).
			select {
			case <-ctx.Done():
				return
			case <-s.cfg.Clock.After(other):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-woken:
		case <-s.cfg.Clock.After(wait):
		}
	}
}

// Close stops what New started for this Switchboard — its part in
// sequencing the audit log and its subscription to the store's
// notifications — and waits for it. It does not close the store, which the
// caller owns. Calls made after Close still work, but blocked claims and
// subscriptions no longer hear of other processes' commits before their
// next poll. Close is idempotent. Stop Run, Work loops and subscriptions
// first (cancel their contexts and wait for them to return), then Close,
// then close the store.
func (s *Switchboard) Close() error {
	s.closeOnce.Do(func() {
		if s.seq != nil {
			s.seq.stop()
			<-s.seq.done
		}
		if s.unwatch != nil {
			s.unwatch()
		}
	})
	return nil
}
