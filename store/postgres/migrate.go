// The versioned layout: Open creates the tables or upgrades them in place.

package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// migrations[i] brings the layout from version i to i+1. A new layout is a
// new entry at the end; entries are never edited once released.
var migrations = []func(table string) []string{
	// 1: the key-value table. COLLATE "C" compares table names bytewise,
	// so no locale is consulted on the hot path.
	func(t string) []string {
		return []string{`CREATE TABLE ` + t + ` (
			tbl text COLLATE "C" NOT NULL,
			k bytea NOT NULL,
			v bytea NOT NULL,
			PRIMARY KEY (tbl, k))`}
	},
	// 2: the counters of store.Appender: the keys Append assigns at
	// commit, and the blocks of numbers Sequence hands out (64 at a time,
	// so one round trip serves 64 calls of a process).
	func(t string) []string {
		return []string{`CREATE SEQUENCE ` + t + `_append`, `CREATE SEQUENCE ` + t + `_numbers INCREMENT BY ` + fmt.Sprint(numberBlock)}
	},
}

// migrate creates or upgrades the layout in one transaction, under a lock
// so that processes starting together do not race.
func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		vt := s.opts.Table + "_schema"
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.lockKey+1); err != nil {
			return fmt.Errorf("postgres: schema lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+vt+` (version integer NOT NULL)`); err != nil {
			return fmt.Errorf("postgres: create %s: %w", vt, err)
		}
		var v int
		err := tx.QueryRow(ctx, `SELECT version FROM `+vt).Scan(&v)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := tx.Exec(ctx, `INSERT INTO `+vt+` (version) VALUES (0)`); err != nil {
				return fmt.Errorf("postgres: %s: %w", vt, err)
			}
		case err != nil:
			return fmt.Errorf("postgres: read %s: %w", vt, err)
		}
		if v > len(migrations) {
			return fmt.Errorf("%w: %s is at version %d, this package writes %d", ErrNewerSchema, vt, v, len(migrations))
		}
		for ; v < len(migrations); v++ {
			for _, stmt := range migrations[v](s.opts.Table) {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return fmt.Errorf("postgres: upgrade to version %d: %w", v+1, err)
				}
			}
			if _, err := tx.Exec(ctx, `UPDATE `+vt+` SET version = $1`, v+1); err != nil {
				return fmt.Errorf("postgres: %s: %w", vt, err)
			}
		}
		return nil
	})
}
