package switchboard_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// The requesting agent collects its own credential, exactly once, with the
// secret whose verifier its request carried; every refusal reads the same.
func TestTheRequesterCollectsItsCredentialOnce(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &faultyStore{Store: b.open(t), tables: map[string]bool{}}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			secret, pickup := sb.NewPickup()
			r := sb.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "pickup", Pickup: pickup}
			r.IDToken = h.iss.RequestToken("alice", r, h.clock.Now())
			e, _, err := h.sb.Request(ctx, r)
			require.NoError(t, err)

			unknown := func() string {
				_, _, err := h.sb.Collect(ctx, "edge_doesnotexist", secret)
				require.ErrorIs(t, err, sb.ErrNotFound)
				return err.Error()
			}()
			refusedSame := func(edgeID, secret, why string) {
				t.Helper()
				before := lastSeq(t, h)
				_, c, err := h.sb.Collect(ctx, edgeID, secret)
				require.ErrorIs(t, err, sb.ErrNotFound, why)
				assert.Equal(t, unknown, err.Error(), why)
				assert.Empty(t, c)
				assert.Equal(t, before, lastSeq(t, h), why)
			}
			refusedSame(e.ID, secret, "still pending")

			g, err := h.sb.Approve(ctx, h.bob, e.ID, nil)
			require.NoError(t, err)
			assert.True(t, g.CollectBy.Equal(h.clock.Now().Add(7*24*time.Hour)), "default window: 7 days, got %v", g.CollectBy)
			other, _ := sb.NewPickup()
			refusedSame(e.ID, other, "a wrong secret")
			near := []byte(secret)
			if near[len(near)-1] == 'A' {
				near[len(near)-1] = 'B'
			} else {
				near[len(near)-1] = 'A'
			}
			refusedSame(e.ID, string(near), "a near secret (last character changed)")
			_, _, err = h.sb.Collect(ctx, e.ID, "not-a-secret")
			require.ErrorIs(t, err, sb.ErrInvalidArgument)

			got, cred, err := h.sb.Collect(ctx, e.ID, secret)
			require.NoError(t, err)
			assert.Equal(t, g.ID, got.ID)
			assert.False(t, got.CollectedAt.IsZero())
			_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err, "the collected credential works")
			refusedSame(e.ID, secret, "a second collection")

			// Neither the secret nor the credential is stored anywhere.
			for table, kv := range dump(t, st, st.tableList()) {
				for k, v := range kv {
					assert.NotContains(t, k+v, secret[4:], "table %s holds the pickup secret", table)
					assert.NotContains(t, k+v, string(cred)[4:], "table %s holds the credential", table)
				}
			}

			// Revoked before collection: nothing to collect.
			s2, p2 := sb.NewPickup()
			r2 := sb.FriendRequest{From: "carol-bot", To: "bob-desk", Scope: inboxCreate, Why: "pickup", Pickup: p2}
			r2.IDToken = h.iss.RequestToken("carol", r2, h.clock.Now())
			e2, _, err := h.sb.Request(ctx, r2)
			require.NoError(t, err)
			g2, err := h.sb.Approve(ctx, h.bob, e2.ID, nil)
			require.NoError(t, err)
			require.NoError(t, h.sb.Revoke(ctx, h.bob, g2.ID))
			refusedSame(e2.ID, s2, "revoked")

			// The window lapses.
			s3, p3 := sb.NewPickup()
			r3 := sb.FriendRequest{From: "alice-bot", To: "carol-bot", Scope: inboxCreate, Why: "pickup", Pickup: p3}
			r3.IDToken = h.iss.RequestToken("alice", r3, h.clock.Now())
			e3, _, err := h.sb.Request(ctx, r3)
			require.NoError(t, err)
			_, err = h.sb.Approve(ctx, h.carol, e3.ID, nil)
			require.NoError(t, err)
			h.clock.Advance(7 * 24 * time.Hour)
			refusedSame(e3.ID, s3, "after the window")

			// Reap revokes the uncollected grant and its edge, so the
			// friendship does not linger half-made.
			stats, err := h.sb.Reap(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, stats.GrantsExpired)
			got3, err := h.sb.Edge(ctx, h.carol, e3.ID)
			require.NoError(t, err)
			assert.Equal(t, sb.EdgeRevoked, got3.State)
			refusedSame(e3.ID, s3, "after the reap")
			stats, err = h.sb.Reap(ctx)
			require.NoError(t, err)
			assert.Zero(t, stats.GrantsExpired, "a collected grant is not reaped for its old deadline")
			_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err, "alice's collected credential still works")
		})
	}
}

// The pickup verifier is part of what the ID token proves: whoever relays a
// request cannot swap in a verifier of their own and collect the
// credential. A request without one is refused.
func TestThePickupIsBoundToTheRequest(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, pickup := sb.NewPickup()
		r := sb.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "bound", Pickup: pickup}
		r.IDToken = h.iss.RequestToken("alice", r, h.clock.Now())
		_, relay := sb.NewPickup()
		swapped := r
		swapped.Pickup = relay
		before := lastSeq(t, h)
		_, _, err := h.sb.Request(ctx, swapped)
		refused(t, h, before, err, "nonce")

		for _, bad := range []string{"", "short", pickup + "A", pickup[:42] + "="} {
			nr := r
			nr.Pickup = bad
			_, _, err := h.sb.Request(ctx, nr)
			require.ErrorIs(t, err, sb.ErrInvalidArgument, bad)
		}
		_, created, err := h.sb.Request(ctx, r)
		require.NoError(t, err)
		assert.True(t, created)
	})
}
