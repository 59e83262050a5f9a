package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
)

// The sequencer begins a pass early, while the one before commits, only
// when more was committed meanwhile or that one read a full batch, and
// goes back to waiting once a pass has moved what was pending: a pass
// that finds nothing costs two round trips and a commit. So one commit's
// events, with nothing else going on, are sequenced by one pass — one
// commit besides the CreateFor's.
func TestOneCommitIsSequencedInOnePass(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Minute) // no poll meanwhile
	_, friend, _ := d.friend()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	settle := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+d.cfg.Table+`__events_pending`).Scan(&n))
			return n == 0
		}, 10*time.Second, time.Millisecond, "the events are sequenced")
		time.Sleep(200 * time.Millisecond) // a pass begun after it would have committed by now
	}
	settle()
	for i := range 5 {
		before := d.st.Stats().Commits
		_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "job"})
		require.NoError(t, err)
		settle()
		require.Equal(t, uint64(2), d.st.Stats().Commits-before, "round %d: the CreateFor's commit and one pass's", i)
	}
}
