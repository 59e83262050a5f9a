package auditlog_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
)

// check runs Tx.Check over st.
func check(t *testing.T, st store.Store, anchors ...auditlog.Anchor) (auditlog.Tree, error) {
	t.Helper()
	var tree auditlog.Tree
	var cerr error
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		tree, cerr = x.Check(anchors)
		return nil
	}))
	return tree, cerr
}

// Check holds the stored tree to every anchor, and names what broke.
func TestCheck(t *testing.T) {
	st := memory.New()
	appendEntries(t, st, 20, nil)
	want, _ := tree(t, 20)
	root := func(n uint64) auditlog.Checkpoint {
		r, err := auditlog.TreeHash(n, want)
		require.NoError(t, err)
		return auditlog.Checkpoint{Size: n, Root: r}
	}
	signed := func(n uint64) auditlog.Anchor {
		return auditlog.Anchor{Checkpoint: root(n), Which: "the stored checkpoint", Did: "signed"}
	}
	seen := func(cp auditlog.Checkpoint) auditlog.Anchor {
		return auditlog.Anchor{Checkpoint: cp, Which: "this process", Did: "sequenced or signed", Seen: true}
	}

	got, err := check(t, st)
	require.NoError(t, err)
	require.Equal(t, root(20).Root, got.Root, "nothing signed: the tree rebuilt from the entries")
	got, err = check(t, st, signed(12), seen(root(17)), seen(root(5)))
	require.NoError(t, err)
	require.EqualValues(t, 20, got.Size)
	require.Equal(t, root(20).Root, got.Root)
	require.Equal(t, root(20).Root, auditlog.FoldFrontier(got.Frontier))

	_, err = check(t, st, auditlog.Anchor{Checkpoint: auditlog.Checkpoint{Size: 21}, Which: "the stored checkpoint", Did: "signed"})
	require.ErrorIs(t, err, auditlog.ErrAuditBroken)
	require.ErrorContains(t, err, "fewer than the 21 the stored checkpoint signed: it was cut short")

	other := root(17)
	other.Root[0] ^= 1
	_, err = check(t, st, signed(12), seen(other))
	require.ErrorContains(t, err, "the first 17 events no longer hash to the root this process sequenced or signed")

	// An entry after the checkpoint rewritten in place (its hashes with
	// it): the rebuilt tree no longer has the stored hashes over it.
	rewrite := func(n uint64) {
		require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
			k := binary.BigEndian.AppendUint64(nil, n+1)
			v, err := tx.Get("entries", k)
			if err != nil {
				return err
			}
			v[0] ^= 1
			return tx.Put("entries", k, v)
		}))
	}
	rewrite(15)
	_, err = check(t, st, signed(12))
	var ae *auditlog.AuditError
	require.ErrorAs(t, err, &ae)
	require.EqualValues(t, 16, ae.Seq)
	require.ErrorContains(t, err, "audit log broken at event 16: event 16, after the last signed checkpoint: it does not hash to its stored leaf")
	rewrite(15)

	// Before the checkpoint, a stored tree hash (the one over entries 0
	// to 7, in entry 7's record) changed: the frontier stored with the
	// checkpoint names where.
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		k := binary.BigEndian.AppendUint64(nil, 8)
		v, err := tx.Get("entries", k)
		if err != nil {
			return err
		}
		v[len(v)-32] ^= 1
		return tx.Put("entries", k, v)
	}))
	_, err = check(t, st, signed(12))
	require.ErrorContains(t, err, "the first 12 events no longer hash to the root the stored checkpoint signed")
	a := signed(12)
	a.Frontier = func() []byte {
		var b []byte
		hs, err := want.ReadHashes(auditlog.FrontierIndexes(12))
		require.NoError(t, err)
		for _, h := range hs {
			b = append(b, h[:]...)
		}
		return b
	}
	_, err = check(t, st, a)
	require.ErrorContains(t, err, "events 1 to 8 no longer hash to what the stored checkpoint (12 events) signed")
}
