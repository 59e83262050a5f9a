package switchboard_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/memory"
)

// appendingHarness is a harness on a memory store that offers
// store.Appender, as a store whose writers run concurrently does: events
// commit pending and a sequencer moves them into the log.
func appendingHarness(t *testing.T) *harness {
	st := memory.NewWithOptions(memory.Options{Appender: true})
	t.Cleanup(func() { _ = st.Close() })
	h := newHarness(t, st)
	t.Cleanup(func() { _ = h.sb.Close() })
	return h
}

// sequenced waits until no event is pending and returns the log. The
// clock moves a second per look: a sequencer not woken by the commit (one
// made through another Switchboard, on a store that announces nothing)
// polls each second of it.
func sequenced(t *testing.T, h *harness, s *sb.Switchboard) []sb.Event {
	t.Helper()
	require.Eventually(t, func() bool {
		h.clock.Advance(time.Second)
		rep, err := s.VerifyAudit(ctx)
		require.NoError(t, err)
		return rep.Pending == 0
	}, 30*time.Second, time.Millisecond, "events stay pending")
	evs, err := s.Events(ctx, 0, 100000)
	require.NoError(t, err)
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.Seq, "gapless")
	}
	return evs
}

// On a store whose writers run concurrently, events commit pending and are
// sequenced after commit: gapless, each once, each record's events in the
// order of its changes; subscriptions deliver them in log order.
func TestEventsAreSequencedAfterCommit(t *testing.T) {
	h := appendingHarness(t)
	sub := h.sb.Subscribe(ctx, 0, nil)
	defer sub.Close()
	auditFlow(t, h) // what it returns may miss events still pending
	evs := sequenced(t, h, h.sb)
	byTodo := map[string][]sb.EventType{}
	for _, e := range evs {
		if e.Todo != "" && e.Queue == "bob-desk/inbox" {
			byTodo[e.Todo] = append(byTodo[e.Todo], e.Type)
		}
	}
	require.Len(t, byTodo, 3)
	for id, types := range byTodo {
		assert.Equal(t, sb.EventTodoCreated, types[0], id)
	}
	for _, want := range evs {
		require.Equal(t, want, next(t, sub))
	}
	rep, err := h.sb.VerifyAudit(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(evs)), rep.TreeSize)

	// Todos keep their creation order within the process.
	friend, w, _ := queueSetup(t, h)
	var ids []string
	for i := range 5 {
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: fmt.Sprint(i)})
		require.NoError(t, err)
		ids = append(ids, td.ID)
	}
	all, err := h.sb.List(ctx, w, "inbox", nil)
	require.NoError(t, err)
	var got []string
	for _, td := range all[len(all)-5:] {
		got = append(got, td.ID)
	}
	require.Equal(t, ids, got)
}

// One sequencer at a time, on a lease: two Switchboards writing to one
// store never sequence an event twice or leave a gap, and when the
// lease holder stops, the other takes over once the lease runs out — not
// before.
func TestSequencerLeaseTakeover(t *testing.T) {
	h := appendingHarness(t)
	a := h.sb
	// a sequences the harness's setup, and so takes the lease: wait for
	// its pass to commit (its own commits wake it; the clock does not
	// move), or b may take the lease first.
	require.Eventually(t, func() bool {
		rep, err := a.VerifyAudit(ctx)
		return err == nil && rep.Pending == 0
	}, 30*time.Second, time.Millisecond, "a sequenced the setup")
	b, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: testQuotas})
	require.NoError(t, err)
	defer b.Close()
	friend, _, _ := queueSetup(t, h)
	// A subscription in the process that sequences reads what its
	// sequencer just added from memory; it must still see what the other
	// adds once it has taken over.
	sub := a.Subscribe(ctx, 0, nil)
	defer sub.Close()

	created := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, s := range []*sb.Switchboard{a, b, a, b} {
		wg.Go(func() {
			for j := range 25 {
				td, _, err := s.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: fmt.Sprintf("%d-%d", i, j)})
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				created[td.ID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	evs := sequenced(t, h, a)
	seen := map[string]int{}
	for _, e := range evs {
		if e.Type == sb.EventTodoCreated && e.Queue == "bob-desk/inbox" {
			seen[e.Todo]++
		}
	}
	require.Len(t, seen, len(created))
	for id := range created {
		require.Equal(t, 1, seen[id], "todo %s's creation logged once", id)
	}

	// The holder stops; b's events wait while a's lease lasts.
	require.NoError(t, a.Close())
	before := len(evs)
	_, _, err = b.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "after a"})
	require.NoError(t, err)
	rep, err := b.VerifyAudit(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), rep.Pending, "nobody may sequence while a's lease lasts")
	require.Eventually(t, func() bool {
		h.clock.Advance(time.Second) // b polls each second, on the clock
		rep, err := b.VerifyAudit(ctx)
		require.NoError(t, err)
		return rep.Pending == 0
	}, 30*time.Second, 5*time.Millisecond, "b took the sequencer over")
	evs = sequenced(t, h, b)
	require.Len(t, evs, before+1)
	require.Equal(t, sb.EventTodoCreated, evs[len(evs)-1].Type)
	for _, want := range evs {
		require.Equal(t, want, nextPolled(t, h, sub))
	}
}

// nextPolled is next for a subscription that hears of the commits it
// follows only by polling (on the harness's clock).
func nextPolled(t *testing.T, h *harness, sub *sb.Subscription) sb.Event {
	t.Helper()
	for range 3000 {
		select {
		case e, ok := <-sub.C:
			require.True(t, ok, "subscription ended: %v", sub.Err())
			return e
		case <-time.After(10 * time.Millisecond):
			h.clock.Advance(time.Second)
		}
	}
	t.Fatal("no event within 30 s")
	return sb.Event{}
}
