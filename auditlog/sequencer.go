// The sequencer: on a store whose writers run concurrently
// (store.Appender) entries commit pending, and one sequencer at a time —
// in whichever process holds its lease — moves them into the tree after
// commit, in batches.

package auditlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/store"
)

const (
	// sequenceBatch is how many entries one pass moves at least when
	// there are that many (it takes whole pending rows).
	sequenceBatch = 256
	// sequenceRows bounds the pending rows one pass reads (a row holds
	// the entries of one commit, often several).
	sequenceRows = 128
)

// Sequencer moves the entries committed pending (Tx.AddPending) into the
// tree, in the order of their rows' keys, in passes of a few hundred, if
// it holds the sequencer's lease or can take it (it is free or ran out);
// taking or keeping it is part of each pass's transaction, so two
// processes never sequence at once. It keeps a Cache of the tree's
// frontier, so a pass reads none of it from the store. When to run a pass
// (Sequence) is its user's business: after a commit left entries pending,
// and now and then, so a lease left by a process that died is taken over
// soon after it runs out.
//
// The user's transactions are given by Update and View; each pass is one
// Update, in which PassTx.Add appends the rows' entries (Tx.Append, as the
// user writes them) — an entry is stored pending in the form its user
// chose, and may need its seq to become what is appended.
type Sequencer struct {
	// ID names this sequencer in the lease record: one per process.
	ID string
	// Lease is how long each pass holds the lease: the longest the log
	// stalls after the process holding it dies.
	Lease time.Duration
	// Layout is where the log is kept; Layout.Meta holds the lease under
	// LeaseKey.
	Layout   *Layout
	LeaseKey string
	// Update runs fn in a write transaction on a store.LockingStore's
	// row locks where the store has them (see Sequence), not grouped with
	// other writes (store.Alone); fn may run more than once. View runs fn
	// in a read-only one.
	Update func(ctx context.Context, fn func(PassTx) error) error
	View   func(ctx context.Context, fn func(PassTx) error) error
	// Now is the clock the lease is read with.
	Now func() time.Time
	// Mark, if not nil, is what this process saw of the log: a pass
	// notes the tree it built, or, if the tree it built on no longer
	// holds what the mark saw (another process sequenced a different
	// history, a failover lost the log's end), forks the mark and goes
	// on, for the next signature to refuse. Retention is Mark.Get's.
	Mark      *Mark
	Retention time.Duration
	// Unsure, if set, is called when a pass failed after its commit may
	// have been sent: what the process holds of the log's end is no
	// longer known to be its end.
	Unsure func()
	// Wake, if set, returns a channel closed once entries are next
	// committed pending — in this process, or in another as the store
	// tells it. A pass then begins the next one early (see Sequence) only
	// if it read a full batch or entries were committed since it took
	// the channel, before its read: an early pass that finds nothing
	// costs two round trips. Nil means always.
	Wake func() <-chan struct{}

	// held is when the lease this sequencer last wrote ends, and cache
	// its copy of the tree's frontier: touched by one pass at a time (the
	// caller's, or a chained pass's once the pass before it ended).
	held  time.Time
	cache Cache
	// unchained: a chained pass found the log as it was before the pass
	// it followed committed — the store's locked reads do not wait for
	// commits (postgres.Options.SerializableClaims) — so passes no longer
	// begin early. Touched as held is.
	unchained bool
}

// PassTx is the user's transaction a pass runs in.
type PassTx interface {
	// Log is the log's part in the transaction (Layout.In of it, with
	// its row locks).
	Log() *Tx
	// Now is the transaction's time.
	Now() time.Time
	// Add appends the entries of the pending rows (see ParsePending), in
	// order, to the tree, with Log().Append. Until soleUntil no other
	// process can add more after them.
	Add(rows [][]byte, soleUntil time.Time) error
}

// surelyHeld is until when a lease that ends at held surely makes this
// process the only sequencer: other processes' clocks may run ahead of
// this one's, so it counts on half the lease.
func (q *Sequencer) surelyHeld(held time.Time) time.Time {
	return held.Add(-q.Lease / 2)
}

// Sequence runs passes until one leaves nothing pending that it saw — on
// a row-locking store, a chain of passes while more is committed (see
// Wake) — and returns how many entries they moved, or, when another
// process holds the lease, how long that lease still runs. Entries
// committed while it ran may still be waiting: call it again when told
// of them.
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
// There, passes follow each other while more is committed (Wake), each
// begun while the one before commits (see seqPass): its locks wait on the
// server for that commit, so its pending rows come back in the commit's
// round trip instead of one after it.
func (q *Sequencer) Sequence(ctx context.Context) (moved int, other time.Duration, err error) {
	for {
		n, other, full, err := q.chain(ctx)
		moved += n
		if err != nil || other > 0 || !full {
			return moved, other, err
		}
		// The last pass read a full batch: more is pending.
	}
}

// chain runs a pass (and the passes begun early after it) and reports
// what Sequence does, and whether the last pass read a full batch and
// got somewhere (moved entries or dropped empty rows): then more is
// pending.
func (q *Sequencer) chain(ctx context.Context) (moved int, other time.Duration, full bool, err error) {
	// Look first in a read-only snapshot: a process that does not hold
	// the lease then writes nothing and reads nothing in a write
	// transaction — on a serializable store its reading the lease there
	// would make the holder's commits conflict with its own writes.
	// A holder well inside its lease skips the look (the transaction
	// checks the lease again anyway).
	if !q.Now().Before(q.surelyHeld(q.held)) {
		err = q.View(ctx, func(t PassTx) error {
			holder, until, err := q.lease(t.Log())
			if holder != q.ID && t.Now().Before(until) {
				other = until.Sub(t.Now()) + time.Millisecond
			}
			return err
		})
		if err != nil || other > 0 {
			return 0, other, false, err
		}
	}
	p := &seqPass{ended: make(chan struct{}), abandoned: make(chan struct{})}
	q.runPass(ctx, p)
	if p.err == nil && p.created {
		return q.chain(ctx)
	}
	for ; p != nil; p = p.next {
		<-p.ended
		moved += p.n
		if err == nil && !errors.Is(p.err, errPassAbandoned) {
			err = p.err
		}
		full = p.err == nil && p.full && (p.n > 0 || p.dropped > 0)
	}
	return moved, 0, full, err
}

// seqPass is one sequencing transaction. On a row-locking store a pass
// that moved entries begins the next (next) just before its commit: the
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
	n         int           // entries moved
	dropped   int           // pending rows that held no entry, deleted
	full      bool          // it read as many pending rows or entries as a pass takes
	size      uint64        // the tree's size after the pass, once it committed
	created   bool          // the lease record was missing and is written now
	err       error
}

// errPassAbandoned ends a pass begun early whose predecessor did not
// commit (see seqPass): nothing is lost, the next pass reads the rows.
var errPassAbandoned = errors.New("the sequencing pass before did not commit")

// runPass runs pass p to its end.
func (q *Sequencer) runPass(ctx context.Context, p *seqPass) {
	defer close(p.ended)
	var held time.Time
	var size uint64    // the tree's size after the pass
	var root tlog.Hash // and its root
	var forked bool    // the pass built on a log that lost what this process saw
	runs := 0
	p.err = q.Update(ctx, func(t PassTx) error {
		x := t.Log()
		now := t.Now()
		p.n, p.dropped, p.full, held, p.created = 0, 0, false, time.Time{}, false
		var wake <-chan struct{}
		if q.Wake != nil {
			wake = q.Wake() // before the pending rows are read
		}
		if runs++; runs == 2 && p.next != nil {
			// Run again: the pass begun early may hold the locks this
			// run needs.
			close(p.next.abandoned)
		}
		if x.locker != nil {
			// Lock the lease's record and the log's state (the pass
			// writes both back; see LockState) before the pending rows
			// are read: a second would-be sequencer waits on these
			// locks, so no two passes' reads overlap. With LockAhead the
			// locks travel with that read, in one round trip; a process
			// that then finds the lease another's has locked the rows
			// it read for nothing, until its transaction ends at once.
			if al, ok := x.locker.(store.AheadLocker); ok {
				err := al.LockAhead(q.Layout.Meta, [][]byte{[]byte(q.LeaseKey), []byte(q.Layout.StateKey)})
				if err != nil {
					return err
				}
			} else if _, _, err := q.lease(x); err != nil {
				return err
			}
		}
		var keys, rows [][]byte
		entries := 0
		var bad error
		// One statement, so one snapshot: were the rows read in pages
		// (each its own snapshot in a row-locked transaction), a later
		// page could hold an entry whose cause, with a smaller key,
		// committed too late for an earlier page.
		err := x.scanLocked(q.Layout.Pending, sequenceRows, func(k, v []byte) bool {
			err := ParsePending(v, func([]byte) error { entries++; return nil })
			if err != nil {
				bad = fmt.Errorf("pending audit entries %x: %w", k, err)
				return false
			}
			keys, rows = append(keys, k), append(rows, v)
			return entries < sequenceBatch
		})
		if err != nil {
			return err
		}
		p.full = entries >= sequenceBatch || len(keys) >= sequenceRows
		holder, until, err := q.lease(x)
		if err != nil {
			return err
		}
		if x.locker != nil && until.IsZero() {
			// No lease record, so no lease locked: two processes could
			// both go on. Write a free one; the next pass locks it.
			p.created = true
			return x.tx.Put(q.Layout.Meta, []byte(q.LeaseKey), encodeLease("", time.Unix(0, 0)))
		}
		if holder != q.ID && now.Before(until) {
			return nil // another process sequences
		}
		if bad != nil {
			return bad
		}
		if entries == 0 {
			// Rows that hold no entry (AddPending refuses them; an
			// older release, or a hand, may have written some) are
			// deleted: left, they would fill every pass's read.
			for _, k := range keys {
				if err := x.tx.Delete(q.Layout.Pending, k); err != nil {
					return err
				}
			}
			p.dropped = len(keys)
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
			st, err := x.LockState()
			if err != nil {
				return err
			}
			if p.prev.n > 0 && st.Size != p.prev.size {
				// Read before the pass before committed: this store's
				// locks do not wait for commits. Begin no pass early
				// again.
				q.unchained = true
				return errPassAbandoned
			}
		}
		// The cache holds the tree as this sequencer's last pass left
		// it, and the lease record that pass wrote says so: another
		// record means another process sequenced since, or the store was
		// restored or written under this one — the log was not only
		// appended to, and the copy may be of a tree the store no longer
		// holds. It is dropped, and the tree read from the store.
		trusted := holder == q.ID && until.Equal(q.held)
		if !trusted {
			q.cache = Cache{}
		}
		// The pass writes the log's state back: locked, so that a purge
		// committing meanwhile is not undone (retention moves the log's
		// start in a transaction of its own).
		st, err := x.LockState()
		if err != nil {
			return err
		}
		start := st.Size
		held = now.Add(q.Lease)
		if err := x.tx.Put(q.Layout.Meta, []byte(q.LeaseKey), encodeLease(q.ID, held)); err != nil {
			return err
		}
		for _, k := range keys {
			if err := x.tx.Delete(q.Layout.Pending, k); err != nil {
				return err
			}
		}
		x.Use(&q.cache)
		if err := t.Add(rows, q.surelyHeld(held)); err != nil {
			return err
		}
		if st.Size != start+uint64(entries) {
			return fmt.Errorf("the pass added %d entries of the %d pending", st.Size-start, entries)
		}
		p.n, size = entries, st.Size
		hs, err := x.ReadHashes(FrontierIndexes(size))
		if err != nil {
			return err
		}
		root = FoldFrontier(hs)
		forked = false
		if q.Mark != nil {
			if seen := q.Mark.Get(q.Now(), q.Retention); seen != nil && (start != seen.Size || !trusted) {
				// Another process sequenced since, or the log is not the
				// one this process built on (a failover lost its end, a
				// backup was restored): the new tree must still hold what
				// this process saw. If not, sequencing goes on, and the
				// mark stays where it was, for the next signature to
				// refuse.
				// A tree the store can no longer prove (purged past
				// it) is not held.
				holds := seen.Size >= st.Purged
				if holds {
					holds, err = Extends(x, size, root, *seen)
					if err != nil {
						return err // a read failed: the pass runs again
					}
				}
				forked = !holds
			}
		}
		if x.locker != nil && runs == 1 && !q.unchained && (p.full || closed(wake)) {
			// The commit follows, and more is pending: begin the next
			// pass now.
			p.next = &seqPass{prev: p, ended: make(chan struct{}), abandoned: make(chan struct{})}
			go q.runPass(ctx, p.next)
		}
		return nil
	})
	p.prev = nil // read above only: the chain is not kept alive behind the running pass
	if p.err == nil && p.n > 0 {
		q.held = held
		q.cache.Committed(size)
		p.size = size
		if q.Mark != nil {
			if forked {
				q.Mark.Fork()
			} else {
				q.Mark.Note(size, root, q.Now())
			}
		}
	}
	if p.err != nil && !errors.Is(p.err, errPassAbandoned) && q.Unsure != nil {
		q.Unsure()
	}
}

// closed reports whether ch is closed; a nil ch counts as closed.
func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// FoldFrontier returns the root of the tree whose perfect subtrees,
// largest first, have hashes hs (FrontierIndexes; RFC 6962: each combined
// with the root of all after it). No subtrees is the empty tree.
func FoldFrontier(hs []tlog.Hash) tlog.Hash {
	if len(hs) == 0 {
		return EmptyRoot
	}
	h := hs[len(hs)-1]
	for i := len(hs) - 2; i >= 0; i-- {
		h = tlog.NodeHash(hs[i], h)
	}
	return h
}

// lease returns the lease's holder and end (zero if never taken), read
// through the row locks in a row-locked transaction.
func (q *Sequencer) lease(x *Tx) (string, time.Time, error) {
	var b []byte
	var err error
	if x.locker != nil {
		b, err = x.locker.GetLocked(q.Layout.Meta, []byte(q.LeaseKey))
	} else {
		b, err = x.tx.Get(q.Layout.Meta, []byte(q.LeaseKey))
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

// scanLocked is Scan of at most limit rows, locking each row read in a
// row-locked transaction (rows other transactions hold are skipped there).
func (x *Tx) scanLocked(table string, limit int, fn func(k, v []byte) bool) error {
	if x.locker != nil {
		return x.locker.ScanLocked(table, nil, nil, limit, fn)
	}
	n := 0
	return x.tx.Scan(table, nil, nil, func(k, v []byte) bool {
		n++
		return fn(k, v) && n < limit
	})
}
