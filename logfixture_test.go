package switchboard_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
