package switchboard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
)

func TestRequestRejectsBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		long := strings.Repeat("x", 1025)
		many := sb.Scope{}
		for i := 0; i < 33; i++ {
			many = append(many, sb.ScopeEntry{Queue: "q" + strings.Repeat("x", i), Verbs: []sb.Verb{sb.VerbCreateFor}})
		}
		cases := []struct {
			name          string
			from, to, why string
			sc            sb.Scope
			want          error
		}{
			{"empty from", "", "bob-desk", "w", inboxCreate, sb.ErrInvalidArgument},
			{"empty to", "alice-bot", "", "w", inboxCreate, sb.ErrInvalidArgument},
			{"self", "alice-bot", "alice-bot", "w", inboxCreate, sb.ErrInvalidArgument},
			{"empty why", "alice-bot", "bob-desk", "  ", inboxCreate, sb.ErrInvalidArgument},
			{"oversized why", "alice-bot", "bob-desk", long, inboxCreate, sb.ErrInvalidArgument},
			{"control characters in why", "alice-bot", "bob-desk", "ok\x1b[2Jfake", inboxCreate, sb.ErrInvalidArgument},
			{"bidi override in why", "alice-bot", "bob-desk", "ok\u202efake", inboxCreate, sb.ErrInvalidArgument},
			{"empty scope", "alice-bot", "bob-desk", "w", nil, sb.ErrInvalidArgument},
			{"too many queues", "alice-bot", "bob-desk", "w", many, sb.ErrInvalidArgument},
			{"unknown verb", "alice-bot", "bob-desk", "w", scope("inbox", "delete_everything"), sb.ErrInvalidArgument},
			{"owner-only verb", "alice-bot", "bob-desk", "w", scope("inbox", sb.VerbCancel), sb.ErrInvalidArgument},
			{"reserved queue", "alice-bot", "bob-desk", "w", scope(sb.ApprovalsQueue, sb.VerbGet), sb.ErrInvalidArgument},
			{"bad queue name", "alice-bot", "bob-desk", "w", scope("in box", sb.VerbCreateFor), sb.ErrInvalidArgument},
			{"oversized persona id", strings.Repeat("a", 129), "bob-desk", "w", inboxCreate, sb.ErrInvalidArgument},
			{"unknown requesting agent", "ghost-bot", "bob-desk", "w", inboxCreate, sb.ErrNotFound},
			{"unknown target", "alice-bot", "ghost", "w", inboxCreate, sb.ErrNotFound},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := lastSeq(t, h)
				_, err := h.request(h.alice, tc.from, tc.to, tc.sc, tc.why)
				require.ErrorIs(t, err, tc.want)
				assert.Equal(t, before, lastSeq(t, h))
			})
		}
	})
}

func TestCreateForRejectsBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		cases := []struct {
			name string
			n    sb.NewTodo
		}{
			{"empty kind", sb.NewTodo{}},
			{"oversized payload", sb.NewTodo{Kind: "k", Payload: make([]byte, 64<<10+1)}},
			{"oversized title", sb.NewTodo{Kind: "k", Title: strings.Repeat("t", 257)}},
			{"newline in title", sb.NewTodo{Kind: "k", Title: "a\nb"}},
			{"oversized dedup key", sb.NewTodo{Kind: "k", DedupKey: strings.Repeat("d", 257)}},
			{"priority out of range", sb.NewTodo{Kind: "k", Priority: 1 << 30}},
			{"negative max attempts", sb.NewTodo{Kind: "k", MaxAttempts: -1}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := lastSeq(t, h)
				_, _, err := h.sb.CreateFor(ctx, cred, "inbox", tc.n)
				require.ErrorIs(t, err, sb.ErrInvalidArgument)
				assert.Equal(t, before, lastSeq(t, h))
			})
		}
		_, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", Payload: make([]byte, 64<<10)})
		require.NoError(t, err, "a payload of exactly the limit is accepted")
		_, _, err = h.sb.CreateFor(ctx, sb.Credential(""), "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated)
		_, _, err = h.sb.CreateFor(ctx, sb.Credential("sbg_short"), "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated)
	})
}

func TestHumanActsRejectBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "w")
		require.NoError(t, err)
		_, err = h.sb.Approve(ctx, sb.Human{}, e.ID, nil)
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		_, err = h.sb.Approve(ctx, h.bob, "edge_doesnotexist", nil)
		require.ErrorIs(t, err, sb.ErrNotFound)
		require.ErrorIs(t, h.sb.Deny(ctx, h.bob, ""), sb.ErrNotFound)
		require.ErrorIs(t, h.sb.Revoke(ctx, h.bob, "grant_nope"), sb.ErrNotFound)
		_, err = h.sb.Edge(ctx, h.carol, e.ID)
		require.ErrorIs(t, err, sb.ErrNotFound)

		_, err = h.sb.Publish(ctx, sb.Persona{ID: "bob-desk", Owner: h.alice, Card: card("x")})
		require.ErrorIs(t, err, sb.ErrConflict, "a persona id owned by someone else")
		_, err = h.sb.Publish(ctx, sb.Persona{ID: "x", Owner: h.alice, Card: agentcard.Card{Name: "x"}})
		require.ErrorIs(t, err, sb.ErrInvalidArgument, "card without description and version")
		_, err = h.sb.Publish(ctx, sb.Persona{ID: "_reserved", Owner: h.alice, Card: card("x")})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		_, _, err = h.sb.Vend(ctx, h.alice, sb.VendRequest{Agent: "alice-bot", Scope: inboxCreate, ExpiresAt: h.clock.Now().Add(-1)})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
	})
}

func TestCancelledContextAndClosedStore(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, _, err := h.sb.CreateFor(cctx, cred, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, context.Canceled)
		_, _, err = h.sb.Request(cctx, sb.FriendRequest{Pickup: testPickup, From: "carol-bot", To: "bob-desk", Scope: inboxCreate, Why: "w",
			IDToken: h.token(h.carol, "carol-bot", "bob-desk", inboxCreate, "w")})
		require.ErrorIs(t, err, context.Canceled)

		require.NoError(t, h.st.Close())
		_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrClosed)
		_, err = h.sb.Lookup(ctx, "bob-desk")
		require.ErrorIs(t, err, sb.ErrClosed)
	})
}

// A failure at any write inside Request or Approve leaves the store exactly
// as it was: the operation is one transaction.
func TestFailingStepLeavesStoreUnchanged(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &faultyStore{Store: b.open(t), tables: map[string]bool{}}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			// Touch every table once so dumps cover them all.
			_, cred := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", inboxCreate)
			_, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", DedupKey: "d"})
			require.NoError(t, err)

			tok := h.token(h.alice, "alice-bot", "bob-desk", inboxCreate, "w")
			request := func() error {
				_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "w", IDToken: tok})
				return err
			}
			var edgeID string
			approve := func() error {
				_, err := h.sb.Approve(ctx, h.bob, edgeID, nil)
				return err
			}
			for _, op := range []struct {
				name string
				run  func() error
			}{{"request", request}, {"approve", approve}} {
				failures := 0
				for n := 1; ; n++ {
					before := dump(t, st, st.tableList())
					st.failAt = n
					err := op.run()
					st.failAt = 0
					if err == nil {
						break
					}
					require.True(t, errors.Is(err, errInjected), "%s: put %d: %v", op.name, n, err)
					failures++
					assert.Equal(t, before, dump(t, st, st.tableList()), "%s: failing put %d left a partial write", op.name, n)
				}
				assert.Greater(t, failures, 3, "%s wrote fewer records than expected", op.name)
				if op.name == "request" {
					aps, err := h.sb.Approvals(ctx, h.bob)
					require.NoError(t, err)
					require.Len(t, aps, 1)
					edgeID = aps[0].Approval.EdgeID
				}
			}
		})
	}
}
