package switchboard_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/memory"
)

// TestUpgradeFromV1 opens a bolt file written by the previous layout (one
// table per todo index, a meta seq counter; made by that version's code at
// 2026-11-01T12:00Z: a done todo, a leased one, a delayed one of high
// priority, a queued one with a dedup key) and checks that New upgrades it
// in place with nothing lost: order, leases, delays and dedup keys hold.
func TestUpgradeFromV1(t *testing.T) {
	var fx struct {
		Credential sb.Credential `json:"credential"`
		Lease      sb.Lease      `json:"lease"`
	}
	st := openFixture(t, "v1.db", &fx)
	clk := &clock{t: time.Date(2026, 11, 1, 12, 1, 0, 0, time.UTC)}
	cfg := &sb.Config{Clock: clk, Issuers: []sb.Issuer{{URL: "https://issuer.example", ClientID: "v1"}}}
	s, err := sb.New(st, cfg)
	require.NoError(t, err)
	_, err = sb.New(st, cfg) // a second open finds the new layout
	require.NoError(t, err)

	titles := func() []string {
		all, err := s.List(ctx, fx.Credential, "inbox", nil)
		require.NoError(t, err)
		var out []string
		for _, td := range all {
			out = append(out, td.Title+":"+string(td.State))
		}
		return out
	}
	require.Equal(t, []string{"done:done", "leased:leased", "delayed:queued", "queued:queued"}, titles())
	require.NoError(t, s.Complete(ctx, fx.Credential, fx.Lease, nil), "a lease taken before the upgrade still completes")
	td, l, err := s.Claim(ctx, fx.Credential, "inbox", nil)
	require.NoError(t, err)
	require.Equal(t, "queued", td.Title, "the delayed todo (priority 9) is not due yet")
	require.NoError(t, s.Complete(ctx, fx.Credential, l, nil))
	again, created, err := s.CreateFor(ctx, fx.Credential, "inbox", sb.NewTodo{Kind: "k", DedupKey: "d1"})
	require.NoError(t, err)
	require.False(t, created, "the dedup key written before the upgrade still matches")
	require.Equal(t, td.ID, again.ID)
	_, _, err = s.CreateFor(ctx, fx.Credential, "inbox", sb.NewTodo{Kind: "k", Title: "new"})
	require.NoError(t, err)
	td, _, err = s.Claim(ctx, fx.Credential, "inbox", nil)
	require.NoError(t, err)
	require.Equal(t, "new", td.Title)
	clk.Advance(time.Hour) // new's lease lapses; delayed is due
	td, _, err = s.Claim(ctx, fx.Credential, "inbox", nil)
	require.NoError(t, err)
	require.Equal(t, "delayed", td.Title, "due now")
	require.Equal(t, []string{"done:done", "leased:done", "delayed:leased", "queued:done", "new:queued"}, titles())
	_, err = s.VerifyAudit(ctx)
	require.NoError(t, err)
}

// TestUpgradeFromV2 opens a bolt file written by layout 2 (made by that
// version's code at 2026-12-03T18:31Z: alice's friend grant claimed a todo
// carol's grant created, and created one of its own; carol's created two)
// and checks that the upgrade indexes the claim, so List through alice's
// grant, which now reads only what the grant created or claimed, still
// shows the todo it claimed.
func TestUpgradeFromV2(t *testing.T) {
	var fx struct {
		Alice   sb.Credential `json:"alice"`
		Carol   sb.Credential `json:"carol"`
		Written time.Time     `json:"written"`
	}
	st := openFixture(t, "v2.db", &fx)
	s, err := sb.New(st, &sb.Config{Clock: &clock{t: fx.Written.Add(time.Minute)}})
	require.NoError(t, err)
	titles := func(c sb.Credential) []string {
		all, err := s.List(ctx, c, "inbox", nil)
		require.NoError(t, err)
		var out []string
		for _, td := range all {
			out = append(out, td.Title+":"+string(td.State))
		}
		return out
	}
	require.Equal(t, []string{"carol's:leased", "alice's:queued"}, titles(fx.Alice))
	require.Equal(t, []string{"carol's:leased", "carol's second:queued"}, titles(fx.Carol))
}

// openFixture opens a copy of the bolt file testdata/name (the fixture is
// never changed) and decodes testdata/name.json, what its writer recorded
// about it, into fx. The store is closed when the test ends.
func openFixture(t *testing.T, name string, fx any) *bolt.Store {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, fx))
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// A store written by layout 4, 5 or 6 — its audit log already a tree —
// opens with its log as it was: only a layout-3 store's log is upgraded.
func TestUpgradeKeepsATreeLog(t *testing.T) {
	for _, from := range []uint64{4, 5, 6} {
		t.Run(fmt.Sprint(from), func(t *testing.T) {
			h := newHarness(t, memory.New())
			auditFlow(t, h)
			before, err := h.sb.Events(ctx, 0, 1000)
			require.NoError(t, err)
			require.NotEmpty(t, before)
			require.NoError(t, h.sb.Close())
			require.NoError(t, h.st.Update(ctx, func(tx store.Tx) error {
				return tx.Put("meta", []byte("schema"), binary.BigEndian.AppendUint64(nil, from))
			}))
			s, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}})
			require.NoError(t, err)
			defer s.Close()
			after, err := s.Events(ctx, 0, 1000)
			require.NoError(t, err)
			require.Equal(t, before, after)
			rep, err := s.VerifyAudit(ctx)
			require.NoError(t, err)
			require.Equal(t, uint64(len(before)), rep.TreeSize)
		})
	}
}

// A store written before grant records named their replacements: the work
// of a grant a later approval replaced is still handed out after the
// upgrade (New links each replaced grant to the grant that replaced it),
// and revoking the last grant still takes the whole line's work with it.
func TestUpgradeLinksReplacedGrants(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, f1 := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		worker := h.worker(h.bob, "bob-desk", "inbox")
		t1, _, err := h.sb.CreateFor(ctx, f1, "inbox", sb.NewTodo{Kind: "k", Title: "first"})
		require.NoError(t, err)
		h.clock.Advance(time.Second)
		_, f2 := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbGet))
		t2, _, err := h.sb.CreateFor(ctx, f2, "inbox", sb.NewTodo{Kind: "k", Title: "second"})
		require.NoError(t, err)
		h.clock.Advance(time.Second)
		g3, _ := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbList))

		// The records as the version before wrote them.
		require.NoError(t, h.st.Update(ctx, func(tx store.Tx) error {
			var keys, vals [][]byte
			if err := tx.Scan("grants", nil, nil, func(k, v []byte) bool {
				keys, vals = append(keys, bytes.Clone(k)), append(vals, bytes.Clone(v))
				return true
			}); err != nil {
				return err
			}
			for i, k := range keys {
				var m map[string]any
				if err := json.Unmarshal(vals[i], &m); err != nil {
					return err
				}
				delete(m, "replaced_by")
				delete(m, "replaces")
				b, err := json.Marshal(m)
				if err != nil {
					return err
				}
				if err := tx.Put("grants", k, b); err != nil {
					return err
				}
			}
			return tx.Delete("meta", []byte("replacements_linked"))
		}))

		s, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: testQuotas})
		require.NoError(t, err)
		var leases []sb.Lease
		for _, want := range []string{t1.ID, t2.ID} {
			td, l, err := s.Claim(ctx, worker, "inbox", nil)
			require.NoError(t, err, "the replaced grants' work is handed out")
			require.Equal(t, want, td.ID)
			leases = append(leases, l)
		}
		for _, l := range leases {
			require.NoError(t, s.Release(ctx, worker, l))
		}
		require.NoError(t, s.Revoke(ctx, h.bob, g3.ID))
		for _, id := range []string{t1.ID, t2.ID} {
			td, err := s.Get(ctx, worker, id)
			require.NoError(t, err)
			require.Equal(t, sb.TodoCancelled, td.State, "revoking the last grant takes the line's work")
		}
	})
}

// A store at layout 8 stores each audit event in a record of its own
// until UpgradeRecords moves it to 9; from then on a transaction's events
// go into one record (a block). The log is one log across the line:
// Events, VerifyAudit, a checkpoint's proofs of every event, and
// retention purging through singles, then blocks, with the proofs of what
// it keeps intact.
func TestUpgradeToEventBlocks(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
				return tx.Put("meta", []byte("schema"), binary.BigEndian.AppendUint64(nil, 8))
			}))
			h := newHarness(t, st)
			vkey := withLogKey(t, h, func(c *sb.Config) { c.EventRetention = time.Hour })
			keys := func() map[int]int {
				n := map[int]int{}
				raw(t, h, func(tx store.Tx) error {
					return tx.Scan("events", nil, nil, func(k, _ []byte) bool { n[len(k)]++; return true })
				})
				return n
			}
			friend, _, _ := queueSetup(t, h)
			create := func(n int) {
				for range n {
					h.clock.Advance(time.Minute)
					_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
					require.NoError(t, err)
				}
			}
			start := h.clock.Now()
			create(10)
			singles := keys()[8]
			require.Equal(t, map[int]int{8: singles}, keys(), "layout 8: one event to a record")
			require.NoError(t, h.sb.UpgradeRecords(ctx))
			create(20)
			require.Equal(t, singles, keys()[8], "layout 9: no event stored alone")
			require.Equal(t, 20, keys()[9])

			check := func(upTo int) {
				t.Helper()
				evs, err := h.sb.Events(ctx, 0, 1000)
				require.NoError(t, err)
				for i := 1; i < len(evs); i++ {
					require.Equal(t, evs[i-1].Seq+1, evs[i].Seq)
				}
				rep, err := h.sb.VerifyAudit(ctx)
				require.NoError(t, err)
				require.Equal(t, evs[0].Seq, rep.First, "after purging up to minute %d", upTo)
				cp, err := h.sb.Checkpoint(ctx)
				require.NoError(t, err)
				opened, err := sb.OpenCheckpoint(cp.Note, vkey)
				require.NoError(t, err)
				for _, e := range evs {
					p, err := h.sb.ProveEvent(ctx, e.Seq, cp.Size)
					require.NoError(t, err, "event %d", e.Seq)
					got, err := sb.VerifyInclusion(opened, p)
					require.NoError(t, err)
					require.Equal(t, e, got)
				}
			}
			check(0)
			for _, upTo := range []int{5, 12, 25} {
				// Events up to minute upTo pass their retention.
				h.clock.Advance(start.Add(time.Hour + time.Duration(upTo)*time.Minute + time.Second).Sub(h.clock.Now()))
				_, err := h.sb.Reap(ctx)
				require.NoError(t, err)
				check(upTo)
			}
			require.Equal(t, 0, keys()[8], "retention went past the singles")
		})
	}
}
