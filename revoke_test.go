package switchboard_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// Revoke's promise: nil means the revocation committed, an error that it
// did not. When the pass that marks the grant's queued todos cancelled
// fails after the revocation committed (a database failing over between
// the two), Revoke says nil — the revocation holds: the credential is
// refused and no claim takes those todos — and revoking again finishes
// the pass.
func TestRevokeHoldsWhenItsCancelPassFails(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &flakyStore{Store: b.open(t)}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			g, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			worker := h.worker(h.bob, "bob-desk", "inbox")
			var ids []string
			for range 3 {
				td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
				require.NoError(t, err)
				ids = append(ids, td.ID)
			}

			st.failUpdate.Store(2) // the revocation commits; the cancel pass fails
			require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID), "the revocation committed")
			st.failUpdate.Store(0)
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.ErrorIs(t, err, sb.ErrUnauthenticated, "the revocation holds")
			for _, id := range ids {
				td, err := h.sb.Get(ctx, worker, id)
				require.NoError(t, err)
				require.Equal(t, sb.TodoQueued, td.State, "the failed pass left it queued")
			}

			// Revoking again finishes the pass.
			require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))
			for _, id := range ids {
				td, err := h.sb.Get(ctx, worker, id)
				require.NoError(t, err)
				require.Equal(t, sb.TodoCancelled, td.State)
			}
			_, _, err = h.sb.Claim(ctx, worker, "inbox", nil)
			require.ErrorIs(t, err, sb.ErrQueueEmpty)

			// And the revocation's own transaction failing is an error,
			// with nothing changed.
			g2, friend2 := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", inboxCreate)
			st.failUpdate.Store(1)
			require.ErrorIs(t, h.sb.Revoke(ctx, h.bob, g2.ID), errUnreachable)
			st.failUpdate.Store(0)
			_, _, err = h.sb.CreateFor(ctx, friend2, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err, "not revoked")
		})
	}
}

// Revoking a grant that a later approval replaced changes nothing: its
// queued todos stay, as the replacement left them.
func TestRevokeOfAReplacedGrantKeepsItsTodos(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		g1, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		worker := h.worker(h.bob, "bob-desk", "inbox")
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbGet))
		got, err := h.sb.Get(ctx, worker, td.ID)
		require.NoError(t, err)
		require.Equal(t, sb.TodoQueued, got.State, "a replacement keeps the queued todos")
		require.NoError(t, h.sb.Revoke(ctx, h.bob, g1.ID))
		got, err = h.sb.Get(ctx, worker, td.ID)
		require.NoError(t, err)
		require.Equal(t, sb.TodoQueued, got.State, "revoking the replaced grant changes nothing")
	})
}

// Revoking a grant takes the queued work of the grants it replaced with it
// (that work was trusted only while it was live), and revoking it again
// finishes that too when the first pass failed: the same work either way.
func TestRevokeAgainFinishesTheWorkOfTheGrantsItReplaced(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &flakyStore{Store: b.open(t)}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			_, friend1 := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			worker := h.worker(h.bob, "bob-desk", "inbox")
			old, _, err := h.sb.CreateFor(ctx, friend1, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)
			g2, friend2 := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbGet))
			own, _, err := h.sb.CreateFor(ctx, friend2, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)

			st.failUpdate.Store(2) // the revocation commits; the cancel pass fails
			require.NoError(t, h.sb.Revoke(ctx, h.bob, g2.ID), "the revocation committed")
			st.failUpdate.Store(0)
			for _, id := range []string{old.ID, own.ID} {
				td, err := h.sb.Get(ctx, worker, id)
				require.NoError(t, err)
				require.Equal(t, sb.TodoQueued, td.State, "the failed pass left it queued")
			}

			require.NoError(t, h.sb.Revoke(ctx, h.alice, g2.ID), "revoked again, by the other side")
			for _, id := range []string{old.ID, own.ID} {
				td, err := h.sb.Get(ctx, worker, id)
				require.NoError(t, err)
				require.Equal(t, sb.TodoCancelled, td.State, "%s: the second revocation finishes the pass", id)
			}
		})
	}
}
