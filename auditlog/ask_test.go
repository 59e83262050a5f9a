package auditlog_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/witness"
)

// storeProver proves from a log kept in st (auditlog.Prover).
type storeProver struct {
	st   store.Store
	gone bool // answer as if retention purged what a proof needs
}

func (p storeProver) Size(ctx context.Context) (uint64, error) { return sizeOf(p.st), nil }

func (p storeProver) ProveTree(ctx context.Context, oldSize, newSize uint64) ([]tlog.Hash, error) {
	if p.gone {
		return nil, fmt.Errorf("purged: %w", auditlog.ErrHashGone)
	}
	var hs []tlog.Hash
	err := p.st.View(ctx, func(tx store.Tx) error {
		x := layout.In(tx, nil)
		var err error
		hs, err = tlog.ProveTree(int64(newSize), int64(oldSize), &x)
		return err
	})
	return hs, err
}

func sizeOf(st store.Store) uint64 {
	var n uint64
	_ = st.View(context.Background(), func(tx store.Tx) error {
		x := layout.In(tx, nil)
		s, err := x.State()
		if err == nil {
			n = s.Size
		}
		return err
	})
	return n
}

// Witnesses asked through Ask: a first cosignature from nothing; one from
// the size the witness says it holds when the caller's record is lost;
// refusals as AuditErrors wrapping ErrWitnessRefused when the proof
// cannot be built or the log is shorter than what the witness holds; a
// configuration that names two witnesses alike refused.
func TestAsk(t *testing.T) {
	ctx := context.Background()
	signer, _, vkey := key(t, "example.com/log")
	wpriv, wkey, err := witness.NewKey("example.com/w")
	require.NoError(t, err)
	srv, err := witness.NewServer(witness.Config{Name: "example.com/w", Key: wpriv, Store: memory.New(),
		Logs: []witness.Log{{Origin: "example.com/log", Keys: []string{vkey}}}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ws, err := auditlog.NewWitnesses([]auditlog.WitnessConfig{{Witness: srv, Key: wkey}})
	require.NoError(t, err)
	require.Equal(t, []string{"example.com/w"}, ws.Names())

	_, err = auditlog.NewWitnesses([]auditlog.WitnessConfig{{Witness: srv, Key: wkey}, {Witness: srv, Key: wkey}})
	require.ErrorIs(t, err, auditlog.ErrWitnessConfig)
	require.ErrorContains(t, err, `[1]: a second witness named "example.com/w"`)
	_, err = auditlog.NewWitnesses([]auditlog.WitnessConfig{{Key: wkey}})
	require.ErrorContains(t, err, "[0]: no Witness")

	st := memory.New()
	sign := func() auditlog.Checkpoint {
		var cp auditlog.Checkpoint
		require.NoError(t, st.View(ctx, func(tx store.Tx) error {
			x := layout.In(tx, nil)
			s, err := x.State()
			require.NoError(t, err)
			root, err := auditlog.TreeHash(s.Size, &x)
			require.NoError(t, err)
			cp, err = auditlog.Sign(signer, s.Size, root)
			return err
		}))
		return cp
	}
	cosigned := func(cp auditlog.Checkpoint, cs []auditlog.Cosignature) {
		t.Helper()
		require.Len(t, cs, 1)
		require.Equal(t, "example.com/w", cs[0].Name)
		signed := append([]byte{}, cp.Note...)
		for _, l := range cs[0].Lines {
			signed = append(signed, l...)
		}
		names, err := auditlog.Cosigners(signed, []string{wkey}, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"example.com/w"}, names)
	}

	appendEntries(t, st, 5, nil)
	cp := sign()
	cs, err := ws.Ask(ctx, cp, cp.Note, []uint64{0}, storeProver{st: st})
	require.NoError(t, err)
	cosigned(cp, cs)

	// The caller's record of what the witness cosigned lost (0): the
	// witness's 409 says 5, and it is asked again from there.
	appendEntries(t, st, 4, nil)
	cp = sign()
	cs, err = ws.Ask(ctx, cp, cp.Note, []uint64{0}, storeProver{st: st})
	require.NoError(t, err)
	cosigned(cp, cs)

	// The proof from what it holds purged: refused, not an outage.
	appendEntries(t, st, 2, nil)
	cp = sign()
	_, err = ws.Ask(ctx, cp, cp.Note, []uint64{9}, storeProver{st: st, gone: true})
	var ae *auditlog.AuditError
	require.ErrorAs(t, err, &ae)
	require.ErrorIs(t, err, auditlog.ErrWitnessRefused)
	require.ErrorIs(t, err, auditlog.ErrAuditBroken)
	require.ErrorContains(t, err, "retention purged past it")

	// A log shorter than what the witness cosigned: rolled back.
	short := memory.New()
	appendEntries(t, short, 3, nil)
	var scp auditlog.Checkpoint
	require.NoError(t, short.View(ctx, func(tx store.Tx) error {
		x := layout.In(tx, nil)
		root, err := auditlog.TreeHash(3, &x)
		require.NoError(t, err)
		scp, err = auditlog.Sign(signer, 3, root)
		return err
	}))
	_, err = ws.Ask(ctx, scp, scp.Note, []uint64{9}, storeProver{st: short})
	require.ErrorIs(t, err, auditlog.ErrWitnessRefused)
	require.ErrorContains(t, err, "which now holds 3: the log was rolled back")
}
