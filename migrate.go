// The stored layout's version, and the upgrade of older layouts in place.

package switchboard

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchboardhq/switchboard/store"
)

// schemaVersion is the layout this code writes. 1 (no version key): one
// table per todo index and a meta seq counter. 2: every todo index in
// todo_index, delayed todos in their own index, ended todos indexed for
// purging. 3: the todos a friend grant claimed but did not create indexed
// under it (idxClaimed), so List through it reads its own todos only. 4:
// the audit log a Merkle tree (auditlog.go) instead of a hash chain. 5:
// active grants indexed by the humans they concern (grant_human, see
// Connections). 6: todo records may be in the binary form V2 (with a trace
// context), which an older version could not read: it refuses the store.
// 7: grants and edges may be bound to a key (jkt, see Prove); an older
// version would drop the binding and accept the bare credential, so it
// refuses the store. 8: todo records may be in the form V3 (checksummed,
// laid out for updates in place), which an older version cannot read. 9:
// audit events may be stored several to a record (blocks, see
// auditlog.Layout.Entries), which an older version cannot read.
//
// A new store starts at the newest layout. An existing one is brought by
// New to autoVersion only: layouts 8 and 9 wait for UpgradeRecords, run
// once every process sharing the store runs a version that reads what they
// write — so a rolling upgrade never meets a record one of its processes
// cannot read. Until then this version writes what the store's layout
// allows (V2 records at 7, one event to a record at 7 and 8), and reads
// every form.
const schemaVersion = 9

// recordsVersion is the first layout whose todo records may be V3.
const recordsVersion = 8

// autoVersion is the layout New brings an older store to by itself.
const autoVersion = 7

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
var ErrNewerSchema = errors.New("store was written by a newer switchboard version")

// migrate brings st to schemaVersion in one transaction: a store without a
// version is either new (nothing to do) or of version 1, whose todo indexes
// are rebuilt in the new layout from the todo records themselves.
func migrate(ctx context.Context, st store.Store, now func() time.Time) (layout uint64, err error) {
	current := false
	if err := st.View(ctx, func(tx store.Tx) error {
		b, err := tx.Get(tMeta, []byte(schemaKey))
		if err == nil && len(b) == 8 {
			layout = binary.BigEndian.Uint64(b)
		}
		current = layout >= autoVersion && layout <= schemaVersion
		if _, err := tx.Get(tMeta, []byte(linkedKey)); err != nil {
			current = false
		}
		return nil
	}); err != nil {
		return 0, err
	}
	if current {
		return layout, nil // the usual open: no write transaction, no fsync
	}
	err = st.Update(ctx, func(tx store.Tx) error {
		b, err := tx.Get(tMeta, []byte(schemaKey))
		switch {
		case err == nil:
			if len(b) != 8 {
				return fmt.Errorf("schema version is %d bytes", len(b))
			}
			if v := binary.BigEndian.Uint64(b); v > schemaVersion {
				return fmt.Errorf("%w: layout %d, this version reads up to %d", ErrNewerSchema, v, schemaVersion)
			}
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		var from uint64 // the layout found: 0 for none (new, or version 1)
		if err == nil {
			from = binary.BigEndian.Uint64(b)
		}
		t := &txn{tx: tx, now: now().UTC()}
		t.lg = logLayout.In(tx, nil)
		if from >= autoVersion {
			layout = from
		} else if err := upgradeLayout(t, from, &layout); err != nil {
			return err
		}
		if _, err := tx.Get(tMeta, []byte(linkedKey)); errors.Is(err, store.ErrNotFound) {
			if err := linkReplacements(t); err != nil {
				return err
			}
			if err := tx.Put(tMeta, []byte(linkedKey), []byte{1}); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		return tx.Put(tMeta, []byte(schemaKey), binary.BigEndian.AppendUint64(nil, layout))
	})
	return layout, err
}

// upgradeLayout brings a store of layout from (0: new, or version 1) to
// autoVersion — or, for a new store, nothing in it yet, to the newest
// layout (see schemaVersion) — and sets *layout to the one it is at.
func upgradeLayout(t *txn, from uint64, layout *uint64) error {
	*layout = autoVersion
	if from == 0 && isEmpty(t.tx) {
		*layout = schemaVersion
	}
	if from < 3 {
		if err := upgradeIndexes(t); err != nil {
			return err
		}
	}
	if from < 4 {
		// Layout 4 on holds a tree already: its leaves are no
		// chain records.
		if err := upgradeLog(t); err != nil {
			return err
		}
	}
	if from < 5 {
		if err := backfillGrantIndex(t); err != nil {
			return err
		}
	}
	return nil
}

// isEmpty reports whether tx's store holds nothing switchboard wrote: no
// persona, no todo, no event, and none of layout 1's tables.
func isEmpty(tx store.Tx) bool {
	for _, table := range []string{tPersonas, tTodos, tEvents, tGrants, v1Ready, v1ByQueue} {
		found := false
		if err := tx.Scan(table, nil, nil, func(_, _ []byte) bool { found = true; return false }); err != nil || found {
			return false
		}
	}
	return true
}

// UpgradeRecords brings a store from layout 7 or 8 to 9: from then on
// todo records are written in the form V3 (layout 8's; V2 is layout 7's)
// — checksummed (a damaged record is ErrDamaged, never another todo) and
// laid out so that PostgreSQL logs an update as the fields it changed —
// and the audit events a sequencing pass (or a transaction, on bolt) adds
// are stored several to a record, which saves a database most of each
// event's row. Run it once every process sharing the store runs this
// version or a later one (which read both); a process of an older version
// then refuses the store (ErrNewerSchema), as for any newer layout.
// Processes already running learn of it at their next Reap, and write the
// older forms until then; every form is read. Nothing already stored is
// rewritten. Inside the caller's transaction (postgres.WithTx) the upgrade
// commits or rolls back with it, and this process too learns of it at its
// next Reap. A new store starts at layout 9, and upgrading one already
// there does nothing.
func (s *Switchboard) UpgradeRecords(ctx context.Context) error {
	err := s.st.Update(ctx, func(tx store.Tx) error {
		b, err := tx.Get(tMeta, []byte(schemaKey))
		if err != nil {
			return fmt.Errorf("read the layout: %w", err)
		}
		if len(b) != 8 {
			return fmt.Errorf("schema version is %d bytes", len(b))
		}
		switch v := binary.BigEndian.Uint64(b); {
		case v == schemaVersion:
			return nil
		case v < autoVersion || v > schemaVersion:
			return fmt.Errorf("%w: layout %d, this version upgrades %d and %d to %d", ErrNewerSchema, v, autoVersion, recordsVersion, schemaVersion)
		}
		return tx.Put(tMeta, []byte(schemaKey), binary.BigEndian.AppendUint64(nil, schemaVersion))
	})
	if err != nil {
		return fmt.Errorf("switchboard: upgrade records: %w", err)
	}
	if !store.IsInCallersTx(ctx) {
		// Inside the caller's transaction (postgres.WithTx) nothing has
		// committed yet: this process learns of the layout, as the
		// others do, at its next Reap — and not at all if it rolls back.
		s.setLayout(schemaVersion)
	}
	return nil
}

// setLayout records what the store's layout lets this process write.
func (s *Switchboard) setLayout(layout uint64) {
	s.recordsV3.Store(layout >= recordsVersion)
	s.packedLog.Store(layout >= schemaVersion)
}

// readLayout reads the store's layout into s.recordsV3 and s.packedLog
// (Reap calls it, so a process learns of UpgradeRecords run elsewhere).
func (s *Switchboard) readLayout(t *txn) error {
	b, err := t.tx.Get(tMeta, []byte(schemaKey))
	if err != nil || len(b) != 8 {
		return err
	}
	s.setLayout(binary.BigEndian.Uint64(b))
	return nil
}

// linkedKey marks a store whose replaced grants name the grants that
// replaced them (see linkReplacements). It is no layout change: a version
// before it reads the links as fields it does not know.
const linkedKey = "replacements_linked"

// linkReplacements links each grant replaced before the records carried
// ReplacedBy to the grant that replaced it, both ways, as the approval
// that replaced it would now: the grant in the same direction (holder,
// target) created at the instant the replaced one was revoked (the
// replacement revokes and creates in one transaction, at one time). A
// replaced grant's queued work is handed out while its replacement lives
// (originLive); unlinked, a claim would take it for revoked work and
// cancel it. A grant with no such replacement, or with two grants created
// at that instant (no telling which replaced it), is left as it is.
func linkReplacements(t *txn) error {
	var ids []string
	if err := t.tx.Scan(tGrants, nil, nil, func(k, _ []byte) bool {
		ids = append(ids, string(k))
		return true
	}); err != nil {
		return err
	}
	type direction struct{ holder, target string }
	created := map[direction]map[time.Time][]*grantRec{}
	var replaced []*grantRec
	for _, id := range ids {
		g := new(grantRec)
		if err := t.get(tGrants, id, g, "grant"); err != nil {
			return err
		}
		if g.EdgeID == "" {
			continue
		}
		d := direction{g.Holder, g.Target}
		if created[d] == nil {
			created[d] = map[time.Time][]*grantRec{}
		}
		at := g.CreatedAt.UTC()
		created[d][at] = append(created[d][at], g)
		if g.State != GrantRevoked || g.ReplacedBy != "" {
			continue
		}
		var e edgeRec
		if err := t.get(tEdges, g.EdgeID, &e, "edge"); err != nil {
			if isNotFound(err) {
				continue
			}
			return err
		}
		if e.State == EdgeReplaced {
			replaced = append(replaced, g)
		}
	}
	for _, g := range replaced {
		var next *grantRec
		n := 0
		for _, c := range created[direction{g.Holder, g.Target}][g.RevokedAt.UTC()] {
			if c.ID != g.ID {
				next, n = c, n+1
			}
		}
		if n != 1 || next.Replaces != "" {
			continue // none, or two approvals at one instant: no telling which
		}
		g.ReplacedBy, next.Replaces = next.ID, g.ID
		if err := t.put(tGrants, g.ID, g); err != nil {
			return err
		}
		if err := t.put(tGrants, next.ID, next); err != nil {
			return err
		}
	}
	return nil
}

// upgradeIndexes brings the todo indexes of layouts 1 and 2 to layout 3:
// every index rebuilt in todo_index from the todo records themselves.
func upgradeIndexes(t *txn) error {
	tx := t.tx
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
	return tx.Delete(tMeta, []byte("seq"))
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

// upgradeLog (layout 3 to 4) carries the hash-chained audit log into the
// Merkle tree. It checks the chain once, as the version that wrote it did —
// each event stored under its seq, seqs without gaps from the last purged
// event, each event's prev naming the SHA-256 of the record before it (of
// the last purged one for the first), the head naming the last — and
// refuses the upgrade, naming the first broken link, if it does not hold.
// Then it stores each kept event in its leaf form, in seq order, as the
// tree's first leaves (the log's Offset is the last purged seq, so every
// event keeps its seq), and starts the todo counter past every todo's seq
// (layout 3 numbered todos with their events' seqs).
func upgradeLog(t *txn) error {
	tx := t.tx
	var headSeq, baseSeq uint64
	var headHash, baseHash []byte
	for _, m := range []struct {
		key  string
		seq  *uint64
		hash *[]byte
	}{{"audit_head", &headSeq, &headHash}, {"audit_base", &baseSeq, &baseHash}} {
		b, err := tx.Get(tMeta, []byte(m.key))
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return err
		case len(b) != 8+sha256.Size:
			return fmt.Errorf("upgrade the audit log: %s is %d bytes", m.key, len(b))
		}
		*m.seq, *m.hash = binary.BigEndian.Uint64(b), b[8:]
	}
	type chained struct {
		Event
		Prev string `json:"prev,omitempty"`
	}
	var evs []Event
	prevSeq, prevHash := baseSeq, baseHash
	var broken *AuditError
	var derr error
	err := tx.Scan(tEvents, nil, nil, func(k, v []byte) bool {
		var e chained
		if derr = json.Unmarshal(v, &e); derr != nil {
			broken, derr = &AuditError{Seq: prevSeq + 1, Reason: "record does not decode"}, nil
			return false
		}
		switch {
		case keySeq(k) != prevSeq+1 || len(k) != 8:
			broken = &AuditError{Seq: prevSeq + 1, Reason: fmt.Sprintf("missing: the next stored event is %d", keySeq(k))}
		case e.Seq != prevSeq+1:
			broken = &AuditError{Seq: prevSeq + 1, Reason: fmt.Sprintf("its record names seq %d", e.Seq)}
		case e.Prev != base64.RawURLEncoding.EncodeToString(prevHash):
			broken = &AuditError{Seq: prevSeq + 1, Reason: "its link does not name the record before it"}
		}
		if broken != nil {
			return false
		}
		h := sha256.Sum256(v)
		prevSeq, prevHash = e.Seq, h[:]
		evs = append(evs, e.Event)
		return true
	})
	switch {
	case err != nil:
		return err
	case derr != nil:
		return derr
	case broken == nil && prevSeq != headSeq:
		broken = &AuditError{Seq: max(prevSeq, headSeq), Reason: fmt.Sprintf("the head names event %d, the chain ends at %d", headSeq, prevSeq)}
	case broken == nil && len(evs) > 0 && string(prevHash) != string(headHash):
		broken = &AuditError{Seq: prevSeq, Reason: "its record does not hash to what the head recorded"}
	}
	if broken != nil {
		return fmt.Errorf("upgrade the audit log: the hash chain does not verify: %w", broken)
	}

	st, err := t.lg.State()
	if err != nil {
		return err
	}
	if st.Size > 0 {
		return nil // already a tree (a store written by this version)
	}
	st.Offset = baseSeq
	st.Counter = headSeq
	err = tx.Scan(tIdx, []byte{idxQueue}, []byte{idxQueue + 1}, func(k, _ []byte) bool {
		if len(k) >= 8 {
			st.Counter = max(st.Counter, binary.BigEndian.Uint64(k[len(k)-8:]))
		}
		return true
	})
	if err != nil {
		return err
	}
	// Each event is written over its chain record, under the same seq:
	// a Put, not an Insert.
	t.lg.Rewrite = true
	if err := t.integrate(evs); err != nil {
		return err
	}
	for _, k := range []string{"audit_head", "audit_base"} {
		if err := tx.Delete(tMeta, []byte(k)); err != nil {
			return err
		}
	}
	return nil
}
