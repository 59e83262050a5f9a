package postgres_test

import (
	"context"
	"flag"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/switchboardhq/switchboard/internal/model"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
)

// The model of the library's promises (internal/model; the root package
// runs it on memory and bolt) on PostgreSQL, with the application's
// transactions the store joins (WithTx): writes and DPoP proofs made
// inside one, rolled back or committed. 30 histories by default (each
// round trip is the server's); -rapid.checks for more.
func TestModel(t *testing.T) {
	dsn := testDSN(t)
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		_ = f.Value.Set("30")
		defer f.Value.Set(f.DefValue)
	}
	model.Check(t, model.Options{
		NoRestore: true,
		Open: func(string) (store.Store, error) {
			return postgres.Open(context.Background(), dsn, &postgres.Options{Table: freshTable(t, dsn)})
		},
		Tx: func(ctx context.Context) (context.Context, func() error, func() error, error) {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return nil, nil, nil, err
			}
			tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
			if err != nil {
				conn.Close(ctx)
				return nil, nil, nil, err
			}
			end := func(f func(context.Context) error) func() error {
				return func() error {
					defer conn.Close(context.Background())
					return f(context.Background())
				}
			}
			return postgres.WithTx(ctx, tx), end(tx.Commit), end(tx.Rollback), nil
		},
	})
}
