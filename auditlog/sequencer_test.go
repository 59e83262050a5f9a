package auditlog_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
)

// passTx is a user's transaction for a sequencing pass: entries are kept
// pending as they are, and appended as "<seq>:<entry>".
type passTx struct {
	x   auditlog.Tx
	now time.Time
}

func (p *passTx) Log() *auditlog.Tx { return &p.x }
func (p *passTx) Now() time.Time    { return p.now }
func (p *passTx) Add(rows [][]byte, _ time.Time) error {
	var es [][]byte
	for _, r := range rows {
		if err := auditlog.ParsePending(r, func(e []byte) error { es = append(es, bytes.Clone(e)); return nil }); err != nil {
			return err
		}
	}
	return p.x.Append(len(es), func(i int, seq uint64, b []byte) []byte {
		return fmt.Appendf(b, "%d:%s", seq, es[i])
	})
}

// sequencer is one process's sequencer on st, reading the time from now.
func sequencer(st store.Store, id string, now *time.Time, mark *auditlog.Mark) *auditlog.Sequencer {
	run := func(do func(context.Context, func(store.Tx) error) error) func(context.Context, func(auditlog.PassTx) error) error {
		return func(ctx context.Context, fn func(auditlog.PassTx) error) error {
			return do(ctx, func(tx store.Tx) error { return fn(&passTx{x: layout.In(tx, nil), now: *now}) })
		}
	}
	return &auditlog.Sequencer{ID: id, Lease: 10 * time.Second, Layout: &layout, LeaseKey: "lease",
		Update: run(st.Update), View: run(st.View), Now: func() time.Time { return *now },
		Mark: mark, Retention: time.Hour}
}

// commit writes one commit's entries pending.
func commit(t *testing.T, st store.Store, entries ...string) {
	t.Helper()
	var row []byte
	for _, e := range entries {
		row = auditlog.AppendPending(row, []byte(e))
	}
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		return x.AddPending(row)
	}))
}

// Entries committed pending enter the tree in commit order, each once,
// by one sequencer at a time: another process's sequencer waits out the
// lease, then takes over and builds on the same tree. The tree is the one
// tlog builds from the entries in that order, and the mark notes it.
func TestSequencer(t *testing.T) {
	st := memory.NewWithOptions(memory.Options{Appender: true})
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	var mark auditlog.Mark
	a := sequencer(st, "a", &now, &mark)
	b := sequencer(st, "b", &now, nil)
	ctx := context.Background()

	var want []string
	for i := range 300 { // more than one pass holds
		es := []string{"x" + strconv.Itoa(i)}
		if i%3 == 0 {
			es = append(es, "y"+strconv.Itoa(i))
		}
		commit(t, st, es...)
		want = append(want, es...)
	}
	passes := 0
	update := a.Update
	a.Update = func(ctx context.Context, fn func(auditlog.PassTx) error) error {
		passes++
		return update(ctx, fn)
	}
	moved, other, err := a.Sequence(ctx)
	require.NoError(t, err)
	require.Zero(t, other)
	require.Equal(t, len(want), moved, "every pending entry, in one call: it goes on while a pass finds a full batch")
	require.Greater(t, passes, 1, "in passes of a few hundred")
	n, _, err := a.Sequence(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left")
	a.Update = update

	commit(t, st, "late")
	want = append(want, "late")
	n, other, err = b.Sequence(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "b does not hold the lease")
	require.Greater(t, other, time.Duration(0))

	now = now.Add(11 * time.Second) // a's lease ran out
	n, _, err = b.Sequence(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "b took over")

	h := hashes{}
	for i, e := range want {
		leaf := []byte(strconv.Itoa(i+1) + ":" + e)
		hs, err := tlog.StoredHashes(int64(i), leaf, h)
		require.NoError(t, err)
		for j, x := range hs {
			h[tlog.StoredHashIndex(0, int64(i))+int64(j)] = x
		}
	}
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		x := layout.In(tx, nil)
		s, err := x.State()
		require.NoError(t, err)
		require.EqualValues(t, len(want), s.Size)
		got, err := auditlog.TreeHash(s.Size, &x)
		require.NoError(t, err)
		exp, err := auditlog.TreeHash(s.Size, h)
		require.NoError(t, err)
		require.Equal(t, exp, got)
		return tx.Scan("pending", nil, nil, func(k, _ []byte) bool { t.Errorf("pending row %x left", k); return true })
	}))
	seen := mark.Get(now, time.Hour)
	require.NotNil(t, seen)
	require.EqualValues(t, len(want)-1, seen.Size, "a's mark: the tree a built")
}

// A pending row that does not parse stops the pass: nothing moves, the
// row stays, and the error names it.
func TestSequencerBadRow(t *testing.T) {
	st := memory.NewWithOptions(memory.Options{Appender: true})
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	q := sequencer(st, "a", &now, nil)
	commit(t, st, "good")
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		return tx.(store.Appender).Append("pending", []byte{0x05, 'a'})
	}))
	n, _, err := q.Sequence(context.Background())
	require.ErrorContains(t, err, "pending audit entries")
	require.Zero(t, n)
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		s, err := x.State()
		require.NoError(t, err)
		require.Zero(t, s.Size)
		return nil
	}))
}

// snapshot copies the log's tables; restore puts them back.
func snapshot(t *testing.T, st store.Store) map[string][][2][]byte {
	t.Helper()
	out := map[string][][2][]byte{}
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		for _, tb := range []string{layout.Entries, layout.Hashes, layout.Pending, layout.Meta} {
			if err := tx.Scan(tb, nil, nil, func(k, v []byte) bool {
				out[tb] = append(out[tb], [2][]byte{bytes.Clone(k), bytes.Clone(v)})
				return true
			}); err != nil {
				return err
			}
		}
		return nil
	}))
	return out
}

func restore(t *testing.T, st store.Store, snap map[string][][2][]byte) {
	t.Helper()
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		for _, tb := range []string{layout.Entries, layout.Hashes, layout.Pending, layout.Meta} {
			var keys [][]byte
			if err := tx.Scan(tb, nil, nil, func(k, _ []byte) bool { keys = append(keys, bytes.Clone(k)); return true }); err != nil {
				return err
			}
			for _, k := range keys {
				if err := tx.Delete(tb, k); err != nil {
					return err
				}
			}
			for _, kv := range snap[tb] {
				if err := tx.Put(tb, kv[0], kv[1]); err != nil {
					return err
				}
			}
		}
		return nil
	}))
}

// A restore makes a log not append-only: a sequencer whose Cache holds the
// tree the restore undid must not build on it when another process has
// sequenced a different history of the same size meanwhile, and its mark
// is forked at what it saw, not raised over the other history (found from
// outside: the new leaves' hashes were built on the stale copy).
func TestSequencerAfterARestore(t *testing.T) {
	ctx := context.Background()
	st := memory.NewWithOptions(memory.Options{Appender: true})
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	var markA auditlog.Mark
	a := sequencer(st, "a", &now, &markA)
	b := sequencer(st, "b", &now, nil)
	check := func() error {
		var err error
		require.NoError(t, st.View(ctx, func(tx store.Tx) error {
			x := layout.In(tx, nil)
			_, err = x.Check(nil)
			return nil
		}))
		return err
	}

	for i := range 8 {
		commit(t, st, "a"+strconv.Itoa(i))
	}
	n, _, err := a.Sequence(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	backup := snapshot(t, st)
	commit(t, st, "a8")
	commit(t, st, "a9")
	n, _, err = a.Sequence(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	seen := markA.Get(now, time.Hour)
	require.EqualValues(t, 10, seen.Size)

	restore(t, st, backup)
	now = now.Add(11 * time.Second)
	commit(t, st, "b8")
	commit(t, st, "b9")
	n, _, err = b.Sequence(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, check())

	now = now.Add(11 * time.Second)
	commit(t, st, "c10", "c11")
	n, _, err = a.Sequence(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, check(), "the sequencer built on the store's tree")
	got := markA.Get(now, time.Hour)
	require.Equal(t, *seen, *got, "the mark stays at what A saw, forked")
}

// Odd input is an error, never a panic or a log that cannot grow: an
// empty entry (its record would be its hash alone), a negative stored
// hash index, a size past what tlog counts.
func TestOddInput(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	err := st.Update(ctx, func(tx store.Tx) error {
		x := layout.In(tx, nil)
		return x.Append(1, func(int, uint64, []byte) []byte { return nil })
	})
	require.ErrorContains(t, err, "empty")
	appendEntries(t, st, 5, nil)
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		x := layout.In(tx, nil)
		require.NotPanics(t, func() {
			_, err := x.ReadHashes([]int64{-1})
			require.Error(t, err)
		})
		require.NotPanics(t, func() {
			_, err := auditlog.TreeHash(1<<63, &x)
			require.Error(t, err)
		})
		return nil
	}))
}
