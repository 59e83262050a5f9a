package switchboard_test

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
)

// The proof of an approval in hand: after Approve, one call gives the
// event that recorded it, and its Seq an inclusion proof a third party
// checks against a signed checkpoint. Each transition of an edge is found
// the same way, by either side only; a transition the edge never made is
// ErrNotFound at once; one logged before the index existed is still found.
func TestEdgeEventProvesADecision(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		key, pub, err := sb.NewLogKey("example.com/log")
		require.NoError(t, err)
		h.withConfig(t, nil, func(c *sb.Config) { c.LogKey = key })
		e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "let me send you work")
		require.NoError(t, err)

		requested, err := h.sb.EdgeEvent(ctx, h.alice, e.ID, sb.EventEdgeRequested)
		require.NoError(t, err)
		assert.Equal(t, sb.EventEdgeRequested, requested.Type)
		assert.Equal(t, e.ID, requested.Edge)
		_, err = h.sb.EdgeEvent(ctx, h.bob, e.ID, sb.EventEdgeApproved)
		require.ErrorIs(t, err, sb.ErrNotFound, "not approved yet: said at once, not waited for")

		g, err := h.sb.Approve(ctx, h.bob, e.ID, nil)
		require.NoError(t, err)
		approved, err := h.sb.EdgeEvent(ctx, h.bob, e.ID, sb.EventEdgeApproved)
		require.NoError(t, err)
		assert.Equal(t, sb.EventEdgeApproved, approved.Type)
		assert.Equal(t, e.ID, approved.Edge)
		assert.Greater(t, approved.Seq, requested.Seq)
		same, err := h.sb.EdgeEvent(ctx, h.alice, e.ID, sb.EventEdgeApproved)
		require.NoError(t, err, "the requesting side finds it too")
		assert.Equal(t, approved, same)

		// A third party checks it with the public key alone.
		cp, err := h.sb.Checkpoint(ctx)
		require.NoError(t, err)
		proof, err := h.sb.ProveEvent(ctx, approved.Seq, cp.Size)
		require.NoError(t, err)
		opened, err := sb.OpenCheckpoint(cp.Note, pub)
		require.NoError(t, err)
		got, err := sb.VerifyInclusion(opened, proof)
		require.NoError(t, err)
		assert.Equal(t, approved.Seq, got.Seq)
		assert.Equal(t, sb.EventEdgeApproved, got.Type)
		assert.Equal(t, e.ID, got.Edge)
		// And with golang.org/x/mod alone, as docs/audit-log.md shows.
		v, err := note.NewVerifier(pub)
		require.NoError(t, err)
		n, err := note.Open(cp.Note, note.VerifierList(v))
		require.NoError(t, err)
		lines := strings.Split(n.Text, "\n")
		size, err := strconv.ParseUint(lines[1], 10, 64)
		require.NoError(t, err)
		root, err := base64.StdEncoding.DecodeString(lines[2])
		require.NoError(t, err)
		require.NoError(t, tlog.CheckRecord(proof.Hashes, int64(size), tlog.Hash(root), int64(proof.Index), tlog.RecordHash(proof.Leaf)))
		require.Contains(t, string(proof.Leaf), `"type":"edge.approved"`)

		_, err = h.sb.EdgeEvent(ctx, h.carol, e.ID, sb.EventEdgeApproved)
		require.ErrorIs(t, err, sb.ErrNotFound, "a human on neither side learns nothing")
		_, err = h.sb.EdgeEvent(ctx, h.bob, "edge_nope", sb.EventEdgeApproved)
		require.ErrorIs(t, err, sb.ErrNotFound)
		_, err = h.sb.EdgeEvent(ctx, h.bob, e.ID, sb.EventTodoCreated)
		require.ErrorIs(t, err, sb.ErrInvalidArgument)

		require.NoError(t, h.sb.Revoke(ctx, h.alice, g.ID))
		revoked, err := h.sb.EdgeEvent(ctx, h.bob, e.ID, sb.EventEdgeRevoked)
		require.NoError(t, err)
		assert.Greater(t, revoked.Seq, approved.Seq)
		again, err := h.sb.EdgeEvent(ctx, h.bob, e.ID, sb.EventEdgeApproved)
		require.NoError(t, err, "an earlier transition stays found")
		assert.Equal(t, approved.Seq, again.Seq)
		_, err = h.sb.EdgeEvent(ctx, h.bob, e.ID, sb.EventEdgeDenied)
		require.ErrorIs(t, err, sb.ErrNotFound)

		// Logged by a release before the index: found by reading the log.
		require.NoError(t, h.st.Update(ctx, func(tx store.Tx) error {
			return tx.Delete("edge_events", []byte(e.ID+"\x00"+string(sb.EventEdgeApproved)))
		}))
		legacy, err := h.sb.EdgeEvent(ctx, h.bob, e.ID, sb.EventEdgeApproved)
		require.NoError(t, err)
		assert.Equal(t, approved, legacy)
	})
}
