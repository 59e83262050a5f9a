package switchboard_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// Times outside [1970, 2200) are refused where they enter, so none is stored
// where it would compare wrongly (UnixNano wraps after 2262).
func TestTimesOutsideTheRangeAreRefused(t *testing.T) {
	far := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	early := time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)
	eachBackend(t, func(t *testing.T, h *harness) {
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		worker := h.worker(h.bob, "bob-desk", "inbox")
		for _, at := range []time.Time{far, early, time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)} {
			before := lastSeq(t, h)
			_, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", NotBefore: at})
			require.ErrorIs(t, err, sb.ErrInvalidArgument, at)
			assert.Contains(t, err.Error(), "2200")
			assert.Equal(t, before, lastSeq(t, h))

			_, _, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList), ExpiresAt: at})
			require.ErrorIs(t, err, sb.ErrInvalidArgument, at)
			assert.Equal(t, before, lastSeq(t, h))
		}
		// Nothing was queued, so nothing is claimable, today or after a reap.
		_, err := h.sb.Reap(ctx)
		require.NoError(t, err)
		_, _, err = h.sb.Claim(ctx, worker, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty)

		// The edge of the range is fine and behaves: a todo delayed to 2199
		// is not claimable now, and a grant expiring in 2199 survives a reap.
		late := time.Date(2199, 12, 31, 0, 0, 0, 0, time.UTC)
		_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", NotBefore: late})
		require.NoError(t, err)
		_, _, err = h.sb.Claim(ctx, worker, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty, "delayed to 2199")
		_, vended, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList), ExpiresAt: late})
		require.NoError(t, err)
		_, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		_, err = h.sb.Authenticate(ctx, vended)
		require.NoError(t, err, "a grant expiring in 2199 is live after a reap")
	})
}

// A token is remembered until it can no longer be accepted: one whose exp is
// past the range is refused, and one within it stays spent across reaps.
func TestSpentTokensAreNotForgottenEarly(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		r := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "long-lived"}
		c := h.iss.Claims("alice", nonce(r.From, r.To, r.Scope, r.Why), h.clock.Now())
		c.Expiry = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
		r.IDToken = h.iss.Sign(c)
		_, _, err := h.sb.Request(ctx, r)
		require.ErrorIs(t, err, sb.ErrProvenance, "exp in 2300")

		c.Expiry = time.Date(2199, 1, 1, 0, 0, 0, 0, time.UTC)
		r.IDToken = h.iss.Sign(c)
		e, _, err := h.sb.Request(ctx, r)
		require.NoError(t, err)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
		h.clock.Advance(5 * time.Minute)
		_, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		_, _, err = h.sb.Request(ctx, r)
		require.ErrorIs(t, err, sb.ErrProvenance)
		assert.Contains(t, err.Error(), "already used")
	})
}
