package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// CreateFor inside the application's own transaction (WithTx), watched
// from another process: rolled back, it leaves no todo, no audit event and
// no dedup key (the key is used again); committed, the todo is claimable
// by a worker in the other process — whose blocking claim, polling only
// once a minute, wakes on the commit's notification.
func TestCreateForInsideTheApplicationsTransaction(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Minute)
	_, friend, worker := d.friend()
	ctx := context.Background()
	app, err := pgx.Connect(ctx, d.cfg.DSN)
	require.NoError(t, err)
	defer app.Close(ctx)
	decisions := d.cfg.Table + "_decisions"
	_, err = app.Exec(ctx, `CREATE TABLE `+decisions+` (id text PRIMARY KEY)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = app.Exec(context.Background(), `DROP TABLE IF EXISTS `+decisions) })
	// The store writes each of its tables once before (see WithTx).
	_, _, err = d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "warm-up"})
	require.NoError(t, err)
	p := d.start()
	claimed := p.call(command{Op: "claim", Cred: string(worker), Queue: "inbox"})
	require.Empty(t, claimed.Err)
	events := func() int {
		evs, err := d.sb.Events(ctx, 0, 1000)
		require.NoError(t, err)
		return len(evs)
	}
	sequenced(t, d.sb, d.st)
	eventsBefore := events()

	serializable := pgx.TxOptions{IsoLevel: pgx.Serializable}
	decide := func(id string, commit bool) (switchboard.Todo, bool) {
		tx, err := app.BeginTx(ctx, serializable)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO `+decisions+` (id) VALUES ($1)`, id)
		require.NoError(t, err)
		td, created, err := d.sb.CreateFor(postgres.WithTx(ctx, tx), friend, "inbox", switchboard.NewTodo{Kind: "decided", DedupKey: "decision-1", Payload: []byte(`{"id":"` + id + `"}`)})
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
		return td, created
	}

	// Rolled back: nothing of it anywhere.
	gone, created := decide("first", false)
	require.True(t, created)
	_, err = d.sb.Get(ctx, friend, gone.ID)
	require.ErrorIs(t, err, switchboard.ErrNotFound, "the todo rolled back with the application's row")
	empty := p.call(command{Op: "claim", Cred: string(worker), Queue: "inbox"})
	require.Contains(t, empty.Is, "empty", "the other process finds nothing: %+v", empty)
	sequenced(t, d.sb, d.st)
	require.Equal(t, eventsBefore, events(), "no audit event of a rolled-back CreateFor")

	// A worker in the other process waits; the commit wakes it.
	p.send(command{Op: "claim", Cred: string(worker), Queue: "inbox", Wait: true})
	time.Sleep(200 * time.Millisecond) // let it block (if it does not yet, it finds the todo at once)
	kept, created := decide("second", true)
	require.True(t, created, "the rolled-back dedup key is free again")
	require.NotEqual(t, gone.ID, kept.ID)
	got := p.recv()
	require.Empty(t, got.Err)
	require.Equal(t, kept.ID, got.ID, "the committed todo, claimed in the other process")
	require.Less(t, got.Elapsed, 30*time.Second, "woken by the commit, not by the minute's poll")
	var n int
	require.NoError(t, app.QueryRow(ctx, `SELECT count(*) FROM `+decisions).Scan(&n))
	require.Equal(t, 1, n)
	sequenced(t, d.sb, d.st)
	require.Greater(t, events(), eventsBefore, "the committed CreateFor's events, sequenced after the commit")

	// Inside the same committed dedup key, a second CreateFor finds it.
	tx, err := app.BeginTx(ctx, serializable)
	require.NoError(t, err)
	again, created, err := d.sb.CreateFor(postgres.WithTx(ctx, tx), friend, "inbox", switchboard.NewTodo{Kind: "decided", DedupKey: "decision-1"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, kept.ID, again.ID)
	require.NoError(t, tx.Rollback(ctx))

	// A transaction that is not SERIALIZABLE is refused, and stays usable.
	tx, err = app.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	require.NoError(t, err)
	_, _, err = d.sb.CreateFor(postgres.WithTx(ctx, tx), friend, "inbox", switchboard.NewTodo{Kind: "decided"})
	require.ErrorIs(t, err, postgres.ErrTxIsolation)
	require.NoError(t, tx.Commit(ctx))
}

// A table's partition created inside an application's transaction that
// then rolls back is not remembered: the store goes on writing that table
// (creating the partition again) as if the transaction never ran.
func TestWithTxRollbackForgetsNewPartitions(t *testing.T) {
	dsn := testDSN(t)
	st := open(t, dsn, postgres.Options{Table: freshTable(t, dsn)})
	defer st.Close()
	ctx := context.Background()
	app, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer app.Close(ctx)
	tx, err := app.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	in := postgres.WithTx(ctx, tx)
	for i := range 2 { // the second call finds the partition the first created
		require.NoError(t, st.Update(in, func(tx store.Tx) error { return tx.Put("fresh", []byte{byte(i)}, []byte("v")) }))
	}
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error { return tx.Put("fresh", []byte{9}, []byte("v")) }))
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		if _, err := tx.Get("fresh", []byte{0}); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("a rolled-back write is there: %v", err)
		}
		_, err := tx.Get("fresh", []byte{9})
		return err
	}))
}

// Close cuts off a call running in an application's transaction too,
// CloseTimeout after it began.
func TestCloseCutsOffWithTxCalls(t *testing.T) {
	dsn := testDSN(t)
	table := freshTable(t, dsn)
	st := open(t, dsn, postgres.Options{Table: table, CloseTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error { return tx.Put("a", []byte{1}, []byte("v")) }))
	locker, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer locker.Close(ctx)
	ltx, err := locker.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = ltx.Rollback(ctx) }()
	_, err = ltx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	app, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer app.Close(ctx)
	tx, err := app.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	blocked := make(chan error, 1)
	go func() {
		blocked <- st.Update(postgres.WithTx(ctx, tx), func(tx store.Tx) error { _, err := tx.Get("a", []byte{1}); return err })
	}()
	time.Sleep(200 * time.Millisecond) // it waits on the lock
	start := time.Now()
	require.NoError(t, st.Close())
	require.Less(t, time.Since(start), 5*time.Second, "Close waited past CloseTimeout")
	require.Error(t, <-blocked)
}

// Checkpoint's doc: under an application's transaction "nothing outside
// the store is written or asked: no witness, no kept checkpoint". Signed
// under WithTx and rolled back, the checkpoint leaves nothing behind that
// later checks compare against: CheckLog and the next Checkpoint succeed,
// and only that one is kept outside the store. Committed, it is stored,
// and the next Checkpoint outside a transaction keeps it.
func TestCheckpointUnderWithTx(t *testing.T) {
	ctx := context.Background()
	skey, vkey, err := switchboard.NewLogKey("withtx.test/log")
	require.NoError(t, err)
	kept := switchboard.CheckpointFile(filepath.Join(t.TempDir(), "kept"))
	d := newDeploymentOn(t, testDSN(t), postgres.Options{}, switchboard.Quotas{}, time.Second, func(c *switchboard.Config) {
		c.LogKey, c.Checkpoints = skey, kept
	})
	d.friend()
	sequenced(t, d.sb, d.st)
	app, err := pgx.Connect(ctx, d.cfg.DSN)
	require.NoError(t, err)
	defer app.Close(ctx)
	serializable := pgx.TxOptions{IsoLevel: pgx.Serializable}

	tx, err := app.BeginTx(ctx, serializable)
	require.NoError(t, err)
	cp, err := d.sb.Checkpoint(postgres.WithTx(ctx, tx))
	require.NoError(t, err)
	_, err = switchboard.OpenCheckpoint(cp.Note, vkey)
	require.NoError(t, err)
	b, err := kept.Load(ctx)
	require.NoError(t, err)
	require.Nil(t, b, "nothing kept before the application commits")
	require.NoError(t, tx.Rollback(ctx))
	require.Nil(t, storedCheckpoint(t, d.st), "rolled back with the application's transaction")
	require.NoError(t, d.sb.CheckLog(ctx), "nothing the rollback undid is compared against")
	again, err := d.sb.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, cp.Note, again.Note, "the same tree, signed again")
	b, err = kept.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, again.Note, b)

	// Committed: stored, and kept by the next Checkpoint outside.
	_, _, err = d.sb.Vend(ctx, d.bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbList}}}})
	require.NoError(t, err)
	sequenced(t, d.sb, d.st)
	tx, err = app.BeginTx(ctx, serializable)
	require.NoError(t, err)
	cp2, err := d.sb.Checkpoint(postgres.WithTx(ctx, tx))
	require.NoError(t, err)
	require.Greater(t, cp2.Size, cp.Size)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, cp2.Note, storedCheckpoint(t, d.st))
	b, err = kept.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, again.Note, b, "not kept inside the transaction")
	cp3, err := d.sb.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, cp2.Note, cp3.Note)
	b, err = kept.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, cp2.Note, b, "kept by the next Checkpoint outside a transaction")
	require.NoError(t, d.sb.CheckLog(ctx))
}

// Nothing outside the application's transaction is spent before it
// commits — or it is spent for good. Prove's doc: a DPoP proof is spent "in
// its own transaction — even under an application's transaction": rolled
// back, the same proof is still refused as replayed. A friend request's ID
// token is spent with the request, in the application's transaction:
// rolled back, there was no request and the same request may be sent
// again; committed, the token is refused as used.
func TestWithTxSpendsProofsForGood(t *testing.T) {
	ctx := context.Background()
	d := newDeployment(t, switchboard.Quotas{Cooldown: -1}, time.Second)
	_, friend, _ := d.friend()
	app, err := pgx.Connect(ctx, d.cfg.DSN)
	require.NoError(t, err)
	defer app.Close(ctx)
	serializable := pgx.TxOptions{IsoLevel: pgx.Serializable}

	key, err := switchboardtest.NewProofKey("ES256")
	require.NoError(t, err)
	proof := key.Proof("POST", "https://host.example/mcp", string(friend), time.Now())
	tx, err := app.BeginTx(ctx, serializable)
	require.NoError(t, err)
	p, err := d.sb.Prove(postgres.WithTx(ctx, tx), friend, proof)
	require.NoError(t, err)
	_, _, err = d.sb.CreateFor(postgres.WithTx(ctx, tx), p, "inbox", switchboard.NewTodo{Kind: "k"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = d.sb.Prove(ctx, friend, proof)
	require.ErrorIs(t, err, switchboard.ErrInvalidDPoPProof, "a proof is good for one request, whatever the transaction did")
	require.ErrorContains(t, err, "replayed")

	request := func(why string) switchboard.FriendRequest {
		secret, pickup := switchboard.NewPickup()
		_ = secret
		req := switchboard.FriendRequest{From: "carol-desk", To: "bob-desk", Why: why, Pickup: pickup,
			Scope: switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}}
		req.IDToken = d.iss.RequestToken("carol", req, time.Now())
		return req
	}
	req := request("rolled back, then again")
	tx, err = app.BeginTx(ctx, serializable)
	require.NoError(t, err)
	_, created, err := d.sb.Request(postgres.WithTx(ctx, tx), req)
	require.NoError(t, err)
	require.True(t, created)
	require.NoError(t, tx.Rollback(ctx))
	e, created, err := d.sb.Request(ctx, req)
	require.NoError(t, err, "the rolled-back request never was: its token is not spent")
	require.True(t, created)
	require.NoError(t, d.sb.Withdraw(ctx, d.iss.Human("carol"), e.ID))

	req = request("committed")
	tx, err = app.BeginTx(ctx, serializable)
	require.NoError(t, err)
	e, _, err = d.sb.Request(postgres.WithTx(ctx, tx), req)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, d.sb.Withdraw(ctx, d.iss.Human("carol"), e.ID))
	_, _, err = d.sb.Request(ctx, req)
	require.ErrorIs(t, err, switchboard.ErrProvenance, "committed: the token was spent with the request")
	require.ErrorContains(t, err, "already used")
}
