package group

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/store"
)

// serverTx stands for a server store's transaction: a Get waits on the
// server (forever, here) until the transaction's context ends, as a read
// blocked on a lock or a dead server does; Put writes nothing.
type serverTx struct {
	store.Tx
	ctx context.Context
}

func (t serverTx) Get(string, []byte) ([]byte, error) { <-t.ctx.Done(); return nil, t.ctx.Err() }
func (serverTx) Put(string, []byte, []byte) error     { return nil }

func bounded(txn func(ctx context.Context, fn func(store.Tx) error) error) *Committer {
	return New(Config{Name: "t", MaxBatch: 8, Bounded: true,
		Final: func(err error) bool { return errors.Is(err, store.ErrCommitUnknown) }}, txn)
}

// A caller whose fn waits on the server inside a batch returns when its
// own context ends — not when its batch-mates' do — with nothing of it
// written; its batch-mate is run again alone and succeeds.
func TestBoundedCallerLeavesABlockedBatch(t *testing.T) {
	hold := make(chan struct{})
	g := bounded(func(ctx context.Context, fn func(store.Tx) error) error { return fn(serverTx{ctx: ctx}) })
	first := make(chan error, 1)
	go func() { first <- g.Update(context.Background(), func(store.Tx) error { <-hold; return nil }) }()
	time.Sleep(20 * time.Millisecond) // the first batch runs; the next two queue behind it

	aCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	a, b := make(chan error, 1), make(chan error, 1)
	var aTook time.Duration
	go func() {
		start := time.Now()
		err := g.Update(aCtx, func(tx store.Tx) error { _, err := tx.Get("t", []byte("k")); return err })
		aTook = time.Since(start)
		a <- err
	}()
	time.Sleep(5 * time.Millisecond)
	bRan := 0
	go func() {
		b <- g.Update(context.Background(), func(tx store.Tx) error { bRan++; return tx.Put("t", []byte("k"), []byte("v")) })
	}()
	time.Sleep(5 * time.Millisecond)
	close(hold)
	require.NoError(t, <-first)

	select {
	case err := <-a:
		require.Error(t, err)
		require.NotErrorIs(t, err, store.ErrCommitUnknown, "its fn failed: nothing of it was written")
		require.ErrorIs(t, err, context.DeadlineExceeded, "its deadline ended it (the batch was cut off for it)")
		require.Less(t, aTook, 5*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the caller did not return when its context ended")
	}
	require.NoError(t, <-b)
	require.GreaterOrEqual(t, bRan, 1)
}

// fn panicking, or failing, after its caller's context ended: the panic is
// re-raised in the caller's goroutine and the error returned — nothing of
// either was written, so neither is "unknown".
func TestBoundedOutcomeAfterTheDeadline(t *testing.T) {
	slowRollback := func() *Committer {
		return bounded(func(ctx context.Context, fn func(store.Tx) error) error {
			err := fn(serverTx{ctx: ctx})
			time.Sleep(30 * time.Millisecond) // the ROLLBACK's round trip
			return err
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.PanicsWithValue(t, "boom", func() {
		_ = slowRollback().Update(ctx, func(store.Tx) error { time.Sleep(60 * time.Millisecond); panic("boom") })
	})

	mine := errors.New("fn's own error")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	err := slowRollback().Update(ctx2, func(store.Tx) error { time.Sleep(60 * time.Millisecond); return mine })
	require.ErrorIs(t, err, mine)
	require.NotErrorIs(t, err, store.ErrCommitUnknown)

	// fn done, the commit under way when the deadline comes: unknown.
	slowCommit := bounded(func(ctx context.Context, fn func(store.Tx) error) error {
		if err := fn(serverTx{ctx: ctx}); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond) // COMMIT, unanswered
		return nil
	})
	ctx3, cancel3 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel3()
	err = slowCommit.Update(ctx3, func(store.Tx) error { return nil })
	require.ErrorIs(t, err, store.ErrCommitUnknown)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A panic of the transaction itself, outside fn, reaches the caller.
func TestBoundedTxnPanic(t *testing.T) {
	g := bounded(func(context.Context, func(store.Tx) error) error { panic("txn") })
	require.PanicsWithValue(t, "txn", func() { _ = g.Update(context.Background(), func(store.Tx) error { return nil }) })
}

// Many callers with deadlines around their commits' length, their
// transactions sometimes retried: under -race, no fn touches its caller's
// variables after the caller returned, and every call returns.
func TestBoundedDeadlinesUnderLoad(t *testing.T) {
	g := bounded(func(ctx context.Context, fn func(store.Tx) error) error {
		for range 3 {
			err := fn(serverTx{ctx: ctx})
			select {
			case <-time.After(time.Duration(rand.IntN(300)) * time.Microsecond):
			case <-ctx.Done():
				return store.ErrCommitUnknown
			}
			if err != nil || rand.IntN(4) != 0 {
				return err
			}
		}
		return errors.New("gave up")
	})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(400))*time.Microsecond)
				x := 0
				_ = g.Update(ctx, func(store.Tx) error {
					time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
					x++
					return nil
				})
				x = -1 // a run of fn after this line is a race
				_ = x
				cancel()
			}
		})
	}
	wg.Wait()
}

// heldTx stands for a server transaction in which one row ("held") is
// held by someone else: reading it waits until released or the
// transaction's context ends; other reads answer at once, unless the
// context has ended. Its commit fails once the context has ended.
type heldTx struct {
	store.Tx
	ctx     context.Context
	release <-chan struct{}
}

func (t heldTx) Get(_ string, k []byte) ([]byte, error) {
	if string(k) == "held" {
		select {
		case <-t.release:
			return []byte("v"), nil
		case <-t.ctx.Done():
			return nil, t.ctx.Err()
		}
	}
	return []byte("v"), t.ctx.Err()
}

// A caller whose function failed only because a batch-mate's caller cut
// the batch off, and whose own deadline then ends while it waits to be run
// again alone, is told its deadline — not the batch's cancellation, which
// is not its own outcome — with nothing of it written.
func TestADeadlineWhileWaitingToRunAgainIsTheCallersOwn(t *testing.T) {
	release := make(chan struct{})
	g := bounded(func(ctx context.Context, fn func(store.Tx) error) error {
		if err := fn(heldTx{ctx: ctx, release: release}); err != nil {
			return err
		}
		return ctx.Err() // the COMMIT fails once the context has ended
	})
	ctx := context.Background()
	waitHeld := func(tx store.Tx) error { _, err := tx.Get("t", []byte("held")); return err }
	hold := make(chan struct{})
	first := make(chan error, 1)
	go func() { first <- g.Update(ctx, func(store.Tx) error { <-hold; return nil }) }()
	time.Sleep(20 * time.Millisecond)
	bCtx, cancelB := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelB()
	aCtx, cancelA := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancelA()
	b, c, a := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { b <- g.Update(bCtx, waitHeld) }() // cuts the batch off at its deadline
	time.Sleep(5 * time.Millisecond)
	go func() { c <- g.Update(ctx, waitHeld) }() // then, alone, waits for the row
	time.Sleep(5 * time.Millisecond)
	aRan := 0
	go func() {
		a <- g.Update(aCtx, func(tx store.Tx) error { aRan++; _, err := tx.Get("t", []byte("other")); return err })
	}()
	time.Sleep(5 * time.Millisecond)
	close(hold)
	require.NoError(t, <-first)

	require.ErrorIs(t, <-b, context.DeadlineExceeded)
	err := <-a
	require.ErrorIs(t, err, context.DeadlineExceeded, "its own deadline ended it, waiting behind the row")
	require.NotErrorIs(t, err, store.ErrCommitUnknown, "nothing of it was sent")
	require.Equal(t, 1, aRan, "it ran once, in the batch that was cut off")
	close(release)
	require.NoError(t, <-c)
}

// A function that panics in a batch whose commit's outcome is then unknown
// (Final) still panics in its caller's goroutine — nothing of it was in
// the commit — while its batch-mate, whose write was, is told the outcome
// is unknown; bounded or not.
func TestAPanicInABatchWithAnUnknownCommitIsReRaised(t *testing.T) {
	for _, b := range []bool{true, false} {
		hold := make(chan struct{})
		g := New(Config{Name: "t", MaxBatch: 8, Bounded: b,
			Final: func(err error) bool { return errors.Is(err, store.ErrCommitUnknown) }},
			func(ctx context.Context, fn func(store.Tx) error) error {
				if err := fn(serverTx{ctx: ctx}); err != nil {
					return err
				}
				return store.ErrCommitUnknown // the COMMIT's connection was lost
			})
		ctx := context.Background()
		first := make(chan error, 1)
		go func() { first <- g.Update(ctx, func(store.Tx) error { <-hold; return nil }) }()
		time.Sleep(20 * time.Millisecond) // the next calls queue behind the first batch
		mine := errors.New("fn's own error")
		panicked, failed, mate := make(chan any, 1), make(chan error, 1), make(chan error, 1)
		go func() {
			defer func() { panicked <- recover() }()
			_ = g.Update(ctx, func(store.Tx) error { panic("boom") })
		}()
		go func() { failed <- g.Update(ctx, func(store.Tx) error { return mine }) }()
		go func() {
			mate <- g.Update(ctx, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v")) })
		}()
		time.Sleep(10 * time.Millisecond)
		close(hold)
		require.ErrorIs(t, <-first, store.ErrCommitUnknown) // alone, its commit too
		require.Equal(t, "boom", <-panicked, "bounded %v", b)
		err := <-failed
		require.ErrorIs(t, err, mine, "bounded %v", b)
		require.NotErrorIs(t, err, store.ErrCommitUnknown, "bounded %v: its fn failed, nothing of it was sent", b)
		require.ErrorIs(t, <-mate, store.ErrCommitUnknown, "bounded %v", b)
	}
}

// A panic of a batch's transaction itself (outside the functions) reaches
// every caller of the batch in its own goroutine, as it does a call run
// alone (TestBoundedTxnPanic) — it does not end the process from the
// goroutine leading the batch — and the committer goes on.
func TestABatchTransactionPanicReachesItsCallers(t *testing.T) {
	for _, b := range []bool{true, false} {
		var n atomic.Int32
		hold := make(chan struct{})
		g := New(Config{Name: "t", MaxBatch: 8, Bounded: b}, func(ctx context.Context, fn func(store.Tx) error) error {
			err := fn(serverTx{ctx: ctx})
			if n.Add(1) == 2 {
				panic("txn") // the batch's transaction, after its functions
			}
			return err
		})
		ctx := context.Background()
		first := make(chan error, 1)
		go func() { first <- g.Update(ctx, func(store.Tx) error { <-hold; return nil }) }()
		time.Sleep(20 * time.Millisecond)
		got := make(chan any, 2)
		for range 2 {
			go func() {
				defer func() { got <- recover() }()
				_ = g.Update(ctx, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v")) })
			}()
		}
		time.Sleep(10 * time.Millisecond)
		close(hold)
		require.NoError(t, <-first)
		for range 2 {
			require.Equal(t, "txn", <-got, "bounded %v", b)
		}
		require.NoError(t, g.Update(ctx, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v")) }), "bounded %v: later calls run", b)
	}
}
