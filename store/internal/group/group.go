// Package group is the group commit shared by the store backends whose
// commits are expensive (an fsync, a round trip): Update calls that arrive
// while a commit is in progress are queued, and the next commit runs them
// back to back inside one write transaction, each in its own overlay so that
// one that fails or panics is undone alone. Every caller returns after the
// single commit.
package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/internal/overlay"
)

// Committer groups concurrent Update calls into shared transactions.
type Committer struct {
	// Txn runs fn in one write transaction over base and commits iff fn
	// returns nil. It may run fn more than once (retries).
	txn func(ctx context.Context, fn func(base store.Tx) error) error
	// name prefixes the context errors ("bolt", "postgres").
	name     string
	maxBatch int
	// A batch waits for the callers the previous commit released only
	// while they keep arriving: at most stall between two arrivals, and
	// most in all. A lone caller never waits: nobody was released ahead
	// of it.
	stall, most time.Duration
	before      func() func()
	final       func(error) bool
	bounded     bool

	mu      sync.Mutex
	queue   []*call
	leading bool          // a goroutine is committing batches
	expect  int           // how many callers the next batch waits for
	freed   time.Time     // when the last batch released its callers
	arrived chan struct{} // poked (never blocking) when a call is queued
}

// call is one queued Update.
type call struct {
	ctx   context.Context
	fn    func(store.Tx) error
	err   error
	panic any
	done  chan struct{}
	// mu is held while fn runs (Bounded): a caller that gives up waits
	// for a run in progress to end, then marks the call gone, so fn never
	// runs (or runs again, on a retry) once its caller has returned — fn
	// writes the caller's variables.
	mu      sync.Mutex
	ran     bool  // fn has run at least once: its writes may commit
	gone    bool  // the caller returned: fn must not run again
	fnErr   error // fn's last outcome: an error or a panic means
	fnPanic any   // nothing of that run is written
	// cancelBatch cuts off the transaction of the batch running fn
	// (Bounded): a caller that gives up while fn waits on the server
	// ends the wait rather than waiting for its batch-mates' deadlines.
	cancelBatch atomic.Pointer[context.CancelFunc]
}

// Config configures a Committer.
type Config struct {
	Name     string // prefixes context errors ("bolt", "postgres")
	MaxBatch int    // calls per transaction at most
	// Stall and Gather bound how long a batch waits for the callers the
	// previous commit released (see gather): at most Stall between two
	// arrivals and Gather in all. Zero means 50µs and 500µs, sized for a
	// commit of about a millisecond; a slower commit can afford more.
	Stall, Gather time.Duration
	// Before, if set, runs before each batch is taken from the queue — for
	// a backend that must wait its turn to write (a lock shared with other
	// processes): everyone who arrives during that wait joins the batch.
	// The func it returns, if not nil, runs after the batch's commit.
	Before func() (after func())
	// Final, if set, reports that an error of a batch's transaction leaves
	// its outcome unknown (the commit may have happened): every call of
	// the batch then returns that error instead of being run again alone.
	Final func(error) bool
	// Bounded makes the caller's context bound the whole call, for a
	// backend whose commit can hang (on a server): batches run on a
	// goroutine of their own, each caller returns when its context ends —
	// with its context's error if no batch had taken the call (nothing of
	// it runs), else with store.ErrCommitUnknown — and a batch's
	// transaction is handed a context that ends once every one of its
	// callers has given up. Without it the goroutine that finds no leader
	// commits the batch itself (one goroutine switch fewer per commit)
	// and every caller waits for its commit.
	Bounded bool
}

// New returns a Committer that runs its batches with txn.
func New(c Config, txn func(ctx context.Context, fn func(base store.Tx) error) error) *Committer {
	if c.Stall <= 0 {
		c.Stall = 50 * time.Microsecond
	}
	if c.Gather <= 0 {
		c.Gather = 500 * time.Microsecond
	}
	return &Committer{txn: txn, name: c.Name, maxBatch: c.MaxBatch, stall: c.Stall, most: c.Gather, before: c.Before, final: c.Final, bounded: c.Bounded, arrived: make(chan struct{}, 1)}
}

// Update queues fn for the next commit and returns its outcome once that
// commit is durable (or fn's error, with nothing of fn's written). A panic
// in fn is re-raised in the caller's goroutine, with nothing written.
func (g *Committer) Update(ctx context.Context, fn func(store.Tx) error) error {
	c := &call{ctx: ctx, fn: fn, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.leading
	g.leading = true
	g.mu.Unlock()
	select {
	case g.arrived <- struct{}{}:
	default:
	}
	cut := false // the batch running fn was cut off for this caller
	// cutOff reports that err is fn's failure because its batch was cut
	// off for this caller (not a commit that may have landed): the
	// caller's context says why — a deadline is
	// context.DeadlineExceeded, as without a batch.
	cutOff := func(err error) bool {
		return cut && errors.Is(err, context.Canceled) && !errors.Is(err, store.ErrCommitUnknown)
	}
	if g.bounded {
		if lead {
			go g.lead()
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			if !c.mu.TryLock() {
				// fn is running, perhaps waiting on the server: cut its
				// batch's transaction off (the others in it run again
				// alone), then wait for fn to return.
				if cancel := c.cancelBatch.Load(); cancel != nil {
					(*cancel)()
					cut = true
				}
				c.mu.Lock()
			}
			c.gone = true
			ran, fnErr, fnPanic := c.ran, c.fnErr, c.fnPanic
			c.mu.Unlock()
			select {
			case <-c.done: // it finished meanwhile
			default:
				switch {
				case fnPanic != nil:
					panic(fnPanic) // nothing of it was written
				case !ran, cutOff(fnErr): // not run, or cut off for this caller
					return fmt.Errorf("%s: update: %w", g.name, ctx.Err())
				case fnErr != nil:
					return fnErr // nothing of it was written
				}
				return fmt.Errorf("%s: update: %w: %w", g.name, store.ErrCommitUnknown, ctx.Err())
			}
		}
	} else {
		if lead {
			g.lead()
		}
		<-c.done
	}
	if c.panic != nil {
		panic(c.panic)
	}
	if cutOff(c.err) { // and the batch ended meanwhile
		return fmt.Errorf("%s: update: %w", g.name, ctx.Err())
	}
	return c.err
}

// runFn runs c.fn over tx (through run, which keeps a panic), unless c's
// caller has given up on it (skipped is then true).
func (c *call) runFn(tx store.Tx) (err error, skipped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return nil, true
	}
	c.ran = true
	c.panic = nil
	c.fnErr = run(c, func() error { return c.fn(tx) })
	c.fnPanic = c.panic
	return c.fnErr, false
}

// batchContext returns the context batch's transaction runs under: with
// Bounded, one that ends once every caller's context has ended (nobody is
// left waiting for the commit) or a caller gives up while its fn runs
// (call.cancelBatch), else context.Background(). stop releases it.
func (g *Committer) batchContext(batch []*call) (context.Context, func()) {
	if !g.bounded {
		return context.Background(), func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	for _, c := range batch {
		c.cancelBatch.Store(&cancel)
	}
	var live atomic.Int32
	live.Store(int32(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// lead commits the next batch. The goroutine that found no leader runs it
// and returns once its own call is done; later arrivals are handed to a new
// goroutine, so no caller waits on batches after the one it joined.
func (g *Committer) lead() {
	g.gather()
	var after func()
	if g.before != nil {
		after = g.before()
	}
	g.mu.Lock()
	n := min(len(g.queue), g.maxBatch)
	batch := slices.Clone(g.queue[:n])
	g.queue = slices.Delete(g.queue, 0, n)
	g.mu.Unlock()
	g.commit(batch)
	if after != nil {
		after()
	}
	g.mu.Lock()
	// The callers just released usually come straight back with their
	// next Update: the next batch waits for them (see gather).
	// So does the caller that finds no leader because the whole queue
	// was in this batch: it is the first of them back, and it waits for
	// the others too (a batch of 16 is not followed by a batch of 1).
	g.expect = min(len(g.queue)+len(batch), g.maxBatch)
	g.freed = time.Now()
	more := len(g.queue) > 0
	g.leading = more
	g.mu.Unlock()
	if more {
		go g.lead()
	}
}

// gather lets the next batch collect the callers the previous commit just
// released. Without it the callers of one commit always arrive while the
// next is being taken, so 16 callers split into two alternating batches of
// 8, each paying its own commit.
func (g *Committer) gather() {
	g.mu.Lock()
	want := g.expect
	stale := time.Since(g.freed) > g.most // they are not coming back
	g.mu.Unlock()
	if want <= 1 || stale {
		return
	}
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		g.mu.Lock()
		n := len(g.queue)
		g.mu.Unlock()
		if n >= want || time.Since(start) >= g.most {
			return
		}
		if timer == nil {
			timer = time.NewTimer(g.stall)
		} else {
			timer.Reset(g.stall)
		}
		select {
		case <-g.arrived:
		case <-timer.C:
			return // nobody came within stall: go with what is here
		}
	}
}

// commit runs batch in one transaction and releases every caller.
func (g *Committer) commit(batch []*call) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	if len(batch) == 1 {
		g.alone(batch[0])
		return
	}
	ctx, stop := g.batchContext(batch)
	defer stop()
	ctxs := make([]context.Context, len(batch))
	for i, c := range batch {
		ctxs[i] = c.ctx
	}
	var txnPanic any
	err := func() (err error) {
		// A panic of the transaction itself, outside the functions
		// (which run keeps), is re-raised in every caller's goroutine,
		// as for a call run alone — not on this goroutine, which may be
		// a leader of its own that nobody waits on.
		defer func() {
			if p := recover(); p != nil {
				txnPanic = p
			}
		}()
		return g.batchTxn(ctx, batch, ctxs)
	}()
	if txnPanic != nil {
		for _, c := range batch {
			c.err, c.panic = nil, txnPanic
		}
		return
	}
	if err == nil {
		return
	}
	if g.final != nil && g.final(err) {
		for _, c := range batch {
			if c.err != nil || c.panic != nil {
				// Its function failed or panicked (or never ran): nothing
				// of it was in the commit, whatever became of the commit.
				continue
			}
			c.err = err
		}
		return
	}
	// The batch did not commit, so every outcome in it was computed over
	// writes that never landed: run each function again, alone. Until it
	// runs again, nothing of it is written and its batch's outcome is not
	// its own (a function whose read failed because a batch-mate's caller
	// cut the batch off): a caller that gives up meanwhile is told its
	// context's error.
	for _, c := range batch {
		c.mu.Lock()
		c.ran, c.fnErr, c.fnPanic = false, nil, nil
		c.cancelBatch.Store(nil)
		c.mu.Unlock()
	}
	for _, c := range batch {
		g.alone(c)
	}
}

// batchTxn runs batch's functions in one transaction (txn), each in its
// own overlay: one that fails or panics is undone alone.
func (g *Committer) batchTxn(ctx context.Context, batch []*call, ctxs []context.Context) error {
	return g.txn(ctx, func(base store.Tx) error {
		// The rows the functions lock first, locked together with the
		// transaction's first read (store.LockFirst).
		if err := store.LockMarked(base, ctxs...); err != nil {
			return err
		}
		for i, c := range batch {
			c.err, c.panic = nil, nil // txn may run this more than once
			if err := c.ctx.Err(); err != nil {
				c.err = fmt.Errorf("%s: update: %w", g.name, err)
				continue
			}
			ov := overlay.New(base)
			ov.SetLater(len(batch) - 1 - i)
			var skipped bool
			if c.err, skipped = c.runFn(ov.Exposed()); skipped || c.err != nil || c.panic != nil {
				continue // undone alone: its overlay is dropped
			}
			if err := ov.Apply(base); err != nil {
				return err // the transaction is half-applied: give it up
			}
		}
		return nil
	})
}

// alone runs c in a transaction of its own. A panic of fn, or of the
// transaction itself, is kept for the caller's goroutine.
func (g *Committer) alone(c *call) {
	c.err, c.panic = nil, nil
	if err := c.ctx.Err(); err != nil {
		c.err = fmt.Errorf("%s: update: %w", g.name, err)
		return
	}
	c.err = run(c, func() error {
		return g.txn(c.ctx, func(base store.Tx) error {
			if err := store.LockMarked(base, c.ctx); err != nil {
				return err
			}
			err, skipped := c.runFn(base)
			switch {
			case skipped:
				return fmt.Errorf("%s: update: %w", g.name, context.Cause(c.ctx))
			case c.fnPanic != nil:
				return errPanicked // rolled back; re-raised by the caller
			}
			return err
		})
	})
	if c.panic != nil {
		c.err = nil
	}
}

// errPanicked rolls back the transaction of a call whose fn panicked (the
// panic is re-raised in the caller's goroutine).
var errPanicked = errors.New("panicked")

// run calls f, keeping a panic for the caller's goroutine.
func run(c *call, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.panic = p
			err = nil
		}
	}()
	return f()
}
