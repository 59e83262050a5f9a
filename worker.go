// Work: the worker runner — concurrency, blocking claims, automatic
// heartbeats, complete or fail with retry, and a graceful stop — built on
// ClaimN and CompleteAndClaim, so the easy path is the fast one.

package switchboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Handler does one todo. It returns the result to record with Complete,
// or an error to Fail the attempt with (its text becomes the todo's Error:
// keep secrets out of it). Its ctx ends when the lease is lost — the todo
// may then be another worker's — so long work should watch it. A panic is
// recovered and fails the attempt.
type Handler func(ctx context.Context, todo Todo) (result []byte, err error)

// WorkOptions tunes Work. A nil *WorkOptions means the defaults.
type WorkOptions struct {
	// Concurrency is how many todos are handled at once. Zero means 1.
	Concurrency int
	// Lease is the lease length of each claim; zero means the grant's
	// default, else Config.DefaultLease. Work heartbeats every third of it
	// while a handler runs.
	Lease time.Duration
	// RetryDelay is the first pause after a store error (claim, complete,
	// fail or heartbeat), doubled on each further error up to a minute.
	// Zero means 100 ms.
	RetryDelay time.Duration
	// UntilEmpty makes Work return nil once nothing is ready to claim and
	// no handler is running — for tests and batch jobs — instead of
	// waiting for more work.
	UntilEmpty bool
}

// workVerbs are the verbs Work uses: a credential without one of them
// would run handlers whose outcomes cannot be recorded.
var workVerbs = []Verb{VerbClaim, VerbComplete, VerbFail, VerbHeartbeat}

// Work runs h over queue until ctx ends: it claims (blocking) as many todos
// as it has free handlers — several in one ClaimN — runs them, and
// completes each with CompleteAndClaim, taking the next todo in the same
// commit while it is not stopping; a handler error or panic fails the
// attempt (retried after its backoff or dead-lettered, as Fail does).
// Heartbeats keep each lease alive while its handler runs.
//
// With Concurrency above 1 the handlers run concurrently, each on its own
// goroutine. The credential must hold claim, complete, fail and heartbeat
// on the queue: Work checks before it claims anything and returns
// ErrForbidden naming what is missing. Handler errors and panics, and
// outcomes that could not be recorded, are logged to Config.Logger at
// warn level.
//
// When ctx ends Work stops claiming, lets the handlers that are running
// finish and records their outcome (their ctx is not cancelled by the
// stop), and returns ctx's error (nil when WorkOptions.UntilEmpty ended it). Store errors are retried with backoff and
// logged to Config.Logger; an error no retry can fix — the credential is
// unauthenticated or lacks claim, the queue is unknown — stops Work at once
// (after the running handlers finish) and is returned.
func (s *Switchboard) Work(ctx context.Context, c Auth, queue string, h Handler, opts *WorkOptions) error {
	var o WorkOptions
	if opts != nil {
		o = *opts
	}
	if h == nil {
		return fmt.Errorf("switchboard: work: %w", invalid("nil handler"))
	}
	if o.Concurrency < 0 || o.Concurrency > MaxClaimN {
		return fmt.Errorf("switchboard: work: %w", invalid("concurrency %d outside [1, %d]", o.Concurrency, MaxClaimN))
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 100 * time.Millisecond
	}
	if err := s.checkLease(o.Lease); err != nil {
		return fmt.Errorf("switchboard: work: %w", err)
	}
	g, err := s.Authenticate(ctx, c)
	if err != nil {
		return fmt.Errorf("switchboard: work: %w", inner(err))
	}
	var missing []string
	for _, v := range workVerbs {
		if !g.Scope.Allows(queue, v) {
			missing = append(missing, string(v))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("switchboard: work: %w: the credential lacks %s on queue %q", ErrForbidden, strings.Join(missing, ", "), queue)
	}
	w := &worker{s: s, c: c, queue: queue, h: h, o: o, stop: ctx, free: make(chan struct{}, o.Concurrency)}
	for range o.Concurrency {
		w.free <- struct{}{}
	}
	emptied := w.dispatch()
	w.wg.Wait()
	if err := w.fatalErr(); err != nil {
		return fmt.Errorf("switchboard: work: %w", inner(err))
	}
	if emptied {
		return nil
	}
	return ctx.Err()
}

type worker struct {
	s     *Switchboard
	c     Auth
	queue string
	h     Handler
	o     WorkOptions
	stop  context.Context // ends Work: no more claims
	free  chan struct{}   // one token per idle handler slot
	wg    sync.WaitGroup

	mu    sync.Mutex
	fatal error
}

// fatalErr is the error that stopped Work, if any.
func (w *worker) fatalErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatal
}

// permanent reports whether err is one retrying cannot fix.
func permanent(err error) bool {
	return errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrForbidden) ||
		errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrClosed)
}

func (w *worker) setFatal(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatal == nil {
		w.fatal = err
	}
}

func (w *worker) stopped() bool { return w.stop.Err() != nil || w.fatalErr() != nil }

// dispatch claims for idle slots until stopped, starting one goroutine per
// claimed todo. With UntilEmpty it returns true once the queue had nothing
// ready after every handler finished.
func (w *worker) dispatch() bool {
	delay := w.o.RetryDelay
	for {
		// Wait for at least one idle slot, then take every idle one.
		select {
		case <-w.stop.Done():
			return false
		case <-w.free:
		}
		n := 1
	more:
		for n < w.o.Concurrency {
			select {
			case <-w.free:
				n++
			default:
				break more
			}
		}
		if w.fatalErr() != nil {
			return false
		}
		got, err := w.s.ClaimN(w.stop, w.c, w.queue, n, &ClaimOptions{Lease: w.o.Lease, Wait: !w.o.UntilEmpty})
		if err != nil {
			for range n {
				w.free <- struct{}{}
			}
			if w.stop.Err() != nil {
				return false
			}
			if errors.Is(err, ErrQueueEmpty) {
				// UntilEmpty: once the running handlers are done (their
				// completions may claim, and their failures requeue),
				// look once more.
				if len(w.free) == w.o.Concurrency {
					return true
				}
				w.wg.Wait()
				continue
			}
			if permanent(err) {
				w.setFatal(err) // running handlers finish and take no more
				return false
			}
			w.warn("claim failed; retrying", err, delay)
			if !w.sleep(delay) {
				return false
			}
			delay = min(delay*2, time.Minute)
			continue
		}
		delay = w.o.RetryDelay
		for range n - len(got) {
			w.free <- struct{}{}
		}
		for _, cl := range got {
			w.wg.Add(1)
			go w.run(cl)
		}
	}
}

// run handles cl and, while Work is not stopping, the todos that each
// completion claims next; then it frees its slot.
func (w *worker) run(cl Claimed) {
	defer w.wg.Done()
	defer func() { w.free <- struct{}{} }()
	for {
		next, ok := w.handle(cl)
		if !ok {
			return
		}
		cl = next
	}
}

// handle runs the handler on one todo with heartbeats and records the
// outcome; it returns the next todo claimed by the completion, if any.
func (w *worker) handle(cl Claimed) (Claimed, bool) {
	// The handler's context survives the stop (graceful), not a lost lease.
	hctx, lose := context.WithCancelCause(context.WithoutCancel(w.stop))
	defer lose(nil)
	beats, stopBeats := context.WithCancel(hctx)
	lease := cl.Lease
	var mu sync.Mutex
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		w.heartbeat(beats, lose, &mu, &lease)
	}()
	result, herr := w.call(hctx, cl.Todo)
	stopBeats()
	<-beatDone
	if errors.Is(context.Cause(hctx), errLeaseLost) {
		return Claimed{}, false // the todo may be another worker's now: nothing to record
	}
	bg := context.WithoutCancel(w.stop)
	if herr != nil {
		w.s.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "switchboard: work: handler failed; the attempt is recorded as failed",
			slog.String("queue", w.queue), slog.String("todo", cl.Todo.ID), slog.String("error", herr.Error()))
		w.retry(func() error { return w.s.Fail(bg, w.c, lease, herr.Error()) }, lease)
		return Claimed{}, false
	}
	n := 1
	if w.stopped() {
		n = 0
	}
	var next []Claimed
	var cerr error
	w.retry(func() error {
		next, cerr = w.s.CompleteAndClaim(bg, w.c, lease, result, n, &ClaimOptions{Lease: w.o.Lease})
		return cerr
	}, lease)
	if errors.Is(cerr, ErrInvalidArgument) {
		// The result itself cannot be recorded (over Limits.MaxResult):
		// the attempt fails saying why, rather than lapsing unexplained.
		reason := "the handler's result was not recorded: " + strings.TrimPrefix(cerr.Error(), "switchboard: ")
		w.retry(func() error { return w.s.Fail(bg, w.c, lease, reason) }, lease)
		return Claimed{}, false
	}
	if len(next) == 0 {
		return Claimed{}, false
	}
	return next[0], true
}

// errLeaseLost is the cause a handler's context is cancelled with when its
// lease is lost.
var errLeaseLost = errors.New("switchboard: work: lease lost")

// call runs the handler, turning a panic into an error.
func (w *worker) call(ctx context.Context, t Todo) (result []byte, err error) {
	ctx, ob := w.s.observe(ctx, Operation{Verb: VerbWork, Queue: t.Queue, Todo: t.ID, Parent: t.Trace})
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
		ob.End(Result{Todo: t.ID, Err: err})
	}()
	return w.h(ctx, t)
}

// heartbeat extends *lease every third of its length until ctx ends; a
// lost lease cancels the handler with errLeaseLost.
func (w *worker) heartbeat(ctx context.Context, lose context.CancelCauseFunc, mu *sync.Mutex, lease *Lease) {
	for {
		mu.Lock()
		l := *lease
		mu.Unlock()
		every := max(l.ExpiresAt.Sub(w.s.now())/3, 10*time.Millisecond)
		select {
		case <-ctx.Done():
			return
		case <-w.s.cfg.Clock.After(every):
		}
		nl, err := w.s.Heartbeat(ctx, w.c, l, w.o.Lease)
		switch {
		case err == nil:
			mu.Lock()
			*lease = nl
			mu.Unlock()
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrLeaseLost) || permanent(err):
			lose(errLeaseLost)
			return
		default:
			w.warn("heartbeat failed; retrying", err, every)
		}
	}
}

// retry runs f until it succeeds, fails for good, or the lease lapses.
func (w *worker) retry(f func() error, l Lease) {
	delay := w.o.RetryDelay
	for {
		err := f()
		if err == nil {
			return
		}
		if errors.Is(err, ErrLeaseLost) || permanent(err) || !w.s.now().Before(l.ExpiresAt) {
			w.warn("could not record the outcome; the todo will be delivered again", err, 0)
			return
		}
		w.warn("recording the outcome failed; retrying", err, delay)
		time.Sleep(delay) // on the wall clock, as store recovery is; not cut short by a stop
		delay = min(delay*2, time.Minute)
	}
}

// sleep pauses after a store error, on the wall clock (a store's recovery
// does not follow Config.Clock).
func (w *worker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.stop.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *worker) warn(msg string, err error, retryIn time.Duration) {
	w.s.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "switchboard: work: "+msg,
		slog.String("queue", w.queue), slog.String("error", err.Error()), slog.Duration("retry_in", retryIn))
}
