package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/store/storetest"
)

// dsnVar names the environment variable the PostgreSQL tests read; .ci/run
// starts a throwaway server and sets it.
const dsnVar = "SWITCHBOARD_POSTGRES_DSN"

// testDSN returns the DSN, or skips the test saying what to set.
func testDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(dsnVar)
	if dsn == "" {
		t.Skipf("no PostgreSQL server: set %s to a DSN (.ci/postgres start prints one)", dsnVar)
	}
	return dsn
}

// freshTable returns a table name no other test uses, dropped (with its
// schema table) when the test ends.
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
		{"concurrent-writers", postgres.Options{ConcurrentWriters: true}},
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
