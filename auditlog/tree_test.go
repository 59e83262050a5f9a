package auditlog_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/memory"
)

var layout = auditlog.Layout{Entries: "entries", Hashes: "hashes", Pending: "pending", Meta: "meta", StateKey: "log"}

// stores open an empty store of each kind the log is tested on; the
// caller closes it.
var stores = map[string]func(t *testing.T) store.Store{
	"memory": func(*testing.T) store.Store { return memory.New() },
	"bolt": func(t *testing.T) store.Store {
		st, err := bolt.Open(t.TempDir()+"/log.db", nil)
		require.NoError(t, err)
		return st
	},
}

// eachStore runs fn on an empty store of each kind, with a Cache and
// without.
func eachStore(t *testing.T, fn func(t *testing.T, st store.Store, c *auditlog.Cache)) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			for _, cached := range []bool{false, true} {
				st := open(t)
				var c *auditlog.Cache
				if cached {
					c = &auditlog.Cache{}
				}
				fn(t, st, c)
				require.NoError(t, st.Close())
			}
		})
	}
}

// appendEntries appends n entries "entry <i>" in one transaction, one to
// a record.
func appendEntries(t *testing.T, st store.Store, n int, c *auditlog.Cache) {
	t.Helper()
	appendAs(t, st, n, c, false)
}

// appendAs is appendEntries, in blocks if packed (Tx.Packed).
func appendAs(t *testing.T, st store.Store, n int, c *auditlog.Cache, packed bool) {
	t.Helper()
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		x.Packed = packed
		x.Use(c)
		s, err := x.State()
		if err != nil {
			return err
		}
		base := s.Size
		return x.Append(n, func(i int, seq uint64, b []byte) []byte {
			require.Equal(t, base+uint64(i)+1, seq, "the seq of entry %d", base+uint64(i))
			return append(b, "entry "+strconv.Itoa(int(base)+i)...)
		})
	}))
	if c != nil {
		c.Committed(size(t, st))
	}
}

func size(t *testing.T, st store.Store) uint64 {
	t.Helper()
	var n uint64
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		s, err := x.State()
		n = s.Size
		return err
	}))
	return n
}

// The tree a store keeps is the tree of its entries, as tlog builds it
// in memory: the same root at every size, the same proofs; with a Cache
// or without; and Purge keeps exactly what proofs from the purge point on
// still read.
func TestTreeInAStore(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, c *auditlog.Cache) {
		want, _ := tree(t, 45)
		for _, n := range []int{1, 2, 5, 8, 29} { // 45 in all
			appendEntries(t, st, n, c)
		}
		require.EqualValues(t, 45, size(t, st))
		read := func(fn func(tx store.Tx, x *auditlog.Tx)) {
			require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
				x := layout.In(tx, nil)
				fn(tx, &x)
				return nil
			}))
		}
		read(func(tx store.Tx, x *auditlog.Tx) {
			for n := uint64(1); n <= 45; n++ {
				got, err := auditlog.TreeHash(n, x)
				require.NoError(t, err)
				exp, err := auditlog.TreeHash(n, want)
				require.NoError(t, err)
				require.Equal(t, exp, got, "root at %d", n)
			}
			v, err := tx.Get("entries", []byte{0, 0, 0, 0, 0, 0, 0, 8})
			require.NoError(t, err)
			e, hs, err := auditlog.SplitEntry(7, v)
			require.NoError(t, err)
			require.Equal(t, "entry 7", string(e))
			require.Len(t, hs, auditlog.LeafHashes(7)*tlog.HashSize)
			require.Equal(t, 4, auditlog.LeafHashes(7), "leaf 7 completes three subtrees")
		})

		// Purge the first 21: proofs from 21 on still build, the
		// purged leaves' inner hashes are gone.
		require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
			x := layout.In(tx, nil)
			return x.Purge(21)
		}))
		read(func(tx store.Tx, x *auditlog.Tx) {
			s, err := x.State()
			require.NoError(t, err)
			require.EqualValues(t, 21, s.Purged)
			for _, old := range []int64{21, 30, 44} {
				got, err := tlog.ProveTree(45, old, x)
				require.NoError(t, err, "consistency %d → 45", old)
				exp, err := tlog.ProveTree(45, old, want)
				require.NoError(t, err)
				require.Equal(t, exp, got)
			}
			for _, leaf := range []int64{21, 33, 44} {
				got, err := tlog.ProveRecord(45, leaf, x)
				require.NoError(t, err, "inclusion of %d", leaf)
				exp, err := tlog.ProveRecord(45, leaf, want)
				require.NoError(t, err)
				require.Equal(t, exp, got)
			}
			_, err = tlog.ProveRecord(45, 3, x)
			require.ErrorIs(t, err, auditlog.ErrHashGone, "a purged leaf's proof")
			_, err = tx.Get("entries", []byte{0, 0, 0, 0, 0, 0, 0, 21})
			require.ErrorIs(t, err, store.ErrNotFound, "entry 20's record is purged")
		})
		// The tree grows on after a purge, through a cache or not.
		appendEntries(t, st, 3, c)
		want, _ = tree(t, 48)
		read(func(tx store.Tx, x *auditlog.Tx) {
			got, err := auditlog.TreeHash(48, x)
			require.NoError(t, err)
			exp, err := auditlog.TreeHash(48, want)
			require.NoError(t, err)
			require.Equal(t, exp, got)
		})
	})
}

// A pending row holds entries in order, and a bad one is an error, not a
// shorter list; only a store that assigns keys takes one.
func TestPending(t *testing.T) {
	var row []byte
	for _, e := range []string{"a", "", "ccc"} {
		row = auditlog.AppendPending(row, []byte(e))
	}
	var got []string
	require.NoError(t, auditlog.ParsePending(row, func(e []byte) error { got = append(got, string(e)); return nil }))
	require.Equal(t, []string{"a", "", "ccc"}, got)
	require.ErrorContains(t, auditlog.ParsePending(row[:len(row)-1], func([]byte) error { return nil }), "bad length")

	err := memory.New().Update(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		return x.AddPending(row)
	})
	require.ErrorContains(t, err, "store.Appender")

	// A row the sequencer could not append is refused where it is
	// written, as Append refuses an empty entry.
	appending := memory.NewWithOptions(memory.Options{Appender: true})
	for name, bad := range map[string][]byte{
		"an empty entry": row, // "a", "", "ccc"
		"no entry":       nil,
		"a bad length":   row[:len(row)-1],
	} {
		err := appending.Update(context.Background(), func(tx store.Tx) error {
			x := layout.In(tx, nil)
			return x.AddPending(bad)
		})
		require.ErrorContains(t, err, "pending row refused", name)
	}
	require.NoError(t, appending.Update(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		return x.AddPending(auditlog.AppendPending(nil, []byte("a")))
	}))
}

// A state record of the wrong length is an error naming it, never a
// log read as empty.
func TestStateDamaged(t *testing.T) {
	st := memory.New()
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		return tx.Put("meta", []byte("log"), []byte("short"))
	}))
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		_, err := x.State()
		require.ErrorContains(t, err, "is 5 bytes, want 32")
		return nil
	}))
}

// Entries are read by seq — one (Entry), a run (Entries), with their
// stored hashes — and a record outside the kept entries is a stray.
func TestEntries(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	appendEntries(t, st, 12, nil)
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		x := layout.In(tx, nil)
		return x.Purge(3)
	}))
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		x := layout.In(tx, nil)
		e, hs, err := x.Entry(8)
		require.NoError(t, err)
		require.Equal(t, "entry 7", string(e))
		require.Len(t, hs, 4*tlog.HashSize)
		_, _, err = x.Entry(2)
		require.ErrorIs(t, err, store.ErrNotFound, "purged")
		var got []string
		require.NoError(t, x.Entries(10, 2, func(seq uint64, e, _ []byte) bool {
			got = append(got, strconv.FormatUint(seq, 10)+"="+string(e))
			return true
		}))
		require.Equal(t, []string{"10=entry 9", "11=entry 10"}, got)
		got = nil
		require.NoError(t, x.Entries(1, 0, func(seq uint64, e, _ []byte) bool {
			got = append(got, string(e))
			return true
		}))
		require.Len(t, got, 9, "from the first kept to the end")
		return x.Strays()
	}))

	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		return tx.Put("entries", []byte{0, 0, 0, 0, 0, 0, 0, 13}, []byte("a stray past the end, with room for a hash.."))
	}))
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		x := layout.In(tx, nil)
		err := x.Strays()
		require.ErrorIs(t, err, auditlog.ErrAuditBroken)
		require.ErrorContains(t, err, "at event 13: an event is stored past the log's end (12 events)")
		return nil
	}))
}
