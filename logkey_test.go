package switchboard_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// A program's second run that made a new log key instead of keeping its
// own is told so by every check of the log — ErrUnknownLogKey, naming
// Config.LogKey, never "broken" — and signs nothing; run again with its
// key (or with the old key listed as a previous one), it carries on.
func TestNewLogKeyOnASecondRunSaysSo(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		first, firstPub, err := sb.NewLogKey("example.com/log")
		require.NoError(t, err)
		kept := sb.CheckpointFile(t.TempDir() + "/checkpoint")
		h.withConfig(t, nil, func(c *sb.Config) { c.LogKey = first; c.Checkpoints = kept })
		h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		cp, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		require.NoError(t, h.sb.Close())

		second, secondPub, err := sb.NewLogKey("example.com/log")
		require.NoError(t, err)
		// A verifier holding the wrong public key is told the same.
		_, err = sb.OpenCheckpoint(cp.Note, secondPub)
		assert.ErrorIs(t, err, sb.ErrUnknownLogKey, "OpenCheckpoint with another key")
		assert.ErrorIs(t, err, sb.ErrProof, "OpenCheckpoint with another key")
		_, err = sb.OpenCheckpoint(cp.Note, secondPub, firstPub)
		require.NoError(t, err, "the old key listed as a previous one")
		h.withConfig(t, nil, func(c *sb.Config) { c.LogKey = second; c.Checkpoints = kept })
		_, errCheckpoint := h.sb.Checkpoint(ctx)
		errCheck := h.sb.CheckLog(ctx)
		_, errVerify := h.sb.VerifyAudit(ctx)
		_, errReap := h.sb.Reap(ctx)
		require.NoError(t, errReap, "Reap goes on with the rest of its work")
		errReap = h.sb.LogProblem()
		for name, err := range map[string]error{"Checkpoint": errCheckpoint, "CheckLog": errCheck, "VerifyAudit": errVerify, "Reap's LogProblem": errReap} {
			require.Error(t, err, name)
			assert.ErrorIs(t, err, sb.ErrUnknownLogKey, name)
			assert.ErrorIs(t, err, sb.ErrAuditBroken, "%s: still a refusal to sign", name)
			var ae *sb.AuditError
			assert.True(t, errors.As(err, &ae), name)
			assert.Contains(t, err.Error(), "was Config.LogKey changed?", name)
			assert.NotContains(t, err.Error(), "broken", name)
			assert.Equal(t, 1, strings.Count(err.Error(), "switchboard: "), "%s: %s", name, err)
		}
		require.NoError(t, h.sb.Close())

		// Nothing was signed with the new key: the first key carries on.
		h.withConfig(t, nil, func(c *sb.Config) { c.LogKey = first; c.Checkpoints = kept })
		again, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, again.Size, cp.Size)
		require.NoError(t, h.sb.Close())

		// A rotation: the new key with the old one listed.
		h.withConfig(t, nil, func(c *sb.Config) {
			c.LogKey = second
			c.PreviousLogKeys = []string{firstPub}
			c.Checkpoints = kept
		})
		_, err = h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		_, err = h.sb.VerifyAudit(ctx)
		require.NoError(t, err)
	})
}
