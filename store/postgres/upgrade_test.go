package postgres_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/postgres"
)

// A PostgreSQL store holding a layout-3 log (a hash chain) upgrades as a
// bolt file does: every chain record is rewritten, under its seq, as the
// tree's leaf (a Put over the row, where the log's own writes are
// Inserts). The store is the root package's layout-3 fixture, copied row
// by row.
func TestUpgradeFromV3(t *testing.T) {
	dsn := testDSN(t)
	var fx struct {
		Written time.Time              `json:"written"`
		First   uint64                 `json:"first"`
		Last    uint64                 `json:"last"`
		Events  []switchboard.Event    `json:"events"`
		Friend  switchboard.Credential `json:"friend"`
	}
	fixture := filepath.Join("..", "..", "testdata", "v3.db")
	b, err := os.ReadFile(fixture + ".json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &fx))
	raw, err := os.ReadFile(fixture)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "v3.db")
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	src, err := bolt.Open(path, nil)
	require.NoError(t, err)
	defer src.Close()

	ctx := context.Background()
	dst := open(t, dsn, postgres.Options{Table: freshTable(t, dsn)})
	defer dst.Close()
	tables := []string{"personas", "edges", "edge_pending", "edge_live", "grants", "grant_cred", "todos",
		"todo_index", "todo_dedup", "grant_expiry", "oidc_replay", "oidc_expiry", "edge_requester",
		"edge_target", "quota_buckets", "quota_cooldown", "blocks", "events", "meta"}
	rows := 0
	require.NoError(t, src.View(ctx, func(from store.Tx) error {
		return dst.Update(ctx, func(to store.Tx) error {
			for _, tbl := range tables {
				var err error
				scanErr := from.Scan(tbl, nil, nil, func(k, v []byte) bool {
					rows++
					err = to.Put(tbl, k, v)
					return err == nil
				})
				if scanErr != nil {
					return scanErr
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}))
	require.Positive(t, rows)

	s, err := switchboard.New(dst, &switchboard.Config{Clock: fixedClock(fx.Written.Add(time.Minute))})
	require.NoError(t, err)
	defer s.Close()
	evs, err := s.Events(ctx, 0, 100)
	require.NoError(t, err)
	require.Equal(t, fx.Events, evs, "the kept events, unchanged")
	rep, err := s.VerifyAudit(ctx)
	require.NoError(t, err)
	require.Equal(t, fx.First, rep.First)
	require.Equal(t, fx.Last, rep.Last)
	_, _, err = s.CreateFor(ctx, fx.Friend, "inbox", switchboard.NewTodo{Kind: "k", Title: "after"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		evs, err := s.Events(ctx, fx.Last, 10)
		return err == nil && len(evs) > 0 && evs[0].Seq == fx.Last+1
	}, 30*time.Second, 10*time.Millisecond, "the log goes on from the chain's last event")
}

// fixedClock is a switchboard.Clock stopped at t.
type fixedClock time.Time

func (c fixedClock) Now() time.Time                         { return time.Time(c) }
func (c fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
