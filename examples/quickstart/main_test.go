package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
)

// The quickstart with -dir is a program that survives its second run: the
// same humans and agents, the same log extended and checked against the
// checkpoint the first run kept outside the store.
func TestQuickstartRunsTwiceOnOneDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, run(ctx, dir), "first run")
	first := audit(t, dir)
	require.NoError(t, run(ctx, dir), "second run, on the same store, keys and checkpoint")
	second := audit(t, dir)
	require.Greater(t, second.Size, first.Size, "the second run's checkpoint extends the first's")

	// A program that lost its log key is told so, not that its log broke.
	require.NoError(t, os.Remove(filepath.Join(dir, "log.key")))
	err := run(ctx, dir)
	require.ErrorIs(t, err, switchboard.ErrUnknownLogKey)
	require.ErrorContains(t, err, "was Config.LogKey changed?")
}

// audit opens the store dir holds as a verifier would, with the log's key
// from dir, and returns the checkpoint kept beside it, checked: its
// signature, and the whole log against it.
func audit(t *testing.T, dir string) switchboard.Checkpoint {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(dir, "log.key"))
	require.NoError(t, err)
	st, err := bolt.Open(filepath.Join(dir, "switchboard.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	s, err := switchboard.New(st, &switchboard.Config{LogKey: strings.TrimSpace(string(key))})
	require.NoError(t, err)
	defer s.Close()
	note, err := os.ReadFile(filepath.Join(dir, "checkpoint"))
	require.NoError(t, err)
	cp, err := switchboard.OpenCheckpoint(note, s.LogVerifierKey())
	require.NoError(t, err)
	rep, err := s.VerifyAudit(context.Background(), cp)
	require.NoError(t, err)
	require.Equal(t, cp.Size, rep.TreeSize, "the kept checkpoint is the log's last")
	return cp
}
