package switchboard_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
)

// docs/audit-log.md: "Every check runs before any signature: whoever can
// write the store cannot get a rewritten log signed with the real key."
// The purge-mark attack: rewrite an approval, rebuild every tree hash
// above it, then move retention's mark to the log's end (or to the signed
// checkpoint's size), store the rewritten tree's frontier as the hashes
// kept for purged events, and perhaps delete the events under the mark.
// Whatever is configured (a checkpoint kept outside the store, a witness)
// and whoever checks (the process that signed, or a new one that never
// saw the log), Checkpoint, CheckLog, Reap and VerifyAudit refuse it, and
// nothing is signed, stored, kept or sent to a witness. The same steps
// without the attack sign.
func TestPurgeMarkCannotLaunderARewrite(t *testing.T) {
	type variant struct {
		kept, witness, restart, drop, atSigned, attack bool
	}
	var variants []variant
	for _, kept := range []bool{false, true} {
		for _, wit := range []bool{false, true} {
			for _, restart := range []bool{false, true} {
				for _, mark := range []struct{ drop, atSigned bool }{{false, false}, {true, false}, {false, true}} {
					variants = append(variants, variant{kept, wit, restart, mark.drop, mark.atSigned, true})
				}
			}
		}
	}
	variants = append(variants, variant{kept: true, witness: true, restart: true}, variant{})
	for _, b := range backends {
		for _, v := range variants {
			name := fmt.Sprintf("%s/kept=%v/witness=%v/restart=%v/drop=%v/atSigned=%v/attack=%v", b.name, v.kept, v.witness, v.restart, v.drop, v.atSigned, v.attack)
			t.Run(name, func(t *testing.T) {
				st := b.open(t)
				t.Cleanup(func() { _ = st.Close() })
				purgeMarkAttack(t, newHarness(t, st), v.kept, v.witness, v.restart, v.drop, v.atSigned, v.attack)
			})
		}
	}
}

func purgeMarkAttack(t *testing.T, h *harness, kept, wit, restart, drop, atSigned, attack bool) {
	skey, vkey, err := sb.NewLogKey("audit.example/log")
	require.NoError(t, err)
	keptFile := sb.CheckpointFile(filepath.Join(t.TempDir(), "checkpoint"))
	rec := &recorder{}
	priv, wkey, err := witness.NewKey("witness.example/w1")
	require.NoError(t, err)
	ws, err := witness.NewServer(witness.Config{Name: "witness.example/w1", Key: priv, Store: memory.New(),
		Logs: []witness.Log{{Origin: "audit.example/log", Keys: []string{vkey}}}, Logger: slog.New(rec)})
	require.NoError(t, err)
	config := func(c *sb.Config) {
		c.LogKey = skey
		if kept {
			c.Checkpoints = keptFile
		}
		if wit {
			c.Witnesses = []sb.WitnessConfig{{Witness: ws, Key: wkey}}
		}
	}
	h.withConfig(t, nil, config)
	auditFlow(t, h)
	cp1, err := h.sb.Checkpoint(ctx)
	require.NoError(t, err)
	auditFlowMore(t, h)
	size := lastSeq(t, h)
	require.Greater(t, size, cp1.Size)

	var approved uint64
	evs, err := h.sb.Events(ctx, 0, 1000)
	require.NoError(t, err)
	for _, e := range evs {
		if e.Type == sb.EventEdgeApproved {
			approved = e.Seq
			break
		}
	}
	require.NotZero(t, approved)
	if attack {
		require.NoError(t, switchboardtest.RewriteAuditEvent(ctx, h.st, approved, func(leaf []byte) []byte {
			return bytes.Replace(leaf, []byte(`"edge.approved"`), []byte(`"edge.denied"`), 1)
		}))
		mark := size
		if atSigned {
			mark = cp1.Size
		}
		require.NoError(t, switchboardtest.MoveAuditPurgeMark(ctx, h.st, mark, drop))
	}
	if restart {
		h.withConfig(t, nil, config)
	}
	stored, keptBefore := storedNote(t, h), loadKept(t, keptFile)

	_, cerr := h.sb.Checkpoint(ctx)
	lerr := h.sb.CheckLog(ctx)
	st, rerr := h.sb.Reap(ctx)
	require.NoError(t, rerr)
	_, verr := h.sb.VerifyAudit(ctx)
	if !attack {
		require.NoError(t, cerr)
		require.NoError(t, lerr)
		require.NoError(t, st.LogProblem)
		require.NoError(t, verr)
		require.NotEqual(t, stored, storedNote(t, h), "the grown log is signed")
		return
	}
	require.ErrorIs(t, cerr, sb.ErrAuditBroken, "Checkpoint")
	require.ErrorIs(t, lerr, sb.ErrAuditBroken, "CheckLog")
	require.ErrorIs(t, st.LogProblem, sb.ErrAuditBroken, "Reap")
	require.ErrorIs(t, verr, sb.ErrAuditBroken, "VerifyAudit")
	assert.Zero(t, st.EventsPurged)
	assert.Equal(t, stored, storedNote(t, h), "nothing signed or stored")
	assert.Equal(t, keptBefore, loadKept(t, keptFile), "nothing kept")
	assert.Zero(t, rec.errors(), "no witness was shown the rewrite")
}

func loadKept(t *testing.T, cs sb.CheckpointStore) []byte {
	t.Helper()
	b, err := cs.Load(ctx)
	require.NoError(t, err)
	return b
}
