package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/store/storetest"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// dsnVar names the environment variable the PostgreSQL tests read; .ci/run
// starts a throwaway server and sets it.
const dsnVar = "SWITCHBOARD_POSTGRES_DSN"

// testDSN returns the DSN, or skips the test saying what to set.
func testDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(dsnVar)
	if dsn == "" {
		switchboardtest.Skip(t, "no PostgreSQL server: set %s to a DSN (.ci/postgres start prints one)", dsnVar)
	}
	return dsn
}

// freshTable returns a table name no other test uses, dropped (with its
// schema table and sequences) when the test ends.
func freshTable(t testing.TB, dsn string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Logf("drop %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), `DROP TABLE IF EXISTS `+name+`, `+name+`_schema`)
		_, _ = conn.Exec(context.Background(), `DROP SEQUENCE IF EXISTS `+name+`_append, `+name+`_numbers`)
	})
	return name
}

func open(t testing.TB, dsn string, opts postgres.Options) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), dsn, &opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return st
}

func TestConformance(t *testing.T) {
	dsn := testDSN(t)
	for _, c := range []struct {
		name string
		opts postgres.Options
	}{
		{"grouped", postgres.Options{}},
		{"each", postgres.Options{CommitEachUpdate: true}},
		{"serializable-claims", postgres.Options{SerializableClaims: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				o := c.opts
				o.Table = freshTable(t, dsn)
				return open(t, dsn, o)
			}, storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
				o := c.opts
				o.Table = s.(*postgres.Store).Table()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				return open(t, dsn, o)
			}))
		})
	}
}

// Prefetch is only a hint: after it, Get returns what it would have —
// the transaction's own writes, committed values and absences alike.
func TestPrefetchChangesNoResult(t *testing.T) {
	dsn := testDSN(t)
	st := open(t, dsn, postgres.Options{Table: freshTable(t, dsn)})
	defer st.Close()
	ctx := context.Background()
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		return errors.Join(tx.Put("t", []byte("a"), []byte("old")), tx.Put("t", []byte("b"), []byte("b1")))
	}))
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		require.NoError(t, tx.Put("t", []byte("a"), []byte("new")))
		require.NoError(t, tx.Delete("t", []byte("b")))
		p, ok := tx.(store.Prefetcher)
		require.True(t, ok, "the PostgreSQL store's Tx prefetches")
		require.NoError(t, p.Prefetch("t", [][]byte{[]byte("a"), []byte("b"), []byte("c")}))
		v, err := tx.Get("t", []byte("a"))
		require.NoError(t, err)
		require.Equal(t, "new", string(v), "own write wins over the prefetched value")
		_, err = tx.Get("t", []byte("b"))
		require.ErrorIs(t, err, store.ErrNotFound, "own delete wins")
		_, err = tx.Get("t", []byte("c"))
		require.ErrorIs(t, err, store.ErrNotFound, "absent stays absent")
		return nil
	}))
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		v, err := tx.Get("t", []byte("a"))
		require.NoError(t, err)
		require.Equal(t, "new", string(v))
		return nil
	}))
}

// The layout is versioned: reopening an up-to-date table changes nothing,
// a table marked by a newer version is refused with ErrNewerSchema (and
// left as it is), and a table name that is not a plain identifier is
// refused before anything is sent.
func TestSchemaVersion(t *testing.T) {
	dsn := testDSN(t)
	ctx := context.Background()
	table := freshTable(t, dsn)
	st := open(t, dsn, postgres.Options{Table: table})
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v")) }))
	require.NoError(t, st.Close())

	st = open(t, dsn, postgres.Options{Table: table})
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		v, err := tx.Get("t", []byte("k"))
		require.Equal(t, "v", string(v))
		return err
	}))
	require.NoError(t, st.Close())

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `UPDATE `+table+`_schema SET version = version + 1`)
	require.NoError(t, err)
	_, err = postgres.Open(ctx, dsn, &postgres.Options{Table: table})
	require.ErrorIs(t, err, postgres.ErrNewerSchema)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
	require.Equal(t, 1, n, "the newer table is left alone")

	for _, bad := range []string{"Upper", "x; DROP TABLE y", "a-b", "1abc"} {
		_, err := postgres.Open(ctx, dsn, &postgres.Options{Table: bad})
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "identifier")
	}
}

// Notifications sent while the LISTEN connection is down are lost, so once
// it is back every watcher is told to re-check (store.Resync); notifications
// then flow again.
func TestWatchResyncsAfterReconnect(t *testing.T) {
	dsn := testDSN(t)
	st := open(t, dsn, postgres.Options{Table: freshTable(t, dsn)})
	defer st.Close()
	keys := make(chan string, 16)
	stop := st.Watch(func(k string) { keys <- k })
	defer stop()

	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	// Cut the store's LISTEN connection from the server side.
	var cut int
	require.NoError(t, conn.QueryRow(context.Background(),
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'LISTEN ' || $1`, st.Table()+"_notify").Scan(&cut))
	require.Equal(t, 1, cut, "one LISTEN connection")
	select {
	case k := <-keys:
		require.Equal(t, store.Resync, k)
	case <-time.After(30 * time.Second):
		t.Fatal("no resync after the LISTEN connection came back")
	}
	require.NoError(t, st.Update(context.Background(), func(tx store.Tx) error {
		tx.(store.Notifier).Notify("q1")
		return tx.Put("t", []byte("k"), []byte("v"))
	}))
	// A watcher may be told to resync more than once (each successful
	// LISTEN does; a reconnect may take more than one try): only q1
	// matters now.
	deadline := time.After(30 * time.Second)
	for {
		select {
		case k := <-keys:
			if k == store.Resync {
				continue
			}
			require.Equal(t, "q1", k)
			return
		case <-deadline:
			t.Fatal("no notification after the reconnect")
		}
	}
}

// twoStores opens two stores on one fresh table, as two processes would,
// closed when the test ends.
func twoStores(t *testing.T) (a, b *postgres.Store) {
	t.Helper()
	dsn := testDSN(t)
	table := freshTable(t, dsn)
	a = open(t, dsn, postgres.Options{Table: table})
	t.Cleanup(func() { _ = a.Close() })
	b = open(t, dsn, postgres.Options{Table: table})
	t.Cleanup(func() { _ = b.Close() })
	return a, b
}

// UpdateLocked's reads lock: a row one transaction scanned is skipped by
// another's ScanLocked, and another's GetLocked waits for it and then
// reads what the first committed.
func TestLockedReads(t *testing.T) {
	a, b := twoStores(t)
	ctx := context.Background()
	require.NoError(t, a.Update(ctx, func(tx store.Tx) error {
		for _, k := range []string{"a", "b", "c"} {
			if err := tx.Put("t", []byte(k), []byte("0")); err != nil {
				return err
			}
		}
		return nil
	}))
	holding, release := make(chan struct{}), make(chan struct{}, 1)
	first := make(chan error, 1)
	go func() {
		first <- a.UpdateLocked(ctx, func(tx store.Tx) error {
			var got []string
			err := tx.(store.Locker).ScanLocked("t", nil, nil, 1, func(k, _ []byte) bool { got = append(got, string(k)); return true })
			close(holding)
			if err != nil {
				return err
			}
			if len(got) != 1 || got[0] != "a" {
				return fmt.Errorf("first scan read %q", got)
			}
			<-release
			return tx.Put("t", []byte("a"), []byte("1"))
		})
	}()
	<-holding
	defer close(release)
	var got []string
	require.NoError(t, b.UpdateLocked(ctx, func(tx store.Tx) error {
		got = nil
		return tx.(store.Locker).ScanLocked("t", nil, nil, 0, func(k, _ []byte) bool { got = append(got, string(k)); return true })
	}))
	require.Equal(t, []string{"b", "c"}, got, "a row another transaction locked is skipped")
	requireLockWaits(t, b, "a", func() { release <- struct{}{} }, first)
}

// requireLockWaits checks that GetLocked of key in a transaction of st
// waits while another holds the row: no answer after 200 ms; once release
// lets the holder commit (first says how that went), the row as the holder
// left it ("1").
func requireLockWaits(t *testing.T, st *postgres.Store, key string, release func(), first <-chan error) {
	t.Helper()
	waited := make(chan []byte, 1)
	go func() {
		_ = st.UpdateLocked(context.Background(), func(tx store.Tx) error {
			v, err := tx.(store.Locker).GetLocked("t", []byte(key))
			waited <- v
			return err
		})
	}()
	select {
	case v := <-waited:
		t.Fatalf("GetLocked read %q while another transaction held the row", v)
	case <-time.After(200 * time.Millisecond): // it waits (a wrong answer would come at once)
	}
	release()
	require.NoError(t, <-first)
	require.Equal(t, "1", string(<-waited), "read after the holder committed, as it left the row")
}

// PrefetchScan is only a hint too: a Scan after it returns what it would
// have — past the announced rows, within its end, merged with the
// transaction's own writes — and the hint travels with the next read.
func TestPrefetchScanChangesNoResult(t *testing.T) {
	dsn := testDSN(t)
	st := open(t, dsn, postgres.Options{Table: freshTable(t, dsn)})
	defer st.Close()
	ctx := context.Background()
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%03d", i)) }
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		for i := range 50 {
			if err := tx.Put("t", key(i), []byte("v")); err != nil {
				return err
			}
		}
		return tx.Put("u", []byte("x"), []byte("y"))
	}))
	scan := func(tx store.Tx, start, end []byte) []string {
		var got []string
		require.NoError(t, tx.Scan("t", start, end, func(k, _ []byte) bool { got = append(got, string(k)); return true }))
		return got
	}
	var plain, hinted, ended []string
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		plain = scan(tx, key(5), nil)
		return nil
	}))
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		p := tx.(store.ScanPrefetcher)
		require.NoError(t, p.PrefetchScan("t", key(5), 10))
		require.NoError(t, p.PrefetchScan("t", key(40), 100))
		v, err := tx.Get("u", []byte("x")) // the hints travel with it
		require.NoError(t, err)
		require.Equal(t, "y", string(v))
		hinted = scan(tx, key(5), nil) // reads on past the 10 announced
		ended = scan(tx, key(40), key(45))
		return nil
	}))
	require.Len(t, plain, 45)
	require.Equal(t, plain, hinted)
	require.Equal(t, []string{"k040", "k041", "k042", "k043", "k044"}, ended)
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		require.NoError(t, tx.Delete("t", key(6)))
		require.NoError(t, tx.Put("t", key(7), []byte("new")))
		require.NoError(t, tx.(store.ScanPrefetcher).PrefetchScan("t", key(5), 3))
		got := scan(tx, key(5), key(10))
		require.Equal(t, []string{"k005", "k007", "k008", "k009"}, got, "own writes merged")
		return nil
	}))
}

// lockRows is twoStores holding t/x = t/y = "0" and u/z = "1".
func lockRows(t *testing.T) (a, b *postgres.Store) {
	t.Helper()
	a, b = twoStores(t)
	require.NoError(t, a.Update(context.Background(), func(tx store.Tx) error {
		return errors.Join(tx.Put("t", []byte("x"), []byte("0")), tx.Put("t", []byte("y"), []byte("0")), tx.Put("u", []byte("z"), []byte("1")))
	}))
	return a, b
}

// LockAhead locks its rows with the transaction's next read: GetLocked
// then returns them as the lock found them (an absent row as absent), and
// another transaction's GetLocked waits for the holder's commit.
func TestLockAhead(t *testing.T) {
	a, b := lockRows(t)
	ctx := context.Background()
	holding, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- a.UpdateLocked(ctx, func(tx store.Tx) error {
			l := tx.(store.Locker)
			if err := tx.(store.AheadLocker).LockAhead("t", [][]byte{[]byte("y"), []byte("x"), []byte("none")}); err != nil {
				return err
			}
			if _, err := tx.Get("u", []byte("z")); err != nil { // the locks travel with it
				return err
			}
			close(holding)
			<-release
			v, err := l.GetLocked("t", []byte("x"))
			if err != nil || string(v) != "0" {
				return fmt.Errorf("GetLocked(x) = %q, %v", v, err)
			}
			if _, err := l.GetLocked("t", []byte("none")); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("GetLocked(none): %v, want ErrNotFound", err)
			}
			return tx.Put("t", []byte("y"), []byte("1"))
		})
	}()
	select {
	case <-holding:
	case err := <-first:
		t.Fatalf("the locking transaction ended early: %v", err)
	}
	requireLockWaits(t, b, "y", func() { close(release) }, first)
}

// A row an UpdateLocked call marks with store.LockFirst is locked with
// the transaction's first read, costing no round trip of its own:
// GetLocked then returns it as the lock found it, another transaction's
// GetLocked waits for the commit, and an absent row reads as absent. A
// function whose first read is GetLocked of its marked row makes one round
// trip for it, and the rows of calls grouped in one batch are each their
// own caller's.
func TestLockFirst(t *testing.T) {
	a, b := lockRows(t)
	ctx := context.Background()
	holding, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		marked := store.LockFirst(store.LockFirst(ctx, "t", []byte("y")), "t", []byte("none"))
		first <- a.UpdateLocked(marked, func(tx store.Tx) error {
			if _, err := tx.Get("u", []byte("z")); err != nil { // the locks travel with it
				return err
			}
			close(holding)
			<-release
			before := a.Stats().RoundTrips
			v, err := tx.(store.Locker).GetLocked("t", []byte("y"))
			if err != nil || string(v) != "0" {
				return fmt.Errorf("GetLocked(y) = %q, %v", v, err)
			}
			if _, err := tx.(store.Locker).GetLocked("t", []byte("none")); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("GetLocked(none): %v, want ErrNotFound", err)
			}
			if n := a.Stats().RoundTrips - before; n != 0 {
				return fmt.Errorf("GetLocked of marked rows made %d round trips, want none", n)
			}
			return tx.Put("t", []byte("y"), []byte("1"))
		})
	}()
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the stores close, which waits for the call
	select {
	case <-holding:
	case err := <-first:
		t.Fatalf("the locking transaction ended early: %v", err)
	}
	requireLockWaits(t, b, "y", let, first)

	before := a.Stats().RoundTrips
	require.NoError(t, a.UpdateLocked(store.LockFirst(ctx, "t", []byte("x")), func(tx store.Tx) error {
		v, err := tx.(store.Locker).GetLocked("t", []byte("x"))
		if err != nil || string(v) != "0" {
			return fmt.Errorf("GetLocked(x) = %q, %v", v, err)
		}
		return tx.Put("t", []byte("x"), []byte("2"))
	}))
	require.Equal(t, uint64(2), a.Stats().RoundTrips-before, "the locked read, then the commit")

	// Calls grouped in batches: each reads and writes its own row.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			k := []byte(fmt.Sprintf("g%02d", i))
			errs <- a.UpdateLocked(store.LockFirst(ctx, "t", k), func(tx store.Tx) error {
				if _, err := tx.(store.Locker).GetLocked("t", k); !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("GetLocked(%s): %v, want ErrNotFound", k, err)
				}
				return tx.Put("t", k, k)
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, b.View(ctx, func(tx store.Tx) error {
		for i := range 16 {
			k := []byte(fmt.Sprintf("g%02d", i))
			v, err := tx.Get("t", k)
			require.NoError(t, err)
			require.Equal(t, k, v)
		}
		v, err := tx.Get("t", []byte("x"))
		require.NoError(t, err)
		require.Equal(t, "2", string(v))
		return nil
	}))
}

// PrefetchValues is a hint too: the Gets of the rows a locked scan's
// values name return what they would have — an absent row as absent, the
// transaction's own write as written — and cost no round trip of their
// own. The scan locks its rows as before.
func TestPrefetchValuesChangesNoResult(t *testing.T) {
	a, b := twoStores(t)
	ctx := context.Background()
	require.NoError(t, a.Update(ctx, func(tx store.Tx) error {
		for i := range 6 {
			k := fmt.Sprintf("r%d", i)
			if err := errors.Join(tx.Put("idx", []byte("q/"+k), []byte(k)), tx.Put("rec", []byte(k), []byte("v"+k))); err != nil {
				return err
			}
		}
		return errors.Join(tx.Put("idx", []byte("q/x"), []byte("gone")), tx.Put("idx", []byte("z"), []byte("r0")))
	}))
	read := func(st *postgres.Store, hint bool) (got []string, trips uint64) {
		require.NoError(t, st.UpdateLocked(ctx, func(tx store.Tx) error {
			got = nil
			if err := tx.Put("rec", []byte("r2"), []byte("mine")); err != nil {
				return err
			}
			if hint {
				if err := tx.(store.ValuePrefetcher).PrefetchValues("idx", []byte("q/"), "rec"); err != nil {
					return err
				}
			}
			var vals [][]byte
			err := tx.(store.Locker).ScanLocked("idx", []byte("q/"), []byte("q0"), 10, func(k, v []byte) bool {
				got, vals = append(got, string(k)), append(vals, v)
				return true
			})
			if err != nil {
				return err
			}
			before := st.Stats().RoundTrips
			for _, v := range vals {
				r, err := tx.Get("rec", v)
				switch {
				case errors.Is(err, store.ErrNotFound):
					got = append(got, string(v)+"=absent")
				case err != nil:
					return err
				default:
					got = append(got, string(v)+"="+string(r))
				}
			}
			trips = st.Stats().RoundTrips - before
			return nil
		}))
		return got, trips
	}
	plain, _ := read(a, false)
	hinted, trips := read(b, true)
	require.Equal(t, plain, hinted)
	require.Equal(t, []string{"q/r0", "q/r1", "q/r2", "q/r3", "q/r4", "q/r5", "q/x",
		"r0=vr0", "r1=vr1", "r2=mine", "r3=vr3", "r4=vr4", "r5=vr5", "gone=absent"}, hinted)
	require.Zero(t, trips, "the rows came with the scan")

	// The hinted scan still locks its rows: another's skips them.
	holding, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- a.UpdateLocked(ctx, func(tx store.Tx) error {
			if err := tx.(store.ValuePrefetcher).PrefetchValues("idx", []byte("q/"), "rec"); err != nil {
				return err
			}
			err := tx.(store.Locker).ScanLocked("idx", []byte("q/"), []byte("q0"), 2, func(_, _ []byte) bool { return true })
			close(holding)
			<-release
			return err
		})
	}()
	<-holding
	var got []string
	require.NoError(t, b.UpdateLocked(ctx, func(tx store.Tx) error {
		got = nil
		return tx.(store.Locker).ScanLocked("idx", []byte("q/"), []byte("q0"), 0, func(k, _ []byte) bool { got = append(got, string(k)); return true })
	}))
	close(release)
	require.NoError(t, <-first)
	require.Equal(t, []string{"q/r2", "q/r3", "q/r4", "q/r5", "q/x"}, got, "the rows the hinted scan locked are skipped")
}

// Insert (store.Inserter) writes a new row with a plain INSERT: a key that
// is there fails the whole transaction, which writes nothing. A table
// first written by Insert or Append alone gets a partition whose pages
// are filled (fillfactor 100); one written by Put keeps room on each page
// for updates.
func TestInsert(t *testing.T) {
	dsn := testDSN(t)
	table := freshTable(t, dsn)
	st := open(t, dsn, postgres.Options{Table: table})
	defer st.Close()
	ctx := context.Background()
	insert := func(tx store.Tx, tbl, k, v string) error {
		ins, ok := tx.(store.Inserter)
		if !ok {
			return errors.New("the transaction offers no store.Inserter")
		}
		return ins.Insert(tbl, []byte(k), []byte(v))
	}
	require.NoError(t, st.UpdateLocked(ctx, func(tx store.Tx) error {
		return errors.Join(insert(tx, "once", "a", "1"), tx.(store.Appender).Append("appended", []byte("x")))
	}))
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		return errors.Join(insert(tx, "once", "b", "2"), tx.Put("updated", []byte("a"), []byte("1")))
	}))

	err := st.Update(ctx, func(tx store.Tx) error {
		return errors.Join(tx.Put("updated", []byte("b"), []byte("2")), insert(tx, "once", "a", "again"))
	})
	require.Error(t, err, "an Insert over a row")
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		v, err := tx.Get("once", []byte("a"))
		require.Equal(t, "1", string(v))
		_, missing := tx.Get("updated", []byte("b"))
		require.ErrorIs(t, missing, store.ErrNotFound, "the failed transaction wrote nothing")
		return err
	}))

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	fill := map[string]string{}
	rows, err := conn.Query(ctx, `SELECT relname, array_to_string(reloptions, ',') FROM pg_class WHERE relname LIKE $1 AND relkind = 'r'`, table+"\\_\\_%")
	require.NoError(t, err)
	for rows.Next() {
		var name, opts string
		require.NoError(t, rows.Scan(&name, &opts))
		fill[name] = opts
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{
		table + "__once":     "fillfactor=100",
		table + "__appended": "fillfactor=100",
		table + "__updated":  "fillfactor=80",
	}, fill)
}
