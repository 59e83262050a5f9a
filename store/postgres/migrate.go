// The versioned layout: Open creates the tables or upgrades them in place.

package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// migrations[i] brings the layout from version i to i+1. A new layout is a
// new entry at the end; entries are never edited once released.
var migrations = []func(ctx context.Context, tx pgx.Tx, table string) error{
	// 1: the key-value table. COLLATE "C" compares table names bytewise,
	// so no locale is consulted on the hot path.
	func(ctx context.Context, tx pgx.Tx, t string) error {
		_, err := tx.Exec(ctx, `CREATE TABLE `+t+` (
			tbl text COLLATE "C" NOT NULL,
			k bytea NOT NULL,
			v bytea NOT NULL,
			PRIMARY KEY (tbl, k))`)
		return err
	},
	// 2: the counters of store.Appender: the keys Append assigns at
	// commit, and the blocks of numbers Sequence hands out (64 at a time,
	// so one round trip serves 64 calls of a process).
	func(ctx context.Context, tx pgx.Tx, t string) error {
		_, err := tx.Exec(ctx, `CREATE SEQUENCE `+t+`_append; CREATE SEQUENCE `+t+`_numbers INCREMENT BY `+fmt.Sprint(numberBlock))
		return err
	},
	// 3: the table partitioned by switchboard table (see Layout), so no
	// index page holds two tables' rows; the rows of version 2 moved in.
	func(ctx context.Context, tx pgx.Tx, t string) error {
		var names []string
		rows, err := tx.Query(ctx, `SELECT DISTINCT tbl FROM `+t)
		if err != nil {
			return err
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return err
			}
			names = append(names, n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE `+t+` RENAME TO `+t+`_v2;
			ALTER TABLE `+t+`_v2 RENAME CONSTRAINT `+t+`_pkey TO `+t+`_v2_pkey;
			CREATE TABLE `+t+` (
				tbl text COLLATE "C" NOT NULL,
				k bytea NOT NULL,
				v bytea NOT NULL,
				PRIMARY KEY (tbl, k)) PARTITION BY LIST (tbl)`); err != nil {
			return err
		}
		for _, n := range names {
			if _, err := tx.Exec(ctx, createPartition(t, n, false)); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+t+` SELECT tbl, k, v FROM `+t+`_v2; DROP TABLE `+t+`_v2`)
		return err
	},
	// 4: the fill factors of rewritten for the partitions that exist; pages filled before keep their rows until
	// they are rewritten (VACUUM FULL, or the rows' own updates).
	func(ctx context.Context, tx pgx.Tx, t string) error {
		for name, fill := range rewritten {
			if _, err := tx.Exec(ctx, `DO $$ BEGIN
				IF to_regclass(`+quoteLiteral(partitionName(t, name))+`) IS NOT NULL THEN
					ALTER TABLE `+partitionName(t, name)+` SET (fillfactor = `+fill+`);
				END IF; END $$`); err != nil {
				return err
			}
		}
		return nil
	},
	// 5: the audit log's tables keep their rows whole in the row
	// (inline), compressed, for the partitions that exist; rows written
	// before keep their form.
	func(ctx context.Context, tx pgx.Tx, t string) error {
		for _, name := range inline {
			if _, err := tx.Exec(ctx, `DO $$ BEGIN
				IF to_regclass(`+quoteLiteral(partitionName(t, name))+`) IS NOT NULL THEN
					`+inlineStorage(t, name)+`;
				END IF; END $$`); err != nil {
				return err
			}
		}
		return nil
	},
}

// inline are the switchboard tables whose rows are kept in the row,
// compressed (column storage MAIN), rather than moved to the partition's
// TOAST table once they pass about 2 KB (EXTENDED, the default): the
// audit log's, whose rows hold many events each (a block of up to 8 KiB,
// or a commit's pending events), are written once, never updated, and are
// read whole. A TOAST table costs a row and an index entry per 2 KB chunk
// and a second lookup per read; in the row, PostgreSQL compresses the
// value and logs the compressed bytes (measured with
// store/postgres/bench: see docs/scaling.md).
var inline = []string{"events", "events_pending"}

// inlineStorage is the statement that keeps name's rows inline.
func inlineStorage(table, name string) string {
	return `ALTER TABLE ` + partitionName(table, name) + ` ALTER COLUMN v SET STORAGE MAIN`
}

// rewritten are the fill factors of the switchboard tables whose use is
// known. A todo's record is rewritten in place twice — at its claim and at
// its end — and the fields those change come first in it (the root's
// todoFormatV3), so PostgreSQL logs each update as the bytes that changed
// when the new version fits on the old one's page (a HOT update), and the
// whole record, and a key, when it does not. Pages a third full keep 99%
// of the updates there (measured with store/postgres/bench, see
// docs/scaling.md), against 82–88% half full and one in two at 80 — each
// update that leaves the page costs about 600 bytes more WAL.
// The todo index's rows are inserted and deleted, never rewritten: its
// pages are filled.
var rewritten = map[string]string{"todos": "35", "todo_index": "100"}

// fillLockWait bounds how long Open waits to change a fill factor.
var fillLockWait = 2 * time.Second

// fillFactors brings each rewritten partition that exists to this
// release's fill factor, at every Open. A fill factor is a storage
// parameter — every release reads a store whatever its tables' are — so
// no layout version marks it, and a store this changed still opens in the
// release before. Pages filled before keep their rows until those are
// rewritten. It is best effort, since nothing depends on it: ALTER TABLE
// waits for a vacuum of the table (and for DDL) at most fillLockWait, and
// whatever stops it — that wait, a statement_timeout, a role that may not
// alter the table — leaves the fill factor for a later Open; Open goes on.
// options are the partitions' storage parameters, by name, as
// loadPartitions read them.
func (s *Store) fillFactors(ctx context.Context, options map[string][]string) {
	for name, fill := range rewritten {
		part := partitionName(s.opts.Table, name)
		opts, exists := options[part]
		if !exists || slices.Contains(opts, "fillfactor="+fill) {
			continue // not created yet (createPartition gives it fill), or set
		}
		_ = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = `+quoteLiteral(fmt.Sprint(fillLockWait.Milliseconds())+"ms")); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `ALTER TABLE `+part+` SET (fillfactor = `+fill+`)`)
			return err
		})
	}
}

// partitionName is the PostgreSQL table holding switchboard table name's
// rows: <Table>__<name> when name is a short lower-case identifier (all of
// switchboard's are), else <Table>__x and a hash of name.
func partitionName(table, name string) string {
	if identifier.MatchString(name) && len(table)+2+len(name) <= 63 {
		return table + "__" + name
	}
	h := sha256.Sum256([]byte(name))
	return table + "__x" + hex.EncodeToString(h[:8])
}

// createPartition is the statement that creates the partition for
// switchboard table name. Its fill factor leaves room on each page for a
// record's next version, so updates (a todo changing state) stay on the
// page and its index entry is untouched: as rewritten says for the tables
// it names; else a fifth of the page, unless the table's rows are written
// once (writeOnce: the table is first written by Append or Insert alone,
// as the audit log's are), whose pages are filled. The tables inline
// names keep their rows in the row.
func createPartition(table, name string, writeOnce bool) string {
	fill := "80"
	if f, ok := rewritten[name]; ok {
		fill = f
	} else if writeOnce {
		fill = "100"
	}
	create := `CREATE TABLE IF NOT EXISTS ` + partitionName(table, name) + ` PARTITION OF ` + table +
		` FOR VALUES IN (` + quoteLiteral(name) + `) WITH (fillfactor = ` + fill + `)`
	if slices.Contains(inline, name) {
		// One statement still: a batch queues it without arguments.
		return `DO $$ BEGIN ` + create + `; ` + inlineStorage(table, name) + `; END $$`
	}
	return create
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings
// on, the default since PostgreSQL 9.1).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

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
			if err := migrations[v](ctx, tx, s.opts.Table); err != nil {
				return fmt.Errorf("postgres: upgrade to version %d: %w", v+1, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE `+vt+` SET version = $1`, v+1); err != nil {
				return fmt.Errorf("postgres: %s: %w", vt, err)
			}
		}
		return nil
	})
}
