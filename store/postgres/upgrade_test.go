package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
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

// A store written by the release before layout 8 — testdata/layout7.sql,
// a pg_dump of what testdata/layout7.gen.go.txt wrote at commit 6785764:
// PostgreSQL layout 3, switchboard layout 7, todo records in the form V2
// — opens and upgrades in place. Open sets the todos partition's fill
// factor (PostgreSQL layout 4); New keeps switchboard's layout at 7, so
// every record it writes is one the previous release reads, and processes
// of both releases can share the store during a rolling upgrade; once
// every process runs this release, UpgradeRecords moves the store to 9
// (a previous release then refuses it: ErrNewerSchema, as for any newer
// layout), from when records are written checksummed (V3) — by a process
// that opened the store before the upgrade too, from its next Reap. Both
// forms are read throughout.
func TestUpgradeFromLayout7(t *testing.T) {
	ctx := context.Background()
	dsn, fx := loadRelease(t, "layout7")

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	fill := func() string {
		var opts []string
		require.NoError(t, conn.QueryRow(ctx, `SELECT reloptions FROM pg_class WHERE relname = 'fixture_kv__todos'`).Scan(&opts))
		return strings.Join(opts, ",")
	}
	require.Equal(t, "fillfactor=80", fill(), "as the fixture was written")

	st := open(t, dsn, postgres.Options{Table: "fixture_kv"})
	defer st.Close()
	require.Equal(t, "fillfactor=35", fill(), "Open set the fill factor of the rewritten table")
	var pgLayout int
	require.NoError(t, conn.QueryRow(ctx, `SELECT version FROM fixture_kv_schema`).Scan(&pgLayout))
	require.Equal(t, 5, pgLayout)

	cfg := &switchboard.Config{Clock: fixedClock(fx.Written.Add(time.Minute))}
	s1, err := switchboard.New(st, cfg)
	require.NoError(t, err)
	defer s1.Close()
	s2, err := switchboard.New(st, cfg) // a second process, opened before the upgrade
	require.NoError(t, err)
	defer s2.Close()
	layout := func() uint64 { return schemaLayout(t, st) }
	format := func(id string) byte {
		var f byte
		require.NoError(t, st.View(ctx, func(tx store.Tx) error {
			b, err := tx.Get("todos", []byte(id))
			if err == nil {
				f = b[0]
			}
			return err
		}))
		return f
	}
	require.Equal(t, uint64(7), layout(), "New upgrades no layout a previous release cannot read")

	evs, err := s1.Events(ctx, 0, 1000)
	require.NoError(t, err)
	require.Equal(t, fx.Events, evs, "the events, unchanged")
	_, err = s1.VerifyAudit(ctx)
	require.NoError(t, err)
	titles := func(s *switchboard.Switchboard) []string {
		all, err := s.List(ctx, fx.Worker, "inbox", nil)
		require.NoError(t, err)
		var out []string
		for _, td := range all {
			out = append(out, td.Title+":"+string(td.State))
		}
		return out
	}
	require.Equal(t, []string{"done:done", "leased:leased", "cancelled:cancelled", "delayed:queued", "queued:queued"}, titles(s1))

	// Before the upgrade, what this release writes is V2.
	before, _, err := s1.CreateFor(ctx, fx.Friend, "inbox", switchboard.NewTodo{Kind: "k", Title: "before"})
	require.NoError(t, err)
	require.Equal(t, byte(0x01), format(before.ID), "V2 without a trace context: what the previous release reads")
	require.NoError(t, s1.Complete(ctx, fx.Worker, fx.Lease, nil), "a lease taken by the previous release completes")

	require.NoError(t, s1.UpgradeRecords(ctx))
	require.Equal(t, uint64(9), layout(), "a previous release now refuses the store")
	require.NoError(t, s1.UpgradeRecords(ctx), "upgrading again does nothing")

	after, _, err := s1.CreateFor(ctx, fx.Friend, "inbox", switchboard.NewTodo{Kind: "k", Title: "after"})
	require.NoError(t, err)
	require.Equal(t, byte(0x03), format(after.ID), "after the upgrade: V3, checksummed")
	// The process opened before the upgrade writes V2 until its next Reap;
	// each reads the other's.
	mixed, _, err := s2.CreateFor(ctx, fx.Friend, "inbox", switchboard.NewTodo{Kind: "k", Title: "mixed"})
	require.NoError(t, err)
	require.Equal(t, byte(0x01), format(mixed.ID))
	got, err := s2.Get(ctx, fx.Worker, after.ID)
	require.NoError(t, err)
	require.Equal(t, "after", got.Title)
	got, err = s1.Get(ctx, fx.Worker, mixed.ID)
	require.NoError(t, err)
	require.Equal(t, "mixed", got.Title)
	_, err = s2.Reap(ctx)
	require.NoError(t, err)
	later, _, err := s2.CreateFor(ctx, fx.Friend, "inbox", switchboard.NewTodo{Kind: "k", Title: "later"})
	require.NoError(t, err)
	require.Equal(t, byte(0x03), format(later.ID), "from its next Reap on, V3")

	// Every todo, of either form, is worked to its end; the dedup key
	// written by the previous release still matches.
	again, created, err := s1.CreateFor(ctx, fx.Friend, "inbox", switchboard.NewTodo{Kind: "k", DedupKey: "d1"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, "queued", again.Title)
	var done []string
	for {
		td, l, err := s1.Claim(ctx, fx.Worker, "inbox", nil)
		if errors.Is(err, switchboard.ErrQueueEmpty) {
			break
		}
		require.NoError(t, err)
		require.Equal(t, byte(0x03), format(td.ID), "%s: rewritten as V3 by its claim", td.Title)
		require.NoError(t, s1.Complete(ctx, fx.Worker, l, nil))
		done = append(done, td.Title)
	}
	require.ElementsMatch(t, []string{"queued", "before", "after", "mixed", "later"}, done, "all but the delayed one, not due")
	_, err = s1.VerifyAudit(ctx)
	require.NoError(t, err)
}

// A store written by the release before layout 9 — testdata/layout8.sql,
// a pg_dump of what testdata/layout8.gen.go.txt wrote at commit 2b65776:
// PostgreSQL layout 4, switchboard layout 8, audit events one to a
// record — opens and upgrades in place. New keeps it at 8, so the events
// it sequences are stored as the previous release reads them; once every
// process runs this release, UpgradeRecords moves the store to 9, from
// when a sequencing pass stores its events several to a record — in a
// process opened before the upgrade too, from its next Reap. Both forms
// are read throughout, in one log: Events, Subscribe, ProveEvent and
// VerifyAudit read across the line.
func TestUpgradeFromLayout8(t *testing.T) {
	ctx := context.Background()
	dsn, fx := loadRelease(t, "layout8")

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Equal(t, "x", storage(t, conn, "fixture_kv__events"), "as the fixture was written")
	st := open(t, dsn, postgres.Options{Table: "fixture_kv"})
	defer st.Close()
	for _, name := range []string{"events", "events_pending"} {
		require.Equal(t, "m", storage(t, conn, "fixture_kv__"+name), "Open keeps %s's rows in the row (PostgreSQL layout 5)", name)
	}
	clock := fixedClock(fx.Written.Add(time.Minute))
	s1, err := switchboard.New(st, &switchboard.Config{Clock: clock})
	require.NoError(t, err)
	defer s1.Close()
	s2, err := switchboard.New(st, &switchboard.Config{Clock: clock}) // a second process, opened before the upgrade
	require.NoError(t, err)
	defer s2.Close()
	layout := func() uint64 { return schemaLayout(t, st) }
	// keys returns the length of every event record's key, by how many.
	keys := func() map[int]int {
		n := map[int]int{}
		require.NoError(t, st.View(ctx, func(tx store.Tx) error {
			return tx.Scan("events", nil, nil, func(k, _ []byte) bool { n[len(k)]++; return true })
		}))
		return n
	}
	// sequenced creates n todos through s and waits until the last one's
	// event is in the log.
	sequenced := func(s *switchboard.Switchboard, n int) {
		t.Helper()
		var last switchboard.Todo
		for range n {
			last, _, err = s.CreateFor(ctx, fx.Friend, "inbox", switchboard.NewTodo{Kind: "k", Title: "t"})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			evs, err := s1.Events(ctx, 0, 10000)
			require.NoError(t, err)
			return len(evs) > 0 && evs[len(evs)-1].Todo == last.ID
		}, 10*time.Second, 10*time.Millisecond)
	}
	require.Equal(t, uint64(8), layout(), "New upgrades no layout a previous release cannot read")
	require.Equal(t, map[int]int{8: len(fx.Events)}, keys())
	sequenced(s1, 5)
	require.Equal(t, map[int]int{8: len(fx.Events) + 5}, keys(), "before the upgrade: one event to a record, what the previous release reads")

	require.NoError(t, s1.UpgradeRecords(ctx))
	require.Equal(t, uint64(9), layout(), "a previous release now refuses the store")
	sequenced(s2, 5) // whoever sequences: s2 still writes one to a record, s1 blocks
	_, err = s2.Reap(ctx)
	require.NoError(t, err)
	before := keys()
	sequenced(s1, 20)
	sequenced(s2, 20)
	after := keys()
	require.Equal(t, before[8], after[8], "from every process's Reap on, no event is stored alone")
	require.Greater(t, after[9], before[9])
	// Ten events committed together are sequenced in one pass, into one
	// record.
	last := createTogether(t, conn, s1, fx.Friend, 10)
	require.Eventually(t, func() bool {
		evs, err := s1.Events(ctx, 0, 10000)
		require.NoError(t, err)
		return len(evs) > 0 && evs[len(evs)-1].Todo == last.ID
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, after[9]+1, keys()[9], "ten events, one record")

	// One log across the line.
	evs, err := s2.Events(ctx, 0, 10000)
	require.NoError(t, err)
	require.Len(t, evs, len(fx.Events)+60)
	require.Equal(t, fx.Events, evs[:len(fx.Events)], "the previous release's events, unchanged")
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.Seq)
	}
	sub := s1.Subscribe(ctx, 0, nil)
	for i := range evs {
		select {
		case e := <-sub.C:
			require.Equal(t, evs[i], e)
		case <-time.After(10 * time.Second):
			t.Fatalf("the subscription stopped at %d", i)
		}
	}
	sub.Close()
	for _, seq := range []uint64{1, uint64(len(fx.Events)), uint64(len(evs))} {
		p, err := s1.ProveEvent(ctx, seq, 0)
		require.NoError(t, err, "event %d", seq)
		require.Equal(t, switchboard.EventLeaf(evs[seq-1]), p.Leaf)
	}
	for _, s := range []*switchboard.Switchboard{s1, s2} {
		rep, err := s.VerifyAudit(ctx)
		require.NoError(t, err)
		require.EqualValues(t, len(evs), rep.Events)
	}
}

// release is what a fixture's generator (testdata/layoutN.gen.go.txt)
// wrote beside its dump: the clock it ran at, a friend's and a worker's
// credentials, a lease it left held, and the audit events.
type release struct {
	Written time.Time              `json:"written"`
	Friend  switchboard.Credential `json:"friend"`
	Worker  switchboard.Credential `json:"worker"`
	Lease   switchboard.Lease      `json:"lease"`
	Events  []switchboard.Event    `json:"events"`
}

// loadRelease loads testdata/<name>.sql into a database of its own and
// reads testdata/<name>.json: the database's DSN, and what the release
// wrote.
func loadRelease(t *testing.T, name string) (string, release) {
	t.Helper()
	dsn := databaseFromFixture(t, filepath.Join("testdata", name+".sql"))
	var fx release
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &fx))
	return dsn, fx
}

// schemaLayout is the switchboard layout st is at.
func schemaLayout(t *testing.T, st store.Store) uint64 {
	t.Helper()
	var v uint64
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		b, err := tx.Get("meta", []byte("schema"))
		if err == nil {
			v = binary.BigEndian.Uint64(b)
		}
		return err
	}))
	return v
}

// createTogether creates n todos through s in one transaction of the
// application's (postgres.WithTx), committed: their events are pending
// in one row, for one sequencing pass. It returns the last todo.
func createTogether(t *testing.T, conn *pgx.Conn, s *switchboard.Switchboard, friend switchboard.Credential, n int) switchboard.Todo {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	var last switchboard.Todo
	for range n {
		last, _, err = s.CreateFor(postgres.WithTx(ctx, tx), friend, "inbox", switchboard.NewTodo{Kind: "k", Title: "t"})
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
	return last
}

// databaseFromFixture creates a database of its own for the test, loads
// the SQL dump fixture into it, and returns its DSN; it is dropped when
// the test ends.
func databaseFromFixture(t *testing.T, fixture string) string {
	t.Helper()
	ctx := context.Background()
	base := testDSN(t)
	sql, err := os.ReadFile(fixture)
	require.NoError(t, err)
	name := freshDatabase(t, base, "fixture_")
	cfg, err := pgx.ParseConfig(base)
	require.NoError(t, err)
	cfg.Database = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, string(sql)) // no arguments: the simple protocol, several statements
	require.NoError(t, err)
	return withDatabase(t, base, name)
}

// freshDatabase creates a database named prefix and random hex on the
// server base names, dropped (whoever is connected) when the test ends,
// and returns its name.
func freshDatabase(t *testing.T, base, prefix string) string {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `CREATE DATABASE `+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Logf("drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
	})
	return name
}

// withParam is dsn with the run-time parameter name set to value.
func withParam(dsn, name, value string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(name, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + name + "=" + value
}

// withDatabase is dsn with its database replaced by name.
func withDatabase(t *testing.T, dsn, name string) string {
	t.Helper()
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return dsn + " dbname=" + name
}

// A new store's partitions are created with their fill factors: two
// thirds of the page free for the todos, rewritten in place; the todo index
// (inserted and deleted) and the audit log (appended) filled; the others at
// 80. A store whose todos an earlier release left at another fill factor
// has this release's after Open, its layout version unchanged.
func TestPartitionFillFactors(t *testing.T) {
	ctx := context.Background()
	dsn := testDSN(t)
	table := freshTable(t, dsn)
	st := open(t, dsn, postgres.Options{Table: table})
	t.Cleanup(func() { _ = st.Close() }) // after the kit's Switchboard closes
	k := switchboardtest.NewKitOn(t, st, nil)
	k.Publish("bob", "bob-desk")
	k.Publish("alice", "alice-bot")
	_, friend := k.Friend("alice-bot", "bob-desk", switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}})
	_, _, err := k.SB.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "k"})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for name, want := range map[string]string{"todos": "fillfactor=35", "todo_index": "fillfactor=100", "events": "fillfactor=100", "grants": "fillfactor=80"} {
		var opts []string
		require.Eventually(t, func() bool {
			return conn.QueryRow(ctx, `SELECT reloptions FROM pg_class WHERE relname = $1`, table+"__"+name).Scan(&opts) == nil
		}, 10*time.Second, 10*time.Millisecond, name)
		require.Equal(t, want, strings.Join(opts, ","), name)
	}
	// The audit log's rows are kept in the row, compressed (MAIN); the
	// others may move to a TOAST table (EXTENDED, the default).
	require.Eventually(t, func() bool { return storage(t, conn, table+"__events_pending") != "" }, 10*time.Second, 10*time.Millisecond)
	for name, want := range map[string]string{"events": "m", "events_pending": "m", "todos": "x", "todo_index": "x"} {
		require.Equal(t, want, storage(t, conn, table+"__"+name), name)
	}

	var layout int
	require.NoError(t, conn.QueryRow(ctx, `SELECT version FROM `+table+`_schema`).Scan(&layout))
	_, err = conn.Exec(ctx, `ALTER TABLE `+table+`__todos SET (fillfactor = 50)`) // as the release before left it
	require.NoError(t, err)
	todosFill := func() string {
		var opts []string
		require.NoError(t, conn.QueryRow(ctx, `SELECT reloptions FROM pg_class WHERE relname = $1`, table+"__todos").Scan(&opts))
		return strings.Join(opts, ",")
	}

	// A vacuum (or DDL) holding the table does not hold Open up for long:
	// it opens, and leaves the fill factor to a later Open.
	vac, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer vac.Close(ctx)
	vtx, err := vac.Begin(ctx)
	require.NoError(t, err)
	_, err = vtx.Exec(ctx, `LOCK TABLE `+table+`__todos IN SHARE UPDATE EXCLUSIVE MODE`) // as VACUUM takes it
	require.NoError(t, err)
	start := time.Now()
	held := open(t, dsn, postgres.Options{Table: table})
	took := time.Since(start)
	require.NoError(t, held.Close())
	require.Less(t, took, 20*time.Second, "Open waited for the table's lock")
	require.Equal(t, "fillfactor=50", todosFill(), "left for a later Open")
	// Nor does a statement_timeout shorter than that wait fail Open.
	timed := withParam(dsn, "statement_timeout", "500")
	held = open(t, timed, postgres.Options{Table: table})
	require.NoError(t, held.Close())
	require.Equal(t, "fillfactor=50", todosFill(), "left for a later Open")
	require.NoError(t, vtx.Rollback(ctx))

	again := open(t, dsn, postgres.Options{Table: table})
	require.NoError(t, again.Close())
	require.Equal(t, "fillfactor=35", todosFill(), "Open brought the todos to this release's fill factor")
	var after int
	require.NoError(t, conn.QueryRow(ctx, `SELECT version FROM `+table+`_schema`).Scan(&after))
	require.Equal(t, layout, after, "a fill factor is no layout: the release before still opens the store")
}

// storage is the storage of column v of partition rel ("" if there is no
// such table yet).
func storage(t *testing.T, conn *pgx.Conn, rel string) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `SELECT attstorage::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'v'`, rel).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return s
}

// UpgradeRecords inside the application's transaction (postgres.WithTx)
// commits or rolls back with it: rolled back, the store stays at layout 8
// and no process — this one included — writes what a previous release
// cannot read (audit events several to a record); committed, this process
// learns of layout 9 at its next Reap, as the others do. (Found by an
// attack: the process took the upgrade as done when the call returned.)
func TestUpgradeRecordsInTheCallersTx(t *testing.T) {
	ctx := context.Background()
	dsn := testDSN(t)
	table := freshTable(t, dsn)
	st := open(t, dsn, postgres.Options{Table: table})
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		return tx.Put("meta", []byte("schema"), binary.BigEndian.AppendUint64(nil, 8))
	}))
	iss, err := switchboardtest.NewIssuer("multi-process")
	require.NoError(t, err)
	t.Cleanup(iss.Close)
	sb, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	for _, p := range [][2]string{{"alice", "alice-bot"}, {"bob", "bob-desk"}} {
		_, err := sb.Publish(ctx, switchboard.Persona{ID: p[1], Owner: iss.Human(p[0]), Discoverable: true,
			Card: switchboard.PersonaCard(switchboard.CardFields{Name: p[1], Description: "test persona", Version: "1.0", URL: "https://example.test/" + p[1]})})
		require.NoError(t, err)
	}
	d := &deployment{t: t, st: st, sb: sb, iss: iss, bob: iss.Human("bob"), alice: iss.Human("alice")}
	_, friend, _ := d.friend()
	sequenced(t, sb, st)

	layout := func() uint64 { return schemaLayout(t, st) }
	blocks := func() int {
		n := 0
		require.NoError(t, st.View(ctx, func(tx store.Tx) error {
			return tx.Scan("events", nil, nil, func(k, _ []byte) bool {
				if len(k) != 8 {
					n++
				}
				return true
			})
		}))
		return n
	}
	require.Equal(t, uint64(8), layout())
	require.Zero(t, blocks())

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	require.NoError(t, sb.UpgradeRecords(postgres.WithTx(ctx, tx)))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, uint64(8), layout(), "the upgrade rolled back with the application's transaction")

	// Ten events committed together: one sequencing pass.
	createTogether(t, conn, sb, friend, 10)
	sequenced(t, sb, st)
	time.Sleep(10 * time.Millisecond)
	require.Equal(t, uint64(8), layout())
	require.Zero(t, blocks(), "a store at layout 8 holds only records the previous release reads")

	// Committed: the store is at 9; this process writes blocks from its
	// next Reap.
	tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	require.NoError(t, sb.UpgradeRecords(postgres.WithTx(ctx, tx)))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, uint64(9), layout())
	_, err = sb.Reap(ctx)
	require.NoError(t, err)
	createTogether(t, conn, sb, friend, 10)
	sequenced(t, sb, st)
	require.Equal(t, 1, blocks(), "ten events committed together: one record")
	_, err = sb.VerifyAudit(ctx)
	require.NoError(t, err)
}
