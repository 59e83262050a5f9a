package switchboard_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var updateLogFixture = flag.Bool("update-log-fixture", false, "write testdata/log-v8.db and testdata/log-v8.json again, from the code as it is")

// logFixture is what the code that wrote testdata/log-v8.db answered about
// its audit log: the verifier key, the stored checkpoint, every leaf, and
// every inclusion and consistency proof against the checkpoint's size.
type logFixture struct {
	VerifierKey string                `json:"verifier_key"`
	Checkpoint  []byte                `json:"checkpoint"`
	Leaves      [][]byte              `json:"leaves"`
	Inclusion   []sb.InclusionProof   `json:"inclusion"`
	Consistency []sb.ConsistencyProof `json:"consistency"`
}

// The audit log's bytes are a promise to third parties: whatever the code
// becomes, a log it wrote answers with the same leaves, the same
// checkpoint and the same proofs, byte for byte. testdata/log-v8.db is a
// bolt store (layout 8) written on 2026-12-07 by the code before the log
// moved into a package of its own; testdata/log-v8.json holds what that
// code answered. Regenerate both only on purpose: -update-log-fixture.
func TestLogAnswersAsTheFixtureWasWritten(t *testing.T) {
	if *updateLogFixture {
		writeLogFixture(t)
	}
	b, err := os.ReadFile("testdata/log-v8.json")
	require.NoError(t, err)
	var want logFixture
	require.NoError(t, json.Unmarshal(b, &want))
	require.NotEmpty(t, want.Leaves)

	// Opened from a copy: the fixture itself is never written.
	path := filepath.Join(t.TempDir(), "switchboard.db")
	copyFile(t, "testdata/log-v8.db", path)
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	defer st.Close()
	s, err := sb.New(st, nil)
	require.NoError(t, err)
	defer s.Close()
	got := readLogFixture(t, s)
	got.VerifierKey = want.VerifierKey // not in the store: the host's to keep
	assert.Equal(t, want, got)

	cp, err := sb.OpenCheckpoint(got.Checkpoint, want.VerifierKey)
	require.NoError(t, err)
	rep, err := s.VerifyAudit(context.Background(), cp)
	require.NoError(t, err)
	assert.Equal(t, cp.Root, rep.Root)
	for _, p := range got.Inclusion {
		ev, err := sb.VerifyInclusion(cp, p)
		require.NoError(t, err)
		assert.Equal(t, p.Index+1, ev.Seq)
	}
}

// readLogFixture asks s what the fixture records.
func readLogFixture(t *testing.T, s *sb.Switchboard) logFixture {
	t.Helper()
	ctx := context.Background()
	rep, err := s.VerifyAudit(ctx)
	require.NoError(t, err)
	require.NotNil(t, rep.Checkpoint, "the fixture's log has a stored checkpoint")
	size := rep.Checkpoint.Size
	f := logFixture{Checkpoint: rep.Checkpoint.Note}
	evs, err := s.Events(ctx, 0, int(size))
	require.NoError(t, err)
	require.Len(t, evs, int(size))
	for _, e := range evs {
		f.Leaves = append(f.Leaves, sb.EventLeaf(e))
		p, err := s.ProveEvent(ctx, e.Seq, size)
		require.NoError(t, err)
		f.Inclusion = append(f.Inclusion, p)
	}
	for old := uint64(1); old < size; old++ {
		p, err := s.ProveConsistency(ctx, old, size)
		require.NoError(t, err)
		f.Consistency = append(f.Consistency, p)
	}
	return f
}

// writeLogFixture writes testdata/log-v8.db and .json: two organisations
// befriended, work created, claimed, completed and failed, a grant
// revoked, and a checkpoint signed — every kind of leaf a log holds today.
func writeLogFixture(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "switchboard.db")
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	key, vkey, err := sb.NewLogKey("fixture.example/log")
	require.NoError(t, err)
	k := switchboardtest.NewKitOn(t, st, &sb.Config{LogKey: key})
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	inbox := sb.Scope{{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor, sb.VerbGet}}}
	g, cred := k.Friend("alice-bot", "bob-desk", inbox)
	w := k.Worker("bob-desk", "inbox")
	for i, outcome := range []string{"complete", "fail"} {
		_, _, err := k.SB.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "invoice.pay", DedupKey: outcome, Payload: []byte(`{"n":` + string(rune('1'+i)) + `}`)})
		require.NoError(t, err)
		_, l, err := k.SB.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		if outcome == "complete" {
			require.NoError(t, k.SB.Complete(ctx, w, l, []byte("done")))
		} else {
			require.NoError(t, k.SB.Fail(ctx, w, l, "no"))
		}
	}
	require.NoError(t, k.SB.Revoke(ctx, k.Human("bob"), g.ID))
	_, err = k.SB.Checkpoint(ctx)
	require.NoError(t, err)
	f := readLogFixture(t, k.SB)
	f.VerifierKey = vkey
	require.NoError(t, k.SB.Close())
	require.NoError(t, st.Close())
	copyFile(t, path, "testdata/log-v8.db")
	b, err := json.MarshalIndent(f, "", " ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile("testdata/log-v8.json", append(b, '\n'), 0o644))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.Create(to)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// An outside verifier with golang.org/x/mod's note and tlog alone — no
// code of this repository — checks what the fixture's code answered
// (before the log became a package) and what today's code answers after
// appending to that same log under a rotated key: every checkpoint opens,
// every inclusion proof leads to its checkpoint's root, and the new tree
// is proved to extend the old one.
func TestAnOutsideVerifierReadsBeforeAndAfter(t *testing.T) {
	b, err := os.ReadFile("testdata/log-v8.json")
	require.NoError(t, err)
	var before logFixture
	require.NoError(t, json.Unmarshal(b, &before))

	// open is the verifier's reading of a checkpoint note (C2SP
	// tlog-checkpoint: origin, size, base64 root).
	open := func(signed []byte, vkey string) (size int64, root tlog.Hash) {
		t.Helper()
		v, err := note.NewVerifier(vkey)
		require.NoError(t, err)
		n, err := note.Open(signed, note.VerifierList(v))
		require.NoError(t, err)
		lines := strings.Split(n.Text, "\n")
		require.GreaterOrEqual(t, len(lines), 3)
		require.Equal(t, v.Name(), lines[0])
		size, err = strconv.ParseInt(lines[1], 10, 64)
		require.NoError(t, err)
		raw, err := base64.StdEncoding.DecodeString(lines[2])
		require.NoError(t, err)
		require.Len(t, raw, tlog.HashSize)
		copy(root[:], raw)
		return size, root
	}
	oldSize, oldRoot := open(before.Checkpoint, before.VerifierKey)
	require.EqualValues(t, len(before.Leaves), oldSize)
	for i, p := range before.Inclusion {
		require.Equal(t, before.Leaves[i], p.Leaf)
		require.NoError(t, tlog.CheckRecord(p.Hashes, oldSize, oldRoot, int64(p.Index), tlog.RecordHash(p.Leaf)), "leaf %d before", i)
	}
	// The verifier's own tree of the fixture's leaves, for the older roots.
	stored := map[int64]tlog.Hash{}
	mine := tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(ix))
		for i, x := range ix {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, leaf := range before.Leaves {
		hs, err := tlog.StoredHashes(int64(i), leaf, mine)
		require.NoError(t, err)
		for j, h := range hs {
			stored[tlog.StoredHashCount(int64(i))+int64(j)] = h
		}
	}
	all, err := tlog.TreeHash(oldSize, mine)
	require.NoError(t, err)
	require.Equal(t, oldRoot, all, "the fixture's leaves are its checkpoint's tree")
	for _, p := range before.Consistency {
		older, err := tlog.TreeHash(int64(p.OldSize), mine)
		require.NoError(t, err)
		require.NoError(t, tlog.CheckTree(p.Hashes, oldSize, oldRoot, int64(p.OldSize), older), "consistency %d before", p.OldSize)
	}

	// Today's code appends to the fixture's log, signing with a new key
	// of the same name, the fixture's listed as the one before it.
	path := filepath.Join(t.TempDir(), "switchboard.db")
	copyFile(t, "testdata/log-v8.db", path)
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	defer st.Close()
	key, vkey, err := sb.NewLogKey("fixture.example/log")
	require.NoError(t, err)
	k := switchboardtest.NewKitOn(t, st, &sb.Config{LogKey: key, PreviousLogKeys: []string{before.VerifierKey}})
	k.Publish("carol", "carol-bot")
	ctx := context.Background()
	cp, err := k.SB.Checkpoint(ctx)
	require.NoError(t, err)
	newSize, newRoot := open(cp.Note, vkey)
	require.Greater(t, newSize, oldSize)
	p, err := k.SB.ProveConsistency(ctx, uint64(oldSize), uint64(newSize))
	require.NoError(t, err)
	require.NoError(t, tlog.CheckTree(p.Hashes, newSize, newRoot, oldSize, oldRoot), "the new tree extends the fixture's")
	for seq := uint64(1); seq <= uint64(newSize); seq++ {
		ip, err := k.SB.ProveEvent(ctx, seq, uint64(newSize))
		require.NoError(t, err)
		if seq <= uint64(oldSize) {
			require.Equal(t, before.Leaves[seq-1], ip.Leaf, "leaf %d is the fixture's", seq)
		}
		require.NoError(t, tlog.CheckRecord(ip.Hashes, newSize, newRoot, int64(ip.Index), tlog.RecordHash(ip.Leaf)), "leaf %d after", seq)
	}
}
