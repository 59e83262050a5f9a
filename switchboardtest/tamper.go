// Tampering with a store as someone who can write its files would, for
// tests of what the audit log's checks catch.

package switchboardtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
)

// RewriteAuditEvent edits the stored leaf of audit event seq with edit and
// rebuilds every tree hash from it to the end of the log, as an attacker
// who can write the store and knows its layout would: the stored tree is
// consistent again, only no longer the one that was signed. It is for
// tests of the checks that catch it (Checkpoint, CheckLog, VerifyAudit,
// witnesses); it needs a log whose events were never purged.
func RewriteAuditEvent(ctx context.Context, st store.Store, seq uint64, edit func(leaf []byte) []byte) error {
	return st.Update(ctx, func(tx store.Tx) error {
		x := logLayout.In(tx, nil)
		state, err := x.State()
		if err != nil {
			return err
		}
		if state.Purged > 0 || state.Offset > 0 {
			return fmt.Errorf("switchboardtest: a log purged (%d) or with an offset (%d) cannot be rewritten", state.Purged, state.Offset)
		}
		// Every record read, then written again whole in the form it
		// was in (several events to a record or one): the tree hashes
		// before seq come out the same, those from it on new.
		var leaves [][]byte
		if err := x.Entries(1, 0, func(_ uint64, leaf, _ []byte) bool {
			leaves = append(leaves, bytes.Clone(leaf))
			return true
		}); err != nil {
			return err
		}
		if seq == 0 || seq > uint64(len(leaves)) || uint64(len(leaves)) != state.Size {
			return fmt.Errorf("switchboardtest: no audit event %d in a log of %d", seq, len(leaves))
		}
		var keys [][]byte
		if err := tx.Scan(logLayout.Entries, nil, nil, func(k, _ []byte) bool {
			keys = append(keys, bytes.Clone(k))
			x.Packed = x.Packed || len(k) > 8
			return true
		}); err != nil {
			return err
		}
		for _, k := range keys {
			if err := tx.Delete(logLayout.Entries, k); err != nil {
				return err
			}
		}
		leaves[seq-1] = edit(leaves[seq-1])
		state.Size = 0
		x.Rewrite = true
		return x.Append(len(leaves), func(i int, _ uint64, b []byte) []byte { return append(b, leaves[i]...) })
	})
}

// logLayout is where package switchboard keeps its audit log.
var logLayout = auditlog.Layout{Entries: "events", Hashes: "log_hashes", Pending: "events_pending", Meta: "meta", StateKey: "log"}

// MoveAuditPurgeMark sets the audit log's purge mark — how many of its
// first events retention says it deleted — to purged, and stores the tree
// hashes over them that proofs would need (their frontier), read from the
// stored tree as it is: what an attacker who rewrote the log
// (RewriteAuditEvent) would write to make the rewrite look older than
// retention. With drop, the events under the mark are deleted too. It is
// for tests of the checks that refuse it; it needs a log whose events were
// never purged, with no offset.
func MoveAuditPurgeMark(ctx context.Context, st store.Store, purged uint64, drop bool) error {
	return st.Update(ctx, func(tx store.Tx) error {
		x := logLayout.In(tx, nil)
		state, err := x.State()
		if err != nil {
			return fmt.Errorf("switchboardtest: the audit log's state: %w", err)
		}
		if state.Size < purged || state.Purged > 0 || state.Offset > 0 {
			return fmt.Errorf("switchboardtest: a log of %d events (%d purged, offset %d) cannot be purged to %d", state.Size, state.Purged, state.Offset, purged)
		}
		if drop {
			return x.Purge(purged)
		}
		idx := auditlog.FrontierIndexes(purged)
		hs, err := x.ReadHashes(idx)
		if err != nil {
			return fmt.Errorf("switchboardtest: %w", err)
		}
		for i, ix := range idx {
			if err := tx.Put(logLayout.Hashes, binary.BigEndian.AppendUint64(nil, uint64(ix)), hs[i][:]); err != nil {
				return err
			}
		}
		state.Purged = purged
		return x.SaveState()
	})
}
