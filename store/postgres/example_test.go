package postgres_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/postgres"
)

// Handing work over in the same transaction as the application's own rows:
// the decision and the todo commit together, or neither does.
func ExampleWithTx() {
	ctx := context.Background()
	dsn := "postgres://app@db-a:5432,db-b:5432/app?target_session_attrs=read-write"
	st, err := postgres.Open(ctx, dsn, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	sb, err := switchboard.New(st, &switchboard.Config{ /* Issuers, LogKey… */ })
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close()
	pool, err := pgxpool.New(ctx, dsn) // the application's own pool
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var cred switchboard.Credential // the grant's credential, collected earlier

	decide := func(id string) error {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) // a no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO decisions (id) VALUES ($1)`, id); err != nil {
			return err
		}
		_, _, err = sb.CreateFor(postgres.WithTx(ctx, tx), cred, "inbox", switchboard.NewTodo{Kind: "review", DedupKey: id})
		if err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	for {
		// A serialization failure (SQLSTATE 40001) rolls everything back:
		// run the whole transaction again.
		err := decide("decision-42")
		var pe interface{ SQLState() string }
		if errors.As(err, &pe) && pe.SQLState() == "40001" {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		break
	}
}
