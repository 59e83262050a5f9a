package switchboard_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// Subscription's promise: a store that fails to answer does not end a
// subscription — it reads again every PollInterval and goes on from where
// it was, losing nothing — while an event in the log that does not decode
// ends it with ErrAuditBroken.
func TestSubscriptionOutlivesAStoreFailure(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &flakyStore{Store: b.open(t)}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			_, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			evs, err := h.sb.Events(ctx, 0, 1000)
			require.NoError(t, err)
			last := evs[len(evs)-1].Seq
			sub := h.sb.Subscribe(ctx, last, nil)
			defer sub.Close()
			waitTimers(t, h.clock, 1) // idle at the log's end, polling on the clock

			st.failViews.Store(true)
			td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err, "writes do not read through View")
			// Woken by the commit, its read fails; it waits for
			// PollInterval again (the idle timer has not fired: two).
			waitTimers(t, h.clock, 2)
			require.Positive(t, st.viewsFailed.Load(), "the subscription read, and failed")
			st.failViews.Store(false)
			h.clock.Advance(time.Minute) // past PollInterval: it reads again
			e := next(t, sub)
			require.Equal(t, td.ID, e.Todo, "the event committed while reads failed, delivered once they work")
			require.NoError(t, sub.Err())

			// A stored event that does not decode is a broken log: that
			// ends a subscription, saying so.
			require.NoError(t, switchboardtest.RewriteAuditEvent(ctx, st, 1, func([]byte) []byte { return []byte("not an event") }))
			broken := h.sb.Subscribe(ctx, 0, nil)
			defer broken.Close()
			for range broken.C {
			}
			require.ErrorIs(t, broken.Err(), sb.ErrAuditBroken)
		})
	}
}

// A subscription from the log's start, when the oldest events are gone,
// looks up the oldest one to tell a trimmed start from a gap; that lookup
// failing is a store failure like any other — read again — not a gap
// (ErrFellBehind).
func TestSubscriptionFromATrimmedStartOutlivesAFailedLookup(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &flakyStore{Store: b.open(t)}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			unpackEvents(t, st)
			require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
				return tx.Delete("events", []byte{0, 0, 0, 0, 0, 0, 0, 1}) // the log starts at 2 now
			}))
			st.failView.Store(2) // the subscription's first read works; its lookup of the oldest event fails
			sub := h.sb.Subscribe(ctx, 0, nil)
			defer sub.Close()
			deadline := time.After(10 * time.Second)
			for {
				if h.clock.timers() > 0 {
					h.clock.Advance(time.Minute) // past PollInterval: it reads again
				}
				select {
				case e, ok := <-sub.C:
					require.True(t, ok, "the subscription ended: %v", sub.Err())
					require.Equal(t, uint64(2), e.Seq, "from the log's start")
					require.NoError(t, sub.Err())
					require.Equal(t, int32(1), st.viewsFailed.Load(), "the lookup failed once")
					return
				case <-deadline:
					t.Fatalf("nothing delivered (err %v)", sub.Err())
				case <-time.After(time.Millisecond):
				}
			}
		})
	}
}
