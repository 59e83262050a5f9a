package switchboard_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
)

// downWitness fails every call while down is set, as a witness that is
// unreachable does.
type downWitness struct {
	w    sb.Witness
	down atomic.Bool
}

func (d *downWitness) AddCheckpoint(ctx context.Context, old uint64, proof []tlog.Hash, cp []byte) ([]byte, error) {
	if d.down.Load() {
		return nil, errors.New("connection refused")
	}
	return d.w.AddCheckpoint(ctx, old, proof, cp)
}

// docs/audit-log.md: "Retention never purges an event past the last
// checkpoint a configured witness cosigned, so the proof it needs can
// always be built". The record of what a witness cosigned is in the store,
// and a restored backup (taken before the witness's last cosignature)
// forgets it; a configured witness the store holds no record of must
// still hold retention back — it may hold anything — until it cosigns
// again. Found by the model: retention purged past what the witness held
// while it was unreachable, and once it answered, the log could never
// prove itself to it again.
func TestARestoreForgetsWhatAWitnessCosigned(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sb.db")
	open := func() *bolt.Store {
		st, err := bolt.Open(path, nil)
		require.NoError(t, err)
		return st
	}
	st := open()
	h := newHarness(t, st)
	skey, _, srv, wvkey := logAndWitness(t)
	w := &downWitness{w: srv}
	with := func(c *sb.Config) {
		c.LogKey, c.EventRetention = skey, time.Hour
		c.Witnesses = []sb.WitnessConfig{{Witness: w, Key: wvkey}}
	}
	h.withConfig(t, nil, with)
	friend, _, _ := queueSetup(t, h)

	// A backup, as an operator takes one: the file at rest.
	reopen := func(from, to string) {
		require.NoError(t, h.sb.Close())
		require.NoError(t, h.st.Close())
		if from != "" {
			copyFile(t, from, to)
		}
		h.st = open()
		h.withConfig(t, nil, with)
	}
	reopen(path, path+".backup")

	cp, err := h.sb.Checkpoint(ctx) // the witness cosigns this
	require.NoError(t, err)
	require.NotZero(t, cp.Size)

	// The backup restored: the store no longer records that cosignature.
	reopen(path+".backup", path)
	require.NoError(t, h.sb.CheckLog(ctx), "the restored log holds what was signed")

	// The witness unreachable while the log grows and retention runs.
	w.down.Store(true)
	for range 5 {
		_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
	}
	h.clock.Advance(2 * time.Hour)
	_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
	require.NoError(t, err)
	rs, err := h.sb.Reap(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, rs.LogProblem, sb.ErrWitness, "the witness is down")
	require.Zero(t, rs.EventsPurged, "a configured witness the store holds no record of holds retention back")

	// Back: it is asked, cosigns from what it held, and retention goes on.
	w.down.Store(false)
	rs, err = h.sb.Reap(ctx)
	require.NoError(t, err)
	require.NoError(t, rs.LogProblem, "the witness cosigns: the log proves itself from what it held")
	require.NoError(t, h.sb.CheckLog(ctx))
	if rs.EventsPurged == 0 {
		rs, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		require.NoError(t, rs.LogProblem)
	}
	require.NotZero(t, rs.EventsPurged, "once the witness cosigned, retention purges")
}
