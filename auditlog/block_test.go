package auditlog_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
)

// records returns the keys of the stored entry records, in order.
func records(t *testing.T, st store.Store) [][]byte {
	t.Helper()
	var keys [][]byte
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		return tx.Scan("entries", nil, nil, func(k, _ []byte) bool { keys = append(keys, bytes.Clone(k)); return true })
	}))
	return keys
}

func blockKey(last uint64) []byte { return append(binary.BigEndian.AppendUint64(nil, last), 1) }

// readAll checks, in one view, that every kept entry reads back the same
// one at a time (Entry) and as a run (Entries), that the stored tree is
// the tree of the entries, and that no record is a stray.
func readAll(t *testing.T, st store.Store, size uint64, purged uint64) {
	t.Helper()
	want, leaves := tree(t, int(size))
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		for n := purged; n < size; n++ {
			e, hs, err := x.Entry(n + 1)
			require.NoError(t, err, "entry %d", n+1)
			require.Equal(t, string(leaves[n]), string(e))
			require.Len(t, hs, auditlog.LeafHashes(n)*tlog.HashSize)
		}
		for n := uint64(0); n < purged; n++ {
			_, _, err := x.Entry(n + 1)
			require.ErrorIs(t, err, store.ErrNotFound, "purged entry %d", n+1)
		}
		_, _, err := x.Entry(size + 1)
		require.ErrorIs(t, err, store.ErrNotFound, "past the end")
		for _, from := range []uint64{1, purged + 1, (purged + size) / 2, size} {
			next := max(from, purged+1)
			require.NoError(t, x.Entries(from, 0, func(seq uint64, e, _ []byte) bool {
				require.Equal(t, next, seq)
				require.Equal(t, string(leaves[seq-1]), string(e))
				next++
				return true
			}))
			require.Equal(t, size+1, next, "Entries from %d reads to the end", from)
			got := 0
			require.NoError(t, x.Entries(from, 3, func(uint64, []byte, []byte) bool { got++; return true }))
			require.Equal(t, int(min(3, size+1-max(from, purged+1))), got, "a limit of 3 from %d", from)
		}
		for n := purged + 1; n <= size; n++ {
			exp, err := auditlog.TreeHash(n, want)
			require.NoError(t, err)
			got, err := auditlog.TreeHash(n, &x)
			require.NoError(t, err, "root at %d", n)
			require.Equal(t, exp, got, "root at %d", n)
		}
		for leaf := int64(purged); leaf < int64(size); leaf += 7 {
			exp, err := tlog.ProveRecord(int64(size), leaf, want)
			require.NoError(t, err)
			got, err := tlog.ProveRecord(int64(size), leaf, &x)
			require.NoError(t, err, "inclusion of %d", leaf)
			require.Equal(t, exp, got)
		}
		require.NoError(t, x.Strays())
		tr, err := x.Check(nil)
		require.NoError(t, err)
		require.Equal(t, size, tr.Size)
		return nil
	}))
}

// Entries appended Packed are stored several to a record (at most 64),
// keyed by the last one's seq; they read back as entries stored one to a
// record do, in one log with both forms; Purge to the middle of a block
// keeps its later entries.
func TestBlocks(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, c *auditlog.Cache) {
		appendAs(t, st, 10, c, false) // 1-10, one to a record (an older store)
		appendAs(t, st, 150, c, true) // 11-160: 64, 64, 22
		appendAs(t, st, 1, c, true)   // 161: a block of one
		appendAs(t, st, 5, c, false)  // 162-166
		keys := records(t, st)
		require.Len(t, keys, 10+3+1+5)
		require.Equal(t, blockKey(74), keys[10])
		require.Equal(t, blockKey(138), keys[11])
		require.Equal(t, blockKey(160), keys[12])
		require.Equal(t, blockKey(161), keys[13])
		readAll(t, st, 166, 0)

		// Purge into the middle of a block: it keeps 101-138.
		require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
			x := layout.In(tx, nil)
			return x.Purge(100)
		}))
		keys = records(t, st)
		require.Equal(t, blockKey(138), keys[0], "the records before it are gone")
		readAll(t, st, 166, 100)
		// To a block's end, and past the singles after the blocks.
		require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
			x := layout.In(tx, nil)
			return x.Purge(138)
		}))
		require.Equal(t, blockKey(160), records(t, st)[0])
		readAll(t, st, 166, 138)
		require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
			x := layout.In(tx, nil)
			return x.Purge(163)
		}))
		readAll(t, st, 166, 163)
		appendAs(t, st, 70, c, true) // the tree grows on after a purge
		readAll(t, st, 236, 163)
	})
}

// A block is held to its form: a record that cannot be read whole is an
// AuditError naming the entry where it went wrong — from Entries, Entry,
// Check and Strays — never fewer or other entries.
func TestADamagedBlock(t *testing.T) {
	fresh := func() store.Store {
		st := memory.New()
		appendAs(t, st, 3, nil, false) // 1-3
		appendAs(t, st, 5, nil, true)  // 4-8, under blockKey(8)
		return st
	}
	value := func(st store.Store) []byte {
		var v []byte
		require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
			var err error
			v, err = tx.Get("entries", blockKey(8))
			return err
		}))
		return v
	}
	entries := func(v []byte) (count uint64, rest []byte) {
		count, w := binary.Uvarint(v)
		return count, v[w:]
	}
	for _, c := range []struct {
		name   string
		damage func(st store.Store) // what the record becomes
		seq    uint64
		reason string
	}{
		{"it says it holds none", func(st store.Store) { put(t, st, blockKey(8), append([]byte{0}, value(st)[1:]...)) }, 8, "does not say how many"},
		{"it says it holds more than there are seqs", func(st store.Store) {
			put(t, st, blockKey(8), append([]byte{9}, value(st)[1:]...))
		}, 8, "does not say how many"},
		{"it says it holds more than it does", func(st store.Store) {
			_, rest := entries(value(st))
			put(t, st, blockKey(8), append([]byte{6}, rest...))
		}, 3, "is stored twice"}, // 3-8: 3 is stored alone before it
		{"it says it holds fewer than it does", func(st store.Store) {
			_, rest := entries(value(st))
			put(t, st, blockKey(8), append([]byte{4}, rest...))
		}, 6, "cannot hold this one's bytes"}, // 5-8: 5's bytes are 4's, with one hash too few for 6
		{"its last byte is cut", func(st store.Store) { v := value(st); put(t, st, blockKey(8), v[:len(v)-1]) }, 8, "cannot hold this one's bytes"},
		{"an entry's length is zero", func(st store.Store) {
			_, rest := entries(value(st))
			put(t, st, blockKey(8), append([]byte{5, 0}, rest[1:]...))
		}, 4, "cannot hold this one's bytes"},
		{"a key of 10 bytes", func(st store.Store) {
			v := value(st)
			require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
				if err := tx.Delete("entries", blockKey(8)); err != nil {
					return err
				}
				return tx.Put("entries", append(blockKey(8), 0), v)
			}))
		}, 8, "a key of 10 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := fresh()
			c.damage(st)
			require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
				x := layout.In(tx, nil)
				var ae *auditlog.AuditError
				n := 0
				err := x.Entries(1, 0, func(uint64, []byte, []byte) bool { n++; return true })
				require.ErrorAs(t, err, &ae)
				require.ErrorIs(t, err, auditlog.ErrAuditBroken)
				require.Equal(t, c.seq, ae.Seq, ae.Reason)
				require.Contains(t, ae.Reason, c.reason)
				require.Equal(t, 3, n, "the entries stored alone before it, and none of the damaged block's")
				_, err = x.Check(nil)
				require.ErrorAs(t, err, &ae, "Check")
				if c.seq == 8 && c.reason != "a key of 10 bytes" {
					_, _, err = x.Entry(8)
					require.ErrorAs(t, err, &ae, "Entry")
				}
				return nil
			}))
		})
	}

	// A byte of an entry inside a block changed: Check names that entry.
	st := fresh()
	_, rest := entries(value(st))
	v := append([]byte{5}, rest...)
	v[1+1] ^= 1 // entry 4's first byte, after the count and its length
	put(t, st, blockKey(8), v)
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		_, err := x.Check(nil)
		var ae *auditlog.AuditError
		require.ErrorAs(t, err, &ae)
		require.EqualValues(t, 4, ae.Seq, ae.Reason)
		require.Contains(t, ae.Reason, "does not hash to its stored leaf")
		return nil
	}))

	// A block reaching past the log's end, or from before its start, is
	// a stray.
	st = fresh()
	v = value(st)
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		if err := tx.Delete("entries", blockKey(8)); err != nil {
			return err
		}
		return tx.Put("entries", blockKey(9), append([]byte{6}, v[1:]...)) // 4-9, in a log of 8
	}))
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		err := x.Strays()
		require.ErrorContains(t, err, "at event 9: an event is stored past the log's end (8 events)")
		return nil
	}))
	st = fresh()
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		if err := x.Purge(5); err != nil { // 6-8 kept, in the block rewritten
			return err
		}
		return tx.Put("entries", blockKey(8), v) // the block as it was: 4-8
	}))
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		err := x.Strays()
		require.ErrorContains(t, err, "at event 4: an event is stored before the log's first kept event")
		return nil
	}))
}

func put(t *testing.T, st store.Store, k, v []byte) {
	t.Helper()
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error { return tx.Put("entries", k, v) }))
}
