package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/postgres"
)

// A claim answers ErrQueueEmpty only when, at some instant of the call,
// nothing it may take was ready. Four stores on one table (as four
// processes would be), a queue topped up to 20 ready todos before each
// round, and 8 concurrent claims per round: fewer claimers than ready
// todos, so every claim must lease one — none may answer empty, whatever
// the other claims lock, look ahead at or lease meanwhile.
func TestClaimIsNeverEmptyWhileWorkIsReady(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Second)
	_, friend, worker := d.friend()
	ctx := context.Background()
	sbs := []*switchboard.Switchboard{d.sb}
	for range 3 {
		st := open(t, d.cfg.DSN, postgres.Options{Table: d.cfg.Table})
		t.Cleanup(func() { _ = st.Close() })
		sb, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{d.iss.Config()}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sb.Close() })
		sbs = append(sbs, sb)
	}
	reader := d.workerCred()
	const ready, claimers, rounds = 20, 8, 30
	queued, n := 0, 0
	empty, claimed := 0, 0
	for round := range rounds {
		for ; queued < ready; queued++ {
			_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "job", DedupKey: fmt.Sprint(n)})
			require.NoError(t, err)
			n++
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range claimers {
			sb := sbs[i%len(sbs)]
			wg.Go(func() {
				_, _, err := sb.Claim(ctx, worker, "inbox", nil)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					claimed++
				case errors.Is(err, switchboard.ErrQueueEmpty):
					empty++
				default:
					t.Errorf("round %d: claim: %v", round, err)
				}
			})
		}
		wg.Wait()
		// What really is ready now (a claim that wrongly answered empty
		// left its todo in the queue): top up from the truth.
		list, err := d.sb.List(ctx, reader, "inbox", &switchboard.ListOptions{State: switchboard.TodoQueued, Limit: 1000})
		require.NoError(t, err)
		queued = len(list)
	}
	require.Zero(t, empty, "%d of %d claims answered empty while at least %d todos were ready", empty, claimers*rounds, ready-claimers)
	require.Equal(t, claimers*rounds, claimed)
}
