package switchboard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// TestTodoRetention: an ended todo is kept for TodoRetention (and at least
// DedupRetention), then Reap deletes it with every index entry and its
// dedup key; live todos are never touched.
func TestTodoRetention(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		var ended []string
		for i := range 5 {
			td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: fmt.Sprint("d", i)})
			require.NoError(t, err)
			_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
			require.NoError(t, err)
			require.NoError(t, h.sb.Complete(ctx, w, l, nil))
			ended = append(ended, td.ID)
		}
		live, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: "live"})
		require.NoError(t, err)

		h.clock.Advance(6 * 24 * time.Hour)
		st, err := h.sb.Reap(ctx)
		require.NoError(t, err)
		require.Zero(t, st.TodosPurged, "within the 7-day retention")
		_, err = h.sb.Get(ctx, w, ended[0])
		require.NoError(t, err)

		h.clock.Advance(2 * 24 * time.Hour)
		st, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		require.Equal(t, 6, st.TodosPurged, "the five, and the approval todo of the friend request")
		for _, id := range ended {
			_, err = h.sb.Get(ctx, w, id)
			require.ErrorIs(t, err, sb.ErrNotFound)
		}
		all, err := h.sb.List(ctx, w, "inbox", nil)
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.Equal(t, live.ID, all[0].ID, "the live todo stays")
		// No key or value names a purged todo, outside the audit log.
		for table, kv := range dump(t, h.st, []string{"todos", "todo_index", "todo_dedup"}) {
			for k, v := range kv {
				for _, id := range ended {
					require.False(t, strings.Contains(k, id) || strings.Contains(v, id), "%s keeps %s", table, id)
				}
			}
		}
		again, created, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: "d0"})
		require.NoError(t, err)
		require.True(t, created, "the purged todo's dedup key is free again")
		require.NotEqual(t, ended[0], again.ID)
		same, created, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: "live"})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, live.ID, same.ID)
	})
}

// TestEventRetention: events past EventRetention go to Archive, in order
// and complete, and are deleted; the chain still verifies from the first
// kept event; an Archive error purges nothing.
func TestEventRetention(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		var archived []sb.Event
		fail := true
		s, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: testQuotas,
			Archive: func(_ context.Context, evs []sb.Event) error {
				if fail {
					return errors.New("archive down")
				}
				archived = append(archived, evs...)
				return nil
			}})
		require.NoError(t, err)
		h.sb = s
		friend, w, _ := queueSetup(t, h)
		for range 3 {
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)
		}
		old := lastSeq(t, h)
		h.clock.Advance(31 * 24 * time.Hour)
		_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"}) // a recent event
		require.NoError(t, err)

		_, err = h.sb.Reap(ctx)
		require.ErrorContains(t, err, "archive down")
		rep, err := h.sb.VerifyAudit(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), rep.First, "nothing purged while the archive fails")

		fail = false
		for {
			st, err := h.sb.Reap(ctx)
			require.NoError(t, err)
			if st.EventsPurged == 0 {
				break
			}
		}
		require.Len(t, archived, int(old))
		for i, e := range archived {
			require.Equal(t, uint64(i+1), e.Seq, "in order, none missing")
		}
		rep, err = h.sb.VerifyAudit(ctx)
		require.NoError(t, err)
		assert.Equal(t, old+1, rep.First, "the chain verifies from the first kept event")
		evs, err := h.sb.Events(ctx, 0, 100)
		require.NoError(t, err)
		require.Equal(t, old+1, evs[0].Seq)
		_, _, err = h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err, "the queue works on")
	})
}
