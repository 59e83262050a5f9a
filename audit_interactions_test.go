package switchboard_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/witness"
)

// gateWitness delays its first call until released.
type gateWitness struct {
	w       sb.Witness
	reached chan struct{}
	release chan struct{}
	first   bool
}

func (g *gateWitness) AddCheckpoint(ctx context.Context, old uint64, proof []tlog.Hash, cp []byte) ([]byte, error) {
	if !g.first {
		g.first = true
		close(g.reached)
		<-g.release
	}
	return g.w.AddCheckpoint(ctx, old, proof, cp)
}

// logAndWitness is a log key for audit.example/log (signer and verifier)
// and an in-process witness of that log, witness.example/w1, with its key.
func logAndWitness(t *testing.T) (skey, vkey string, srv *witness.Server, wkey string) {
	t.Helper()
	skey, vkey, err := sb.NewLogKey("audit.example/log")
	require.NoError(t, err)
	wpriv, wkey, err := witness.NewKey("witness.example/w1")
	require.NoError(t, err)
	srv, err = witness.NewServer(witness.Config{Name: "witness.example/w1", Key: wpriv, Store: memory.New(),
		Logs: []witness.Log{{Origin: "audit.example/log", Keys: []string{vkey}}}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return skey, vkey, srv, wkey
}

// docs/audit-log.md: a witness's "409 with another size: asks once more,
// from that size"; only "a size larger than the log (a rollback)" is a
// refusal. Two processes on one store, one witness: A checks and signs the
// log at N1; while its witness call is in flight, B signs N2 > N1 and the
// witness cosigns it. A's call hears 409 with N2 — larger than A's
// checkpoint but not than the log — and A signs again, not reporting a
// rollback (found from outside: it did).
func TestTwoSignersAndAWitness(t *testing.T) {
	st := memory.New()
	h := newHarness(t, st)
	skey, _, srv, wvkey := logAndWitness(t)
	gate := &gateWitness{w: srv, reached: make(chan struct{}), release: make(chan struct{})}
	a := h.withConfig(t, nil, func(c *sb.Config) {
		c.LogKey = skey
		c.Witnesses = []sb.WitnessConfig{{Witness: gate, Key: wvkey}}
	})
	gate.first = true // A's first checkpoint goes straight through
	b, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: testQuotas,
		LogKey: skey, Witnesses: []sb.WitnessConfig{{Witness: srv, Key: wvkey}}})
	require.NoError(t, err)
	defer b.Close()

	friend, _, _ := queueSetup(t, h)
	_, err = a.Checkpoint(ctx)
	require.NoError(t, err)
	gate.first = false

	_, _, err = a.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := a.Checkpoint(ctx); done <- err }()
	<-gate.reached
	_, _, err = a.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
	require.NoError(t, err)
	cpB, err := b.Checkpoint(ctx)
	require.NoError(t, err, "B's checkpoint is cosigned")
	close(gate.release)
	errA := <-done
	t.Logf("A's Checkpoint: %v", errA)
	require.NoError(t, b.CheckLog(ctx))
	require.NotErrorIs(t, errA, sb.ErrAuditBroken,
		"nothing was rolled back: the log holds %d events, the witness cosigned %d", cpB.Size, cpB.Size)
}

// Retention in another process purges past this process's mark of what it
// saw (which it had not renewed for longer than EventRetention): the mark
// ages out, and this process signs on — found from outside, it refused
// every signature for good.
func TestAnotherProcessPurgesPastThisOnesMark(t *testing.T) {
	st := memory.New()
	h := newHarness(t, st)
	skey, _, err := sb.NewLogKey("audit.example/log")
	require.NoError(t, err)
	a := h.withConfig(t, nil, func(c *sb.Config) { c.LogKey = skey; c.EventRetention = time.Hour })
	b, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: testQuotas,
		LogKey: skey, EventRetention: time.Hour})
	require.NoError(t, err)
	defer b.Close()

	friend, _, _ := queueSetup(t, h)
	_, err = a.Checkpoint(ctx) // A's mark: this size
	require.NoError(t, err)
	for range 5 {
		_, _, err = b.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
	}
	h.clock.Advance(2 * time.Hour)
	_, _, err = b.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
	require.NoError(t, err)
	stats, err := b.Reap(ctx) // B signs and purges events past retention
	require.NoError(t, err)
	require.NoError(t, stats.LogProblem)
	t.Logf("B purged %d events", stats.EventsPurged)
	require.NoError(t, b.CheckLog(ctx))

	errCheck := a.CheckLog(ctx)
	_, errCp := a.Checkpoint(ctx)
	stA, err := a.Reap(ctx)
	require.NoError(t, err)
	t.Logf("A CheckLog: %v\nA Checkpoint: %v\nA Reap.LogProblem: %v", errCheck, errCp, stA.LogProblem)
	require.NoError(t, errCheck, "nothing was rewritten")
	require.NoError(t, errCp)
	require.NoError(t, stA.LogProblem)
}

type holdKey struct{}

// holdStore delays, once, the View of a context marked holdKey after its
// function ran (a slow read: the caller is preempted there).
type holdStore struct {
	store.Store
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (h *holdStore) View(ctx context.Context, fn func(store.Tx) error) error {
	err := h.Store.View(ctx, fn)
	if ctx.Value(holdKey{}) != nil {
		h.once.Do(func() { close(h.reached); <-h.release })
	}
	return err
}

// The same in one Switchboard (examples/host calls Checkpoint on page
// loads while Run's Reap calls it too): the caller that checked the
// smaller log reaches the witness second and signs again.
func TestTwoCheckpointCallersAndAWitness(t *testing.T) {
	hs := &holdStore{Store: memory.New(), reached: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(t, hs)
	skey, _, srv, wvkey := logAndWitness(t)
	a := h.withConfig(t, nil, func(c *sb.Config) {
		c.LogKey = skey
		c.Witnesses = []sb.WitnessConfig{{Witness: srv, Key: wvkey}}
	})
	friend, _, _ := queueSetup(t, h)
	_, err := a.Checkpoint(ctx)
	require.NoError(t, err)

	_, _, err = a.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := a.Checkpoint(context.WithValue(ctx, holdKey{}, 1)); done <- err }()
	<-hs.reached // the first caller checked the log; it is slow to go on
	_, _, err = a.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
	require.NoError(t, err)
	cp2, err := a.Checkpoint(ctx) // a second caller: Reap, or a page load
	require.NoError(t, err)
	close(hs.release)
	err1 := <-done
	t.Logf("first caller: %v", err1)
	require.NoError(t, a.CheckLog(ctx))
	require.NotErrorIs(t, err1, sb.ErrAuditBroken, "the log holds %d events, as the witness cosigned", cp2.Size)
}

// Config.Witnesses' retention rule: events are kept past the last
// checkpoint each configured witness cosigned; a witness out of the
// configuration holds nothing back. Put back before retention purged past
// what it cosigned, it is asked from where it was and cosigns. Put back
// after, it is refused, the error saying its operator must reset what it
// holds for this log (found from outside: the error said only that the
// store was written).
func TestAWitnessOutOfTheConfiguration(t *testing.T) {
	for _, out := range []time.Duration{30 * time.Minute, 2 * time.Hour} {
		t.Run(out.String(), func(t *testing.T) {
			st := memory.New()
			h := newHarness(t, st)
			skey, _, srv, wvkey := logAndWitness(t)
			with := func(c *sb.Config) {
				c.LogKey, c.EventRetention = skey, time.Hour
				c.Witnesses = []sb.WitnessConfig{{Witness: srv, Key: wvkey}}
			}
			h.withConfig(t, nil, with)
			friend, _, _ := queueSetup(t, h)
			_, err := h.sb.Checkpoint(ctx) // cosigned
			require.NoError(t, err)

			// Out of the configuration (a restart without it) for a while,
			// the log growing and retention running.
			h.withConfig(t, nil, func(c *sb.Config) { c.LogKey, c.EventRetention = skey, time.Hour })
			for range 5 {
				_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
				require.NoError(t, err)
			}
			h.clock.Advance(out)
			_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)
			_, err = h.sb.Reap(ctx)
			require.NoError(t, err)

			// Put back.
			h.withConfig(t, nil, with)
			_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)
			rs, err := h.sb.Reap(ctx)
			require.NoError(t, err)
			require.NoError(t, h.sb.CheckLog(ctx), "the log is sound")
			if out < time.Hour {
				require.NoError(t, rs.LogProblem, "within retention: asked from where it was, it cosigns")
				return
			}
			require.ErrorIs(t, rs.LogProblem, sb.ErrWitnessRefused)
			require.ErrorContains(t, rs.LogProblem, "its operator must reset what it holds for this log")
		})
	}
}
