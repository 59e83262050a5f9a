package switchboard_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

var replacements int

// replace has alice's agent ask bob-desk again with scope and bob approve
// it: the new grant replaces the live one in the same direction.
func replace(t *testing.T, h *harness, sc sb.Scope) (sb.Grant, sb.Credential) {
	t.Helper()
	replacements++
	e, err := h.request(h.alice, "alice-bot", "bob-desk", sc, fmt.Sprintf("again, please (%d)", replacements))
	require.NoError(t, err)
	_, err = h.sb.Approve(ctx, h.bob, e.ID, nil)
	require.NoError(t, err)
	g, cred, err := h.sb.Collect(ctx, e.ID, testSecret)
	require.NoError(t, err)
	return g, cred
}

// The edge states' doc: a replacement "keeps the queued todos", which came
// from a party still trusted. Work a grant queued before a later approval
// in the same direction replaced it is handed out like any other: alone in
// the queue (Claim), beside other work (ClaimN), by CompleteAndClaim and
// by Work. Once a grant that replaced it is revoked, the work it vouched
// for goes with it: cancelled, never handed out.
func TestReplacedGrantsWorkIsHandedOut(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		create := scope("inbox", sb.VerbCreateFor)
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", create)
		w := h.worker(h.bob, "bob-desk", "inbox")
		invoice := func(c sb.Credential, title string) sb.Todo {
			t.Helper()
			td, _, err := h.sb.CreateFor(ctx, c, "inbox", sb.NewTodo{Kind: "invoice", Title: title})
			require.NoError(t, err)
			return td
		}
		claimed := func(td sb.Todo) {
			t.Helper()
			got, err := h.sb.InspectTodo(ctx, td.ID)
			require.NoError(t, err)
			assert.Contains(t, []sb.TodoState{sb.TodoLeased, sb.TodoDone}, got.State, "%s handed out", td.Title)
		}

		// Alone in the queue.
		alone := invoice(cred, "alone")
		_, cred2 := replace(t, h, scope("inbox", sb.VerbCreateFor, sb.VerbGet))
		_, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated, "the replaced credential is dead")
		got, l, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err, "alone in the queue")
		assert.Equal(t, alone.ID, got.ID)
		require.NoError(t, h.sb.Complete(ctx, w, l, nil))

		// Beside other work.
		beside := invoice(cred2, "beside")
		_, cred3 := replace(t, h, create)
		other := invoice(cred3, "other")
		cs, err := h.sb.ClaimN(ctx, w, "inbox", 2, nil)
		require.NoError(t, err)
		require.Len(t, cs, 2)
		claimed(beside)
		claimed(other)
		for _, c := range cs {
			require.NoError(t, h.sb.Complete(ctx, w, c.Lease, nil))
		}

		// CompleteAndClaim.
		first, second := invoice(cred3, "first"), invoice(cred3, "second")
		_, cred4 := replace(t, h, create)
		_, l, err = h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		claimed(first)
		next, err := h.sb.CompleteAndClaim(ctx, w, l, nil, 1, nil)
		require.NoError(t, err)
		require.Len(t, next, 1)
		assert.Equal(t, second.ID, next[0].Todo.ID)
		require.NoError(t, h.sb.Complete(ctx, w, next[0].Lease, nil))

		// Work.
		worked := invoice(cred4, "worked")
		g5, cred5 := replace(t, h, create)
		var ran []string
		require.NoError(t, h.sb.Work(ctx, w, "inbox", func(_ context.Context, td sb.Todo) ([]byte, error) {
			ran = append(ran, td.ID)
			return nil, nil
		}, &sb.WorkOptions{UntilEmpty: true}))
		assert.Equal(t, []string{worked.ID}, ran)

		// The grant that replaced them revoked: their work goes with it.
		left := invoice(cred5, "left")
		_, cred6 := replace(t, h, create)
		older := invoice(cred6, "older")
		_ = older
		g6, err := h.sb.Authenticate(ctx, cred6)
		require.NoError(t, err)
		require.NoError(t, h.sb.Revoke(ctx, h.bob, g6.ID))
		_, _, err = h.sb.Claim(ctx, w, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty, "nothing of a revoked line is handed out")
		for _, td := range []sb.Todo{left, older} {
			got, err := h.sb.InspectTodo(ctx, td.ID)
			require.NoError(t, err)
			assert.Equal(t, sb.TodoCancelled, got.State, "%s cancelled with the grant that vouched for it", td.Title)
		}
		_ = g5
	})
}

// ApproveOptions.ExpiresAt: "from then on its credential fails as a
// revoked one does"; TodoCancelled: cancelled when "the grant that created
// it was revoked (or expired) before anyone claimed it". At the instant a
// grant expires — before any Reap — none of its queued work is handed out
// by any claim verb (Claim, ClaimN, CompleteAndClaim, Work): each claim
// that meets such a todo cancels it ("grant expired"), commits that, and
// goes on to the next, or answers ErrQueueEmpty; its webhooks hear of
// nothing more (outcomes, and arrivals for an owner's expired grant), and
// Connections no longer lists it. Work claimed before the instant finishes.
func TestExpiredGrantIsDeadAtItsInstant(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		rcv := newReceiver(t, 0)
		_, alice, w := hookHarness(t, h, &sb.WebhookConfig{Key: webhookKey, Origins: []string{rcv.srv.URL}, AllowPrivate: true, AllowHTTP: true}, false)
		e, err := h.request(h.carol, "carol-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbWebhook), "for an hour")
		require.NoError(t, err)
		expires := h.clock.Now().Add(time.Hour)
		g, err := h.sb.ApproveWith(ctx, h.bob, e.ID, sb.ApproveOptions{ExpiresAt: expires})
		require.NoError(t, err)
		_, carol, err := h.sb.Collect(ctx, e.ID, testSecret)
		require.NoError(t, err)
		_, _, err = h.sb.RegisterWebhook(ctx, carol, rcv.srv.URL+"/carol")
		require.NoError(t, err)
		_, watcher, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbWebhook), ExpiresAt: expires})
		require.NoError(t, err)
		_, _, err = h.sb.RegisterWebhook(ctx, watcher, rcv.srv.URL+"/arrivals", "inbox")
		require.NoError(t, err)

		// The queue, highest priority first: carol's (expiring) work
		// before each of alice's, so each claim verb meets one of carol's.
		var expired, live []sb.Todo
		for i := range 5 {
			td, _, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "carol", Priority: 100 - 2*i})
			require.NoError(t, err)
			expired = append(expired, td)
			if i < 4 {
				td, _, err = h.sb.CreateFor(ctx, alice, "inbox", sb.NewTodo{Kind: "alice", Priority: 97 - 2*i})
				require.NoError(t, err)
				live = append(live, td)
			}
		}
		held, lease, err := h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: 2 * time.Hour}) // before the expiry: it finishes
		require.NoError(t, err)
		require.Equal(t, expired[0].ID, held.ID)
		conns, err := h.sb.Connections(ctx, h.bob)
		require.NoError(t, err)
		require.True(t, hasGrant(conns, g.ID))
		before, err := h.sb.InspectTodos(ctx, "~system/webhooks", nil)
		require.NoError(t, err)

		h.clock.Advance(time.Hour) // exactly ExpiresAt; no Reap
		cancelled := func(i int) {
			t.Helper()
			got, err := h.sb.InspectTodo(ctx, expired[i].ID)
			require.NoError(t, err)
			assert.Equal(t, sb.TodoCancelled, got.State, "carol's todo %d", i)
			evs, err := h.sb.Events(ctx, 0, 1000)
			require.NoError(t, err)
			assert.True(t, slices.ContainsFunc(evs, func(e sb.Event) bool {
				return e.Type == sb.EventTodoCancelled && e.Todo == expired[i].ID && e.Detail == "grant expired"
			}), "the cancellation is audited, saying why")
		}
		got, l1, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		assert.Equal(t, live[0].ID, got.ID, "Claim")
		cancelled(1)
		cs, err := h.sb.ClaimN(ctx, w, "inbox", 1, nil)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		assert.Equal(t, live[1].ID, cs[0].Todo.ID, "ClaimN")
		cancelled(2)
		next, err := h.sb.CompleteAndClaim(ctx, w, l1, nil, 1, nil)
		require.NoError(t, err)
		require.Len(t, next, 1)
		assert.Equal(t, live[2].ID, next[0].Todo.ID, "CompleteAndClaim")
		cancelled(3)
		var ran []string
		require.NoError(t, h.sb.Work(ctx, w, "inbox", func(_ context.Context, td sb.Todo) ([]byte, error) {
			ran = append(ran, td.ID)
			return nil, nil
		}, &sb.WorkOptions{UntilEmpty: true}))
		assert.Equal(t, []string{live[3].ID}, ran, "Work")
		cancelled(4)

		// Alone in the queue: the claim answers empty, and what it
		// cancelled stays cancelled.
		require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID)) // (Revoke of an expired grant changes nothing)
		require.NoError(t, h.sb.Complete(ctx, w, lease, []byte(`{"ok":true}`)), "claimed before the instant: finishes")
		require.NoError(t, h.sb.Complete(ctx, w, cs[0].Lease, nil))
		require.NoError(t, h.sb.Complete(ctx, w, next[0].Lease, nil))

		conns, err = h.sb.Connections(ctx, h.bob)
		require.NoError(t, err)
		assert.False(t, hasGrant(conns, g.ID), "Connections lists no expired grant")
		_, _, err = h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated)
		_, _, err = h.sb.CreateFor(ctx, alice, "inbox", sb.NewTodo{Kind: "arrives"})
		require.NoError(t, err)
		after, err := h.sb.InspectTodos(ctx, "~system/webhooks", nil)
		require.NoError(t, err)
		assert.Equal(t, len(before), len(after), "no delivery queued after the instant: no outcome for carol's webhook, no arrival for the expired watcher")
	})
}

// A claim that meets only work it may not hand out answers ErrQueueEmpty
// — and the cancellations it made commit: the todo does not stay queued.
func TestAClaimThatAnswersEmptyKeepsWhatItCancelled(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		e, err := h.request(h.carol, "carol-bot", "bob-desk", scope("inbox", sb.VerbCreateFor), "for an hour")
		require.NoError(t, err)
		_, err = h.sb.ApproveWith(ctx, h.bob, e.ID, sb.ApproveOptions{ExpiresAt: h.clock.Now().Add(time.Hour)})
		require.NoError(t, err)
		_, carol, err := h.sb.Collect(ctx, e.ID, testSecret)
		require.NoError(t, err)
		td, _, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		w := h.worker(h.bob, "bob-desk", "inbox")
		h.clock.Advance(time.Hour)
		_, _, err = h.sb.Claim(ctx, w, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty)
		got, err := h.sb.InspectTodo(ctx, td.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoCancelled, got.State, "committed, not rolled back with the empty answer")
	})
}

func hasGrant(cs []sb.Connection, id string) bool {
	for _, c := range cs {
		if c.Grant.ID == id {
			return true
		}
	}
	return false
}
