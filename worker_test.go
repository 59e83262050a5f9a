package switchboard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

func titlesOf(cl []sb.Claimed) []string {
	var out []string
	for _, c := range cl {
		out = append(out, c.Todo.Title)
	}
	return out
}

func TestClaimN(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		for i, prio := range []int{1, 5, 3, 5, 0} {
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: fmt.Sprint(i), Priority: prio})
			require.NoError(t, err)
		}
		got, err := h.sb.ClaimN(ctx, w, "inbox", 3, nil)
		require.NoError(t, err)
		require.Equal(t, []string{"1", "3", "2"}, titlesOf(got), "claim order: priority, then age")
		seen := map[string]bool{}
		for _, c := range got {
			assert.Equal(t, c.Todo.ID, c.Lease.TodoID)
			assert.Equal(t, sb.TodoLeased, c.Todo.State)
			assert.False(t, seen[c.Lease.Token], "each todo has its own lease")
			seen[c.Lease.Token] = true
		}
		got, err = h.sb.ClaimN(ctx, w, "inbox", 10, nil)
		require.NoError(t, err)
		require.Equal(t, []string{"0", "4"}, titlesOf(got), "fewer than n when fewer are ready")
		_, err = h.sb.ClaimN(ctx, w, "inbox", 10, nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty)
		for _, n := range []int{0, -1, sb.MaxClaimN + 1} {
			_, err = h.sb.ClaimN(ctx, w, "inbox", n, nil)
			require.ErrorIs(t, err, sb.ErrInvalidArgument, "n=%d", n)
		}
		_, err = h.sb.ClaimN(ctx, friend, "inbox", 2, nil)
		require.ErrorIs(t, err, sb.ErrForbidden, "the friend grant holds no claim")
	})
}

func TestCompleteAndClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		for i := range 4 {
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: fmt.Sprint(i)})
			require.NoError(t, err)
		}
		first, l, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		before := lastSeq(t, h)
		next, err := h.sb.CompleteAndClaim(ctx, w, l, []byte("r0"), 2, nil)
		require.NoError(t, err)
		require.Equal(t, []string{"1", "2"}, titlesOf(next))
		done, err := h.sb.Get(ctx, w, first.ID)
		require.NoError(t, err)
		require.Equal(t, sb.TodoDone, done.State)
		require.Equal(t, []byte("r0"), done.Result)
		evs, err := h.sb.Events(ctx, before, 10)
		require.NoError(t, err)
		require.Len(t, evs, 3, "completed, claimed, claimed")
		for _, e := range evs {
			assert.Equal(t, evs[0].At, e.At, "one transaction")
		}

		// A stale lease: nothing completes, nothing is claimed.
		_, err = h.sb.CompleteAndClaim(ctx, w, l, nil, 1, nil)
		require.ErrorIs(t, err, sb.ErrLeaseLost)
		queued, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoQueued})
		require.NoError(t, err)
		require.Len(t, queued, 1, "todo 3 is still queued")

		// A grant that may complete but not claim: refused whole when n > 0.
		_, cw, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbComplete, sb.VerbGet)})
		require.NoError(t, err)
		_, err = h.sb.CompleteAndClaim(ctx, cw, next[0].Lease, nil, 1, nil)
		require.ErrorIs(t, err, sb.ErrForbidden)
		still, err := h.sb.Get(ctx, w, next[0].Todo.ID)
		require.NoError(t, err)
		require.Equal(t, sb.TodoLeased, still.State, "nothing changed")
		next2, err := h.sb.CompleteAndClaim(ctx, cw, next[0].Lease, nil, 0, nil)
		require.NoError(t, err, "n = 0 is a plain Complete")
		require.Empty(t, next2)

		// The queue runs dry: the completion stands, next is empty.
		got, err := h.sb.CompleteAndClaim(ctx, w, next[1].Lease, nil, 5, nil)
		require.NoError(t, err)
		require.Equal(t, []string{"3"}, titlesOf(got))
		got, err = h.sb.CompleteAndClaim(ctx, w, got[0].Lease, nil, 5, nil)
		require.NoError(t, err)
		require.Empty(t, got)
		_, err = h.sb.CompleteAndClaim(ctx, w, l, nil, sb.MaxClaimN+1, nil)
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
	})
}

func TestWork(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		const n = 40
		for i := range n {
			kind := "ok"
			switch i {
			case 7:
				kind = "fail"
			case 9:
				kind = "panic"
			}
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: kind, Title: fmt.Sprint(i), MaxAttempts: 1})
			require.NoError(t, err)
		}
		var mu sync.Mutex
		runs := map[string]int{}
		wctx, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			errc <- h.sb.Work(wctx, w, "inbox", func(_ context.Context, td sb.Todo) ([]byte, error) {
				mu.Lock()
				runs[td.Title]++
				mu.Unlock()
				switch td.Kind {
				case "fail":
					return nil, errors.New("cannot do this one")
				case "panic":
					panic("boom")
				}
				return []byte("done " + td.Title), nil
			}, &sb.WorkOptions{Concurrency: 4})
		}()
		require.Eventually(t, func() bool {
			done, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoDone})
			require.NoError(t, err)
			return len(done) == n-2
		}, 30*time.Second, 5*time.Millisecond)
		stop()
		require.ErrorIs(t, <-errc, context.Canceled)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, runs, n)
		for title, k := range runs {
			require.Equal(t, 1, k, "todo %s handled once", title)
		}
		dead, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoDead})
		require.NoError(t, err)
		require.Len(t, dead, 2)
		errs := map[string]string{dead[0].Title: dead[0].Error, dead[1].Title: dead[1].Error}
		require.Equal(t, "cannot do this one", errs["7"])
		require.Contains(t, errs["9"], "handler panicked: boom")
		one, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoDone, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, "done "+one[0].Title, string(one[0].Result))
	})
}

// TestWorkStopsGracefully: a stop lets the running handler finish (its ctx
// is not cancelled) and records its completion; nothing more is claimed.
func TestWorkStopsGracefully(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		for i := range 3 {
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: fmt.Sprint(i)})
			require.NoError(t, err)
		}
		started, release := make(chan string, 3), make(chan struct{})
		wctx, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			errc <- h.sb.Work(wctx, w, "inbox", func(hctx context.Context, td sb.Todo) ([]byte, error) {
				started <- td.Title
				<-release
				if hctx.Err() != nil {
					return nil, errors.New("handler context was cancelled by the stop")
				}
				return nil, nil
			}, nil)
		}()
		first := <-started
		stop()
		close(release)
		require.ErrorIs(t, <-errc, context.Canceled)
		done, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoDone})
		require.NoError(t, err)
		require.Equal(t, []string{first}, []string{done[0].Title})
		require.Len(t, done, 1, "nothing claimed after the stop")
		queued, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoQueued})
		require.NoError(t, err)
		require.Len(t, queued, 2)
	})
}

// TestWorkHeartbeats: a handler that outlives its lease keeps it (Work
// heartbeats on Config.Clock); a revoked credential stops Work with
// ErrUnauthenticated.
func TestWorkHeartbeats(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		release := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- h.sb.Work(ctx, w, "inbox", func(context.Context, sb.Todo) ([]byte, error) {
				<-release
				return nil, nil
			}, &sb.WorkOptions{Lease: time.Minute})
		}()
		for range 5 { // five minutes on a one-minute lease
			waitTimers(t, h.clock, 1) // the heartbeat's timer
			h.clock.Advance(30 * time.Second)
			require.Eventually(t, func() bool {
				got, err := h.sb.Get(ctx, w, td.ID)
				require.NoError(t, err)
				return got.LeaseExpiresAt.After(h.clock.Now().Add(30 * time.Second))
			}, 10*time.Second, time.Millisecond, "the lease was extended")
		}
		close(release)
		require.Eventually(t, func() bool {
			got, err := h.sb.Get(ctx, w, td.ID)
			require.NoError(t, err)
			return got.State == sb.TodoDone && got.Attempts == 1
		}, 10*time.Second, time.Millisecond)

		g, err := h.sb.Authenticate(ctx, w)
		require.NoError(t, err)
		require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))
		// Wake the blocked claim's poll. The claim may not be asleep yet
		// (nothing says when Work loops back to it), so the clock moves on
		// until Work returns rather than once.
		var werr error
		require.Eventually(t, func() bool {
			h.clock.Advance(time.Hour)
			select {
			case werr = <-errc:
				return true
			default:
				return false
			}
		}, 30*time.Second, 5*time.Millisecond, "Work did not stop on a revoked credential")
		require.ErrorIs(t, werr, sb.ErrUnauthenticated)
	})
}

// Work checks the credential's verbs before claiming anything: one that
// cannot record outcomes is refused at once, naming what it lacks, and no
// todo is leased.
func TestWorkRefusesACredentialThatCannotFinish(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, _, _ := queueSetup(t, h)
		_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, claimOnly, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbClaim, sb.VerbGet, sb.VerbList)})
		require.NoError(t, err)
		ran := false
		err = h.sb.Work(ctx, claimOnly, "inbox", func(context.Context, sb.Todo) ([]byte, error) { ran = true; return nil, nil }, nil)
		require.ErrorIs(t, err, sb.ErrForbidden)
		require.ErrorContains(t, err, "complete, fail, heartbeat")
		require.False(t, ran)
		leased, err := h.sb.List(ctx, claimOnly, "inbox", &sb.ListOptions{State: sb.TodoLeased})
		require.NoError(t, err)
		require.Empty(t, leased)
	})
}

// UntilEmpty drains the queue and returns nil; a handler's error reaches
// Config.Logger at warn level with the todo's id.
func TestWorkUntilEmptyAndLogsHandlerErrors(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		var logs syncBuffer
		h.withConfig(t, nil, func(c *sb.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		friend, w, _ := queueSetup(t, h)
		var bad sb.Todo
		for i := range 10 {
			td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: fmt.Sprint(i), MaxAttempts: 1})
			require.NoError(t, err)
			if i == 3 {
				bad = td
			}
		}
		err := h.sb.Work(ctx, w, "inbox", func(_ context.Context, td sb.Todo) ([]byte, error) {
			if td.ID == bad.ID {
				return nil, errors.New("cannot do this one")
			}
			return nil, nil
		}, &sb.WorkOptions{Concurrency: 3, UntilEmpty: true})
		require.NoError(t, err)
		done, err := h.sb.List(ctx, w, "inbox", &sb.ListOptions{State: sb.TodoDone})
		require.NoError(t, err)
		require.Len(t, done, 9)
		out := logs.String()
		require.Contains(t, out, "level=WARN")
		require.Contains(t, out, "handler failed")
		require.Contains(t, out, bad.ID)
		require.Contains(t, out, "cannot do this one")
	})
}
