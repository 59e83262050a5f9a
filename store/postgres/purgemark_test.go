package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
)

// The purge-mark attack on PostgreSQL (the root package's
// TestPurgeMarkCannotLaunderARewrite runs it on memory and bolt): an
// approval rewritten, the tree rebuilt above it, retention's mark moved
// past the signed checkpoint with the rewritten tree's frontier stored as
// the hashes kept for purged events. With or without a kept checkpoint or
// a witness, in the process that signed or a new one, nothing is signed,
// stored, kept or shown to a witness; without the attack the log signs.
func TestPurgeMarkCannotLaunderARewrite(t *testing.T) {
	type variant struct{ kept, witness, restart, drop, atSigned, attack bool }
	variants := []variant{
		{attack: true}, {kept: true, attack: true}, {witness: true, attack: true}, {restart: true, attack: true},
		{kept: true, witness: true, restart: true, attack: true}, {drop: true, attack: true}, {atSigned: true, attack: true},
		{kept: true, witness: true, restart: true},
	}
	for _, v := range variants {
		t.Run(fmt.Sprintf("kept=%v/witness=%v/restart=%v/drop=%v/atSigned=%v/attack=%v", v.kept, v.witness, v.restart, v.drop, v.atSigned, v.attack), func(t *testing.T) {
			ctx := context.Background()
			skey, vkey, err := switchboard.NewLogKey("audit.example/log")
			require.NoError(t, err)
			keptFile := switchboard.CheckpointFile(filepath.Join(t.TempDir(), "checkpoint"))
			rec := &errorCount{}
			priv, wkey, err := witness.NewKey("witness.example/w1")
			require.NoError(t, err)
			ws, err := witness.NewServer(witness.Config{Name: "witness.example/w1", Key: priv, Store: memory.New(),
				Logs: []witness.Log{{Origin: "audit.example/log", Keys: []string{vkey}}}, Logger: slog.New(rec)})
			require.NoError(t, err)
			config := func(c *switchboard.Config) {
				c.LogKey = skey
				if v.kept {
					c.Checkpoints = keptFile
				}
				if v.witness {
					c.Witnesses = []switchboard.WitnessConfig{{Witness: ws, Key: wkey}}
				}
			}
			d := newDeploymentOn(t, testDSN(t), postgres.Options{}, switchboard.Quotas{}, time.Second, config)
			_, friend, _ := d.friend()
			sequenced(t, d.sb, d.st)
			cp1, err := d.sb.Checkpoint(ctx)
			require.NoError(t, err)
			for range 3 {
				_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "k"})
				require.NoError(t, err)
			}
			rep := sequenced(t, d.sb, d.st)
			require.Greater(t, rep.TreeSize, cp1.Size)

			var approved uint64
			evs, err := d.sb.Events(ctx, 0, 1000)
			require.NoError(t, err)
			for _, e := range evs {
				if e.Type == switchboard.EventEdgeApproved {
					approved = e.Seq
					break
				}
			}
			require.NotZero(t, approved)
			if v.attack {
				require.NoError(t, switchboardtest.RewriteAuditEvent(ctx, d.st, approved, func(leaf []byte) []byte {
					return bytes.Replace(leaf, []byte(`"edge.approved"`), []byte(`"edge.denied"`), 1)
				}))
				mark := rep.TreeSize
				if v.atSigned {
					mark = cp1.Size
				}
				require.NoError(t, switchboardtest.MoveAuditPurgeMark(ctx, d.st, mark, v.drop))
			}
			sb := d.sb
			if v.restart {
				cfg := &switchboard.Config{Issuers: []switchboard.Issuer{d.iss.Config()}}
				config(cfg)
				sb, err = switchboard.New(d.st, cfg)
				require.NoError(t, err)
				t.Cleanup(func() { _ = sb.Close() })
			}
			stored := storedCheckpoint(t, d.st)
			keptBefore, err := keptFile.Load(ctx)
			require.NoError(t, err)

			_, cerr := sb.Checkpoint(ctx)
			lerr := sb.CheckLog(ctx)
			st, rerr := sb.Reap(ctx)
			require.NoError(t, rerr)
			_, verr := sb.VerifyAudit(ctx)
			if !v.attack {
				require.NoError(t, cerr)
				require.NoError(t, lerr)
				require.NoError(t, st.LogProblem)
				require.NoError(t, verr)
				require.NotEqual(t, stored, storedCheckpoint(t, d.st), "the grown log is signed")
				return
			}
			require.ErrorIs(t, cerr, switchboard.ErrAuditBroken, "Checkpoint")
			require.ErrorIs(t, lerr, switchboard.ErrAuditBroken, "CheckLog")
			require.ErrorIs(t, st.LogProblem, switchboard.ErrAuditBroken, "Reap")
			require.ErrorIs(t, verr, switchboard.ErrAuditBroken, "VerifyAudit")
			assert.Zero(t, st.EventsPurged)
			assert.Equal(t, stored, storedCheckpoint(t, d.st), "nothing signed or stored")
			keptAfter, err := keptFile.Load(ctx)
			require.NoError(t, err)
			assert.Equal(t, keptBefore, keptAfter, "nothing kept")
			assert.Zero(t, rec.count(), "no witness was shown the rewrite")
		})
	}
}

// storedCheckpoint is the stored checkpoint's note (nil: none).
func storedCheckpoint(t *testing.T, st store.Store) []byte {
	t.Helper()
	var b []byte
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		v, err := tx.Get("meta", []byte("checkpoint"))
		if err == nil {
			b = bytes.Clone(v)
		}
		return nil
	}))
	return b
}

// errorCount counts records logged at error level or above.
type errorCount struct {
	mu   sync.Mutex
	msgs int
}

func (r *errorCount) Enabled(context.Context, slog.Level) bool { return true }
func (r *errorCount) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelError {
		r.mu.Lock()
		r.msgs++
		r.mu.Unlock()
	}
	return nil
}
func (r *errorCount) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *errorCount) WithGroup(string) slog.Handler      { return r }
func (r *errorCount) count() int                         { r.mu.Lock(); defer r.mu.Unlock(); return r.msgs }
