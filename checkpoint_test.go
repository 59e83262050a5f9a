package switchboard_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// rewriteEvent edits the leaf of event seq and rebuilds every tree hash
// from it on (switchboardtest.RewriteAuditEvent): the tree is consistent
// again, only no longer the one signed.
func rewriteEvent(t *testing.T, h *harness, seq uint64, edit func([]byte) []byte) {
	t.Helper()
	require.NoError(t, switchboardtest.RewriteAuditEvent(ctx, h.st, seq, edit))
}

func requireAuditError(t *testing.T, err error, seq uint64, reason string) {
	t.Helper()
	require.ErrorIs(t, err, sb.ErrAuditBroken)
	var ae *sb.AuditError
	require.True(t, errors.As(err, &ae), "%v", err)
	assert.Equal(t, seq, ae.Seq, ae.Reason)
	assert.Contains(t, ae.Reason, reason)
}

// storedNote is the stored checkpoint's note (nil: none).
func storedNote(t *testing.T, h *harness) []byte {
	t.Helper()
	var b []byte
	require.NoError(t, h.st.View(ctx, func(tx store.Tx) error {
		v, err := tx.Get("meta", []byte("checkpoint"))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		b = v
		return err
	}))
	return b
}

// Whoever can write the store cannot get a rewritten log signed: edit a
// middle event and rebuild every tree hash above it, leaving the signed
// checkpoint in place, and Checkpoint — and Reap, and CheckLog — refuse
// with an *AuditError naming the first events that changed, and sign
// nothing. Before this check, the next Checkpoint signed the forgery.
func TestCheckpointRefusesARewrittenLog(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		withLogKey(t, h)
		auditFlow(t, h)
		cp1, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		auditFlowMore(t, h)

		rewriteEvent(t, h, 5, func(leaf []byte) []byte { return bytes.Replace(leaf, []byte(`"todo.`), []byte(`"TODO.`), 1) })
		before := storedNote(t, h)
		// The first perfect subtree of the signed tree that changed holds
		// events 1 to 16 (the checkpoint has 20): that is as near as the
		// stored hashes can place an edit whose hashes were rebuilt.
		_, err = h.sb.Checkpoint(ctx)
		requireAuditError(t, err, 1, "events 1 to 16 no longer hash to what the stored checkpoint (20 events) signed")
		assert.Equal(t, before, storedNote(t, h), "nothing signed")
		err = h.sb.CheckLog(ctx)
		requireAuditError(t, err, 1, "rewritten")
		_, err = h.sb.VerifyAudit(ctx)
		require.ErrorIs(t, err, sb.ErrAuditBroken, "VerifyAudit agrees")

		// Reap goes on with the rest and says why the log is not signed.
		st, err := h.sb.Reap(ctx)
		require.NoError(t, err)
		require.ErrorIs(t, st.LogProblem, sb.ErrAuditBroken)
		require.ErrorIs(t, h.sb.LogProblem(), sb.ErrAuditBroken)
		assert.Equal(t, before, storedNote(t, h))
		_ = cp1
	})
}

// auditFlowMore adds events after a checkpoint.
func auditFlowMore(t *testing.T, h *harness) {
	t.Helper()
	for range 3 {
		_, _, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList)})
		require.NoError(t, err)
	}
}

// The other rewrites: a tail cut with the log's state made to match, an
// event after the last checkpoint rewritten without its hashes, the stored
// checkpoint deleted or replaced by an older genuine one (both seen only
// against the checkpoint kept outside the store). Each is refused before
// any signature.
func TestCheckpointRefusesOtherRewrites(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		kept := sb.CheckpointFile(filepath.Join(t.TempDir(), "checkpoint"))
		withLogKey(t, h, func(c *sb.Config) { c.Checkpoints = kept })
		auditFlow(t, h)
		cp1, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		b, err := kept.Load(ctx)
		require.NoError(t, err)
		require.Equal(t, cp1.Note, b, "the checkpoint is kept outside the store")
		auditFlowMore(t, h)
		cp2, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		require.Greater(t, cp2.Size, cp1.Size)
		auditFlowMore(t, h)

		// An event after the last checkpoint, rewritten without its hashes.
		last := cp2.Size + 2
		unpackEvents(t, h.st)
		var orig []byte
		raw(t, h, func(tx store.Tx) error {
			v, err := tx.Get("events", be64(last))
			orig = bytes.Clone(v)
			if err != nil {
				return err
			}
			return tx.Put("events", be64(last), bytes.Replace(v, []byte(`"grant.`), []byte(`"GRANT.`), 1))
		})
		_, err = h.sb.Checkpoint(ctx)
		requireAuditError(t, err, last, "does not hash to its stored leaf")
		raw(t, h, func(tx store.Tx) error { return tx.Put("events", be64(last), orig) })

		// The stored checkpoint replaced by the older genuine one: the kept
		// one is knowledge, not a replacement. The log is checked against
		// it — a rewrite before it is refused, with or without the stored
		// one — and the next signature extends it.
		flip := func(seq uint64) {
			rewriteEvent(t, h, seq, func(leaf []byte) []byte { return bytes.Replace(leaf, []byte(`"type":"`), []byte(`"type":"X`), 1) })
		}
		unflip := func(seq uint64) {
			rewriteEvent(t, h, seq, func(leaf []byte) []byte { return bytes.Replace(leaf, []byte(`"type":"X`), []byte(`"type":"`), 1) })
		}
		raw(t, h, func(tx store.Tx) error { return tx.Put("meta", []byte("checkpoint"), cp1.Note) })
		flip(cp1.Size + 1)
		_, err = h.sb.Checkpoint(ctx)
		requireAuditError(t, err, 1, "the checkpoint kept outside the store")
		requireAuditError(t, h.sb.CheckLog(ctx), 1, "rewritten")
		assert.Equal(t, cp1.Note, storedNote(t, h), "nothing signed")
		unflip(cp1.Size + 1)
		cp3, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		require.Greater(t, cp3.Size, cp2.Size)
		p, err := h.sb.ProveConsistency(ctx, cp2.Size, cp3.Size)
		require.NoError(t, err)
		require.NoError(t, sb.VerifyConsistency(cp2, cp3, p), "the new checkpoint extends the kept one")

		// Deleted: the same.
		raw(t, h, func(tx store.Tx) error { return tx.Delete("meta", []byte("checkpoint")) })
		flip(2)
		_, err = h.sb.Checkpoint(ctx)
		requireAuditError(t, err, 1, "the checkpoint kept outside the store")
		assert.Nil(t, storedNote(t, h), "nothing signed")
		unflip(2)
		again, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		require.Equal(t, cp3.Note, again.Note, "the same tree, signed again")
		require.Equal(t, cp3.Note, storedNote(t, h))
		auditFlowMore(t, h)
		cp3, err = h.sb.Checkpoint(ctx)
		require.NoError(t, err)

		// A tail cut, the log's state rewritten to match.
		unpackEvents(t, h.st)
		raw(t, h, func(tx store.Tx) error {
			for s := cp3.Size; s > cp2.Size; s-- {
				if err := tx.Delete("events", be64(s)); err != nil {
					return err
				}
			}
			return setLogSize(tx, cp2.Size)
		})
		_, err = h.sb.Checkpoint(ctx)
		requireAuditError(t, err, cp2.Size+1, "cut short")
	})
}

// setLogSize rewrites the log state's size (its first field).
func setLogSize(tx store.Tx, size uint64) error {
	v, err := tx.Get("meta", []byte("log"))
	if err != nil {
		return err
	}
	var rest []byte
	if len(v) > 8 {
		rest = v[8:]
	}
	return tx.Put("meta", []byte("log"), append(be64(size), rest...))
}

// recorder counts what is logged at or above a level.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec.Level >= slog.LevelError {
		r.msgs = append(r.msgs, rec.Message)
	}
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }
func (r *recorder) errors() int                        { r.mu.Lock(); defer r.mu.Unlock(); return len(r.msgs) }

// outcomes counts, as a metrics Observer would, the outcomes of each verb.
type outcomes struct {
	mu     sync.Mutex
	failed map[sb.Verb]int
}

func (o *outcomes) Start(ctx context.Context, op sb.Operation) (context.Context, sb.Observation) {
	return ctx, outcome{o, op.Verb}
}
func (o *outcomes) Trace(context.Context) sb.Trace { return sb.Trace{} }

type outcome struct {
	o *outcomes
	v sb.Verb
}

func (e outcome) End(r sb.Result) {
	if r.Err != nil {
		e.o.mu.Lock()
		e.o.failed[e.v]++
		e.o.mu.Unlock()
	}
}

// Rotating the log key: a store whose checkpoint the old key signed opens
// with a new key that lists the old one; the first checkpoint under the
// new key extends the last under the old, and both verify with the keys a
// third party holds. Started with a new key that does not list the old,
// Reap does not wedge: it logs the problem once, keeps purging todos,
// leaves the audit events for when the log is sound, and reports it.
func TestLogKeyRotation(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		oldKey, oldV, err := sb.NewLogKey("audit.example/log")
		require.NoError(t, err)
		h.withConfig(t, nil, func(c *sb.Config) { c.LogKey = oldKey })
		auditFlow(t, h)
		cp1, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)

		newKey, newV, err := sb.NewLogKey("audit.example/log")
		require.NoError(t, err)
		rec := &recorder{}
		metrics := &outcomes{failed: map[sb.Verb]int{}}
		h.withConfig(t, nil, func(c *sb.Config) {
			c.LogKey, c.Logger, c.EventRetention, c.TodoRetention, c.DedupRetention = newKey, slog.New(rec), time.Hour, time.Hour, time.Hour
			c.Observer = metrics
		})
		h.clock.Advance(2 * time.Hour)
		for range 3 {
			st, err := h.sb.Reap(ctx)
			require.NoError(t, err, "Reap does not fail on a log problem")
			require.ErrorIs(t, st.LogProblem, sb.ErrAuditBroken)
			require.Contains(t, st.LogProblem.Error(), "Config.PreviousLogKeys")
			assert.Zero(t, st.EventsPurged, "no audit purge while the log cannot be checked")
		}
		assert.Equal(t, 1, rec.errors(), "the problem is logged once")
		assert.Equal(t, 3, metrics.failed[sb.VerbCheckpoint], "and counted each time, for the host's metrics")
		require.Error(t, h.sb.LogProblem())
		todos, err := h.sb.InspectTodos(ctx, sb.QueueAddress("bob-desk", "inbox"), nil)
		require.NoError(t, err)
		assert.Empty(t, todos, "todos are purged all the same")

		h.withConfig(t, nil, func(c *sb.Config) {
			c.LogKey, c.PreviousLogKeys, c.Logger, c.EventRetention = newKey, []string{oldV}, slog.New(rec), time.Hour
		})
		require.NoError(t, h.sb.CheckLog(ctx))
		st, err := h.sb.Reap(ctx)
		require.NoError(t, err)
		require.NoError(t, st.LogProblem)
		cp2, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, cp2.Size, cp1.Size)
		_, err = sb.OpenCheckpoint(cp2.Note, newV)
		require.NoError(t, err, "signed with the new key")
		_, err = sb.OpenCheckpoint(cp1.Note, newV)
		require.ErrorIs(t, err, sb.ErrProof)
		old, err := sb.OpenCheckpoint(cp1.Note, newV, oldV)
		require.NoError(t, err, "the old one verifies with the old key listed")
		p, err := h.sb.ProveConsistency(ctx, cp1.Size, cp2.Size)
		if cp2.Size > cp1.Size && !errors.Is(err, sb.ErrEventPurged) {
			require.NoError(t, err)
			require.NoError(t, sb.VerifyConsistency(old, cp2, p))
		}
		_, err = sb.New(h.st, &sb.Config{LogKey: newKey, PreviousLogKeys: []string{strings.Replace(oldV, "audit.example/log", "other.example/log", 1)}})
		require.ErrorIs(t, err, sb.ErrInvalidArgument, "a previous key of another origin")
		// The key listed again, as a previous key or twice, is a
		// configuration mistake said at New — not, later, a log that
		// reads as tampered ("ambiguous key").
		_, err = sb.New(h.st, &sb.Config{LogKey: newKey, PreviousLogKeys: []string{newV}})
		require.ErrorIs(t, err, sb.ErrInvalidArgument, "the signing key listed as a previous one")
		_, err = sb.New(h.st, &sb.Config{LogKey: newKey, PreviousLogKeys: []string{oldV, oldV}})
		require.ErrorIs(t, err, sb.ErrInvalidArgument, "a previous key listed twice")
		_, err = sb.OpenCheckpoint(cp1.Note, oldV, oldV)
		require.NoError(t, err, "a verifier giving a key twice")
	})
}
