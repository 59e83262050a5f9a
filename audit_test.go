package switchboard_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
)

// auditFlow writes a mix of events and returns them.
func auditFlow(t *testing.T, h *harness) []sb.Event {
	t.Helper()
	g, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
	w := h.worker(h.bob, "bob-desk", "inbox")
	for i := 0; i < 3; i++ {
		_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
	}
	_, l, err := h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, h.sb.Complete(ctx, w, l, nil))
	require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))
	evs, err := h.sb.Events(ctx, 0, 1000)
	require.NoError(t, err)
	return evs
}

// withLogKey replaces h.sb with one that signs checkpoints, and returns the
// log's public key.
func withLogKey(t *testing.T, h *harness, cfg ...func(*sb.Config)) string {
	t.Helper()
	skey, vkey, err := sb.NewLogKey("audit.example/log")
	require.NoError(t, err)
	h.withConfig(t, nil, func(c *sb.Config) {
		c.LogKey = skey
		for _, f := range cfg {
			f(c)
		}
	})
	require.Equal(t, vkey, h.sb.LogVerifierKey())
	return vkey
}

// raw reads and writes the store underneath the Switchboard, as someone
// with access to its files would.
func raw(t *testing.T, h *harness, fn func(tx store.Tx) error) {
	t.Helper()
	require.NoError(t, h.st.Update(ctx, fn))
}

func be64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func requireBroken(t *testing.T, h *harness, seq uint64, reason string, kept ...sb.Checkpoint) {
	t.Helper()
	_, err := h.sb.VerifyAudit(ctx, kept...)
	require.ErrorIs(t, err, sb.ErrAuditBroken)
	var ae *sb.AuditError
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, seq, ae.Seq, ae.Reason)
	assert.Contains(t, ae.Reason, reason)
}

// The audit log is numbered without gaps and is a Merkle tree: VerifyAudit
// rebuilds the tree from the events and finds, by position, an event
// edited, deleted or renumbered, a tree hash changed, and — against a
// checkpoint — a tail cut off with the log's state rewritten to match.
func TestTheAuditLogIsAMerkleTree(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		withLogKey(t, h)
		evs := auditFlow(t, h)
		require.Greater(t, len(evs), 10)
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.Seq, "gapless")
		}
		last := uint64(len(evs))
		rep, err := h.sb.VerifyAudit(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), rep.First)
		assert.Equal(t, last, rep.Last)
		assert.Equal(t, last, rep.Events)
		assert.Equal(t, last, rep.TreeSize)
		assert.Nil(t, rep.Checkpoint, "nothing signed yet")

		cp, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		assert.Equal(t, last, cp.Size)
		assert.Equal(t, rep.Root, cp.Root, "the checkpoint states the root VerifyAudit rebuilds")
		rep, err = h.sb.VerifyAudit(ctx)
		require.NoError(t, err)
		require.NotNil(t, rep.Checkpoint)
		assert.Equal(t, cp.Note, rep.Checkpoint.Note)

		unpackEvents(t, h.st) // the damage below is to one event's record
		// tamper changes a raw record and returns what puts it back.
		tamper := func(table string, key []byte, change func(v []byte) []byte) (restore func()) {
			var orig []byte
			raw(t, h, func(tx store.Tx) error {
				v, err := tx.Get(table, key)
				if err != nil {
					return err
				}
				orig = append([]byte(nil), v...)
				if nv := change(v); nv != nil {
					return tx.Put(table, key, nv)
				}
				return tx.Delete(table, key)
			})
			return func() { raw(t, h, func(tx store.Tx) error { return tx.Put(table, key, orig) }) }
		}
		replace := func(old, new string) func([]byte) []byte {
			return func(v []byte) []byte {
				require.Contains(t, string(v), old)
				return []byte(strings.Replace(string(v), old, new, 1))
			}
		}
		restore := tamper("events", be64(5), replace(`"actor":"`, `"actor":"x`))
		requireBroken(t, h, 5, "does not hash to its leaf")
		restore()
		restore = tamper("events", be64(5), func([]byte) []byte { return nil })
		requireBroken(t, h, 5, "missing")
		restore()
		// An event renumbered is reported where it is stored, not where
		// its altered number points.
		restore = tamper("events", be64(5), replace(`"seq":5,`, `"seq":7,`))
		requireBroken(t, h, 5, "names seq 7")
		restore()
		restore = tamper("events", be64(5), replace(`{"actor"`, `{ "actor"`))
		requireBroken(t, h, 5, "canonical")
		restore()
		// The tree's hashes are stored after the event that adds them:
		// event 6 (leaf 5) adds its leaf hash and the hash of the subtree
		// over leaves 4 and 5 (events 5 and 6), last in its record.
		restore = tamper("events", be64(6), func(v []byte) []byte { v[len(v)-1] ^= 1; return v })
		requireBroken(t, h, 5, "tree hash over events 5 to 6")
		restore()
		// An edited event (5, leaf 4: one hash, its own) with its leaf
		// hash rewritten to match: the tree above it still differs.
		restore = tamper("events", be64(5), func(v []byte) []byte {
			leaf := []byte(strings.Replace(string(v[:len(v)-32]), `"actor":"`, `"actor":"x`, 1))
			lh := tlog.RecordHash(leaf)
			return append(leaf, lh[:]...)
		})
		requireBroken(t, h, 5, "tree hash over events 5 to 6")
		restore()
		restore = tamper("events", be64(5), func(v []byte) []byte { return v[:len(v)-1] })
		requireBroken(t, h, 5, "does not decode")
		restore()

		// A signed checkpoint changed by a byte no longer verifies.
		restore = tamper("meta", []byte("checkpoint"), func(v []byte) []byte {
			return []byte(strings.Replace(string(v), "\n"+strconv.FormatUint(last, 10)+"\n", "\n"+strconv.FormatUint(last+1, 10)+"\n", 1))
		})
		requireBroken(t, h, 0, "signature")
		restore()
		_, err = h.sb.VerifyAudit(ctx)
		require.NoError(t, err, "restored")

		// Cut the last three events, their tree hashes and the log's
		// state to match: the stored checkpoint, signed before, sees it.
		var state []byte
		raw(t, h, func(tx store.Tx) error { var err error; state, err = tx.Get("meta", []byte("log")); return err })
		cut := func() {
			raw(t, h, func(tx store.Tx) error {
				for seq := last - 2; seq <= last; seq++ {
					if err := tx.Delete("events", be64(seq)); err != nil {
						return err
					}
				}
				st := append([]byte(nil), state...)
				binary.BigEndian.PutUint64(st, last-3)
				return tx.Put("meta", []byte("log"), st)
			})
		}
		recordsBefore := map[string][]byte{}
		raw(t, h, func(tx store.Tx) error {
			return tx.Scan("events", nil, nil, func(k, v []byte) bool { recordsBefore[string(k)] = v; return true })
		})
		var storedCP []byte
		raw(t, h, func(tx store.Tx) error {
			var err error
			storedCP, err = tx.Get("meta", []byte("checkpoint"))
			return err
		})
		uncut := func() {
			raw(t, h, func(tx store.Tx) error {
				for k, v := range recordsBefore {
					if err := tx.Put("events", []byte(k), v); err != nil {
						return err
					}
				}
				if err := tx.Put("meta", []byte("checkpoint"), storedCP); err != nil {
					return err
				}
				return tx.Put("meta", []byte("log"), state)
			})
		}
		cut()
		requireBroken(t, h, last-2, "cut from its end")
		// With the stored checkpoint removed too, only a checkpoint kept
		// outside the store can tell — and it does.
		raw(t, h, func(tx store.Tx) error { return tx.Delete("meta", []byte("checkpoint")) })
		_, err = h.sb.VerifyAudit(ctx)
		require.NoError(t, err, "a log cut with its state rewritten is consistent with itself")
		requireBroken(t, h, last-2, "cut from its end", cp)
		uncut()
		_, err = h.sb.VerifyAudit(ctx, cp)
		require.NoError(t, err, "restored")

		// New events go on after a verified log, and a checkpoint kept
		// from before still verifies against the grown log.
		_, _, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList)})
		require.NoError(t, err)
		rep, err = h.sb.VerifyAudit(ctx, cp)
		require.NoError(t, err)
		assert.Equal(t, last+1, rep.Last)
		// A kept checkpoint that does not verify is refused, not ignored.
		requireBroken(t, h, 0, "signature", sb.Checkpoint{Origin: cp.Origin, Size: cp.Size, Root: cp.Root, Note: append([]byte("x"), cp.Note...)})
	})
}

// Proofs verify with the library's functions and with tlog and note
// directly — a third party needs only the public key, the checkpoint, the
// proof and the event — and tampered ones do not.
func TestAuditProofs(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		vkey := withLogKey(t, h)
		evs := auditFlow(t, h)
		cp1, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		again, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		require.Equal(t, cp1.Note, again.Note, "the log did not grow: the same checkpoint")

		opened, err := sb.OpenCheckpoint(cp1.Note, vkey)
		require.NoError(t, err)
		require.Equal(t, cp1, opened)
		_, other, err := sb.NewLogKey("audit.example/log")
		require.NoError(t, err)
		_, err = sb.OpenCheckpoint(cp1.Note, other)
		require.ErrorIs(t, err, sb.ErrProof, "signed by another key")

		// Outside the library: note verifies the signature, the text is
		// the C2SP checkpoint, tlog checks the proof of each event.
		v, err := note.NewVerifier(vkey)
		require.NoError(t, err)
		n, err := note.Open(cp1.Note, note.VerifierList(v))
		require.NoError(t, err)
		lines := strings.Split(n.Text, "\n")
		require.Len(t, lines, 4)
		require.Equal(t, "audit.example/log", lines[0])
		size, err := strconv.ParseInt(lines[1], 10, 64)
		require.NoError(t, err)
		require.Equal(t, int64(len(evs)), size)
		rootBytes, err := base64.StdEncoding.DecodeString(lines[2])
		require.NoError(t, err)
		var root tlog.Hash
		copy(root[:], rootBytes)
		for _, e := range evs {
			p, err := h.sb.ProveEvent(ctx, e.Seq, cp1.Size)
			require.NoError(t, err)
			require.Equal(t, e.Seq-1, p.Index)
			require.NoError(t, tlog.CheckRecord(p.Hashes, size, root, int64(e.Seq-1), tlog.RecordHash(sb.EventLeaf(e))), "event %d", e.Seq)
			got, err := sb.VerifyInclusion(opened, p)
			require.NoError(t, err)
			require.Equal(t, e, got)
		}

		// The log grows; the older checkpoint is a prefix of the newer.
		_, _, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList)})
		require.NoError(t, err)
		cp2, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		require.Equal(t, cp1.Size+1, cp2.Size)
		cons, err := h.sb.ProveConsistency(ctx, cp1.Size, cp2.Size)
		require.NoError(t, err)
		require.NoError(t, sb.VerifyConsistency(cp1, cp2, cons))
		require.NoError(t, tlog.CheckTree(cons.Hashes, int64(cp2.Size), cp2.Root, int64(cp1.Size), cp1.Root))
		// A proof against the old checkpoint still holds for old events.
		p, err := h.sb.ProveEvent(ctx, 3, cp1.Size)
		require.NoError(t, err)
		_, err = sb.VerifyInclusion(cp1, p)
		require.NoError(t, err)

		// Tampered proofs, leaves and checkpoints fail.
		bad := p
		bad.Hashes = append([]tlog.Hash(nil), p.Hashes...)
		bad.Hashes[0][0] ^= 1
		_, err = sb.VerifyInclusion(cp1, bad)
		require.ErrorIs(t, err, sb.ErrProof)
		bad = p
		bad.Leaf = []byte(strings.Replace(string(p.Leaf), `"seq":3`, `"seq":4`, 1))
		_, err = sb.VerifyInclusion(cp1, bad)
		require.ErrorIs(t, err, sb.ErrProof)
		bad = p
		bad.Index++
		_, err = sb.VerifyInclusion(cp1, bad)
		require.ErrorIs(t, err, sb.ErrProof)
		_, err = sb.VerifyInclusion(cp2, p)
		require.ErrorIs(t, err, sb.ErrProof, "a proof for another tree size")
		badCons := cons
		badCons.Hashes = append([]tlog.Hash(nil), cons.Hashes...)
		badCons.Hashes[len(badCons.Hashes)-1][3] ^= 1
		require.ErrorIs(t, sb.VerifyConsistency(cp1, cp2, badCons), sb.ErrProof)
		forged := cp2
		forged.Root[0] ^= 1
		require.ErrorIs(t, sb.VerifyConsistency(cp1, forged, cons), sb.ErrProof)

		// Bad requests.
		_, err = h.sb.ProveEvent(ctx, cp2.Size+1, 0)
		require.ErrorIs(t, err, sb.ErrNotFound)
		_, err = h.sb.ProveEvent(ctx, 1, cp2.Size+5)
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		_, err = h.sb.ProveConsistency(ctx, 0, cp2.Size)
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
	})
}

// Without Config.LogKey the log is still a tree that proofs cover, but
// nothing is signed; a malformed key is refused by New.
func TestAuditLogWithoutKey(t *testing.T) {
	h := newHarness(t, memory.New())
	auditFlow(t, h)
	_, err := h.sb.Checkpoint(ctx)
	require.ErrorIs(t, err, sb.ErrNoLogKey)
	require.Empty(t, h.sb.LogVerifierKey())
	p, err := h.sb.ProveEvent(ctx, 2, 0)
	require.NoError(t, err)
	rep, err := h.sb.VerifyAudit(ctx)
	require.NoError(t, err)
	require.NoError(t, tlog.CheckRecord(p.Hashes, int64(rep.TreeSize), rep.Root, 1, tlog.RecordHash(p.Leaf)))
	for _, bad := range []string{"x", "PRIVATE+KEY+a+00000000+AAAA"} {
		_, err := sb.New(h.st, &sb.Config{LogKey: bad})
		require.ErrorIs(t, err, sb.ErrInvalidArgument, bad)
	}
}

// EventLeaf is RFC 8785 (JCS) of the event's JSON: what any language with
// a JCS library computes from the event.
func TestEventLeafIsJCS(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"", "a", "bob-desk", "<script>&", `"q"`, `\`, "\x00", "\x1f", "\t\n\r\b\f", "\x7f", "é", "日本", "\u2028", "😀", "\xff", "a\xc3"}
	str := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for i := range 2000 {
		e := sb.Event{Seq: rng.Uint64N(1 << 53), At: time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).UTC(),
			Type: sb.EventType(str()), Actor: str(), Persona: str(), Edge: str(), Grant: str(), Todo: str(), Queue: str(), Detail: str()}
		leaf := sb.EventLeaf(e)
		js, err := json.Marshal(e)
		require.NoError(t, err)
		want, err := jcs.Transform(js)
		require.NoError(t, err)
		require.Equal(t, string(want), string(leaf), "event %d: %#v", i, e)
	}
}

// A store of layout 3 (a hash chain, its first 12 events purged) opens with
// its history: the chain is checked once and its events become the tree's
// first leaves, keeping their seqs; the log goes on after them.
func TestUpgradeFromV3(t *testing.T) {
	var fx struct {
		Friend  sb.Credential `json:"friend"`
		Worker  sb.Credential `json:"worker"`
		Written time.Time     `json:"written"`
		First   uint64        `json:"first"`
		Last    uint64        `json:"last"`
		NewTodo string        `json:"new_todo"`
		Events  []sb.Event    `json:"events"`
	}
	st := openFixture(t, "v3.db", &fx)
	skey, vkey, err := sb.NewLogKey("upgrade.example/log")
	require.NoError(t, err)
	s, err := sb.New(st, &sb.Config{Clock: &clock{t: fx.Written.Add(time.Minute)}, LogKey: skey})
	require.NoError(t, err)
	evs, err := s.Events(ctx, 0, 100)
	require.NoError(t, err)
	require.Equal(t, fx.Events, evs, "the kept events, unchanged")
	off, err := s.LogOffset(ctx)
	require.NoError(t, err)
	require.Equal(t, fx.First-1, off, "events purged before the upgrade are not in the tree")
	rep, err := s.VerifyAudit(ctx)
	require.NoError(t, err)
	require.Equal(t, fx.First, rep.First)
	require.Equal(t, fx.Last, rep.Last)
	require.Equal(t, fx.Last-off, rep.TreeSize)

	// Layout 5: the grants written before are indexed by their humans.
	for _, c := range []sb.Credential{fx.Friend, fx.Worker} {
		g, err := s.Authenticate(ctx, c)
		require.NoError(t, err)
		cs, err := s.Connections(ctx, g.Grantor)
		require.NoError(t, err)
		found := false
		for _, c := range cs {
			found = found || c.Grant.ID == g.ID && c.Direction == sb.Granted
		}
		require.True(t, found, "grant %s missing from its grantor's connections after the upgrade", g.ID)
	}

	again, created, err := s.CreateFor(ctx, fx.Friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: "d1"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, fx.NewTodo, again.ID)
	td, created, err := s.CreateFor(ctx, fx.Friend, "inbox", sb.NewTodo{Kind: "k", Title: "after"})
	require.NoError(t, err)
	require.True(t, created)
	all, err := s.List(ctx, fx.Worker, "inbox", nil)
	require.NoError(t, err)
	require.Equal(t, td.ID, all[len(all)-1].ID, "a new todo comes after every todo written before the upgrade")
	evs, err = s.Events(ctx, fx.Last, 10)
	require.NoError(t, err)
	require.Equal(t, fx.Last+1, evs[0].Seq, "the log goes on from the chain's last event")

	cp, err := s.Checkpoint(ctx)
	require.NoError(t, err)
	cp, err = sb.OpenCheckpoint(cp.Note, vkey)
	require.NoError(t, err)
	p, err := s.ProveEvent(ctx, fx.First, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(0), p.Index, "the first kept event is the tree's first leaf")
	got, err := sb.VerifyInclusion(cp, p)
	require.NoError(t, err)
	require.Equal(t, fx.Events[0], got)
	_, err = s.ProveEvent(ctx, fx.First-1, 0)
	require.ErrorIs(t, err, sb.ErrNotFound)
}

// A layout-3 store whose chain does not verify is not upgraded: New names
// the broken link and changes nothing.
func TestUpgradeRefusesABrokenChain(t *testing.T) {
	var fx struct {
		First uint64 `json:"first"`
	}
	st := openFixture(t, "v3.db", &fx)
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		v, err := tx.Get("events", be64(fx.First+1))
		if err != nil {
			return err
		}
		return tx.Put("events", be64(fx.First+1), []byte(strings.Replace(string(v), `"actor":"`, `"actor":"x`, 1)))
	}))
	_, err := sb.New(st, nil)
	require.ErrorIs(t, err, sb.ErrAuditBroken)
	require.ErrorContains(t, err, fmt.Sprintf("at event %d", fx.First+2), "the link after the edited event breaks")
	_, err = sb.New(st, nil)
	require.ErrorIs(t, err, sb.ErrAuditBroken, "still refused: nothing was changed")
}

// memHashes is a tree built in memory from leaves, as an auditor holding
// the archive builds it: tlog's stored hashes in a map.
type memHashes map[int64]tlog.Hash

func (m memHashes) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		h, ok := m[x]
		if !ok {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = h
	}
	return out, nil
}

func (m memHashes) add(t *testing.T, n int64, leaf []byte) {
	hs, err := tlog.StoredHashes(n, leaf, m)
	require.NoError(t, err)
	for j, h := range hs {
		m[tlog.StoredHashIndex(0, n)+int64(j)] = h
	}
}

// Retention purges the oldest events in runs of any length; the log keeps
// only the few tree hashes that proofs about the kept events need, every
// proof about a kept event still verifies, and an auditor holding the
// archive rebuilds the whole tree — and proves a purged event — from it.
func TestAuditRetentionKeepsProofs(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		var archived []sb.Event
		vkey := withLogKey(t, h, func(c *sb.Config) {
			c.EventRetention = time.Hour
			c.Archive = func(_ context.Context, evs []sb.Event) error { archived = append(archived, evs...); return nil }
		})
		friend, _, _ := queueSetup(t, h)
		start := h.clock.Now()
		for range 40 {
			h.clock.Advance(time.Minute)
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)
		}
		var kept []sb.Checkpoint
		for _, upTo := range []int{3, 4, 9, 17, 18, 31, 32, 39} {
			// Events up to minute upTo pass their retention.
			h.clock.Advance(start.Add(time.Hour + time.Duration(upTo)*time.Minute + time.Second).Sub(h.clock.Now()))
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "recent"})
			require.NoError(t, err)
			_, err = h.sb.Reap(ctx)
			require.NoError(t, err)
			cp, err := h.sb.Checkpoint(ctx)
			require.NoError(t, err)
			kept = append(kept, cp)

			evs, err := h.sb.Events(ctx, 0, 1000)
			require.NoError(t, err)
			first := evs[0].Seq
			require.Equal(t, uint64(len(archived))+1, first, "purged a prefix, archived in order")
			for i, e := range archived {
				require.Equal(t, uint64(i+1), e.Seq)
			}
			rep, err := h.sb.VerifyAudit(ctx)
			require.NoError(t, err)
			require.Equal(t, first, rep.First)
			var hashRows int
			raw(t, h, func(tx store.Tx) error {
				return tx.Scan("log_hashes", nil, nil, func(_, _ []byte) bool { hashRows++; return true })
			})
			require.LessOrEqual(t, hashRows, 6, "only the frontier of %d purged events", first-1)

			for _, e := range evs {
				p, err := h.sb.ProveEvent(ctx, e.Seq, cp.Size)
				require.NoError(t, err, "event %d", e.Seq)
				_, err = sb.VerifyInclusion(cp, p)
				require.NoError(t, err)
			}
			_, err = h.sb.ProveEvent(ctx, first-1, cp.Size)
			require.ErrorIs(t, err, sb.ErrEventPurged)
			// Consistency from every checkpoint kept since the events it
			// needs were purged... and from those that are not.
			for _, old := range kept {
				p, err := h.sb.ProveConsistency(ctx, old.Size, cp.Size)
				if err != nil {
					require.ErrorIs(t, err, sb.ErrEventPurged)
					continue
				}
				require.NoError(t, sb.VerifyConsistency(old, cp, p))
			}

			// The auditor: archive + kept events rebuild the tree the
			// checkpoint signs, and prove a purged event.
			tree := memHashes{}
			all := append(append([]sb.Event(nil), archived...), evs...)
			for i, e := range all {
				tree.add(t, int64(i), sb.EventLeaf(e))
			}
			root, err := tlog.TreeHash(int64(len(all)), tree)
			require.NoError(t, err)
			require.Equal(t, cp.Root, root)
			opened, err := sb.OpenCheckpoint(cp.Note, vkey)
			require.NoError(t, err)
			proof, err := tlog.ProveRecord(int64(opened.Size), 0, tree)
			require.NoError(t, err)
			got, err := sb.VerifyInclusion(opened, sb.InclusionProof{Index: 0, TreeSize: opened.Size, Leaf: sb.EventLeaf(archived[0]), Hashes: proof})
			require.NoError(t, err)
			require.Equal(t, archived[0], got)
		}
	})
}

// VerifyAuditWith reports its progress batch by batch up to the whole log,
// and stops when its context is cancelled.
func TestVerifyAuditProgress(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		for i := 0; i < 600; i++ {
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)
		}
		sequenced(t, h, h.sb)
		var calls [][2]uint64
		rep, err := h.sb.VerifyAuditWith(ctx, sb.VerifyOptions{Progress: func(checked, total uint64) {
			calls = append(calls, [2]uint64{checked, total})
		}})
		require.NoError(t, err)
		require.Greater(t, rep.Events, uint64(600))
		require.Len(t, calls, 3, "before the first event, after each of the two batches")
		require.Equal(t, [2]uint64{0, rep.Events}, calls[0])
		require.Equal(t, [2]uint64{512, rep.Events}, calls[1])
		require.Equal(t, [2]uint64{rep.Events, rep.Events}, calls[2])

		cctx, cancel := context.WithCancel(ctx)
		_, err = h.sb.VerifyAuditWith(cctx, sb.VerifyOptions{Progress: func(checked, _ uint64) {
			if checked > 0 {
				cancel()
			}
		}})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, sb.ErrAuditBroken)
	})
}

// Each Switchboard builds new leaves on the frontier it committed itself
// (frontCache) and reads the rest from the store: two Switchboards
// appending in turn to one store — runs of 1 to 7 events each, so each
// meets frontiers the other made — keep one tree that VerifyAudit rebuilds
// from the records, and that a checkpoint and proofs from either agree on.
func TestTwoSwitchboardsKeepOneTree(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		skey, _, err := sb.NewLogKey("audit.example/log")
		require.NoError(t, err)
		h.withConfig(t, nil, func(c *sb.Config) { c.LogKey = skey })
		other, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, LogKey: skey})
		require.NoError(t, err)
		defer other.Close()
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		sbs := []*sb.Switchboard{h.sb, other}
		for i := range 60 {
			for range 1 + i%7 {
				_, _, err := sbs[i%2].CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
				require.NoError(t, err)
			}
		}
		rep, err := h.sb.VerifyAudit(ctx)
		require.NoError(t, err)
		for _, s := range sbs {
			cp, err := s.Checkpoint(ctx)
			require.NoError(t, err)
			require.Equal(t, rep.Root, cp.Root)
			for _, seq := range []uint64{1, rep.Last / 2, rep.Last} {
				p, err := s.ProveEvent(ctx, seq, cp.Size)
				require.NoError(t, err)
				_, err = sb.VerifyInclusion(cp, p)
				require.NoError(t, err)
			}
		}
	})
}

// An event is handed out only under the seq it is stored under: a stored
// leaf naming another seq (one bit of its "seq" changed, in a block or in
// a record of its own) is a broken log from Events and Subscribe, never
// an event under another seq. (Found by an attack: Events read the seq
// from the leaf alone.)
func TestAnEventIsReadUnderItsOwnSeq(t *testing.T) {
	for _, b := range backends {
		for _, single := range []bool{false, true} {
			t.Run(b.name+map[bool]string{false: "/block", true: "/single"}[single], func(t *testing.T) {
				st := b.open(t)
				h := newHarness(t, st)
				friend, _, _ := queueSetup(t, h)
				_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
				require.NoError(t, err)
				evs, err := h.sb.Events(ctx, 0, 1000)
				require.NoError(t, err)
				if single {
					unpackEvents(t, st)
				}
				last := evs[len(evs)-1]
				digits := []byte(`"seq":` + strconv.FormatUint(last.Seq, 10))
				raw(t, h, func(tx store.Tx) error {
					var k, v []byte
					if err := tx.Scan("events", nil, nil, func(kk, vv []byte) bool { k, v = bytes.Clone(kk), bytes.Clone(vv); return true }); err != nil {
						return err
					}
					i := bytes.LastIndex(v, digits)
					require.GreaterOrEqual(t, i, 0)
					v[i+len(digits)-1] ^= 1 // one bit of the last digit
					return tx.Put("events", k, v)
				})
				_, err = h.sb.Events(ctx, 0, 1000)
				require.ErrorIs(t, err, sb.ErrAuditBroken)
				var ae *sb.AuditError
				require.ErrorAs(t, err, &ae)
				require.Equal(t, last.Seq, ae.Seq)
				require.Contains(t, ae.Reason, "its record names seq")

				sub := h.sb.Subscribe(ctx, 0, nil)
				defer sub.Close()
				for e := range sub.C {
					require.Less(t, e.Seq, last.Seq, "only the events before it")
				}
				require.ErrorIs(t, sub.Err(), sb.ErrAuditBroken)
			})
		}
	}
}
