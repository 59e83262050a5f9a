package switchboard_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// An approval that replaces a grant already past its expiry (before any
// Reap) revokes it as expired, "its queued todos cancelled" (found from
// outside: the cancel pass ran only for Revoke and Reap, and the grant's
// expiry entry was gone, so its work stayed queued for good). Every
// transaction that revokes now cancels the revoked grant's queued work
// after it commits (updateWith).
func TestApproveOverAnExpiredGrantCancelsItsWork(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		sc := scope("inbox", sb.VerbCreateFor)
		e, err := h.request(h.carol, "carol-bot", "bob-desk", sc, "for an hour")
		require.NoError(t, err)
		_, err = h.sb.ApproveWith(ctx, h.bob, e.ID, sb.ApproveOptions{ExpiresAt: h.clock.Now().Add(time.Hour)})
		require.NoError(t, err)
		_, carol, err := h.sb.Collect(ctx, e.ID, testSecret)
		require.NoError(t, err)
		td, _, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)

		h.clock.Advance(time.Hour) // expired; no Reap
		e2, err := h.request(h.carol, "carol-bot", "bob-desk", sc, "again")
		require.NoError(t, err)
		_, err = h.sb.Approve(ctx, h.bob, e2.ID, nil) // replaces the expired grant
		require.NoError(t, err)
		_, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		h.clock.Advance(time.Minute)
		_, err = h.sb.Reap(ctx)
		require.NoError(t, err)

		got, err := h.sb.InspectTodo(ctx, td.ID)
		require.NoError(t, err)
		qs, err := h.sb.InspectQueues(ctx)
		require.NoError(t, err)
		t.Logf("todo state after Approve + 2 Reaps: %s; queues: %+v", got.State, qs)
		assert.Equal(t, sb.TodoCancelled, got.State, "replaceEdge: 'revoked as expired, its queued todos cancelled'")
	})
}

// A grant that replaced another but whose credential was never collected
// lapses at CollectBy, as Reap would record it: from that instant it
// vouches for nothing — the replaced grant's work is not handed out and
// Connections does not list it (Grant.live: one rule, CollectBy included).
func TestALapsedReplacementVouchesForNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		sc := scope("inbox", sb.VerbCreateFor)
		_, carol := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", sc)
		td, _, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		e2, err := h.request(h.carol, "carol-bot", "bob-desk", sc, "again")
		require.NoError(t, err)
		g2, err := h.sb.Approve(ctx, h.bob, e2.ID, nil) // never collected
		require.NoError(t, err)
		h.clock.Advance(g2.CollectBy.Sub(h.clock.Now())) // the pickup window is over
		_, _, err = h.sb.Collect(ctx, e2.ID, testSecret)
		require.Error(t, err, "lapsed: cannot be collected")

		conns, err := h.sb.Connections(ctx, h.bob)
		require.NoError(t, err)
		listed := hasGrant(conns, g2.ID)
		w := h.worker(h.bob, "bob-desk", "inbox")
		got, _, claimErr := h.sb.Claim(ctx, w, "inbox", nil)
		t.Logf("lapsed grant listed in Connections: %v; claim: %v %v (todo %s)", listed, got.ID, claimErr, td.ID)
		assert.False(t, listed, "Connections lists a grant that lapsed")
		assert.ErrorIs(t, claimErr, sb.ErrQueueEmpty, "the replaced grant's work is vouched for by a lapsed grant; after Reap it would be cancelled")
	})
}
