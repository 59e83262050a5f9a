// The sequencer: on a store whose writers run concurrently (store.Appender)
// events commit pending, and one sequencer at a time — in whichever process
// holds its lease — moves them into the audit log after commit, in batches.

package switchboard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"golang.org/x/mod/sumdb/tlog"
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
	// sequenceBatch is how many events one sequencing transaction moves
	// at least when there are that many (it takes whole pending rows).
	sequenceBatch = 256
	// sequenceRows bounds the pending rows one sequencing transaction
	// reads (a row holds the events of one commit, often several).
	sequenceRows = 128
)

// sequencer is a Switchboard's part in sequencing: its holder id and its
// loop.
type sequencer struct {
	id   string
	stop context.CancelFunc
	done chan struct{}
	// held is when the lease this Switchboard last wrote ends, and tree
	// its copy of the tree's frontier: touched by one pass at a time (the
	// loop's, or a chained pass's once the pass before it ended).
	held time.Time
	tree auditlog.Cache
	// unchained: a chained pass found the log as it was before the pass
	// it followed committed — the store's locked reads do not wait for
	// commits (postgres.Options.SerializableClaims) — so passes no longer
	// begin early. Touched as held is.
	unchained bool
}

// surelyHeld is until when a lease that ends at held surely makes this
// process the only sequencer: other processes' clocks may run ahead of
// this one's, so it counts on half the lease.
func (s *Switchboard) surelyHeld(held time.Time) time.Time {
	return held.Add(-s.cfg.SequencerLease / 2)
}

// startSequencer runs the sequencing loop until Close.
func (s *Switchboard) startSequencer() {
	ctx, cancel := context.WithCancel(context.Background())
	s.seq = &sequencer{id: newID("seq"), stop: cancel, done: make(chan struct{})}
	go s.sequenceLoop(ctx)
}

// sequenceLoop sequences whenever events are committed pending — in this
// process (a local wake) or another (a store notification) — and at least
// every PollInterval or SequencerLease, whichever is shorter, so a lease
// left by a process that died is taken over soon after it runs out.
func (s *Switchboard) sequenceLoop(ctx context.Context) {
	defer close(s.seq.done)
	for {
		woken := s.commits.wait(pendingKey) // before looking: no commit is missed
		n, other, err := s.sequence(ctx)
		switch {
		case ctx.Err() != nil || isClosed(err):
			return
		case err != nil:
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "switchboard: sequencing the audit log failed; retrying",
				slog.String("error", err.Error()), slog.Duration("retry_in", s.cfg.PollInterval))
		case n > 0:
			continue // more may be waiting
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

// sequence moves pending events into the log, up to sequenceBatch a pass,
// in the order of their keys, if this Switchboard holds the sequencer's
// lease or can take it (it is free or ran out); taking or keeping it is
// part of each pass's transaction, so two processes never sequence at
// once. It returns how many events it moved, or, when another process
// holds the lease, how long that lease still runs.
//
// On a store with row locks (store.LockingStore, as PostgreSQL) a pass
// runs in a row-locked transaction that first locks the lease record and
// the log's state (in the pending rows' round trip where the store is a
// store.AheadLocker): a second would-be sequencer waits on those locks and
// then sees the lease taken. A serializable pass would also be correct,
// but it reads the pending range every writer appends to, and
// PostgreSQL's serializable checks then cancelled about one pass in
// twenty-five under load (each retried whole, a stall in delivery). Rows
// appended meanwhile are simply left for the next pass: the pass deletes
// the rows it read, by key.
//
// There, passes follow each other while they find events, each begun
// while the one before commits (see seqPass): its locks wait on the
// server for that commit, so its pending rows come back in the commit's
// round trip instead of one after it.
func (s *Switchboard) sequence(ctx context.Context) (moved int, other time.Duration, err error) {
	// Look first in a read-only snapshot: a process that does not hold
	// the lease then writes nothing and reads nothing in a write
	// transaction — on a serializable store its reading the lease there
	// would make the holder's commits conflict with its own writes.
	// A holder well inside its lease skips the look (the transaction
	// checks the lease again anyway).
	if !s.now().Before(s.surelyHeld(s.seq.held)) {
		err = s.view(ctx, func(t *txn) error {
			holder, until, err := t.sequencerLease()
			if holder != s.seq.id && t.now.Before(until) {
				other = until.Sub(t.now) + time.Millisecond
			}
			return err
		})
		if err != nil || other > 0 {
			return 0, other, wrapErr("sequence audit events", err)
		}
	}
	p := &seqPass{ended: make(chan struct{}), abandoned: make(chan struct{})}
	s.runPass(ctx, p)
	if p.err == nil && p.created {
		return s.sequence(ctx)
	}
	for ; p != nil; p = p.next {
		<-p.ended
		moved += p.n
		if err == nil && !errors.Is(p.err, errPassAbandoned) {
			err = p.err
		}
	}
	return moved, 0, wrapErr("sequence audit events", err)
}

// seqPass is one sequencing transaction. On a row-locking store a pass
// that moved events begins the next (next) just before its commit: the
// next one's lock requests and pending read wait on the server for that
// commit and are answered right after it. The next pass builds on the tree
// only once this one has ended (ended); if this one fails, or runs its
// transaction again (the next one may hold the locks it needs by then:
// abandoned), the next gives up with errPassAbandoned and the chain ends.
type seqPass struct {
	prev      *seqPass // the pass still committing when this one began
	next      *seqPass // the pass this one began; set before ended closes
	ended     chan struct{}
	abandoned chan struct{} // closed when prev runs its transaction again
	n         int           // events moved
	size      uint64        // the tree's size after the pass, once it committed
	created   bool          // the lease record was missing and is written now
	err       error
}

// errPassAbandoned ends a pass begun early whose predecessor did not
// commit (see seqPass): nothing is lost, the next pass reads the rows.
var errPassAbandoned = errors.New("the sequencing pass before did not commit")

// runPass runs pass p to its end.
func (s *Switchboard) runPass(ctx context.Context, p *seqPass) {
	defer close(p.ended)
	var held time.Time
	var size uint64    // the tree's size after the pass
	var root tlog.Hash // and its root
	var forked bool    // the pass built on a log that lost what this process saw
	runs := 0
	// Alone: not grouped with other writes of this process, so the
	// sequencing commit does not wait for a whole batch of them.
	p.err = s.updateLocked(store.Alone(ctx), func(t *txn) error {
		p.n, held, p.created = 0, time.Time{}, false
		if runs++; runs == 2 && p.next != nil {
			// Run again: the pass begun early may hold the locks this
			// run needs.
			close(p.next.abandoned)
		}
		if t.locker != nil {
			// Lock the lease's record and the log's state (the pass
			// writes both back; see lockLogState) before the pending
			// rows are read: a second would-be sequencer waits on these
			// locks, so no two passes' reads overlap. With LockAhead the
			// locks travel with that read, in one round trip; a process
			// that then finds the lease another's has locked the rows
			// it read for nothing, until its transaction ends at once.
			if al, ok := t.locker.(store.AheadLocker); ok {
				err := al.LockAhead(tMeta, [][]byte{[]byte(sequencerKey), []byte(logStateKey)})
				if err != nil {
					return err
				}
			} else if _, _, err := t.sequencerLease(); err != nil {
				return err
			}
		}
		var keys [][]byte
		var evs []Event
		var bad error
		// One statement, so one snapshot: were the rows read in pages
		// (each its own snapshot in a row-locked transaction), a later
		// page could hold an event whose cause, with a smaller key,
		// committed too late for an earlier page.
		err := t.scanLocked(tPending, nil, nil, sequenceRows, func(k, v []byte) bool {
			some, err := parsePending(v)
			if err != nil {
				bad = fmt.Errorf("pending audit events %x: %w", k, err)
				return false
			}
			keys, evs = append(keys, k), append(evs, some...)
			return len(evs) < sequenceBatch
		})
		if err != nil {
			return err
		}
		holder, until, err := t.sequencerLease()
		if err != nil {
			return err
		}
		if t.locker != nil && until.IsZero() {
			// No lease record, so no lease locked: two processes could
			// both go on. Write a free one; the next pass locks it.
			p.created = true
			return t.tx.Put(tMeta, []byte(sequencerKey), encodeLease("", time.Unix(0, 0)))
		}
		if holder != s.seq.id && t.now.Before(until) {
			return nil // another process sequences
		}
		if bad != nil {
			return bad
		}
		if len(evs) == 0 {
			return nil
		}
		if p.prev != nil {
			// Begun while the pass before committed: build on the tree
			// only once that one has.
			select {
			case <-p.prev.ended:
				if p.prev.err != nil {
					return errPassAbandoned
				}
			case <-p.abandoned:
				return errPassAbandoned
			case <-ctx.Done():
				return ctx.Err()
			}
			st, err := t.lg.LockState()
			if err != nil {
				return err
			}
			if p.prev.n > 0 && st.Size != p.prev.size {
				// Read before the pass before committed: this store's
				// locks do not wait for commits. Begin no pass early
				// again.
				s.seq.unchained = true
				return errPassAbandoned
			}
		}
		// The pass writes the log's state back: locked, so that a purge
		// committing meanwhile is not undone (Reap moves the log's start
		// in a transaction of its own).
		st, err := t.lg.LockState()
		if err != nil {
			return err
		}
		start := st.Size
		held = t.now.Add(s.cfg.SequencerLease)
		if err := t.tx.Put(tMeta, []byte(sequencerKey), encodeLease(s.seq.id, held)); err != nil {
			return err
		}
		for _, k := range keys {
			if err := t.tx.Delete(tPending, k); err != nil {
				return err
			}
		}
		t.lg.Use(&s.seq.tree)
		if err := t.integrate(evs); err != nil {
			return err
		}
		t.logged, p.n, size = len(evs), len(evs), st.Size
		hs, err := t.lg.ReadHashes(auditlog.FrontierIndexes(size))
		if err != nil {
			return err
		}
		root = foldFrontier(hs)
		forked = false
		if seen := s.seen.Get(s.now(), s.cfg.EventRetention); seen != nil && start != seen.Size {
			// Another process sequenced since, or the log is not the
			// one this process built on (a failover lost its end): the
			// new tree must still hold what this process saw. If not,
			// sequencing goes on, and the mark stays where it was, for
			// the next signature to refuse.
			holds, err := holdsTree(t, st, *seen, root)
			if err != nil {
				return err // a read failed: the pass runs again
			}
			forked = !holds
		}
		t.sequenced, t.soleUntil = evs, s.surelyHeld(held)
		if t.locker != nil && runs == 1 && !s.seq.unchained {
			// The commit follows: begin the next pass now.
			p.next = &seqPass{prev: p, ended: make(chan struct{}), abandoned: make(chan struct{})}
			go s.runPass(ctx, p.next)
		}
		return nil
	})
	p.prev = nil // read above only: the chain is not kept alive behind the running pass
	if p.err == nil && p.n > 0 {
		s.seq.held = held
		s.seq.tree.Committed(size)
		p.size = size
		if forked {
			s.seen.Fork()
		} else {
			s.seen.Note(size, root, s.now())
		}
	}
	if p.err != nil && !errors.Is(p.err, errPassAbandoned) {
		// The commit may have run: what this process holds of the log's
		// end is no longer known to be its end. Subscriptions waiting at
		// it look in the store.
		s.recent.reset()
		s.commits.signal(commitsKey)
	}
}

// sequencerLease returns the lease's holder and end (zero if never taken).
func (t *txn) sequencerLease() (string, time.Time, error) {
	var b []byte
	var err error
	if t.locker != nil {
		b, err = t.locker.GetLocked(tMeta, []byte(sequencerKey))
	} else {
		b, err = t.tx.Get(tMeta, []byte(sequencerKey))
	}
	if errors.Is(err, store.ErrNotFound) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, err
	}
	if len(b) < 8 {
		return "", time.Time{}, errors.New("sequencer lease record too short")
	}
	return string(b[8:]), time.Unix(0, int64(binary.BigEndian.Uint64(b))), nil
}

// encodeLease is the lease record: its end in Unix nanoseconds (8 bytes),
// then the holder's id.
func encodeLease(holder string, until time.Time) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(until.UnixNano())), holder...)
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
