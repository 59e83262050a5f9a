package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
