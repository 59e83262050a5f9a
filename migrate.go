// The stored layout's version, and the upgrade of older layouts in place.

package switchboard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/switchboardhq/switchboard/store"
)

// schemaVersion is the layout this code writes. 1 (no version key): one
// table per todo index and a meta seq counter. 2: every todo index in
// todo_index, delayed todos in their own index, ended todos indexed for
// purging. 3: the todos a friend grant claimed but did not create indexed
// under it (idxClaimed), so List through it reads its own todos only.
const schemaVersion = 3

const schemaKey = "schema"

// The version 1 tables, removed by the upgrade.
const (
	v1Ready   = "todo_ready"
	v1Leases  = "todo_leases"
	v1ByGrant = "todo_grant"
	v1ByQueue = "todo_queue"
)

// ErrNewerSchema is returned by New for a store written by a newer
// switchboard, whose layout this version cannot read.
var ErrNewerSchema = errors.New("switchboard: store was written by a newer version")

// migrate brings st to schemaVersion in one transaction: a store without a
// version is either new (nothing to do) or of version 1, whose todo indexes
// are rebuilt in the new layout from the todo records themselves.
func migrate(ctx context.Context, st store.Store, now func() time.Time) error {
	current := false
	if err := st.View(ctx, func(tx store.Tx) error {
		b, err := tx.Get(tMeta, []byte(schemaKey))
		current = err == nil && len(b) == 8 && binary.BigEndian.Uint64(b) == schemaVersion
		return nil
	}); err != nil {
		return err
	}
	if current {
		return nil // the usual open: no write transaction, no fsync
	}
	return st.Update(ctx, func(tx store.Tx) error {
		b, err := tx.Get(tMeta, []byte(schemaKey))
		switch {
		case err == nil:
			if len(b) != 8 {
				return fmt.Errorf("switchboard: schema version is %d bytes", len(b))
			}
			if v := binary.BigEndian.Uint64(b); v > schemaVersion {
				return fmt.Errorf("%w: layout %d, this version reads up to %d", ErrNewerSchema, v, schemaVersion)
			} else if v == schemaVersion {
				return nil
			}
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		t := &txn{tx: tx, now: now().UTC()}
		var ids []string
		if err := tx.Scan(tTodos, nil, nil, func(k, _ []byte) bool {
			ids = append(ids, string(k))
			return true
		}); err != nil {
			return err
		}
		for _, id := range ids {
			r, err := t.todo(id)
			if err != nil {
				return err
			}
			if err := t.reindex(r); err != nil {
				return err
			}
			if err := t.reindexClaims(r); err != nil {
				return err
			}
		}
		// The by-grant index is copied, not derived: approval todos
		// carry a grant in their origin but were never listed under it.
		var grantKeys [][2]string
		if err := tx.Scan(v1ByGrant, nil, nil, func(k, v []byte) bool {
			grantKeys = append(grantKeys, [2]string{string(k), string(v)})
			return true
		}); err != nil {
			return err
		}
		for _, kv := range grantKeys {
			if err := tx.Put(tIdx, []byte(string(idxGrant)+kv[0]), []byte(kv[1])); err != nil {
				return err
			}
		}
		for _, table := range []string{v1Ready, v1Leases, v1ByGrant, v1ByQueue} {
			if err := deleteAll(tx, table); err != nil {
				return err
			}
		}
		if err := tx.Delete(tMeta, []byte("seq")); err != nil {
			return err
		}
		return tx.Put(tMeta, []byte(schemaKey), binary.BigEndian.AppendUint64(nil, schemaVersion))
	})
}

// reindex writes r's entries in the todo index: by queue, and the ready,
// delayed, lease or ended entry its state calls for.
func (t *txn) reindex(r *todoRec) error {
	if err := t.tx.Put(tIdx, []byte(idxKey(idxQueue, r.QueueKey, be64(r.Seq))), []byte(r.ID)); err != nil {
		return err
	}
	switch {
	case r.State == TodoQueued:
		return t.enqueue(r)
	case r.State == TodoLeased:
		return t.tx.Put(tIdx, []byte(leaseKey(r)), nil)
	case r.State.Terminal():
		return t.tx.Put(tIdx, []byte(endedKey(r)), nil)
	}
	return nil
}

// reindexClaims writes r's idxClaimed entries: one for each friend grant
// in its history other than its creator. A grant that no longer exists
// needs none (it cannot list anything).
func (t *txn) reindexClaims(r *todoRec) error {
	for _, id := range claimedBy(r) {
		var g grantRec
		err := t.get(tGrants, id, &g, "grant")
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if g.EdgeID != "" {
			if err := t.tx.Put(tIdx, []byte(idxKey(idxClaimed, id, be64(r.Seq))), []byte(r.ID)); err != nil {
				return err
			}
		}
	}
	return nil
}

func deleteAll(tx store.Tx, table string) error {
	var keys [][]byte
	if err := tx.Scan(table, nil, nil, func(k, _ []byte) bool {
		keys = append(keys, k)
		return true
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := tx.Delete(table, k); err != nil {
			return err
		}
	}
	return nil
}
