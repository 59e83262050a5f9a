package switchboard_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/internal/model"
	"github.com/switchboardhq/switchboard/store/memory"
)

// The model's backup copies every table the root package names: a table
// it missed would survive a restore from a later history.
func TestTheModelBacksUpEveryTable(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	named := regexp.MustCompile(`(?m)^\s*(?:const\s+)?t[A-Z]\w*\s*=\s*"([a-z_]+)"`)
	var tables []string
	for _, f := range files {
		if filepath.Ext(f) != ".go" || regexp.MustCompile(`_test\.go$`).MatchString(f) {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range named.FindAllSubmatch(b, -1) {
			tables = append(tables, string(m[1]))
		}
	}
	slices.Sort(tables)
	require.Len(t, tables, 27, "the tables the root names: %v", tables)
	require.Equal(t, tables, slices.Sorted(slices.Values(model.Tables)))
}

// sequencedAll waits until s's store holds no pending events, and returns the
// log's size.
func sequencedAll(t *testing.T, h *harness, s *sb.Switchboard) uint64 {
	t.Helper()
	var size uint64
	var verr error
	require.Eventually(t, func() bool {
		h.clock.Advance(10 * time.Millisecond)
		rep, err := s.VerifyAudit(ctx)
		size, verr = rep.TreeSize, err
		return err != nil || rep.Pending == 0
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, verr)
	return size
}

// The sequencer keeps a copy of the tree's frontier, true "whoever appends
// next" in an append-only log (auditlog.Cache). A restored backup makes the
// log not append-only: process A sequences to N+2; the store goes back to
// N; process B sequences two other events (a different history of N+2);
// then A sequences again. It must build on the store's tree, not on its
// copy of the one the restore undid — and fork its mark of what it saw,
// not raise it. Found from outside: A wrote tree hashes its events do not
// give, and every process found the log rewritten for good.
func TestARestoreAndASecondSequencer(t *testing.T) {
	st := memory.NewWithOptions(memory.Options{Appender: true})
	h := newHarness(t, st)
	skey, _, err := sb.NewLogKey("audit.example/log")
	require.NoError(t, err)
	require.NoError(t, h.sb.Close())
	a := h.withConfig(t, nil, func(c *sb.Config) { c.LogKey = skey })
	defer a.Close()
	friend, _, _ := queueSetup(t, h)
	create := func(s *sb.Switchboard, n int) {
		for range n {
			_, _, err := s.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)
		}
	}
	size := sequencedAll(t, h, a)
	for size%8 != 0 { // later leaves complete subtrees over what the restore loses
		create(a, 1)
		size = sequencedAll(t, h, a)
	}
	backup, err := model.BackUp(ctx, st)
	require.NoError(t, err)
	create(a, 2)
	require.Equal(t, size+2, sequencedAll(t, h, a))

	require.NoError(t, model.Restore(ctx, st, backup))
	// Another process, started after the restore (one that ran before
	// it would have seen A's history too, and rightly refuse B's).
	b, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: testQuotas, LogKey: skey})
	require.NoError(t, err)
	defer b.Close()
	h.clock.Advance(6 * time.Second) // the restored lease ran out
	time.Sleep(50 * time.Millisecond)
	create(b, 2) // a different history of the same size
	require.Equal(t, size+2, sequencedAll(t, h, b))
	require.NoError(t, b.CheckLog(ctx), "the restored log, grown by B, is sound")

	h.clock.Advance(6 * time.Second) // B's lease ran out
	time.Sleep(50 * time.Millisecond)
	create(a, 4)
	require.Equal(t, size+6, sequencedAll(t, h, a))
	rep, err := b.VerifyAudit(ctx)
	require.NoError(t, err, "A built on the store's tree")
	require.EqualValues(t, size+6, rep.TreeSize)
	require.NoError(t, b.CheckLog(ctx))
	require.ErrorIs(t, a.CheckLog(ctx), sb.ErrAuditBroken, "A saw another history of %d events: its mark refuses", size+2)
}
