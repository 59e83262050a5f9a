package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
)

// A server whose commits hang — it waits for a synchronous standby that
// is not there, as a primary does once its only synchronous standby died —
// does not hang the callers: a call's context bounds it, the commit
// included, and a commit cut off so says its outcome is unknown; a call
// without a deadline is cut off by Close, which returns within
// CloseTimeout; and the Switchboard's own Close is bounded too.
func TestDeadlinesKeptWhenCommitsHang(t *testing.T) {
	primary := newPrimary(t)
	const closeTimeout = time.Second
	d := newDeploymentOnStore(t, primary.dsn(), postgres.Options{CloseTimeout: closeTimeout})
	_, friend, worker := d.friend()
	ctx := context.Background()
	_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "before"})
	require.NoError(t, err)

	// From here every COMMIT that wrote something waits for a standby
	// named "gone", which never connects.
	primary.setting("synchronous_standby_names", "gone")
	// (Cleanups run last first: this one before the deployment's, which
	// commit.)
	t.Cleanup(func() { primary.setting("synchronous_standby_names", "") })

	const deadline = 1500 * time.Millisecond
	// Generous: the bound is the deadline; the slack absorbs a loaded
	// machine, never a commit that waits for the server.
	const slack = 5 * time.Second
	for _, c := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"CreateFor", func(ctx context.Context) error {
			_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "hung", DedupKey: "hung-1"})
			return err
		}},
		{"Claim", func(ctx context.Context) error {
			_, _, err := d.sb.Claim(ctx, worker, "inbox", nil)
			return err
		}},
		{"store Update", func(ctx context.Context) error {
			return d.st.Update(ctx, func(tx store.Tx) error { return tx.Put("hang", []byte("k"), []byte("v")) })
		}},
		{"store Update alone", func(ctx context.Context) error {
			return d.st.Update(store.Alone(ctx), func(tx store.Tx) error { return tx.Put("hang", []byte("k"), []byte("v")) })
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			start := time.Now()
			err := c.call(cctx)
			took := time.Since(start)
			require.Error(t, err)
			require.ErrorIs(t, err, switchboard.ErrCommitUnknown, "the commit was sent and not answered")
			require.ErrorIs(t, err, postgres.ErrCommitUnknown)
			require.ErrorIs(t, err, context.DeadlineExceeded, "what ended the call")
			require.Less(t, took, deadline+slack, "the deadline bounds the call, its commit included")
			t.Logf("%s: returned after %v: %v", c.name, took.Round(time.Millisecond), err)
		})
	}

	// Reads do not wait for the standby: the store still answers them.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, d.st.View(rctx, func(tx store.Tx) error { _, err := tx.Get("todos", []byte("none")); return ignoreNotFound(err) }))

	// A call without a deadline hangs in its commit until Close cuts it
	// off, CloseTimeout after Close began.
	hung := make(chan error, 1)
	go func() {
		_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "hung", DedupKey: "hung-2"})
		hung <- err
	}()
	time.Sleep(300 * time.Millisecond) // its commit is on the way
	select {
	case err := <-hung:
		t.Fatalf("a commit the server does not answer returned: %v", err)
	default:
	}
	start := time.Now()
	require.NoError(t, d.sb.Close())
	require.NoError(t, d.st.Close())
	took := time.Since(start)
	require.Less(t, took, closeTimeout+slack, "Close is bounded by CloseTimeout")
	select {
	case err := <-hung:
		require.ErrorIs(t, err, switchboard.ErrCommitUnknown)
		t.Logf("Close returned after %v; the call it cut off: %v", took.Round(time.Millisecond), err)
	case <-time.After(slack):
		t.Fatal("the call Close cut off did not return")
	}
}

func ignoreNotFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// A caller whose deadline ends while its function waits on the server
// inside a group-commit batch gets context.DeadlineExceeded, as a caller
// alone does (the batch is cut off for it: the store's own cancellation is
// not the reason its caller is told), with nothing of it written; its
// batch-mate's write lands.
func TestADeadlineInABatchIsDeadlineExceeded(t *testing.T) {
	st, atx := storeWithHeldRow(t)
	ctx := context.Background()

	for _, locked := range []bool{true, false} {
		update, wait := st.Update, func(tx store.Tx) error {
			return tx.Put("t", []byte("held"), []byte("mine")) // waits for the row at COMMIT
		}
		if locked {
			update, wait = st.UpdateLocked, func(tx store.Tx) error {
				_, err := tx.(store.Locker).GetLocked("t", []byte("held")) // waits for the row
				return err
			}
		}
		// A first call occupies the committer, so the next two share a
		// batch.
		hold := make(chan struct{})
		first := make(chan error, 1)
		go func() { first <- update(ctx, func(store.Tx) error { <-hold; return nil }) }()
		time.Sleep(50 * time.Millisecond)
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		waiter := make(chan error, 1)
		go func() { waiter <- update(dctx, wait) }()
		time.Sleep(20 * time.Millisecond)
		mate := make(chan error, 1)
		mateKey := []byte(fmt.Sprint("mate-", locked))
		go func() {
			mate <- update(ctx, func(tx store.Tx) error { return tx.Put("t", mateKey, []byte("v")) })
		}()
		time.Sleep(20 * time.Millisecond)
		close(hold)
		require.NoError(t, <-first)
		select {
		case err := <-waiter:
			require.ErrorIs(t, err, context.DeadlineExceeded, "locked %v: its deadline ended it", locked)
			if !locked {
				// Its commit was sent: the outcome is unknown.
				require.ErrorIs(t, err, store.ErrCommitUnknown)
			} else {
				require.NotErrorIs(t, err, context.Canceled, "locked %v", locked)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("locked %v: the caller did not return when its deadline passed", locked)
		}
		cancel()
		if !locked {
			// The batch waits for the row with its mate: let it go.
			require.NoError(t, atx.Rollback(ctx))
		}
		require.NoError(t, <-mate, "locked %v", locked)
		require.NoError(t, st.View(ctx, func(tx store.Tx) error {
			_, err := tx.Get("t", mateKey)
			return err
		}))
	}
}

// A batch-mate of a caller whose deadline cut the batch off is run again
// alone; if its own deadline ends while it waits for that, it is told its
// deadline, not the cut-off batch's cancellation (which failed its first
// run's read), with nothing of it written.
func TestADeadlineWaitingToRunAgainIsDeadlineExceeded(t *testing.T) {
	st, atx := storeWithHeldRow(t, "other")
	ctx := context.Background()

	waitHeld := func(tx store.Tx) error { _, err := tx.(store.Locker).GetLocked("t", []byte("held")); return err }
	hold := make(chan struct{})
	first := make(chan error, 1)
	go func() { first <- st.UpdateLocked(ctx, func(store.Tx) error { <-hold; return nil }) }()
	time.Sleep(50 * time.Millisecond)
	bCtx, cancelB := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelB()
	aCtx, cancelA := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancelA()
	b, c, a := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { b <- st.UpdateLocked(bCtx, waitHeld) }() // its deadline cuts the batch off
	time.Sleep(20 * time.Millisecond)
	go func() { c <- st.UpdateLocked(ctx, waitHeld) }() // run again alone, it waits for the row
	time.Sleep(20 * time.Millisecond)
	go func() {
		a <- st.UpdateLocked(aCtx, func(tx store.Tx) error { _, err := tx.Get("t", []byte("other")); return err })
	}()
	time.Sleep(20 * time.Millisecond)
	close(hold)
	require.NoError(t, <-first)
	require.ErrorIs(t, <-b, context.DeadlineExceeded)
	err := <-a
	require.ErrorIs(t, err, context.DeadlineExceeded, "its own deadline ended it")
	require.NotErrorIs(t, err, store.ErrCommitUnknown, "nothing of it was sent")
	require.NoError(t, atx.Rollback(ctx))
	require.NoError(t, <-c)
}

// storeWithHeldRow opens a store on a fresh table whose table "t" holds
// the row "held", and the rows others, and an application's transaction
// that holds "held" (SELECT … FOR UPDATE) until it rolls back (at the
// test's end, or when the test rolls it back).
func storeWithHeldRow(t *testing.T, others ...string) (*postgres.Store, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	dsn := testDSN(t)
	st := open(t, dsn, postgres.Options{Table: freshTable(t, dsn)})
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		for _, k := range append([]string{"held"}, others...) {
			if err := tx.Put("t", []byte(k), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	}))
	app, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	atx, err := app.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = atx.Rollback(ctx); _ = app.Close(ctx) }) // before the store's Close
	_, err = atx.Exec(ctx, `SELECT v FROM `+st.Table()+` WHERE tbl = 't' AND k = 'held'::bytea FOR UPDATE`)
	require.NoError(t, err)
	return st, atx
}
