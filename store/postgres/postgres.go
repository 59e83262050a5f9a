// Package postgres is the switchboard store for deployments that outgrow one
// machine: several processes share edges, grants, todos, quotas and
// revocations through one PostgreSQL database (version 12 or later; tested
// on 15).
//
// It is its own Go module, so users of the embedded stores never download
// the PostgreSQL driver (github.com/jackc/pgx/v5).
//
// # Layout
//
// Every switchboard table lives in one PostgreSQL table (Options.Table,
// default switchboard_kv) of (tbl, k, v) rows with bytea keys and values
// and a primary key on (tbl, k): a Get is one index lookup and a Scan an
// ordered range query on that index (bytea compares bytewise, as the store
// contract requires). The layout is versioned in a second table
// (<Table>_schema): Open creates it, upgrades an older one in place, and
// refuses a newer one with ErrNewerSchema.
//
// # Transactions
//
// View runs in a REPEATABLE READ, READ ONLY transaction: one consistent
// snapshot. Update runs in a SERIALIZABLE transaction; a serialization
// failure or a deadlock rolls it back and runs it again after a jittered
// backoff (the store contract lets fn run more than once), up to
// Options.MaxRetries times. Round trips are few: BEGIN travels with the
// transaction's first read; writes are buffered and sent, with COMMIT and
// the writer lock's release, in one pipeline; a key or range the
// transaction has read is not read again (its snapshot cannot change
// under it); and a Prefetch hint (store.Prefetcher) fetches several keys
// at once. So a function's cost is the reads nobody made before it.
//
// Every switchboard write appends to one hash-chained audit log, so write
// transactions conflict on the log's head whatever else they touch: run
// concurrently from several processes, most of them would fail and retry.
// Instead, a write transaction first takes a session-level advisory lock
// (the writer lock, keyed by the table name) and starts its snapshot only
// after it has the lock, so writers from every process commit one after
// another and never conflict with each other; within a process, concurrent
// Updates are grouped into one transaction (see Group commit), so the lock
// is taken once per batch, not once per call. Reads (View) never wait for
// it. Options.ConcurrentWriters turns the lock off, to measure what it
// saves.
//
// # Group commit
//
// As in the bolt store, Update calls that arrive while a transaction is in
// progress are queued, and the next transaction runs them back to back, each
// in its own overlay (a function that fails or panics is undone alone); one
// COMMIT makes the batch durable and every caller returns after it. If the
// batch cannot commit, each function is run again in a transaction of its
// own. Options.CommitEachUpdate turns this off.
//
// # Notifications
//
// A transaction's Notify(key) becomes a NOTIFY sent at commit; one LISTEN
// connection per Store hands the keys to the Watch callbacks. switchboard
// uses it to wake blocking claims and subscriptions in every process as
// soon as another commits work for them. A lost LISTEN connection is
// re-established with backoff; meanwhile waiters fall back to polling.
package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/internal/group"
	"github.com/switchboardhq/switchboard/store/internal/overlay"
)

// Options configures Open. A nil *Options means the defaults.
type Options struct {
	// Table names the PostgreSQL table that holds the store; the schema
	// version is kept in Table + "_schema". Several stores can share a
	// database under different names. It must be a lower-case SQL
	// identifier (letters, digits, underscores). Zero means
	// "switchboard_kv".
	Table string
	// MaxConns bounds the connection pool (the LISTEN connection is extra).
	// Zero means 16.
	MaxConns int32
	// CommitEachUpdate runs every Update in a transaction of its own
	// instead of grouping concurrent ones (see Group commit).
	CommitEachUpdate bool
	// MaxBatch bounds how many Update calls one transaction groups. Zero
	// means 128.
	MaxBatch int
	// MaxRetries bounds how many times an Update is run again after a
	// serialization failure or deadlock. Zero means 30; the last error is
	// returned, wrapped, after that.
	MaxRetries int
	// ConcurrentWriters skips the writer lock (see Transactions): write
	// transactions then run concurrently, conflict on the audit log and
	// are retried. It exists to measure the lock against the naive way.
	ConcurrentWriters bool
}

// ErrNewerSchema is returned by Open when the database was laid out by a
// newer version of this package than the running one.
var ErrNewerSchema = errors.New("postgres: the table was written by a newer version of this store")

// ErrCommitUnknown is wrapped by the error of an Update whose connection
// failed while its COMMIT was on the way: the server may or may not have
// committed it, so it is neither retried nor reported as rolled back. A
// caller that must know reads the store again (a CreateFor with a dedup key
// can simply be repeated).
var ErrCommitUnknown = errors.New("postgres: the connection failed during COMMIT; the transaction may or may not have committed")

// Store is a PostgreSQL-backed store.
type Store struct {
	pool       *pgxpool.Pool
	opts       Options
	lockKey    int64
	group      *group.Committer
	closed     atomic.Bool
	inflight   sync.WaitGroup
	commits    atomic.Uint64
	retries    atomic.Uint64
	updates    atomic.Uint64
	channel    string
	listenStop context.CancelFunc
	listenDone chan struct{}

	// held is a connection holding the writer lock, taken by lockAhead
	// for the batch about to run (only the committing goroutine touches it).
	held *pgxpool.Conn

	watchMu  sync.Mutex
	watchers map[int]func(string)
	nextW    int

	sqlGet, sqlGetMany, sqlScan, sqlPut, sqlDel string
	sqlLock, sqlUnlock                          string
	sqlAppend, sqlNumbers                       string

	// numbers is this process's block of Sequence numbers: next up to
	// end (exclusive).
	numMu   sync.Mutex
	numNext uint64
	numEnd  uint64
}

// numberBlock is how many numbers one round trip reserves for Sequence.
const numberBlock = 64

var (
	_ store.Store    = (*Store)(nil)
	_ store.Watcher  = (*Store)(nil)
	_ store.Appender = (*reader)(nil)
)

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)

// Open connects to the database named by dsn (a PostgreSQL URL or
// key=value string, as pgx parses it), creates or upgrades the store's
// tables, and starts listening for notifications.
func Open(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = "switchboard_kv"
	}
	if !identifier.MatchString(o.Table) {
		return nil, fmt.Errorf("postgres: Options.Table %q is not a lower-case SQL identifier", o.Table)
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 16
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 128
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 30
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse DSN: %w", err)
	}
	cfg.MaxConns = o.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte("switchboard writer lock " + o.Table))
	s := &Store{
		pool:       pool,
		opts:       o,
		lockKey:    int64(h.Sum64()),
		channel:    o.Table + "_notify",
		watchers:   map[int]func(string){},
		sqlGet:     `SELECT v FROM ` + o.Table + ` WHERE tbl = $1 AND k = $2`,
		sqlGetMany: `SELECT k, v FROM ` + o.Table + ` WHERE tbl = $1 AND k = ANY($2::bytea[])`,
		sqlScan:    `SELECT k, v FROM ` + o.Table + ` WHERE tbl = $1 AND k >= $2 ORDER BY k LIMIT $3`,
		sqlPut: `INSERT INTO ` + o.Table + ` (tbl, k, v) SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS w(k, v)
			ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v`,
		sqlDel: `DELETE FROM ` + o.Table + ` WHERE tbl = $1 AND k = ANY($2::bytea[])`,
		// Keys taken in the order of the Append calls (volatile functions
		// in the target list are evaluated after the sort).
		sqlAppend: `INSERT INTO ` + o.Table + ` (tbl, k, v) SELECT $1, int8send(nextval('` + o.Table + `_append')), v
			FROM unnest($2::bytea[]) WITH ORDINALITY AS w(v, o) ORDER BY o`,
		sqlNumbers: `SELECT int8send(nextval('` + o.Table + `_numbers'))`,
	}
	s.sqlLock = fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, s.lockKey)
	s.sqlUnlock = fmt.Sprintf(`SELECT pg_advisory_unlock(%d)`, s.lockKey)
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	// A commit here costs round trips as well as the fsync: a batch can
	// afford to wait longer for the callers the last one released.
	gc := group.Config{Name: "postgres", MaxBatch: o.MaxBatch, Stall: 200 * time.Microsecond, Gather: 2 * time.Millisecond,
		Final: func(err error) bool { return errors.Is(err, ErrCommitUnknown) }}
	if !o.ConcurrentWriters {
		// Wait for the writer lock before taking the batch, so everyone
		// who arrives while another process writes joins it.
		gc.Before = s.lockAhead
	}
	s.group = group.New(gc, func(ctx context.Context, fn func(store.Tx) error) error {
		// Only the committing goroutine runs this: the lock lockAhead took
		// goes to the batch's first attempt.
		held := s.held
		s.held = nil
		return s.txn(ctx, fn, held)
	})
	lctx, stop := context.WithCancel(context.Background())
	s.listenStop, s.listenDone = stop, make(chan struct{})
	first := make(chan struct{})
	go s.listen(lctx, first)
	// Wait for the first LISTEN (or its failure: waiters poll meanwhile
	// and are told to re-check once it is up), so a process that starts
	// waiting right after Open does not miss what others commit.
	select {
	case <-first:
	case <-ctx.Done():
		stop()
		<-s.listenDone
		pool.Close()
		return nil, fmt.Errorf("postgres: listen: %w", ctx.Err())
	}
	return s, nil
}

// Table returns the name of the PostgreSQL table holding the store.
func (s *Store) Table() string { return s.opts.Table }

// Stats counts a store's write transactions since Open.
type Stats struct {
	// Commits is how many write transactions committed.
	Commits uint64
	// Retries is how many write transactions were rolled back by a
	// serialization failure or deadlock and run again.
	Retries uint64
	// Updates is how many Update calls returned (grouped into Commits).
	Updates uint64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Retries: s.retries.Load(), Updates: s.updates.Load()}
}

// View runs fn in a read-only transaction over one snapshot.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	if err := s.enter(ctx, "view"); err != nil {
		return err
	}
	defer s.inflight.Done()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: view: %w", err)
	}
	defer conn.Release()
	// Once it has started, a transaction is not interrupted by ctx.
	run := context.WithoutCancel(ctx)
	tx, err := conn.BeginTx(run, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: view: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(run) }()
	if err := fn(&reader{s: s, ctx: run, tx: tx, readOnly: true}); err != nil {
		return err
	}
	if err := tx.Commit(run); err != nil {
		return fmt.Errorf("postgres: view: %w", err)
	}
	return nil
}

// Update runs fn in a serializable read-write transaction, grouped with
// concurrent Updates of this process (see Group commit), and returns after
// it committed, or fn's error with nothing written. A panic in fn is
// re-raised in the caller's goroutine, with nothing written.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	if err := s.enter(ctx, "update"); err != nil {
		return err
	}
	defer s.inflight.Done()
	defer s.updates.Add(1)
	if s.opts.CommitEachUpdate {
		return s.txn(ctx, fn, nil)
	}
	return s.group.Update(ctx, fn)
}

// enter refuses a call after Close or with ctx done, and counts it in
// flight.
func (s *Store) enter(ctx context.Context, what string) error {
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", what, store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: %s: %w", what, err)
	}
	s.inflight.Add(1)
	if s.closed.Load() {
		s.inflight.Done()
		return fmt.Errorf("postgres: %s: %w", what, store.ErrClosed)
	}
	return nil
}

// Close waits for the transactions in flight, then closes the connections.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.inflight.Wait()
	s.listenStop()
	<-s.listenDone
	s.pool.Close()
	return nil
}

// txn runs fn in one serializable transaction, retrying it on
// serialization failures and deadlocks.
func (s *Store) txn(ctx context.Context, fn func(store.Tx) error, held *pgxpool.Conn) error {
	backoff := time.Millisecond
	for attempt := 0; ; attempt++ {
		err := s.once(ctx, fn, held)
		held = nil
		if err == nil {
			s.commits.Add(1)
			return nil
		}
		if !retryable(err) {
			return err
		}
		if attempt >= s.opts.MaxRetries {
			return fmt.Errorf("postgres: update: gave up after %d retries: %w", attempt, err)
		}
		s.retries.Add(1)
		// Full jitter: a random wait up to the current bound, so the
		// transactions that collided do not collide again in step.
		t := time.NewTimer(rand.N(backoff) + time.Microsecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("postgres: update: %w (after %v)", ctx.Err(), err)
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// retryable reports whether err is a serialization failure or a deadlock:
// the transaction was rolled back and may simply be run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// lockAhead takes a connection and the writer lock for the next batch (on
// failure, once tries again itself). The func it returns gives them back if
// the batch did not use them (every call in it was cancelled).
func (s *Store) lockAhead() (after func()) {
	pc, err := s.pool.Acquire(context.Background())
	if err != nil {
		return nil
	}
	if _, err := pc.Exec(context.Background(), s.sqlLock); err != nil {
		pc.Release()
		return nil
	}
	s.held = pc
	return func() {
		if s.held == nil {
			return
		}
		pc := s.held
		s.held = nil
		if _, err := pc.Exec(context.Background(), s.sqlUnlock); err != nil {
			_ = pc.Conn().Close(context.Background()) // closing drops the lock
		}
		pc.Release()
	}
}

// once runs fn in one transaction: writer lock, BEGIN (sent with the first
// read), fn, then the buffered writes, COMMIT and the unlock in one round
// trip. held, if not nil, is a connection that already holds the writer
// lock.
func (s *Store) once(ctx context.Context, fn func(store.Tx) error, held *pgxpool.Conn) (err error) {
	pc, locked := held, held != nil
	if pc == nil {
		if pc, err = s.pool.Acquire(ctx); err != nil {
			return fmt.Errorf("postgres: update: %w", err)
		}
	}
	defer pc.Release()
	conn := pc.Conn()
	if !s.opts.ConcurrentWriters && !locked {
		// The lock is taken before BEGIN, so the transaction's snapshot
		// starts after the previous writer committed.
		if _, err := conn.Exec(ctx, s.sqlLock); err != nil {
			return fmt.Errorf("postgres: update: writer lock: %w", err)
		}
		locked = true
	}
	run := context.WithoutCancel(ctx)
	done := false
	defer func() {
		if done {
			return
		}
		// fn failed or panicked, or the commit did not go through: end
		// the transaction and drop the lock; if that fails, closing the
		// connection does both.
		var cerr error
		if conn.PgConn().TxStatus() != 'I' {
			_, cerr = conn.Exec(run, "ROLLBACK")
		}
		if cerr == nil && locked {
			_, cerr = conn.Exec(run, s.sqlUnlock)
		}
		if cerr != nil {
			_ = conn.Close(run)
		}
	}()
	rd := &reader{s: s, ctx: run, conn: conn, begin: "BEGIN ISOLATION LEVEL SERIALIZABLE"}
	w := overlay.New(rd)
	if err := fn(w.Exposed()); err != nil {
		return err
	}
	var c collector
	if err := w.Apply(&c); err != nil {
		return err
	}
	var b pgx.Batch
	if rd.begin != "" && (len(c.tables) > 0 || len(c.notes) > 0 || len(c.appends) > 0) {
		b.Queue(rd.begin)
		rd.begin = ""
	}
	if rd.begin == "" {
		s.queueWrites(&b, &c)
		b.Queue("COMMIT")
	}
	if locked {
		b.Queue(s.sqlUnlock)
	}
	if b.Len() > 0 {
		if err := conn.SendBatch(run, &b).Close(); err != nil {
			var pe *pgconn.PgError
			if rd.begin == "" && !errors.As(err, &pe) && !pgconn.SafeToRetry(err) {
				// Not refused by the server, and maybe sent: COMMIT
				// may have been executed.
				return fmt.Errorf("postgres: update: %w (%v)", ErrCommitUnknown, err)
			}
			return fmt.Errorf("postgres: update: commit: %w", err)
		}
	}
	done = true
	return nil
}

// queueWrites adds c's writes and notifications to b.
func (s *Store) queueWrites(b *pgx.Batch, c *collector) {
	for _, name := range c.order {
		t := c.tables[name]
		if len(t.putK) > 0 {
			b.Queue(s.sqlPut, name, t.putK, t.putV)
		}
		if len(t.delK) > 0 {
			b.Queue(s.sqlDel, name, t.delK)
		}
	}
	for _, name := range c.appendOrder {
		b.Queue(s.sqlAppend, name, c.appends[name])
	}
	for _, n := range c.notes {
		b.Queue(`SELECT pg_notify($1, $2)`, s.channel, n)
	}
}

// collector receives an overlay's writes, grouped per table.
type collector struct {
	order  []string
	tables map[string]*tableWrites
	notes  []string
	// appends per table, in the order of the Append calls.
	appendOrder []string
	appends     map[string][][]byte
}

type tableWrites struct{ putK, putV, delK [][]byte }

func (c *collector) table(name string) *tableWrites {
	if c.tables == nil {
		c.tables = map[string]*tableWrites{}
	}
	t := c.tables[name]
	if t == nil {
		t = &tableWrites{}
		c.tables[name] = t
		c.order = append(c.order, name)
	}
	return t
}

func (c *collector) Get(string, []byte) ([]byte, error) { return nil, store.ErrNotFound }
func (c *collector) Scan(string, []byte, []byte, func(k, v []byte) bool) error {
	return nil
}
func (c *collector) Put(table string, key, value []byte) error {
	t := c.table(table)
	t.putK, t.putV = append(t.putK, key), append(t.putV, value)
	return nil
}
func (c *collector) Delete(table string, key []byte) error {
	t := c.table(table)
	t.delK = append(t.delK, key)
	return nil
}
func (c *collector) Append(table string, value []byte) error {
	if c.appends == nil {
		c.appends = map[string][][]byte{}
	}
	if _, ok := c.appends[table]; !ok {
		c.appendOrder = append(c.appendOrder, table)
	}
	c.appends[table] = append(c.appends[table], value)
	return nil
}

func (c *collector) Sequence() (uint64, error) {
	return 0, errors.New("postgres: Sequence outside the transaction") // never: the overlay asks the reader
}

func (c *collector) Notify(key string) {
	if !slices.Contains(c.notes, key) {
		c.notes = append(c.notes, key)
	}
}

// reader reads from the transaction; in an Update it sits under the
// overlay, which takes the writes. Its transaction sees one snapshot (the
// writes are all in the overlay until commit), so it remembers what it
// read: a key or a range that another function of the same batch already
// read costs no round trip.
type reader struct {
	s        *Store
	ctx      context.Context
	tx       pgx.Tx    // a View's transaction, or
	conn     *pgx.Conn // an Update's connection, whose transaction
	begin    string    // is begun by this statement, sent with the first read
	readOnly bool
	gets     map[string][]byte // table \x00 key → value; nil: not found
	pages    map[string][][][]byte
}

// query runs one read, sending BEGIN in the same round trip if the
// transaction has not begun yet. The returned func ends the round trip.
func (r *reader) query(sql string, args ...any) (pgx.Rows, func() error, error) {
	none := func() error { return nil }
	if r.tx != nil {
		rows, err := r.tx.Query(r.ctx, sql, args...)
		return rows, none, err
	}
	if r.begin == "" {
		rows, err := r.conn.Query(r.ctx, sql, args...)
		return rows, none, err
	}
	var b pgx.Batch
	b.Queue(r.begin)
	b.Queue(sql, args...)
	r.begin = ""
	br := r.conn.SendBatch(r.ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, nil, err
	}
	return rows, br.Close, nil
}

// rows reads every row of one query, each as its columns.
func (r *reader) rows(sql string, args ...any) ([][][]byte, error) {
	rows, end, err := r.query(sql, args...)
	if err != nil {
		return nil, err
	}
	var out [][][]byte
	for rows.Next() {
		row := make([][]byte, len(rows.FieldDescriptions()))
		dst := make([]any, len(row))
		for i := range row {
			dst[i] = &row[i]
		}
		if err := rows.Scan(dst...); err != nil { // Scan copies into a []byte
			rows.Close()
			_ = end()
			return nil, err
		}
		for i := range row {
			if row[i] == nil {
				row[i] = []byte{} // an empty value, not a missing one
			}
		}
		out = append(out, row)
	}
	rows.Close()
	return out, errors.Join(rows.Err(), end())
}

func (r *reader) Get(table string, key []byte) ([]byte, error) {
	mk := table + "\x00" + string(key)
	v, ok := r.gets[mk]
	if !ok {
		rows, err := r.rows(r.s.sqlGet, table, key)
		if err != nil {
			return nil, fmt.Errorf("postgres: get: %w", err)
		}
		if len(rows) > 0 {
			v = rows[0][0]
		}
		if r.gets == nil {
			r.gets = map[string][]byte{}
		}
		r.gets[mk] = v
	}
	if v == nil {
		return nil, store.ErrNotFound
	}
	return bytes.Clone(v), nil
}

// Prefetch reads the keys not read yet in one round trip and remembers
// them, so the Gets that follow cost none. A hint whose first key was read
// already is one that looks ahead over keys mostly fetched by an earlier
// hint (a window sliding one claim at a time): it is skipped, so that only
// one hint in a window's width costs a round trip.
func (r *reader) Prefetch(table string, keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	if _, ok := r.gets[table+"\x00"+string(keys[0])]; ok {
		return nil
	}
	var want [][]byte
	for _, k := range keys {
		if _, ok := r.gets[table+"\x00"+string(k)]; !ok {
			want = append(want, k)
		}
	}
	if len(want) == 0 {
		return nil
	}
	rows, err := r.rows(r.s.sqlGetMany, table, want)
	if err != nil {
		return fmt.Errorf("postgres: prefetch: %w", err)
	}
	if r.gets == nil {
		r.gets = map[string][]byte{}
	}
	for _, k := range want {
		r.gets[table+"\x00"+string(k)] = nil // absent unless found below
	}
	for _, row := range rows {
		r.gets[table+"\x00"+string(row[0])] = row[1]
	}
	return nil
}

// Scan pages through the keys from start in chunks that grow from 16 to
// 1024 rows, so a scan that stops at its first key reads little and a long
// one takes few round trips. A page is read without the end bound (the
// first key at or past end ends the scan), so that the functions of a batch
// that scan from the same start with different ends — "due before now",
// where each has its own now — share one page.
func (r *reader) Scan(table string, start, end []byte, fn func(k, v []byte) bool) error {
	if start == nil {
		start = []byte{}
	}
	limit := 16
	for {
		page, err := r.page(table, start, limit)
		if err != nil {
			return fmt.Errorf("postgres: scan: %w", err)
		}
		for _, kv := range page {
			if end != nil && bytes.Compare(kv[0], end) >= 0 {
				return nil
			}
			if !fn(bytes.Clone(kv[0]), bytes.Clone(kv[1])) {
				return nil
			}
		}
		if len(page) < limit {
			return nil
		}
		// Next page: the keys after the last one seen.
		last := page[len(page)-1][0]
		start = append(append(make([]byte, 0, len(last)+1), last...), 0)
		limit = min(4*limit, 1024)
	}
}

// page reads up to limit rows from start on, or recalls them.
func (r *reader) page(table string, start []byte, limit int) ([][][]byte, error) {
	mk := fmt.Sprintf("%s\x00%x\x00%d", table, start, limit)
	if p, ok := r.pages[mk]; ok {
		return p, nil
	}
	page, err := r.rows(r.s.sqlScan, table, start, limit)
	if err != nil {
		return nil, err
	}
	if r.pages == nil {
		r.pages = map[string][][][]byte{}
	}
	r.pages[mk] = page
	return page, nil
}

func (r *reader) Put(string, []byte, []byte) error {
	if r.readOnly {
		return store.ErrReadOnly
	}
	return errors.New("postgres: write outside the overlay") // never: the overlay takes writes
}

func (r *reader) Delete(string, []byte) error {
	if r.readOnly {
		return store.ErrReadOnly
	}
	return errors.New("postgres: write outside the overlay")
}

// Append is store.Appender's: in an Update the overlay above takes it (and
// the collector sends it with the commit), so it never reaches here.
func (r *reader) Append(string, []byte) error {
	if r.readOnly {
		return store.ErrReadOnly
	}
	return errors.New("postgres: write outside the overlay")
}

// Sequence is store.Appender's: a number from this process's block,
// reserving the next block (one round trip, on the transaction's
// connection) when it is used up. Numbers are unique across processes;
// within a process they increase.
func (r *reader) Sequence() (uint64, error) {
	if r.readOnly {
		return 0, store.ErrReadOnly
	}
	s := r.s
	s.numMu.Lock()
	defer s.numMu.Unlock()
	if s.numNext == s.numEnd {
		rows, err := r.rows(s.sqlNumbers)
		if err != nil {
			return 0, fmt.Errorf("postgres: sequence: %w", err)
		}
		if len(rows) != 1 || len(rows[0][0]) != 8 {
			return 0, errors.New("postgres: sequence: no number")
		}
		first := binary.BigEndian.Uint64(rows[0][0])
		s.numNext, s.numEnd = first, first+numberBlock
	}
	n := s.numNext
	s.numNext++
	return n, nil
}

// Watch registers fn for the keys notified by committed transactions of
// every process sharing the database (see Notifications).
func (s *Store) Watch(fn func(key string)) (stop func()) {
	s.watchMu.Lock()
	id := s.nextW
	s.nextW++
	s.watchers[id] = fn
	s.watchMu.Unlock()
	return func() {
		s.watchMu.Lock()
		delete(s.watchers, id)
		s.watchMu.Unlock()
	}
}

// listen holds the LISTEN connection until ctx ends, reconnecting with
// backoff. first is closed once the first attempt has listened or failed.
func (s *Store) listen(ctx context.Context, first chan struct{}) {
	defer close(s.listenDone)
	var once sync.Once
	firstDone := func() { once.Do(func() { close(first) }) }
	defer firstDone()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, firstDone)
		firstDone()
		if ctx.Err() != nil {
			return
		}
		_ = err // waiters poll meanwhile; try again
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenOnce listens on one connection until it fails. Once LISTEN is in
// place it calls listening and tells every watcher to re-check
// (store.Resync): whatever was notified before was not heard here.
func (s *Store) listenOnce(ctx context.Context, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `LISTEN `+s.channel); err != nil {
		return err
	}
	listening()
	s.deliver(store.Resync)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		s.deliver(n.Payload)
	}
}

func (s *Store) deliver(key string) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for _, fn := range s.watchers {
		fn(key)
	}
}
