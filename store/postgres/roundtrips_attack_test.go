package postgres_test

// Found by attacking the round-trip changes (store.LockFirst, the
// remembered credential, the sequencer's wake-ups) where they meet older
// features: an application's transaction holding a row, a lost LISTEN
// connection, damaged pending rows, a claim that waits.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/postgres"
)

// A made-up credential locks nothing: CompleteAndClaim locks its todo
// ahead of its checks only for a credential that authenticated before, so
// one naming a todo another transaction holds fails at once, and a
// legitimate call grouped with it does not wait behind it.
func TestAMadeUpCredentialLocksNoTodo(t *testing.T) {
	for _, claimOnly := range []bool{false, true} {
		name := map[bool]string{false: "CompleteAndClaim", true: "Claim"}[claimOnly]
		t.Run(name, func(t *testing.T) {
			d := newDeployment(t, switchboard.Quotas{}, time.Second)
			_, friend, _ := d.friend()
			ctx := context.Background()
			_, worker, err := d.sb.Vend(ctx, d.bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{
				{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbComplete, switchboard.VerbGet}}}})
			require.NoError(t, err)
			for range 6 {
				_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "job"})
				require.NoError(t, err)
			}
			_, held, err := d.sb.Claim(ctx, worker, "inbox", nil)
			require.NoError(t, err)
			_, mine, err := d.sb.Claim(ctx, worker, "inbox", nil)
			require.NoError(t, err)

			app, err := pgx.Connect(ctx, d.cfg.DSN)
			require.NoError(t, err)
			defer app.Close(ctx)
			tx, err := app.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			require.NoError(t, d.sb.Complete(postgres.WithTx(ctx, tx), worker, held, nil)) // holds held's row

			bogus := switchboard.Credential("sbg_" + strings.Repeat("A", 43))
			var wg sync.WaitGroup
			var badErr, goodErr error
			var badTook, goodTook time.Duration
			wg.Go(func() {
				t0 := time.Now()
				_, badErr = d.sb.CompleteAndClaim(ctx, bogus, switchboard.Lease{TodoID: held.TodoID, Token: "x"}, nil, 1, nil)
				badTook = time.Since(t0)
			})
			wg.Go(func() {
				time.Sleep(200 * time.Microsecond) // into the same batch, as a rule
				t0 := time.Now()
				if claimOnly {
					_, _, goodErr = d.sb.Claim(ctx, worker, "inbox", nil)
				} else {
					_, goodErr = d.sb.CompleteAndClaim(ctx, worker, mine, nil, 1, nil)
				}
				goodTook = time.Since(t0)
			})
			time.Sleep(3 * time.Second)
			require.NoError(t, tx.Commit(ctx))
			wg.Wait()
			require.ErrorIs(t, badErr, switchboard.ErrUnauthenticated)
			require.Less(t, badTook, time.Second, "a made-up credential waited for a row it has no right to")
			require.NoError(t, goodErr)
			require.Less(t, goodTook, time.Second, "a legitimate call waited behind a made-up credential's lock")
		})
	}
}

// A CompleteAndClaim that completed its todo and then waits for work
// another transaction holds waits holding nothing else (waitHeld): the
// completed todo's row is free meanwhile.
func TestAWaitingCompleteAndClaimHoldsNoTodo(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Second)
	_, friend, worker := d.friend()
	ctx := context.Background()
	for range 2 {
		_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "job"})
		require.NoError(t, err)
	}
	_, l, err := d.sb.Claim(ctx, worker, "inbox", nil)
	require.NoError(t, err)

	holder, err := pgx.Connect(ctx, d.cfg.DSN)
	require.NoError(t, err)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `WITH l AS (SELECT k FROM `+d.cfg.Table+` WHERE tbl = 'todo_index' AND substr(k, 1, 1) = 'r' FOR UPDATE) SELECT count(*) FROM l`).Scan(&n))
	require.Equal(t, 1, n, "the other todo's ready entry, held")

	done := make(chan error, 1)
	go func() {
		_, err := d.sb.CompleteAndClaim(ctx, worker, l, nil, 1, nil)
		done <- err
	}()
	time.Sleep(time.Second) // it completed, and waits for the held entry

	probe, err := pgx.Connect(ctx, d.cfg.DSN)
	require.NoError(t, err)
	defer probe.Close(ctx)
	ptx, err := probe.Begin(ctx)
	require.NoError(t, err)
	_, lockErr := ptx.Exec(ctx, `SELECT v FROM `+d.cfg.Table+` WHERE tbl = 'todos' AND k = $1 FOR UPDATE NOWAIT`, []byte(l.TodoID))
	_ = ptx.Rollback(ctx)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done)
	require.NoError(t, lockErr, "the waiting transaction holds the completed todo's row")
}

// While its LISTEN connection is down, a process still sequences its own
// commits' events at once: the store delivers its own commit's
// notifications to its watchers itself then (store.Notifier).
func TestOwnCommitsAreSequencedWithListenDown(t *testing.T) {
	base := testDSN(t)
	ctx := context.Background()
	db := freshDatabase(t, base, "listen_")
	dsn := withDatabase(t, base, db)
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer admin.Close(ctx)
	defer func() { _, _ = admin.Exec(context.Background(), `ALTER DATABASE `+db+` ALLOW_CONNECTIONS true`) }()

	const poll = 20 * time.Second
	d := newDeploymentOn(t, dsn, postgres.Options{MinConns: 8}, switchboard.Quotas{}, poll, nil)
	_, friend, _ := d.friend()
	_, _, err = d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "warm-up"})
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	evs, err := d.sb.Events(ctx, 0, 10000)
	require.NoError(t, err)
	last := evs[len(evs)-1].Seq

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := d.sb.Subscribe(sctx, last, nil)
	defer sub.Close()

	// The LISTEN connection cut, and kept from coming back.
	_, err = admin.Exec(ctx, `ALTER DATABASE `+db+` ALLOW_CONNECTIONS false`)
	require.NoError(t, err)
	var n int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%'`, db).Scan(&n))
	require.Equal(t, 1, n, "the LISTEN backend")
	time.Sleep(300 * time.Millisecond)

	t0 := time.Now()
	td, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "job"})
	require.NoError(t, err)
	for {
		select {
		case ev := <-sub.C:
			if ev.Todo == td.ID {
				require.Less(t, time.Since(t0), 2*time.Second, "this process's own commit waited for the poll")
				return
			}
		case <-time.After(poll + 5*time.Second):
			t.Fatalf("no event; subscription: %v", sub.Err())
		}
	}
}

// Pending rows that hold no entry (AddPending refuses them; an older
// release or a hand may have written some) are deleted by the sequencer,
// which neither spins on them nor lets them hold back the events after
// them.
func TestEmptyPendingRowsAreDropped(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Minute)
	_, friend, _ := d.friend()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	pending := func() int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+d.cfg.Table+`__events_pending`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return pending() == 0 }, 10*time.Second, time.Millisecond)
	_, err = conn.Exec(ctx, `SELECT setval('`+d.cfg.Table+`_append', 100000)`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO `+d.cfg.Table+` (tbl, k, v) SELECT 'events_pending', int8send(i), ''::bytea FROM generate_series(1, 300) AS i`)
	require.NoError(t, err)
	before := d.st.Stats()
	td, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "job"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		evs, err := d.sb.Events(ctx, 0, 10000)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Todo == td.ID {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the CreateFor's events are sequenced past the empty rows")
	time.Sleep(time.Second)
	require.Zero(t, pending())
	require.Less(t, d.st.Stats().Commits-before.Commits, uint64(20), "the sequencer spins")
}
