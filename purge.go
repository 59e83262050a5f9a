// Retention: deleting ended todos and old audit events, so the store's size
// follows live work, not history.

package switchboard

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/switchboardhq/switchboard/store"
)

// endedDue returns up to limit ids of ended todos whose retention has
// passed, oldest first (stale entries of todos redriven since included).
func (s *Switchboard) endedDue(t *txn, limit int) (ids, keys []string, err error) {
	keep := max(s.cfg.TodoRetention, s.cfg.DedupRetention)
	prefix := string(idxEnded)
	end := prefix + timeKey(t.now.Add(-keep))
	err = t.tx.Scan(tIdx, []byte(prefix), []byte(end), func(k, _ []byte) bool {
		ids, keys = append(ids, string(k[len(prefix)+8:])), append(keys, string(k))
		return len(ids) < limit
	})
	return ids, keys, err
}

// archiveTodos hands up to limit ended todos past their retention to
// Config.ArchiveTodos, outside any transaction, then purges those still
// stored exactly as they were handed over. A todo redriven or changed
// meanwhile is kept.
func (s *Switchboard) archiveTodos(ctx context.Context, limit int) (int, error) {
	var todos []Todo
	only := map[string][]byte{}
	err := s.view(ctx, func(t *txn) error {
		todos, only = nil, map[string][]byte{}
		ids, _, err := s.endedDue(t, limit)
		if err != nil {
			return err
		}
		for _, id := range ids {
			b, err := t.tx.Get(tTodos, []byte(id))
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			r, err := t.todo(id)
			if t.setAside(err, id) {
				continue
			}
			if err != nil {
				return err
			}
			if r.State.Terminal() {
				todos, only[id] = append(todos, r.Todo), b
			}
		}
		return nil
	})
	if err != nil || len(todos) == 0 {
		return 0, err
	}
	if err := s.cfg.ArchiveTodos(ctx, todos); err != nil {
		return 0, fmt.Errorf("archive todos: %w (nothing purged)", err)
	}
	n := 0
	err = s.update(ctx, func(t *txn) error {
		var err error
		n, err = s.purgeTodos(t, limit, only)
		return err
	})
	return n, err
}

// purgeTodos deletes up to limit ended todos whose retention has passed,
// oldest first, with every index entry and the dedup key that name them.
// If only is not nil, it deletes only todos in it whose stored record is
// still the bytes it holds (those archived).
func (s *Switchboard) purgeTodos(t *txn, limit int, only map[string][]byte) (int, error) {
	if s.cfg.TodoRetention < 0 {
		return 0, nil
	}
	ids, keys, err := s.endedDue(t, limit)
	if err != nil {
		return 0, err
	}
	n := len(ids)
	for i, id := range ids {
		r, err := t.todo(id)
		if aside, err := t.setAsideEntry(err, id, keys[i], ""); aside || err != nil {
			if err != nil {
				return 0, err
			}
			n-- // not work done: its entry is out of the way now
			continue
		}
		if only != nil {
			want, ok := only[id]
			if !ok {
				continue
			}
			if cur, err := t.tx.Get(tTodos, []byte(id)); err != nil || string(cur) != string(want) {
				continue
			}
		}
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if err := t.del(tIdx, endedKey(r)); err != nil {
			return 0, err
		}
		if !r.State.Terminal() {
			continue // redriven since: a stale entry
		}
		if err := t.del(tIdx, idxKey(idxQueue, r.QueueKey, be64(r.Seq))); err != nil {
			return 0, err
		}
		for _, g := range claimedBy(r) {
			if err := t.del(tIdx, idxKey(idxClaimed, g, be64(r.Seq))); err != nil {
				return 0, err
			}
		}
		if r.Origin.Grant != "" {
			if err := t.del(tIdx, idxKey(idxGrant, r.Origin.Grant, be64(r.Seq))); err != nil {
				return 0, err
			}
			if r.DedupKey != "" {
				dk := r.Origin.Grant + sep + r.DedupKey
				if cur, err := t.lookup(tDedup, dk); err != nil {
					return 0, err
				} else if cur == r.ID {
					if err := t.del(tDedup, dk); err != nil {
						return 0, err
					}
				}
			}
		}
		if err := t.del(tTodos, r.ID); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// purgeEvents archives and deletes up to limit of the oldest audit events
// past their retention — always the log's oldest, so what is kept is a
// contiguous run up to its end. The events are read first, handed to
// Config.Archive outside any transaction, then deleted — those still
// present and unchanged — with the tree hashes stored in their records.
// Of those hashes, proofs about kept events and between tree sizes of at
// least the new purge point read only the few that cover the purged leaves
// together (frontierIndexes: one per set bit of their count); those move to
// tLogHashes in the same transaction. So the tree's storage follows the
// kept events, not the history; proofs that need purged leaves are
// recomputed from the archived events (Config.Archive).
func (s *Switchboard) purgeEvents(ctx context.Context, limit int) (int, error) {
	if s.cfg.EventRetention < 0 {
		return 0, nil
	}
	// Never past a checkpoint later checks need (purgeCap): the kept
	// one's size is read first.
	var kept *uint64
	if cp, err := s.keptCheckpoint(ctx); err != nil {
		return 0, err
	} else if cp != nil {
		kept = &cp.Size
	}
	var evs []Event
	var raws [][]byte
	err := s.view(ctx, func(t *txn) error {
		evs, raws = nil, nil
		cutoff := t.now.Add(-s.cfg.EventRetention)
		st, err := t.lg.State()
		if err != nil {
			return err
		}
		upto, err := s.purgeCap(t, st, kept)
		if err != nil || upto <= st.Purged {
			return err
		}
		from, end := st.Seq(st.Purged), st.Seq(upto)
		var derr error
		err = t.lg.Entries(from, limit, func(seq uint64, leaf, hashes []byte) bool {
			if seq >= end {
				return false
			}
			var e Event
			if e, derr = storedEvent(seq, leaf); derr != nil {
				return false
			}
			if !e.At.Before(cutoff) {
				return false
			}
			evs, raws = append(evs, e), append(raws, append(bytes.Clone(leaf), hashes...))
			return true
		})
		if err == nil {
			err = derr
		}
		return err
	})
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	if s.cfg.Archive != nil {
		if err := s.cfg.Archive(ctx, evs); err != nil {
			return 0, fmt.Errorf("archive: %w (nothing purged)", err)
		}
	}
	purged := 0
	// Row-locked where the store can: the log's state is locked first,
	// so a sequencing pass (which locks it too) waits for the purge, or
	// the purge for it, instead of one failing the other's commit. Every
	// row the purge changes is one no pass touches while it holds that
	// lock (the oldest events, the tree hashes over them).
	err = s.updateLocked(ctx, func(t *txn) error {
		purged = 0
		st, err := t.lg.LockState()
		if err != nil {
			return err
		}
		upto, err := s.purgeCap(t, st, kept)
		if err != nil {
			return err
		}
		oldP, newP := st.Purged, st.Purged
		evs, raws := evs, raws // this attempt's (an attempt may run again)
		for len(evs) > 0 && evs[0].Seq <= st.Offset+newP {
			evs, raws = evs[1:], raws[1:] // purged by another Reap meanwhile
		}
		if len(evs) > 0 && evs[0].Seq <= st.Offset+upto {
			if evs[0].Seq != st.Offset+newP+1 {
				return fmt.Errorf("audit event %d is not the log's oldest kept (%d)", evs[0].Seq, st.Offset+newP+1)
			}
			var cerr error
			err := t.lg.Entries(evs[0].Seq, len(evs), func(seq uint64, leaf, hashes []byte) bool {
				i := int(seq - evs[0].Seq)
				switch {
				case seq > st.Offset+upto:
					return false
				case i >= len(evs) || evs[i].Seq != seq:
					cerr = fmt.Errorf("audit event %d is not the log's oldest kept (%d)", seq, st.Offset+newP+1)
				case string(leaf)+string(hashes) != string(raws[i]):
					cerr = fmt.Errorf("audit event %d changed while it was archived", seq)
				default:
					newP++
					return true
				}
				return false
			})
			if err = cmp.Or(err, cerr); err != nil {
				return err
			}
		}
		if newP == oldP {
			return nil
		}
		// The tree hashes proofs will still need over the purged leaves
		// (their frontier) move out of the event records (Purge).
		if err := t.lg.Purge(newP); err != nil {
			return err
		}
		purged = int(newP - oldP)
		return nil
	})
	return purged, err
}
