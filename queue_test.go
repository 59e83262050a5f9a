package switchboard_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// queueSetup befriends alice-bot → bob-desk with create_for, get and list on
// inbox, and vends bob's own agent every verb on inbox (twice, as two
// workers).
func queueSetup(t testing.TB, h *harness) (friend, w1, w2 sb.Credential) {
	_, friend = h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbGet, sb.VerbList))
	all := scope("inbox", sb.VerbList, sb.VerbGet, sb.VerbClaim, sb.VerbHeartbeat, sb.VerbComplete, sb.VerbFail, sb.VerbRelease, sb.VerbCancel, sb.VerbRedrive)
	_, w1, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: all})
	require.NoError(t, err)
	_, w2, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: all})
	require.NoError(t, err)
	return friend, w1, w2
}

func TestStaleLeaseIsFenced(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w1, w2 := queueSetup(t, h)
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, stale, err := h.sb.Claim(ctx, w1, "inbox", &sb.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)
		_, _, err = h.sb.Claim(ctx, w2, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty, "a live lease hides the todo")

		h.clock.Advance(time.Minute + time.Second)
		got, fresh, err := h.sb.Claim(ctx, w2, "inbox", nil)
		require.NoError(t, err, "an expired lease is re-delivered")
		assert.Equal(t, td.ID, got.ID)
		assert.Equal(t, 2, fresh.Attempt)
		assert.NotEqual(t, stale.Token, fresh.Token)

		// The worker that lost its lease can do nothing to the todo.
		require.ErrorIs(t, h.sb.Complete(ctx, w1, stale, nil), sb.ErrLeaseLost)
		require.ErrorIs(t, h.sb.Fail(ctx, w1, stale, "x"), sb.ErrLeaseLost)
		require.ErrorIs(t, h.sb.Release(ctx, w1, stale), sb.ErrLeaseLost)
		_, err = h.sb.Heartbeat(ctx, w1, stale, 0)
		require.ErrorIs(t, err, sb.ErrLeaseLost)
		// Not even with the new holder's credential, nor with a forged token.
		require.ErrorIs(t, h.sb.Complete(ctx, w2, stale, nil), sb.ErrLeaseLost)
		forged := fresh
		forged.Token = "lease_000000000000000000000000"
		require.ErrorIs(t, h.sb.Complete(ctx, w2, forged, nil), sb.ErrLeaseLost)

		now, err := h.sb.Get(ctx, w2, td.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoLeased, now.State)
		require.Len(t, now.History, 2)
		assert.Equal(t, sb.AttemptLeaseExpired, now.History[0].Outcome)

		require.NoError(t, h.sb.Complete(ctx, w2, fresh, []byte("ok")))
		require.ErrorIs(t, h.sb.Complete(ctx, w2, fresh, nil), sb.ErrLeaseLost, "completing twice")
		// An expired lease on a todo nobody re-claimed is lost too.
		_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, l, err := h.sb.Claim(ctx, w1, "inbox", &sb.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)
		h.clock.Advance(time.Minute)
		require.ErrorIs(t, h.sb.Complete(ctx, w1, l, nil), sb.ErrLeaseLost)
	})
}

func TestFailBacksOffThenDeadLetters(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", MaxAttempts: 4})
		require.NoError(t, err)
		for attempt, wait := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute} {
			_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
			require.NoError(t, err, "attempt %d", attempt+1)
			require.Equal(t, attempt+1, l.Attempt)
			require.NoError(t, h.sb.Fail(ctx, w, l, fmt.Sprintf("boom %d", attempt+1)))
			h.clock.Advance(wait - time.Second)
			_, _, err = h.sb.Claim(ctx, w, "inbox", nil)
			require.ErrorIs(t, err, sb.ErrQueueEmpty, "retry %d came before its backoff", attempt+1)
			h.clock.Advance(time.Second)
		}
		_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		require.NoError(t, h.sb.Fail(ctx, w, l, "final"))
		dead, err := h.sb.Get(ctx, w, td.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoDead, dead.State)
		assert.Equal(t, "final", dead.Error)
		require.Len(t, dead.History, 4)
		for _, a := range dead.History {
			assert.Equal(t, sb.AttemptFailed, a.Outcome)
		}
		listed, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoDead})
		require.NoError(t, err)
		require.Len(t, listed, 1)
		_, _, err = h.sb.Claim(ctx, w, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty)

		// The friend cannot redrive (to it the todo is not there); the
		// owner can, with attempts reset.
		require.ErrorIs(t, h.sb.Redrive(ctx, friend, td.ID), sb.ErrNotFound)
		require.NoError(t, h.sb.Redrive(ctx, w, td.ID))
		require.ErrorIs(t, h.sb.Redrive(ctx, w, td.ID), sb.ErrInvalidTransition)
		_, l, err = h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		assert.Equal(t, 1, l.Attempt)
	})
}

func TestBackoffIsCapped(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", MaxAttempts: 10})
		require.NoError(t, err)
		for i := 1; i <= 8; i++ {
			_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
			require.NoError(t, err, "attempt %d", i)
			require.NoError(t, h.sb.Fail(ctx, w, l, "x"))
			h.clock.Advance(15 * time.Minute) // never more than the cap
		}
	})
}

func TestHeartbeatCeiling(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		claimedAt := h.clock.Now()
		_, l, err := h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Hour})
		require.NoError(t, err)
		for i := 0; i < 30; i++ {
			h.clock.Advance(50 * time.Minute)
			l, err = h.sb.Heartbeat(ctx, w, l, time.Hour)
			if h.clock.Now().Before(claimedAt.Add(24 * time.Hour)) {
				require.NoError(t, err, "heartbeat %d", i)
				assert.False(t, l.ExpiresAt.After(claimedAt.Add(24*time.Hour)))
			} else {
				require.ErrorIs(t, err, sb.ErrLeaseLost, "past the 24 h ceiling the lease is gone")
				return
			}
		}
		t.Fatal("the lease outlived 24 hours")
	})
}

func TestReleaseDoesNotCountAnAttempt(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", MaxAttempts: 1})
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
			require.NoError(t, err)
			assert.Equal(t, 1, l.Attempt)
			require.NoError(t, h.sb.Release(ctx, w, l))
		}
		td, l, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		require.NoError(t, h.sb.Complete(ctx, w, l, nil))
		got, err := h.sb.Get(ctx, w, td.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoDone, got.State)
		assert.Len(t, got.History, 4)
	})
}

func TestClaimOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		mk := func(title string, prio int, delay time.Duration) {
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: title, Priority: prio, NotBefore: h.clock.Now().Add(delay)})
			require.NoError(t, err)
			h.clock.Advance(time.Second)
		}
		mk("low-old", -5, 0)
		mk("normal-old", 0, 0)
		mk("high-later", 10, time.Hour)
		mk("normal-new", 0, 0)
		mk("high", 10, 0)
		var got []string
		for {
			td, l, err := h.sb.Claim(ctx, w, "inbox", nil)
			if err != nil {
				require.ErrorIs(t, err, sb.ErrQueueEmpty)
				break
			}
			got = append(got, td.Title)
			require.NoError(t, h.sb.Complete(ctx, w, l, nil))
		}
		assert.Equal(t, []string{"high", "normal-old", "normal-new", "low-old"}, got)
		h.clock.Advance(time.Hour)
		td, _, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		assert.Equal(t, "high-later", td.Title)
	})
}

func TestBlockingClaimWakesOnCreate(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		// A poll interval of an hour: only the in-process wake-up can
		// deliver within the test's deadline.
		s, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, PollInterval: time.Hour})
		require.NoError(t, err)
		h.sb = s
		friend, w, _ := queueSetup(t, h)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			td, _, err := s.Claim(wctx, w, "inbox", &sb.ClaimOptions{Wait: true})
			if err == nil && td.Title != "wake up" {
				err = fmt.Errorf("claimed %q", td.Title)
			}
			got <- err
		}()
		waitTimers(t, h.clock, 1) // the claimer found the queue empty and sleeps
		_, _, err = s.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: "wake up"})
		require.NoError(t, err)
		require.NoError(t, <-got)

		// A waiting claim ends with its context.
		cctx, cancel2 := context.WithCancel(ctx)
		go func() {
			_, _, err := s.Claim(cctx, w, "inbox", &sb.ClaimOptions{Wait: true})
			got <- err
		}()
		waitTimers(t, h.clock, 2) // the second claimer sleeps too (the first one's timer never fired)
		cancel2()
		require.ErrorIs(t, <-got, context.Canceled)
	})
}

// waitTimers waits (in real time, bounded) until n timers wait on the clock:
// the goroutine under test has reached its sleep.
func waitTimers(t *testing.T, c *clock, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.timers() >= n }, 30*time.Second, time.Millisecond)
}

func TestBlockingClaimPollsForOtherProcesses(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		// A second Switchboard on the same store stands for another process:
		// h.sb's in-process wake-up does not reach it, only its poll does,
		// and the poll runs on the injected clock.
		other, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, PollInterval: time.Minute})
		require.NoError(t, err)
		friend, w, _ := queueSetup(t, h)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			_, _, err := other.Claim(wctx, w, "inbox", &sb.ClaimOptions{Wait: true})
			got <- err
		}()
		waitTimers(t, h.clock, 1)
		_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		select {
		case err := <-got:
			t.Fatalf("the claim returned (%v) before its poll interval passed on the clock", err)
		case <-time.After(50 * time.Millisecond):
		}
		h.clock.Advance(time.Minute)
		require.NoError(t, <-got)
	})
}

// Run reaps on the injected clock's schedule: an expired lease is
// re-delivered without any Claim, and Run ends with its context.
func TestRunReapsOnTheClock(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		s, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, ReapInterval: time.Hour})
		// An hour-long interval: only the injected clock can make Run reap
		// within the test's deadline.
		require.NoError(t, err)
		friend, w, _ := queueSetup(t, h)
		td, _, err := s.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, _, err = s.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)

		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx) }()
		waitTimers(t, h.clock, 1) // first Reap done, Run sleeps on the clock
		got, err := s.Get(ctx, w, td.ID)
		require.NoError(t, err)
		require.Equal(t, sb.TodoLeased, got.State, "the lease has not expired yet")

		h.clock.Advance(time.Hour)
		require.Eventually(t, func() bool {
			got, err := s.Get(ctx, w, td.ID)
			return err == nil && got.State == sb.TodoQueued
		}, 30*time.Second, time.Millisecond, "Run re-queues the expired lease")
		got, err = s.Get(ctx, w, td.ID)
		require.NoError(t, err)
		require.Len(t, got.History, 1)
		assert.Equal(t, sb.AttemptLeaseExpired, got.History[0].Outcome)

		cancel()
		require.ErrorIs(t, <-done, context.Canceled)

		// A closed store ends Run. (The first Run's last timer is still
		// registered, never fired: wait for a second.)
		go func() { done <- s.Run(ctx) }()
		waitTimers(t, h.clock, 2)
		require.NoError(t, h.st.Close())
		h.clock.Advance(time.Hour)
		require.ErrorIs(t, <-done, sb.ErrClosed)
	})
}

func TestDedupRetention(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		first, created, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: "once"})
		require.NoError(t, err)
		require.True(t, created)
		_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		again, created, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: "once"})
		require.NoError(t, err)
		assert.False(t, created, "while live")
		assert.Equal(t, first.ID, again.ID)
		require.NoError(t, h.sb.Complete(ctx, w, l, nil))
		h.clock.Advance(24*time.Hour - time.Second)
		again, created, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: "once"})
		require.NoError(t, err)
		assert.False(t, created, "within retention after it ended")
		assert.Equal(t, sb.TodoDone, again.State)
		h.clock.Advance(time.Second)
		fresh, created, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: "once"})
		require.NoError(t, err)
		assert.True(t, created, "after retention the key is free")
		assert.NotEqual(t, first.ID, fresh.ID)

		// Keys are per grant: carol's "once" is her own.
		_, carol := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", inboxCreate)
		other, created, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k", DedupKey: "once"})
		require.NoError(t, err)
		assert.True(t, created)
		assert.NotEqual(t, fresh.ID, other.ID)
	})
}

func TestFriendSeesOnlyItsOwnTodos(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		mine, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: "mine"})
		require.NoError(t, err)
		_, carol := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", inboxCreate)
		_, _, err = h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k", Title: "carol's"})
		require.NoError(t, err)
		list, err := h.sb.List(ctx, friend, "inbox", nil)
		require.NoError(t, err)
		require.Len(t, list, 1)
		assert.Equal(t, mine.ID, list[0].ID)
		all, err := h.sb.List(ctx, w, "inbox", nil)
		require.NoError(t, err)
		assert.Len(t, all, 2, "the owner sees the whole queue")
		page, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{Limit: 1})
		require.NoError(t, err)
		require.Len(t, page, 1)
		rest, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{After: page[0].ID})
		require.NoError(t, err)
		require.Len(t, rest, 1)
		assert.NotEqual(t, page[0].ID, rest[0].ID)
		_, err = h.sb.List(ctx, friend, "other", nil)
		require.ErrorIs(t, err, sb.ErrNotFound)
		// A friend without cancel cannot cancel, even its own todo: for a
		// verb it does not hold, no id is there.
		require.ErrorIs(t, h.sb.Cancel(ctx, friend, mine.ID, ""), sb.ErrNotFound)
		require.NoError(t, h.sb.Cancel(ctx, w, mine.ID, "not needed"))
		got, err := h.sb.Get(ctx, friend, mine.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoCancelled, got.State)
	})
}

func TestReap(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", MaxAttempts: 1})
		require.NoError(t, err)
		_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, _, err = h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)
		_, _, err = h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)
		_, err = h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, "hello")
		require.NoError(t, err)
		g, _, err := h.sb.Vend(ctx, h.alice, sb.VendRequest{Agent: "alice-bot", Scope: inboxCreate, ExpiresAt: h.clock.Now().Add(time.Hour)})
		require.NoError(t, err)

		st, err := h.sb.Reap(ctx)
		require.NoError(t, err)
		assert.Equal(t, sb.ReapStats{}, st, "nothing is due yet")

		h.clock.Advance(8 * 24 * time.Hour)
		st, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		assert.Equal(t, sb.ReapStats{LeasesExpired: 2, EdgesExpired: 1, GrantsExpired: 1, TokensPurged: 2, TodosPurged: 1}, st,
			"both used ID tokens (alice's, carol's) have expired; the approval todo of the friend grant ended over 7 days ago")
		dead, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoDead})
		require.NoError(t, err)
		assert.Len(t, dead, 1, "the todo on its last attempt is dead-lettered")
		queued, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoQueued})
		require.NoError(t, err)
		assert.Len(t, queued, 1, "the other is re-delivered")
		aps, err := h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		assert.Empty(t, aps, "an expired request leaves the approvals queue")
		_, err = h.sb.Authenticate(ctx, sb.Credential("x"))
		require.Error(t, err)
		evs, err := h.sb.Events(ctx, 0, 1000)
		require.NoError(t, err)
		var revoked bool
		for _, e := range evs {
			revoked = revoked || (e.Type == sb.EventGrantRevoked && e.Grant == g.ID)
		}
		assert.True(t, revoked)

		st, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		assert.Equal(t, sb.ReapStats{}, st, "reaping is idempotent")
	})
}

// 16 workers drain 5,000 todos while leases randomly expire under them:
// every todo ends done exactly once, and no todo ever has two live leases.
func TestConcurrentDrainExactlyOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		n := 5000
		if testing.Short() {
			n = 500
		}
		friend, _, _ := queueSetup(t, h)
		all := scope("inbox", sb.VerbClaim, sb.VerbComplete, sb.VerbFail, sb.VerbGet)
		for i := 0; i < n; i++ {
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", MaxAttempts: 100, DedupKey: fmt.Sprint(i)})
			require.NoError(t, err)
		}
		// Every lease granted, by todo and attempt. Workers record after
		// their calls return, so records may arrive out of order; the checks
		// run at the end, over attempt order, which is commit order.
		type grant struct {
			token    string
			from, to time.Time
		}
		var mu sync.Mutex
		leases := map[string]map[int]grant{}
		completed := map[string][]int{} // todo → attempts that completed it
		var finished atomic.Int64
		const lease = time.Minute
		// A bound on wall time so a liveness bug fails the test instead of
		// hanging it.
		deadline, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for wkr := 0; wkr < 16; wkr++ {
			_, cred, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: all})
			require.NoError(t, err)
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, seed))
				for {
					td, l, err := h.sb.Claim(ctx, cred, "inbox", &sb.ClaimOptions{Lease: lease})
					if err != nil {
						if !assert.ErrorIs(t, err, sb.ErrQueueEmpty) {
							return
						}
						if finished.Load() == int64(n) || deadline.Err() != nil {
							return
						}
						time.Sleep(time.Millisecond) // the rest is leased; a stalled lease lapses by itself
						continue
					}
					mu.Lock()
					if leases[td.ID] == nil {
						leases[td.ID] = map[int]grant{}
					}
					leases[td.ID][l.Attempt] = grant{l.Token, l.ExpiresAt.Add(-lease), l.ExpiresAt}
					mu.Unlock()
					if rng.IntN(10) == 0 {
						// Stall past the lease — long enough in wall time for
						// another worker to take the todo over — then try to
						// finish anyway.
						h.clock.Advance(lease + time.Second)
						time.Sleep(2 * time.Millisecond)
					}
					err = h.sb.Complete(ctx, cred, l, nil)
					switch {
					case err == nil:
						mu.Lock()
						completed[td.ID] = append(completed[td.ID], l.Attempt)
						mu.Unlock()
						finished.Add(1)
					case !assert.ErrorIs(t, err, sb.ErrLeaseLost):
					}
				}
			}(uint64(wkr + 1))
		}
		wg.Wait()
		require.NoError(t, deadline.Err(), "workers did not drain the queue in time")
		require.Len(t, completed, n, "every todo completed")
		for id, by := range completed {
			require.Len(t, by, 1, "todo %s completed %d times", id, len(by))
			attempts := slices.Sorted(maps.Keys(leases[id]))
			for i := 1; i < len(attempts); i++ {
				prev, next := leases[id][attempts[i-1]], leases[id][attempts[i]]
				require.False(t, prev.to.After(next.from), "todo %s: attempt %d leased at %s while attempt %d ran to %s",
					id, attempts[i], next.from, attempts[i-1], prev.to)
			}
			require.Equal(t, attempts[len(attempts)-1], by[0], "todo %s completed by attempt %d, not its latest lease", id, by[0])
		}
	})
}

func TestHistoryIsBounded(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		for i := 0; i < 60; i++ {
			_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
			require.NoError(t, err)
			require.NoError(t, h.sb.Release(ctx, w, l))
		}
		got, err := h.sb.Get(ctx, w, td.ID)
		require.NoError(t, err)
		require.Len(t, got.History, 50, "only the latest 50 attempts are kept")
		assert.Equal(t, sb.AttemptReleased, got.History[49].Outcome)
		assert.False(t, got.History[49].EndedAt.IsZero())
	})
}

// The Todo CreateFor returns is the caller's to keep: reusing the payload
// buffer afterwards changes neither it nor what is stored.
func TestCreateForCopiesThePayload(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbGet))
		buf := []byte("first")
		td, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", Payload: buf})
		require.NoError(t, err)
		copy(buf, "XXXXX")
		require.Equal(t, "first", string(td.Payload))
		got, err := h.sb.Get(ctx, cred, td.ID)
		require.NoError(t, err)
		require.Equal(t, "first", string(got.Payload))
	})
}

// Revoking a grant that created more todos than one cancelling transaction
// reads cancels every one still queued, and leaves those already claimed
// or done alone.
func TestRevokeCancelsManyQueuedTodos(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		g, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		w := h.worker(h.bob, "bob-desk", "inbox")
		for i := range 600 {
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: fmt.Sprint(i)})
			require.NoError(t, err)
		}
		claimed, _, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))
		_, _, err = h.sb.Claim(ctx, w, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty)
		cancelled := 0
		for page := (&sb.ListOptions{State: sb.TodoCancelled, Limit: 1000}); ; {
			got, err := h.sb.List(ctx, w, "inbox", page)
			require.NoError(t, err)
			cancelled += len(got)
			if len(got) < page.Limit {
				break
			}
			page.After = got[len(got)-1].ID
		}
		require.Equal(t, 599, cancelled)
		got, err := h.sb.Get(ctx, w, claimed.ID)
		require.NoError(t, err)
		require.Equal(t, sb.TodoLeased, got.State, "the claimed one stays with its worker")
	})
}
