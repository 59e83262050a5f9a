package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
)

// The grant rules of the root package's grantlife_test.go on PostgreSQL,
// whose claims take row locks: a replaced grant's queued work is handed
// out (alone in the queue, and beside other work), and an expired grant's
// is cancelled at its instant by the claim that meets it — committed, not
// rolled back with an empty answer.
func TestGrantLifeOnPostgres(t *testing.T) {
	ctx := context.Background()
	d := newDeployment(t, switchboard.Quotas{}, time.Second)
	_, friend, worker := d.friend()
	approve := func(why string, expires time.Time) switchboard.Credential {
		t.Helper()
		scope := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
		secret, pickup := switchboard.NewPickup()
		req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: scope, Why: why, Pickup: pickup}
		req.IDToken = d.iss.RequestToken("alice", req, time.Now())
		e, _, err := d.sb.Request(ctx, req)
		require.NoError(t, err)
		_, err = d.sb.ApproveWith(ctx, d.bob, e.ID, switchboard.ApproveOptions{ExpiresAt: expires})
		require.NoError(t, err)
		_, cred, err := d.sb.Collect(ctx, e.ID, secret)
		require.NoError(t, err)
		return cred
	}
	create := func(c switchboard.Credential, title string) switchboard.Todo {
		t.Helper()
		td, _, err := d.sb.CreateFor(ctx, c, "inbox", switchboard.NewTodo{Kind: "k", Title: title})
		require.NoError(t, err)
		return td
	}
	state := func(td switchboard.Todo) switchboard.TodoState {
		t.Helper()
		got, err := d.sb.InspectTodo(ctx, td.ID)
		require.NoError(t, err)
		return got.State
	}

	alone := create(friend, "alone")
	second := approve("replace", time.Time{})
	got, l, err := d.sb.Claim(ctx, worker, "inbox", nil)
	require.NoError(t, err, "a replaced grant's work, alone in the queue")
	require.Equal(t, alone.ID, got.ID)
	require.NoError(t, d.sb.Complete(ctx, worker, l, nil))

	beside := create(second, "beside")
	third := approve("replace again", time.Time{})
	other := create(third, "other")
	cs, err := d.sb.ClaimN(ctx, worker, "inbox", 2, nil)
	require.NoError(t, err)
	require.Len(t, cs, 2, "beside other work")
	require.Equal(t, switchboard.TodoLeased, state(beside))
	require.Equal(t, switchboard.TodoLeased, state(other))
	for _, c := range cs {
		require.NoError(t, d.sb.Complete(ctx, worker, c.Lease, nil))
	}

	// An expiring grant (PostgreSQL's clock is the real one: a short
	// lifetime, waited out).
	expiry := time.Now().Add(2 * time.Second)
	soon := approve("for a moment", expiry)
	doomed := create(soon, "doomed")
	time.Sleep(time.Until(expiry)) // its instant, on the server's and this process's clock
	_, _, err = d.sb.Claim(ctx, worker, "inbox", nil)
	require.ErrorIs(t, err, switchboard.ErrQueueEmpty)
	require.Equal(t, switchboard.TodoCancelled, state(doomed), "cancelled at the claim that met it, and committed")
}
