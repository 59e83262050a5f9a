// Retention: deleting ended todos and old audit events, so the store's size
// follows live work, not history.

package switchboard

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/switchboardhq/switchboard/store"
)

// auditBaseKey is the tMeta key of the last purged event: its seq (8 bytes)
// and the SHA-256 of its stored record (32), which the first kept event's
// Prev must name.
const auditBaseKey = "audit_base"

// purgeTodos deletes up to limit ended todos whose retention has passed,
// oldest first, with every index entry and the dedup key that name them.
func (s *Switchboard) purgeTodos(t *txn, limit int) (int, error) {
	if s.cfg.TodoRetention < 0 {
		return 0, nil
	}
	keep := max(s.cfg.TodoRetention, s.cfg.DedupRetention)
	prefix := string(idxEnded)
	end := prefix + timeKey(t.now.Add(-keep))
	var ids []string
	err := t.tx.Scan(tIdx, []byte(prefix), []byte(end), func(k, _ []byte) bool {
		ids = append(ids, string(k[len(prefix)+8:]))
		return len(ids) < limit
	})
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		r, err := t.todo(id)
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
	return len(ids), nil
}

// purgeEvents archives and deletes up to limit of the oldest audit events
// past their retention. The events are read first, handed to
// Config.Archive outside any transaction, then deleted — those still
// present and unchanged — with the chain's new base recorded in the same
// transaction.
func (s *Switchboard) purgeEvents(ctx context.Context, limit int) (int, error) {
	if s.cfg.EventRetention < 0 {
		return 0, nil
	}
	var evs []Event
	var raws [][]byte
	err := s.view(ctx, func(t *txn) error {
		evs, raws = nil, nil
		cutoff := t.now.Add(-s.cfg.EventRetention)
		headSeq, _, err := t.auditHead()
		if err != nil {
			return err
		}
		var derr error
		err = t.tx.Scan(tEvents, nil, nil, func(_, v []byte) bool {
			var e Event
			if derr = json.Unmarshal(v, &e); derr != nil {
				return false
			}
			// The head event stays, so the chain always has a kept event
			// to check the base against.
			if !e.At.Before(cutoff) || e.Seq >= headSeq {
				return false
			}
			evs, raws = append(evs, e), append(raws, v)
			return len(evs) < limit
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
	err = s.update(ctx, func(t *txn) error {
		purged = 0
		var lastSeq uint64
		var lastHash [sha256.Size]byte
		for i, e := range evs {
			cur, err := t.tx.Get(tEvents, []byte(be64(e.Seq)))
			if errors.Is(err, store.ErrNotFound) {
				continue // purged by another Reap meanwhile
			}
			if err != nil {
				return err
			}
			if string(cur) != string(raws[i]) {
				return fmt.Errorf("audit event %d changed while it was archived", e.Seq)
			}
			if err := t.tx.Delete(tEvents, []byte(be64(e.Seq))); err != nil {
				return err
			}
			lastSeq, lastHash = e.Seq, sha256.Sum256(cur)
			purged++
		}
		if purged == 0 {
			return nil
		}
		return t.tx.Put(tMeta, []byte(auditBaseKey), append(binary.BigEndian.AppendUint64(nil, lastSeq), lastHash[:]...))
	})
	return purged, err
}

// auditBase returns the seq and record hash of the last purged event, or
// zeros when nothing was purged.
func (t *txn) auditBase() (uint64, []byte, error) {
	b, err := t.tx.Get(tMeta, []byte(auditBaseKey))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, nil, nil
	case err != nil:
		return 0, nil, err
	case len(b) != 8+sha256.Size:
		return 0, nil, fmt.Errorf("switchboard: audit base is %d bytes, want %d", len(b), 8+sha256.Size)
	}
	return binary.BigEndian.Uint64(b), b[8:], nil
}
