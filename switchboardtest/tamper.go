// Tampering with a store as someone who can write its files would, for
// tests of what the audit log's checks catch.

package switchboardtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

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
		hs := hashMap{}
		leaves := map[uint64][]byte{}
		var size uint64
		if err := tx.Scan("events", nil, nil, func(k, v []byte) bool {
			n := binary.BigEndian.Uint64(k) - 1
			count := 1
			for x := n; x&1 == 1; x >>= 1 {
				count++
			}
			leaf := v[:len(v)-count*tlog.HashSize]
			leaves[n] = bytes.Clone(leaf)
			for i := range count {
				var h tlog.Hash
				copy(h[:], v[len(leaf)+i*tlog.HashSize:])
				hs[tlog.StoredHashIndex(0, int64(n))+int64(i)] = h
			}
			size = max(size, n+1)
			return true
		}); err != nil {
			return err
		}
		if seq == 0 || seq > size || leaves[seq-1] == nil {
			return fmt.Errorf("switchboardtest: no audit event %d in a log of %d", seq, size)
		}
		for n := seq - 1; n < size; n++ {
			leaf := leaves[n]
			if n == seq-1 {
				leaf = edit(leaf)
			}
			hashes, err := tlog.StoredHashes(int64(n), leaf, hs)
			if err != nil {
				return err
			}
			v := bytes.Clone(leaf)
			for i, h := range hashes {
				hs[tlog.StoredHashIndex(0, int64(n))+int64(i)] = h
				v = append(v, h[:]...)
			}
			if err := tx.Put("events", binary.BigEndian.AppendUint64(nil, n+1), v); err != nil {
				return err
			}
		}
		return nil
	})
}

type hashMap map[int64]tlog.Hash

func (m hashMap) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		h, ok := m[x]
		if !ok {
			return nil, fmt.Errorf("switchboardtest: tree hash %d not stored", x)
		}
		out[i] = h
	}
	return out, nil
}

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
		state, err := tx.Get("meta", []byte("log"))
		if err != nil {
			return fmt.Errorf("switchboardtest: the audit log's state: %w", err)
		}
		if len(state) != 32 || binary.BigEndian.Uint64(state) < purged {
			return fmt.Errorf("switchboardtest: a log state of %d bytes cannot be purged to %d", len(state), purged)
		}
		var start uint64
		for level := 63; level >= 0; level-- {
			if purged&(1<<level) == 0 {
				continue
			}
			x := tlog.StoredHashIndex(level, int64(start>>level))
			n := start + 1<<level - 1 // the leaf that completed the subtree
			v, err := tx.Get("events", binary.BigEndian.AppendUint64(nil, n+1))
			if err != nil {
				return fmt.Errorf("switchboardtest: event %d: %w", n+1, err)
			}
			count := 1
			for y := n; y&1 == 1; y >>= 1 {
				count++
			}
			at := len(v) - count*tlog.HashSize + level*tlog.HashSize
			if err := tx.Put("log_hashes", binary.BigEndian.AppendUint64(nil, uint64(x)), bytes.Clone(v[at:at+tlog.HashSize])); err != nil {
				return err
			}
			start += 1 << level
		}
		if drop {
			for seq := uint64(1); seq <= purged; seq++ {
				if err := tx.Delete("events", binary.BigEndian.AppendUint64(nil, seq)); err != nil {
					return err
				}
			}
		}
		state = bytes.Clone(state)
		binary.BigEndian.PutUint64(state[16:], purged)
		return tx.Put("meta", []byte("log"), state)
	})
}
