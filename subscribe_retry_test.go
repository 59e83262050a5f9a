package switchboard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// failingViews is a real store whose read-only transactions fail while
// failing is set — a database that cannot be reached for a while.
type failingViews struct {
	store.Store
	failing atomic.Bool
	failed  atomic.Int32
}

var errUnreachable = errors.New("the database cannot be reached")

func (f *failingViews) View(ctx context.Context, fn func(store.Tx) error) error {
	if f.failing.Load() {
		f.failed.Add(1)
		return errUnreachable
	}
	return f.Store.View(ctx, fn)
}

// Subscription's promise: a store that fails to answer does not end a
// subscription — it reads again every PollInterval and goes on from where
// it was, losing nothing — while an event in the log that does not decode
// ends it with ErrAuditBroken.
func TestSubscriptionOutlivesAStoreFailure(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &failingViews{Store: b.open(t)}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			_, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			evs, err := h.sb.Events(ctx, 0, 1000)
			require.NoError(t, err)
			last := evs[len(evs)-1].Seq
			sub := h.sb.Subscribe(ctx, last, nil)
			defer sub.Close()

			st.failing.Store(true)
			td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err, "writes do not read through View")
			require.Eventually(t, func() bool { return st.failed.Load() > 0 }, 10*time.Second, time.Millisecond, "the subscription never read")
			time.Sleep(20 * time.Millisecond) // it waits for PollInterval now
			st.failing.Store(false)
			for range 3 {
				h.clock.Advance(time.Minute) // past PollInterval: it reads again
			}
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
