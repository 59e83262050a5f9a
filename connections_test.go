package switchboard_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
)

// Connections shows each side of a friend grant to its human, with the
// edge and the newest todo's time; revocation removes it from both; a Vend
// is its grantor's in both directions.
func TestConnections(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		none, err := h.sb.Connections(ctx, h.alice)
		require.NoError(t, err)
		require.Empty(t, none)

		g, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", switchboard.VerbCreateFor, switchboard.VerbGet))
		for _, who := range []switchboard.Human{h.alice, h.bob} {
			cs, err := h.sb.Connections(ctx, who)
			require.NoError(t, err)
			require.Len(t, cs, 1)
			require.Equal(t, g.ID, cs[0].Grant.ID)
			require.NotNil(t, cs[0].Edge)
			require.Equal(t, h.alice, cs[0].Edge.Requester)
			require.True(t, cs[0].LastUsed.IsZero(), "no todo yet")
			want := switchboard.Granted
			if who == h.alice {
				want = switchboard.Received
			}
			require.Equal(t, want, cs[0].Direction)
		}
		cs, err := h.sb.Connections(ctx, h.carol)
		require.NoError(t, err)
		require.Empty(t, cs, "carol is on neither side")

		var last time.Time
		for i := range 5 {
			h.clock.Advance(time.Minute)
			td, _, err := h.sb.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k", DedupKey: string(rune('a' + i))})
			require.NoError(t, err)
			last = td.CreatedAt
		}
		cs, err = h.sb.Connections(ctx, h.bob)
		require.NoError(t, err)
		require.True(t, last.Equal(cs[0].LastUsed), "last used %v, want %v", cs[0].LastUsed, last)

		// The todos it created, for either side; outstanding ones by state.
		todos, err := h.sb.GrantTodos(ctx, h.bob, g.ID, &switchboard.ListOptions{State: switchboard.TodoQueued})
		require.NoError(t, err)
		require.Len(t, todos, 5)
		page, err := h.sb.GrantTodos(ctx, h.alice, g.ID, &switchboard.ListOptions{Limit: 2, After: todos[1].ID})
		require.NoError(t, err)
		require.Equal(t, []string{todos[2].ID, todos[3].ID}, []string{page[0].ID, page[1].ID})
		_, err = h.sb.GrantTodos(ctx, h.carol, g.ID, nil)
		require.ErrorIs(t, err, switchboard.ErrNotFound, "a grant of others is not found")
		_, err = h.sb.GrantTodos(ctx, h.bob, "grant_nope", nil)
		require.ErrorIs(t, err, switchboard.ErrNotFound)

		// Revoked by alice's side: gone from both lists; its todos still listed.
		require.NoError(t, h.sb.Revoke(ctx, h.alice, g.ID))
		for _, who := range []switchboard.Human{h.alice, h.bob} {
			cs, err := h.sb.Connections(ctx, who)
			require.NoError(t, err)
			require.Empty(t, cs)
		}
		todos, err = h.sb.GrantTodos(ctx, h.bob, g.ID, nil)
		require.NoError(t, err)
		require.Len(t, todos, 5)
		require.Equal(t, switchboard.TodoCancelled, todos[0].State)

		// A Vend: bob's own agent, in both of bob's directions.
		vg, _, err := h.sb.Vend(ctx, h.bob, switchboard.VendRequest{Agent: "bob-desk", Scope: scope("inbox", switchboard.VerbClaim)})
		require.NoError(t, err)
		cs, err = h.sb.Connections(ctx, h.bob)
		require.NoError(t, err)
		require.Len(t, cs, 2)
		require.Equal(t, vg.ID, cs[0].Grant.ID)
		require.Nil(t, cs[0].Edge)
	})
}

// An expired grant leaves the connections when Reap revokes it.
func TestConnectionsAfterExpiry(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, _, err := h.sb.Vend(ctx, h.carol, switchboard.VendRequest{Agent: "carol-bot", Scope: scope("inbox", switchboard.VerbClaim), ExpiresAt: h.clock.Now().Add(time.Hour)})
		require.NoError(t, err)
		cs, err := h.sb.Connections(ctx, h.carol)
		require.NoError(t, err)
		require.Len(t, cs, 2)
		h.clock.Advance(2 * time.Hour)
		_, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		cs, err = h.sb.Connections(ctx, h.carol)
		require.NoError(t, err)
		require.Empty(t, cs)
	})
}

// Every listing takes the same limits: the operator's view as well.
func TestListingLimits(t *testing.T) {
	h := newHarness(t, memoryStore(t))
	_, err := h.sb.InspectTodos(ctx, "bob-desk/inbox", &switchboard.ListOptions{Limit: 1001})
	require.ErrorIs(t, err, switchboard.ErrInvalidArgument)
	_, err = h.sb.GrantTodos(ctx, h.bob, "grant_x", &switchboard.ListOptions{Limit: 1001})
	require.ErrorIs(t, err, switchboard.ErrInvalidArgument)
}
