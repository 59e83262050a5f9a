package switchboard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
)

func next(t *testing.T, sub *sb.Subscription) sb.Event {
	t.Helper()
	select {
	case e, ok := <-sub.C:
		require.True(t, ok, "subscription ended: %v", sub.Err())
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("no event")
	}
	return sb.Event{}
}

// A subscription sees every committed change that matches, in commit
// order, after commit; a reader that does not read blocks nothing; a new
// subscription resumes from a seq.
func TestSubscriptionsFollowTheLog(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		start := lastSeq(t, h)
		all := h.sb.Subscribe(ctx, start, nil)
		defer all.Close()
		stalled := h.sb.Subscribe(ctx, start, nil) // never read until the end
		defer stalled.Close()
		approvals := h.sb.Subscribe(ctx, start, &sb.EventFilter{Types: []sb.EventType{sb.EventEdgeRequested, sb.EventEdgeApproved, sb.EventGrantRevoked}})
		defer approvals.Close()

		g, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))

		want, err := h.sb.Events(ctx, start, 1000)
		require.NoError(t, err)
		require.NotEmpty(t, want)
		for _, w := range want {
			got := next(t, all)
			assert.Equal(t, w, got, "in commit order, as stored")
		}
		var types []sb.EventType
		for range 3 {
			types = append(types, next(t, approvals).Type)
		}
		assert.Equal(t, []sb.EventType{sb.EventEdgeRequested, sb.EventEdgeApproved, sb.EventGrantRevoked}, types)

		// The stalled reader lost nothing.
		for _, w := range want {
			assert.Equal(t, w.Seq, next(t, stalled).Seq)
		}

		// Resume after a seq.
		mid := want[len(want)/2].Seq
		resumed := h.sb.Subscribe(ctx, mid, &sb.EventFilter{Todo: td.ID})
		defer resumed.Close()
		e := next(t, resumed)
		assert.Greater(t, e.Seq, mid)
		assert.Equal(t, td.ID, e.Todo)

		all.Close()
		_, open := <-all.C
		assert.False(t, open)
		assert.NoError(t, all.Err(), "closed by its owner")
	})
}

// Events gone from the log are reported, with where to resume.
func TestASubscriptionThatFellBehindIsTold(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		evs, err := h.sb.Events(ctx, 0, 1000)
		require.NoError(t, err)
		unpackEvents(t, h.st)
		require.NoError(t, h.st.Update(ctx, func(tx store.Tx) error {
			return tx.Delete("events", []byte{0, 0, 0, 0, 0, 0, 0, 3})
		}))
		sub := h.sb.Subscribe(ctx, 1, nil)
		defer sub.Close()
		assert.Equal(t, uint64(2), next(t, sub).Seq)
		for range sub.C {
		}
		require.ErrorIs(t, sub.Err(), sb.ErrFellBehind)
		assert.Contains(t, sub.Err().Error(), "resume after 3")
		assert.Equal(t, uint64(2), sub.Last())
		assert.Greater(t, len(evs), 3)
		resumed := h.sb.Subscribe(ctx, 3, nil)
		defer resumed.Close()
		assert.Equal(t, uint64(4), next(t, resumed).Seq, "resumes after the gap")

		cctx, cancel := context.WithCancel(ctx)
		s2 := h.sb.Subscribe(cctx, uint64(len(evs)), nil)
		cancel()
		for range s2.C {
		}
		assert.True(t, errors.Is(s2.Err(), context.Canceled))
	})
}

// A blocking Claim wakes for work on its own queue, not for every change.
func TestBlockingClaimWakesPerQueue(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		// A long poll interval: only a wake can end the wait in time.
		h.withConfig(t, nil, func(c *sb.Config) { c.PollInterval = time.Hour })
		_, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", sb.Scope{
			{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor}}, {Queue: "other", Verbs: []sb.Verb{sb.VerbCreateFor}}})
		w := h.worker(h.bob, "bob-desk", "inbox")
		got := make(chan sb.Todo, 1)
		go func() {
			td, _, err := h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Wait: true})
			if err == nil {
				got <- td
			}
		}()
		waitTimers(t, h.clock, 1) // the claim sleeps
		_, _, err := h.sb.CreateFor(ctx, friend, "other", sb.NewTodo{Kind: "elsewhere"})
		require.NoError(t, err)
		select {
		case td := <-got:
			t.Fatalf("claimed work from another queue: %+v", td)
		case <-time.After(50 * time.Millisecond):
		}
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "mine"})
		require.NoError(t, err)
		select {
		case c := <-got:
			assert.Equal(t, td.ID, c.ID)
		case <-time.After(30 * time.Second):
			t.Fatal("the blocked claim did not wake for its queue")
		}
	})
}

// A host learns of what concerns one queue: a new approval todo for a
// human, new and finished work in a persona's queue.
func TestSubscribeByQueue(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		start := lastSeq(t, h)
		approvals := h.sb.Subscribe(ctx, start, &sb.EventFilter{Queue: sb.ApprovalsAddress(h.bob), Types: []sb.EventType{sb.EventTodoCreated}})
		defer approvals.Close()
		inbox := h.sb.Subscribe(ctx, start, &sb.EventFilter{Queue: sb.QueueAddress("bob-desk", "inbox"),
			Types: []sb.EventType{sb.EventTodoCreated, sb.EventTodoCompleted}})
		defer inbox.Close()

		e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "queue events")
		require.NoError(t, err)
		ev := next(t, approvals)
		assert.Equal(t, e.ApprovalTodo, ev.Todo)
		_, err = h.sb.Approve(ctx, h.bob, e.ID, nil)
		require.NoError(t, err)
		_, friend, err := h.sb.Collect(ctx, e.ID, testSecret)
		require.NoError(t, err)
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		w := h.worker(h.bob, "bob-desk", "inbox")
		_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		require.NoError(t, h.sb.Complete(ctx, w, l, nil))
		for _, want := range []sb.EventType{sb.EventTodoCreated, sb.EventTodoCompleted} {
			ev := next(t, inbox)
			assert.Equal(t, want, ev.Type)
			assert.Equal(t, td.ID, ev.Todo)
		}
		// Carol's approvals are not Bob's.
		carol := h.sb.Subscribe(ctx, start, &sb.EventFilter{Queue: sb.ApprovalsAddress(h.carol)})
		defer carol.Close()
		_, err = h.request(h.alice, "alice-bot", "carol-bot", inboxCreate, "for carol")
		require.NoError(t, err)
		ev = next(t, carol)
		assert.NotEqual(t, e.ApprovalTodo, ev.Todo)
		assert.Equal(t, sb.ApprovalsAddress(h.carol), ev.Queue)
	})
}
