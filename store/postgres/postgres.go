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
// and a primary key on (tbl, k), partitioned by tbl: each switchboard
// table is a partition of its own (<Table>__<name>, created by the first
// transaction that writes it), so no index page holds two tables' rows and
// serializable transactions that touch different tables never conflict
// through a shared page. A Get is one index lookup and a Scan an ordered
// range query (bytea compares bytewise, as the store contract requires).
// Statements name the partition itself once it exists, so each is planned
// once per connection rather than at every call, and the store's
// connections run with sequential and bitmap scans off (enable_seqscan,
// enable_bitmapscan; a DSN that sets either keeps its value): every
// statement reads by primary key — a set of keys one key at a time — and
// an index scan costs only the rows it returns however large a queue has
// grown.
// Two sequences serve store.Appender. The layout is versioned in a second
// table (<Table>_schema): Open creates it, upgrades an older one in place,
// and refuses a newer one with ErrNewerSchema.
//
// # Transactions
//
// View runs in a REPEATABLE READ, READ ONLY transaction: one consistent
// snapshot. Update runs in a SERIALIZABLE transaction; a serialization
// failure or a deadlock rolls it back and runs it again after a jittered
// backoff (the store contract lets fn run more than once), up to
// Options.MaxRetries times. Writers take no lock of their own: processes
// write concurrently, and PostgreSQL's serializable isolation decides.
// UpdateLocked (store.LockingStore) runs in READ COMMITTED, protected by
// the row locks its reads take (store.Locker: FOR UPDATE, and FOR UPDATE
// SKIP LOCKED for scans) — switchboard claims through it, so claimers
// skip each other's rows instead of aborting each other.
//
// Round trips are few: BEGIN travels with the transaction's first read;
// writes are buffered and sent with COMMIT in one pipeline (the values a
// transaction appends to a table as one row); a key or range the
// transaction has read is not read again, nor a range it has locked; and a
// Prefetch hint (store.Prefetcher) fetches several keys at once. After a
// statement fails, the server ignores the transaction's others: the first
// error is what the transaction returns, so a serialization failure is
// retried even when the caller went on.
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
// A transaction's Notify(key) becomes a NOTIFY sent right after its commit
// (in the same round trip, but not inside the transaction, where it would
// serialize every notifying commit in the database); one LISTEN
// connection per Store hands the keys to the Watch callbacks. switchboard
// uses it to wake blocking claims and subscriptions in every process as
// soon as another commits work for them. A lost LISTEN connection is
// re-established with backoff; meanwhile waiters fall back to polling.
//
// # Deadlines, failover and Close
//
// A caller's context bounds the whole call, its COMMIT included: a commit
// the server does not answer when the context ends (a primary waiting for
// a synchronous standby that is gone) returns ErrCommitUnknown, and the
// connection is discarded; any other error means nothing was committed.
// Close waits for the calls in flight at most Options.CloseTimeout, then
// cuts them off the same way. With a multi-host DSN
// (target_session_attrs=read-write) the store goes on by itself once a
// standby is promoted. See docs/scaling.md, "When the primary fails".
//
// # Inside the application's transaction
//
// WithTx runs a call inside a pgx.Tx the application began (SERIALIZABLE),
// so that a CreateFor commits or rolls back with the application's own
// rows.
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
	"strings"
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
	// MinConns is how many connections the pool opens at Open (in the
	// background) and keeps open, at most MaxConns: a call that finds no
	// idle connection waits for a new one, which under load takes tens of
	// milliseconds. Zero means the DSN's pool_min_conns if it sets one,
	// else 4; a negative value means none.
	MinConns int32
	// CommitEachUpdate runs every Update in a transaction of its own
	// instead of grouping concurrent ones (see Group commit).
	CommitEachUpdate bool
	// MaxBatch bounds how many Update calls one transaction groups. Zero
	// means 32: larger serializable transactions hold more predicate
	// locks, and the server's room for them is shared
	// (max_pred_locks_per_transaction × max_connections).
	MaxBatch int
	// MaxRetries bounds how many times an Update is run again after a
	// serialization failure or deadlock. Zero means 30; the last error is
	// returned, wrapped, after that.
	MaxRetries int
	// CloseTimeout bounds how long Close waits for the calls in flight
	// before it ends them: their transactions are cut off (an Update
	// whose COMMIT was on the way then returns ErrCommitUnknown) and the
	// connections closed. Zero means 10 seconds.
	CloseTimeout time.Duration
	// SerializableClaims runs UpdateLocked's transactions as serializable
	// ones, their locked reads plain reads — how a plain key-value backend
	// claims. It exists to measure row-locked claims against that.
	SerializableClaims bool
}

// ErrNewerSchema is returned by Open when the database was laid out by a
// newer version of this package than the running one.
var ErrNewerSchema = errors.New("postgres: the table was written by a newer version of this store")

// ErrCommitUnknown is wrapped by the error of an Update whose COMMIT was on
// the way when its connection failed or its context ended (a server whose
// commits hang — a synchronous standby that is gone — ends there): the
// server may or may not have committed it, so it is neither retried nor
// reported as rolled back, and its connection is discarded. A caller that
// must know reads the store again (a CreateFor with a dedup key can simply
// be repeated). It is store.ErrCommitUnknown, so errors.Is matches either
// through the switchboard's errors.
var ErrCommitUnknown = store.ErrCommitUnknown

// Store is a PostgreSQL-backed store.
type Store struct {
	pool    *pgxpool.Pool
	opts    Options
	lockKey int64
	group   *group.Committer
	closed  atomic.Bool
	// calls counts the calls in flight; Close waits on done until it is
	// zero (a WaitGroup may not be added to while Wait runs).
	callsMu    sync.Mutex
	calls      int
	idle       *sync.Cond
	commits    atomic.Uint64
	retries    atomic.Uint64
	updates    atomic.Uint64
	trips      atomic.Uint64
	listening  atomic.Bool // the LISTEN connection is in place (see once)
	channel    string
	listenStop context.CancelFunc
	listenDone chan struct{}
	// life ends when Close has waited CloseTimeout for the calls in
	// flight: every transaction runs under it as well as its caller's
	// context.
	life    context.Context
	endLife context.CancelFunc

	locked *group.Committer // UpdateLocked's batches

	watchMu  sync.Mutex
	watchers map[int]func(string)
	nextW    int

	// parent queries a table through the partitioned parent (tbl = $1
	// picks the partition); direct holds, per switchboard table whose
	// partition is known to exist, the same statements on the partition
	// itself (see queriesFor).
	parent     *queries
	direct     sync.Map // switchboard table name → *queries
	sqlNumbers string

	// parts are the partitions known to exist (by PostgreSQL name).
	parts sync.Map

	// numbers is this process's block of Sequence numbers: next up to
	// end (exclusive).
	numMu   sync.Mutex
	numNext uint64
	numEnd  uint64
}

// queries are the statements that read and write one switchboard table.
// Every one takes the switchboard table's name as $1 (tbl).
type queries struct {
	rel                                   string // the relation they read and write
	get, getMany, scan, put, insert, del  string
	getLocked, scanLocked, scanLockedFrom string
	getManyLocked                         string
	append                                string
}

// newQueries returns the statements on relation rel: the partitioned
// parent table, or one of its partitions (a row inserted into a partition
// directly is checked against its bound, so tbl = $1 must name it).
func newQueries(rel, table string) *queries {
	return &queries{
		rel: rel,
		get: `SELECT v FROM ` + rel + ` WHERE tbl = $1 AND k = $2`,
		// A set of keys is looked up key by key, each with the whole
		// primary key: with statistics from when the table was small,
		// PostgreSQL takes k = ANY($2), or a join with the keys, as a
		// filter over every row of the table (seen: 30,332 rows read to
		// delete 16), while an equality on the whole primary key is
		// always one index lookup.
		// (OFFSET 0 keeps the lateral lookup a subquery run per key,
		// which the planner cannot turn into a scan of the table.)
		getMany: `SELECT w.k, t.v FROM unnest($2::bytea[]) AS w(k)
			CROSS JOIN LATERAL (SELECT v FROM ` + rel + ` WHERE tbl = $1 AND k = w.k OFFSET 0) AS t`,
		scan: `SELECT k, v FROM ` + rel + ` WHERE tbl = $1 AND k >= $2 ORDER BY k LIMIT $3`,
		put: `INSERT INTO ` + rel + ` (tbl, k, v) SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS w(k, v)
			ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v`,
		// store.Inserter's: no look for a row first (a third of an
		// upsert's cost); a key that is there fails the transaction.
		insert: `INSERT INTO ` + rel + ` (tbl, k, v) SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS w(k, v)`,
		del:    `DELETE FROM ` + rel + ` WHERE tbl = $1 AND k = $2`, // once per key (see getMany)
		// Keys taken in the order of the Append calls (volatile functions
		// in the target list are evaluated after the sort).
		append: `INSERT INTO ` + rel + ` (tbl, k, v) SELECT $1, int8send(nextval('` + table + `_append')), v
			FROM unnest($2::bytea[]) WITH ORDINALITY AS w(v, o) ORDER BY o`,
		getLocked: `SELECT v FROM ` + rel + ` WHERE tbl = $1 AND k = $2 FOR UPDATE`,
		// Locks in the order of the keys given (sorted by the caller).
		getManyLocked: `SELECT w.k, t.v FROM unnest($2::bytea[]) WITH ORDINALITY AS w(k, o)
			CROSS JOIN LATERAL (SELECT v FROM ` + rel + ` WHERE tbl = $1 AND k = w.k FOR UPDATE OFFSET 0) AS t ORDER BY w.o`,
		scanLocked:     `SELECT k, v FROM ` + rel + ` WHERE tbl = $1 AND k >= $2 AND k < $3 ORDER BY k LIMIT $4 FOR UPDATE SKIP LOCKED`,
		scanLockedFrom: `SELECT k, v FROM ` + rel + ` WHERE tbl = $1 AND k >= $2 ORDER BY k LIMIT $3 FOR UPDATE SKIP LOCKED`,
	}
}

// queriesFor returns the statements for switchboard table name: on its
// partition once the partition is known to exist, else on the parent.
//
// A statement on the parent is planned again at every execution: with
// tbl a parameter, a generic plan would keep every partition, so
// PostgreSQL plans each call for its value (a profile of the lifecycle
// showed planning at a sixth of the server's time). A statement on the
// partition has one plan, kept by the connection's prepared statement.
// Both read and write the same rows: a partition holds exactly its
// table's.
func (s *Store) queriesFor(name string) *queries {
	if q, ok := s.direct.Load(name); ok {
		return q.(*queries)
	}
	part := partitionName(s.opts.Table, name)
	if _, ok := s.parts.Load(part); !ok {
		return s.parent
	}
	q, _ := s.direct.LoadOrStore(name, newQueries(part, s.opts.Table))
	return q.(*queries)
}

// numberBlock is how many numbers one round trip reserves for Sequence.
const numberBlock = 64

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.LockingStore  = (*Store)(nil)
	_ store.Appender      = (*reader)(nil)
	_ store.Locker        = (*reader)(nil)
	_ store.LatestScanner = (*reader)(nil)
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
		o.MaxBatch = 32
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 30
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 10 * time.Second
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse DSN: %w", err)
	}
	switch {
	case o.MinConns == 0 && cfg.MinConns > 0: // the DSN's pool_min_conns
		o.MinConns = cfg.MinConns
	case o.MinConns == 0:
		o.MinConns = 4
	case o.MinConns < 0:
		o.MinConns = 0
	}
	o.MinConns = min(o.MinConns, o.MaxConns)
	cfg.MaxConns, cfg.MinConns = o.MaxConns, o.MinConns
	// Every statement of the store reads by its primary key: one key, a
	// set of keys (each looked up alone), or a key range in key order. A
	// partition's plan is made once per connection (see queriesFor),
	// often while the table is still small or its statistics stale; a
	// sequential or bitmap scan chosen then would read a whole queue at
	// every claim once it has grown. Only index scans keep each
	// statement's cost to the rows it touches.
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	for _, p := range []string{"enable_seqscan", "enable_bitmapscan"} {
		if _, set := cfg.ConnConfig.RuntimeParams[p]; !set {
			cfg.ConnConfig.RuntimeParams[p] = "off"
		}
	}
	cfg.AfterConnect = registerByteaArrays
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
		parent:     newQueries(o.Table, o.Table),
		sqlNumbers: `SELECT int8send(nextval('` + o.Table + `_numbers'))`,
	}
	s.idle = sync.NewCond(&s.callsMu)
	s.life, s.endLife = context.WithCancel(context.Background())
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	options, err := s.loadPartitions(ctx)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.fillFactors(ctx, options)
	// A commit here costs round trips as well as the fsync: a batch can
	// afford to wait longer for the callers the last one released.
	gc := group.Config{Name: "postgres", MaxBatch: o.MaxBatch, Stall: 200 * time.Microsecond, Gather: 2 * time.Millisecond,
		Final: func(err error) bool { return errors.Is(err, ErrCommitUnknown) }, Bounded: true}
	s.group = group.New(gc, func(ctx context.Context, fn func(store.Tx) error) error {
		return s.txn(ctx, fn, serializable)
	})
	s.locked = group.New(gc, func(ctx context.Context, fn func(store.Tx) error) error {
		return s.txn(ctx, fn, s.lockedIso())
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
	// RoundTrips is how many times a transaction (a View's, an
	// Update's, an UpdateLocked's) sent statements to the server and
	// waited for the answer: each read not answered from what the
	// transaction read already, and each commit. A View's ROLLBACK,
	// which nobody waits for, is not counted.
	RoundTrips uint64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Retries: s.retries.Load(), Updates: s.updates.Load(), RoundTrips: s.trips.Load()}
}

// View runs fn in a read-only transaction over one snapshot.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	if err := s.enter(ctx, "view"); err != nil {
		return err
	}
	defer s.leave()
	if tx := txFrom(ctx); tx != nil {
		ctx, stop := s.bound(ctx)
		defer stop()
		if err := checkTx(ctx, tx); err != nil {
			return err
		}
		return fn(&reader{s: s, ctx: ctx, conn: tx.Conn(), readOnly: true})
	}
	run, stop := s.bound(ctx)
	defer stop()
	conn, err := s.pool.Acquire(run)
	if err != nil {
		return fmt.Errorf("postgres: view: %w", err)
	}
	// BEGIN travels with the first read, as in Update: one round trip
	// fewer for every read-only call.
	rd := &reader{s: s, ctx: run, conn: conn.Conn(), begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", readOnly: true}
	defer func() {
		if rd.begin != "" { // nothing was read: no transaction to end
			conn.Release()
			return
		}
		// A read-only transaction commits nothing, and every result fn
		// saw is read: the caller need not wait for the ROLLBACK that
		// ends it. The connection goes back to the pool after it (a
		// failure closes it; Close waits for it).
		go func() {
			if !conn.Conn().IsClosed() {
				end, cancel := context.WithTimeout(s.life, rollbackTimeout)
				if _, err := conn.Exec(end, "ROLLBACK"); err != nil {
					_ = conn.Conn().Close(end)
				}
				cancel()
			}
			conn.Release()
		}()
	}()
	return fn(rd)
}

// Update runs fn in a serializable read-write transaction, grouped with
// concurrent Updates of this process (see Group commit), and returns after
// it committed, or fn's error with nothing written. A panic in fn is
// re-raised in the caller's goroutine, with nothing written.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	if err := s.enter(ctx, "update"); err != nil {
		return err
	}
	defer s.leave()
	defer s.updates.Add(1)
	if tx := txFrom(ctx); tx != nil {
		return s.inTx(ctx, tx, fn, false)
	}
	if s.opts.CommitEachUpdate || store.IsAlone(ctx) {
		return s.txn(ctx, fn, serializable)
	}
	return s.group.Update(ctx, fn)
}

// UpdateLocked runs fn in a READ COMMITTED read-write transaction whose
// Tx locks what it reads through store.Locker (SELECT … FOR UPDATE, and
// FOR UPDATE SKIP LOCKED for ScanLocked), grouped with concurrent
// UpdateLocked calls of this process like Update. A deadlock rolls it back
// and runs it again. See store.LockingStore.
func (s *Store) UpdateLocked(ctx context.Context, fn func(store.Tx) error) error {
	if err := s.enter(ctx, "update"); err != nil {
		return err
	}
	defer s.leave()
	defer s.updates.Add(1)
	if tx := txFrom(ctx); tx != nil {
		return s.inTx(ctx, tx, fn, true)
	}
	if s.opts.CommitEachUpdate || store.IsAlone(ctx) {
		return s.txn(ctx, func(tx store.Tx) error {
			if err := store.LockMarked(tx, ctx); err != nil {
				return err
			}
			return fn(tx)
		}, s.lockedIso())
	}
	return s.locked.Update(ctx, fn)
}

// isolation is how a write transaction runs.
type isolation int

const (
	serializable isolation = iota // SERIALIZABLE
	rowLocked                     // READ COMMITTED, protected by the locks it takes
)

func (s *Store) lockedIso() isolation {
	if s.opts.SerializableClaims {
		return serializable
	}
	return rowLocked
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
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", what, store.ErrClosed)
	}
	s.calls++
	return nil
}

// leave ends a call enter admitted.
func (s *Store) leave() {
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	if s.calls--; s.calls == 0 {
		s.idle.Broadcast()
	}
}

// Close waits for the transactions in flight, then closes the connections.
func (s *Store) Close() error {
	s.callsMu.Lock()
	if s.closed.Swap(true) {
		s.callsMu.Unlock()
		return nil
	}
	// Past CloseTimeout the calls still in flight are cut off: a commit
	// the server does not answer must not hold Close forever.
	cut := time.AfterFunc(s.opts.CloseTimeout, s.endLife)
	for s.calls > 0 {
		s.idle.Wait()
	}
	s.callsMu.Unlock()
	cut.Stop()
	s.endLife()
	s.listenStop()
	<-s.listenDone
	s.pool.Close()
	return nil
}

// txn runs fn in one transaction, retrying it on serialization failures
// and deadlocks.
func (s *Store) txn(ctx context.Context, fn func(store.Tx) error, iso isolation) error {
	backoff := time.Millisecond
	for attempt := 0; ; attempt++ {
		err := s.once(ctx, fn, iso)
		if err == nil {
			s.commits.Add(1)
			return nil
		}
		if s.life.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%w (cut off by Close: %w)", err, store.ErrClosed)
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

// retryable reports whether err is a serialization failure, a deadlock or
// the server running out of room for serializable transactions' predicate
// locks (53200, which transactions ending free up): the transaction was
// rolled back and may simply be run again.
//
// So is a partition this transaction creates (CREATE TABLE IF NOT EXISTS)
// that another transaction created first, unseen when the statement
// began: 42P07, or a unique violation in the catalog. The other may be
// this process's own whose COMMIT was cut off (ErrCommitUnknown) and
// landed. Run again, the transaction finds the partition.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "40001", "40P01", "53200", "42P07":
		return true
	case "23505":
		return strings.HasPrefix(pe.ConstraintName, "pg_")
	}
	return false
}

// rollbackTimeout bounds the ROLLBACK that ends a transaction given up:
// past it the connection is closed instead.
const rollbackTimeout = 5 * time.Second

// bound returns ctx, ending also when Close cuts off the calls in flight.
func (s *Store) bound(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.life, cancel)
	return ctx, func() { stop(); cancel() }
}

// once runs fn in one transaction: BEGIN (sent with the first read), fn,
// then the buffered writes and COMMIT in one round trip. ctx bounds all of
// it: when it ends, the statement on the way is cut off and its connection
// discarded (pgx's default), and a COMMIT cut off so is reported as
// ErrCommitUnknown.
func (s *Store) once(ctx context.Context, fn func(store.Tx) error, iso isolation) (err error) {
	run, stop := s.bound(ctx)
	defer stop()
	pc, err := s.pool.Acquire(run)
	if err != nil {
		return fmt.Errorf("postgres: update: %w", err)
	}
	defer pc.Release()
	conn := pc.Conn()
	done := false
	defer func() {
		if done || conn.IsClosed() {
			return
		}
		// fn failed or panicked, or the commit did not go through: end
		// the transaction; if that fails, closing the connection does.
		if conn.PgConn().TxStatus() != 'I' {
			end, cancel := context.WithTimeout(s.life, rollbackTimeout)
			defer cancel()
			if _, err := conn.Exec(end, "ROLLBACK"); err != nil {
				_ = conn.Close(end)
			}
		}
	}()
	rd := &reader{s: s, ctx: run, conn: conn, begin: "BEGIN ISOLATION LEVEL SERIALIZABLE"}
	if iso == rowLocked {
		rd.begin, rd.locking = "BEGIN ISOLATION LEVEL READ COMMITTED", true
	}
	c, missing, err := s.gather(rd, fn, true)
	if err != nil {
		return err
	}
	var b pgx.Batch
	if rd.begin != "" && (len(c.tables) > 0 || len(c.notes) > 0 || len(c.appends) > 0) {
		b.Queue(rd.begin)
		rd.begin = ""
	}
	if rd.begin == "" {
		for _, name := range missing {
			// The transaction creates what it writes into: it takes
			// the parent table exclusively, waiting for the others
			// that use it, once per table and database.
			b.Queue(createPartition(s.opts.Table, name, c.writeOnce(name)))
		}
		s.queueWrites(&b, c)
		b.Queue("COMMIT")
	}
	committed := b.Len() // the statements up to COMMIT
	if rd.begin == "" && len(c.notes) > 0 {
		// Notifications go after COMMIT, in a transaction of their own
		// in the same round trip: a transaction that sends NOTIFY holds
		// a lock every other notifying commit in the database waits on,
		// from its commit until its WAL is flushed (PostgreSQL's async.c
		// orders the notification queue so). Sent from a transaction
		// that writes nothing, the lock is held for an instant.
		b.Queue(notifySQL, s.channel, c.notes)
	}
	if b.Len() > 0 {
		s.trips.Add(1)
		if err := sendCommit(run, conn, &b, committed); err != nil {
			if rd.begin == "" && commitMayHaveRun(err) {
				return fmt.Errorf("postgres: update: %w: %w", ErrCommitUnknown, err)
			}
			return fmt.Errorf("postgres: update: commit: %w", err)
		}
	}
	if len(c.notes) > 0 && !s.listening.Load() {
		// No LISTEN connection to bring them back: this process's
		// watchers hear its own commit's notifications directly
		// (store.Notifier). (One in place before the NOTIFY brings them
		// back; one put in place after it begins with store.Resync.)
		for _, k := range c.notes {
			s.deliver(k)
		}
	}
	for _, name := range missing {
		// Created with this commit: later statements name it directly
		// (see queriesFor) without asking the server first.
		s.parts.Store(partitionName(s.opts.Table, name), struct{}{})
	}
	done = true
	return nil
}

// ErrTxIsolation is returned by a call made under WithTx whose transaction
// is not SERIALIZABLE.
var ErrTxIsolation = errors.New("postgres: the application's transaction must be SERIALIZABLE (pgx.TxOptions{IsoLevel: pgx.Serializable})")

type txKey struct{}

// WithTx returns a context under which the store's calls run inside tx, a
// transaction the application began, instead of transactions of their own:
// what a switchboard call given that context writes — a CreateFor's todo,
// its dedup key, its audit events, the wake-up of other processes' workers
// — commits exactly when the application commits tx, and vanishes if it
// rolls back (a dedup key can then be used again). The audit log sequences
// the events, and blocked claims in every process wake, after that commit.
//
//	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
//	…the application's own writes, through tx…
//	_, _, err = sb.CreateFor(postgres.WithTx(ctx, tx), cred, "inbox", todo)
//	…
//	err = tx.Commit(ctx) // or Rollback: no todo, no event, no wake-up
//
// tx must be SERIALIZABLE (ErrTxIsolation otherwise): the switchboard's
// writes rely on it, as they do in the store's own transactions, so a
// commit may fail with a serialization failure (SQLSTATE 40001) the
// application retries, tx and all. Nothing is retried or committed behind
// the application's back, and a statement the server refuses aborts tx.
// Use it for the calls that write once and return — CreateFor, Complete,
// Fail, Cancel, Revoke, Approve — not for a blocking Claim or Work, which
// would wait inside tx for work its snapshot cannot see.
//
// What a call spends is spent with tx or for good, never in between: a
// friend request's ID token is spent with the request (rolled back, there
// was no request, and the token may be sent again with it); a DPoP proof
// (Prove, CollectWithProof) is spent in a transaction of its own, so it
// stays spent whatever tx does; a Checkpoint under tx stores the checkpoint
// with tx but keeps nothing outside the store and asks no witness. The store must
// have written the table once before (any earlier call did): creating a
// table's partition inside tx would lock the parent table until tx ends.
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return store.InCallersTx(context.WithValue(ctx, txKey{}, tx))
}

// txFrom is the application's transaction ctx carries (WithTx), unless
// the call is to run in its own (store.OwnTx).
func txFrom(ctx context.Context) pgx.Tx {
	if store.IsOwnTx(ctx) {
		return nil
	}
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// checkTx refuses a transaction that is not SERIALIZABLE.
func checkTx(ctx context.Context, tx pgx.Tx) error {
	var iso string
	if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&iso); err != nil {
		return fmt.Errorf("postgres: the application's transaction: %w", err)
	}
	if iso != "serializable" {
		return fmt.Errorf("%w, not %s", ErrTxIsolation, strings.ToUpper(iso))
	}
	return nil
}

// inTx runs fn inside the application's transaction tx (WithTx): its reads
// go through tx, its writes and notifications are sent in one round trip
// at its end, and nothing commits until the application commits tx.
// NOTIFY is transactional, so other processes hear of the writes only if
// and when tx commits.
func (s *Store) inTx(ctx context.Context, tx pgx.Tx, fn func(store.Tx) error, locking bool) error {
	ctx, stop := s.bound(ctx) // Close cuts it off too
	defer stop()
	if err := checkTx(ctx, tx); err != nil {
		return err
	}
	rd := &reader{s: s, ctx: ctx, conn: tx.Conn(), locking: locking}
	c, missing, err := s.gather(rd, fn, false)
	if err != nil {
		return err
	}
	var b pgx.Batch
	for _, name := range missing {
		// Known to exist only once tx commits: not remembered here.
		b.Queue(createPartition(s.opts.Table, name, c.writeOnce(name)))
	}
	s.queueWrites(&b, c)
	if len(c.notes) > 0 {
		b.Queue(notifySQL, s.channel, c.notes)
	}
	if b.Len() > 0 {
		s.trips.Add(1)
		if err := sendCommit(ctx, tx.Conn(), &b, b.Len()); err != nil {
			return fmt.Errorf("postgres: update: %w", err)
		}
	}
	return nil
}

// notifySQL sends a NOTIFY on channel $1 for each key of $2.
const notifySQL = `SELECT pg_notify($1, n) FROM unnest($2::text[]) AS w(n)`

// gather runs fn over an overlay of rd's transaction and collects its
// writes, with the partitions they need that do not exist yet (remember:
// see checkPartitions).
func (s *Store) gather(rd *reader, fn func(store.Tx) error, remember bool) (*collector, []string, error) {
	w := overlay.New(rd)
	err := fn(w.Exposed())
	if rd.failed != nil && (err == nil || !retryable(err)) {
		// fn went on after a statement failed (and the server aborted
		// the transaction): what failed is the outcome.
		return nil, nil, fmt.Errorf("postgres: update: %w", rd.failed)
	}
	if err != nil {
		return nil, nil, err
	}
	c := new(collector)
	if err := w.Apply(c); err != nil {
		return nil, nil, err
	}
	missing, err := s.checkPartitions(rd, c, remember)
	if err != nil {
		return nil, nil, err
	}
	return c, missing, nil
}

// loadPartitions reads which partitions exist, and returns their storage
// parameters (reloptions) by name.
func (s *Store) loadPartitions(ctx context.Context) (options map[string][]string, err error) {
	rows, err := s.pool.Query(ctx, `SELECT c.relname, coalesce(c.reloptions, '{}') FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass($1)`, s.opts.Table)
	if err != nil {
		return nil, fmt.Errorf("postgres: read partitions: %w", err)
	}
	defer rows.Close()
	options = map[string][]string{}
	for rows.Next() {
		var name string
		var opts []string
		if err := rows.Scan(&name, &opts); err != nil {
			return nil, fmt.Errorf("postgres: read partitions: %w", err)
		}
		s.parts.Store(name, struct{}{})
		options[name] = opts
	}
	return options, rows.Err()
}

// checkPartitions returns the tables c writes whose partition this process
// has not seen and the server does not have (another process may have
// created one).
//
// remember is false inside an application's transaction (WithTx): a
// partition found there may be one an earlier call of the same
// transaction created, which a rollback undoes.
func (s *Store) checkPartitions(rd *reader, c *collector, remember bool) ([]string, error) {
	var missing []string
	for _, names := range [][]string{c.order, c.appendOrder} {
		for _, name := range names {
			part := partitionName(s.opts.Table, name)
			if _, ok := s.parts.Load(part); ok || slices.Contains(missing, name) {
				continue
			}
			rows, err := rd.rows(`SELECT 1 FROM pg_class WHERE oid = to_regclass($1)`, part)
			if err != nil {
				return nil, err
			}
			if len(rows) > 0 {
				if remember {
					s.parts.Store(part, struct{}{})
				}
				continue
			}
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// commitMayHaveRun reports whether err, from the pipeline that ends with
// COMMIT, leaves the commit's outcome unknown. Only a statement error
// (severity ERROR) proves the transaction aborted, so that COMMIT rolled
// back. A lost connection, or a FATAL or PANIC from the server — an
// administrator terminating the backend, a shutdown — may come after the
// COMMIT ran: the outcome is unknown, and the transaction must not be run
// again as if it had not committed.
func commitMayHaveRun(err error) bool {
	// pgx prepares the statements it has not seen on the connection in a
	// round trip of their own before it sends the batch: a failure there
	// (a lost connection, the caller's deadline) sent no COMMIT.
	var pre pgx.ErrPreprocessingBatch
	if errors.As(err, &pre) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		sev := pe.SeverityUnlocalized
		if sev == "" {
			sev = pe.Severity
		}
		return sev != "ERROR"
	}
	return !pgconn.SafeToRetry(err)
}

// queueWrites adds c's writes to b.
func (s *Store) queueWrites(b *pgx.Batch, c *collector) {
	for _, name := range c.order {
		t := c.tables[name]
		if len(t.putK) > 0 {
			b.Queue(s.queriesFor(name).put, name, t.putK, t.putV)
		}
		if len(t.insK) > 0 {
			b.Queue(s.queriesFor(name).insert, name, t.insK, t.insV)
		}
		for _, k := range t.delK {
			b.Queue(s.queriesFor(name).del, name, k)
		}
	}
	for _, name := range c.appendOrder {
		// One row per table and commit: the values joined in order (the
		// store.Appender contract allows it; they are self-delimiting).
		v := bytes.Join(c.appends[name], nil)
		if v == nil {
			v = []byte{} // empty values joined: an empty row, not NULL
		}
		b.Queue(s.queriesFor(name).append, name, [][]byte{v})
	}
}

// sendCommit sends b, whose first n statements end with the transaction's
// COMMIT, and returns the first of those that failed. The statement after
// them — the notifications, sent once the transaction committed — may fail
// without undoing the commit: its keys are then not delivered
// (notifications are best effort, store.Notifier), and the pool drops a
// connection that failure left broken.
func sendCommit(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, n int) error {
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	for range n {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
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

type tableWrites struct{ putK, putV, insK, insV, delK [][]byte }

// writeOnce reports whether every write to table name is an Append or an
// Insert.
func (c *collector) writeOnce(name string) bool {
	t := c.tables[name]
	return t == nil || len(t.putK) == 0 && len(t.delK) == 0
}

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
func (c *collector) Insert(table string, key, value []byte) error {
	t := c.table(table)
	t.insK, t.insV = append(t.insK, key), append(t.insV, value)
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
	conn     *pgx.Conn // the transaction's connection; the transaction
	begin    string    // is begun by this statement, sent with the first read
	readOnly bool
	locking  bool  // a row-locked (READ COMMITTED) transaction: Locker locks
	failed   error // the first statement error: the server aborted the transaction
	// locked remembers, per range, the rows ScanLocked locked, so the
	// functions of a batch that scan the same range (claims of one queue)
	// share them instead of each locking more.
	locked map[string]*lockedRange
	gets   map[string][]byte // table \x00 key → value; nil: not found
	pages  map[string][][][]byte
	// ahead holds the ranges PrefetchScan announced (table \x00 start),
	// lockedGets the rows LockAhead locked (nil: absent) by the same key
	// as gets; queued holds the reads announced and not sent yet, which
	// go with the next round trip, in order.
	ahead      map[string]*aheadRange
	lockedGets map[string][]byte
	queued     []queuedRead
	// lockQueued holds the keys (as in gets) LockAhead queued whose rows
	// have not arrived yet.
	lockQueued map[string]bool
	// valuesOf holds, per range PrefetchValues announced (table \x00
	// start), the table whose rows its ScanLocked reads along.
	valuesOf map[string]string
}

// aheadRange is a range PrefetchScan announced: up to limit rows of table
// from start, read with the transaction's next round trip.
type aheadRange struct {
	limit int
	rows  [][][]byte
	sent  bool
}

// queuedRead is a read announced by a hint: its statement, and what takes
// its rows once they arrive.
type queuedRead struct {
	sql  string
	args []any
	got  func(rows [][][]byte)
}

// query runs one read, sending BEGIN in the same round trip if the
// transaction has not begun yet. The returned func ends the round trip.
func (r *reader) query(sql string, args ...any) (rows pgx.Rows, end func() error, err error) {
	if r.failed != nil {
		// After an error the server ignores every statement until the
		// transaction ends: report the error that aborted it, so that
		// a serialization failure is retried even if the caller went
		// on after it.
		return nil, nil, r.failed
	}
	defer func() {
		if err != nil {
			r.failed = err
		}
	}()
	none := func() error { return nil }
	if sql == "" && r.begin == "" && len(r.queued) == 0 {
		return nil, none, nil // nothing to send
	}
	r.s.trips.Add(1)
	if r.begin == "" && len(r.queued) == 0 {
		rows, err = r.conn.Query(r.ctx, sql, args...)
		return rows, none, err
	}
	var b pgx.Batch
	if r.begin != "" {
		b.Queue(r.begin)
	}
	for _, q := range r.queued {
		b.Queue(q.sql, q.args...)
	}
	if sql != "" {
		b.Queue(sql, args...)
	}
	begun, queued := r.begin != "", r.queued
	r.begin, r.queued = "", nil
	br := r.conn.SendBatch(r.ctx, &b)
	fail := func(err error) (pgx.Rows, func() error, error) {
		_ = br.Close()
		return nil, nil, err
	}
	if begun {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	for _, q := range queued {
		ahead, err := br.Query()
		if err != nil {
			return fail(err)
		}
		got, err := collect(ahead)
		if err != nil {
			return fail(err)
		}
		q.got(got)
	}
	if sql == "" {
		return nil, nil, br.Close()
	}
	rows, err = br.Query()
	if err != nil {
		return fail(err)
	}
	return rows, br.Close, nil
}

// collect reads every row of rows, each as its columns (an empty value as
// a non-nil empty slice), and closes it.
func collect(rows pgx.Rows) ([][][]byte, error) {
	defer rows.Close()
	var out [][][]byte
	for rows.Next() {
		row := make([][]byte, len(rows.FieldDescriptions()))
		dst := make([]any, len(row))
		for i := range row {
			dst[i] = &row[i]
		}
		if err := rows.Scan(dst...); err != nil { // Scan copies into a []byte
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
	return out, rows.Err()
}

// rows reads every row of one query, each as its columns.
func (r *reader) rows(sql string, args ...any) (_ [][][]byte, err error) {
	var rows pgx.Rows
	var end func() error
	rows, end, err = r.query(sql, args...)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && r.failed == nil {
			r.failed = err
		}
	}()
	out, err := collect(rows)
	if err := errors.Join(err, end()); err != nil {
		return nil, err
	}
	return out, nil
}

func (r *reader) Get(table string, key []byte) ([]byte, error) {
	mk := table + "\x00" + string(key)
	v, ok := r.gets[mk]
	if !ok {
		rows, err := r.rows(r.s.queriesFor(table).get, table, key)
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
// already looks ahead over keys mostly fetched by an earlier hint (a window
// sliding one claim at a time): it is skipped while fewer than half its
// keys are new, so that about one hint in half a window's width costs a
// round trip.
func (r *reader) Prefetch(table string, keys [][]byte) error {
	if len(keys) == 0 {
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
	if _, ok := r.gets[table+"\x00"+string(keys[0])]; ok && 2*len(want) < len(keys) {
		return nil
	}
	rows, err := r.rows(r.s.queriesFor(table).getMany, table, want)
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
	if a := r.ahead[table+"\x00"+string(start)]; a != nil {
		// Announced by PrefetchScan: read with the first round trip
		// since, or now.
		if !a.sent {
			if _, _, err := r.query(""); err != nil {
				return fmt.Errorf("postgres: scan: %w", err)
			}
		}
		for _, kv := range a.rows {
			if end != nil && bytes.Compare(kv[0], end) >= 0 {
				return nil
			}
			if !fn(bytes.Clone(kv[0]), bytes.Clone(kv[1])) {
				return nil
			}
		}
		if len(a.rows) < a.limit {
			return nil
		}
		last := a.rows[len(a.rows)-1][0]
		start = append(append(make([]byte, 0, len(last)+1), last...), 0)
		limit = min(4*a.limit, 1024)
	}
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

// PrefetchScan is store.ScanPrefetcher's: the range's first limit rows (at
// most 1024) are read with the transaction's next round trip — the next
// Get's, say, or else the Scan's — and the Scan from start returns them
// before it reads on.
func (r *reader) PrefetchScan(table string, start []byte, limit int) error {
	if start == nil {
		start = []byte{}
	}
	mk := table + "\x00" + string(start)
	if limit <= 0 || r.ahead[mk] != nil {
		return nil
	}
	if r.ahead == nil {
		r.ahead = map[string]*aheadRange{}
	}
	a := &aheadRange{limit: min(limit, 1024)}
	r.ahead[mk] = a
	r.queued = append(r.queued, queuedRead{
		sql:  r.s.queriesFor(table).scan,
		args: []any{table, bytes.Clone(start), a.limit},
		got:  func(rows [][][]byte) { a.rows, a.sent = rows, true },
	})
	return nil
}

// LockAhead is store.AheadLocker's: in a row-locked transaction the rows are
// locked, in key order, with the transaction's next round trip, and
// GetLocked returns them as the lock found them. Elsewhere it does
// nothing (GetLocked is a plain Get there).
func (r *reader) LockAhead(table string, keys [][]byte) error {
	if !r.locking || len(keys) == 0 {
		return nil
	}
	var want [][]byte
	for _, k := range keys {
		mk := table + "\x00" + string(k)
		if _, ok := r.lockedGets[mk]; !ok && !r.lockQueued[mk] {
			want = append(want, bytes.Clone(k))
		}
	}
	slices.SortFunc(want, bytes.Compare) // one order for every transaction: no deadlock between two
	want = slices.CompactFunc(want, bytes.Equal)
	if len(want) == 0 {
		return nil
	}
	if r.lockQueued == nil {
		r.lockQueued = map[string]bool{}
	}
	for _, k := range want {
		r.lockQueued[table+"\x00"+string(k)] = true
	}
	found := func(keys [][]byte, rows [][][]byte) {
		if r.lockedGets == nil {
			r.lockedGets = map[string][]byte{}
		}
		if r.gets == nil {
			r.gets = map[string][]byte{}
		}
		for _, k := range keys {
			mk := table + "\x00" + string(k)
			r.lockedGets[mk], r.gets[mk] = nil, nil // absent unless found below
			delete(r.lockQueued, mk)
		}
		for _, row := range rows {
			mk := table + "\x00" + string(row[0])
			r.lockedGets[mk], r.gets[mk] = row[1], row[1] // what later plain Gets see too
		}
	}
	if len(want) <= fewLocks {
		// A statement per key, in key order: the set's statement is
		// planned anew at every call (its plan depends on the array's
		// length), a single key's is planned once per connection.
		for _, k := range want {
			r.queued = append(r.queued, queuedRead{
				sql:  r.s.queriesFor(table).getLocked,
				args: []any{table, k},
				got: func(rows [][][]byte) {
					if len(rows) > 0 {
						rows = [][][]byte{{k, rows[0][0]}}
					}
					found([][]byte{k}, rows)
				},
			})
		}
		return nil
	}
	r.queued = append(r.queued, queuedRead{
		sql:  r.s.queriesFor(table).getManyLocked,
		args: []any{table, want},
		got:  func(rows [][][]byte) { found(want, rows) },
	})
	return nil
}

// PrefetchValues is store.ValuePrefetcher's: in a row-locked
// transaction, ScanLocked of table from start reads the rows of target
// its values name in the same statement (a join), and the Gets of them
// that follow cost no round trip. Elsewhere it does nothing.
func (r *reader) PrefetchValues(table string, start []byte, target string) error {
	if !r.locking {
		return nil
	}
	if r.valuesOf == nil {
		r.valuesOf = map[string]string{}
	}
	r.valuesOf[table+"\x00"+string(start)] = target
	return nil
}

// scanLockedWith is ScanLocked's statement (q's) joined with the rows of
// target its values name: it returns the locked rows, and remembers each
// value's row of target (or its absence) as a Get would — unless the
// transaction read it before, which stays as read.
func (r *reader) scanLockedWith(q *queries, table string, start, end []byte, limit int, target string) ([][][]byte, error) {
	locked, args := q.scanLockedFrom, []any{table, start, limit, target}
	if end != nil {
		locked, args = q.scanLocked, []any{table, start, end, limit, target}
	}
	sql := `SELECT e.k, e.v, t.v, t.v IS NOT NULL FROM (` + locked + `) AS e
		LEFT JOIN LATERAL (SELECT v FROM ` + r.s.queriesFor(target).rel + ` WHERE tbl = $` + fmt.Sprint(len(args)) + ` AND k = e.v OFFSET 0) AS t ON true ORDER BY e.k`
	rs, end2, err := r.query(sql, args...)
	if err != nil {
		return nil, err
	}
	if r.gets == nil {
		r.gets = map[string][]byte{}
	}
	var out [][][]byte
	for rs.Next() {
		var k, v, tv []byte
		var ok bool
		if err := rs.Scan(&k, &v, &tv, &ok); err != nil {
			rs.Close()
			return nil, errors.Join(err, end2())
		}
		if k == nil {
			k = []byte{}
		}
		if v == nil {
			v = []byte{}
		}
		out = append(out, [][]byte{k, v})
		if ok && tv == nil {
			tv = []byte{} // an empty row, not a missing one
		}
		mk := target + "\x00" + string(v)
		if _, read := r.gets[mk]; !read {
			r.gets[mk] = tv
		}
	}
	rs.Close()
	if err := errors.Join(rs.Err(), end2()); err != nil {
		if r.failed == nil {
			r.failed = err
		}
		return nil, err
	}
	return out, nil
}

// fewLocks is the most keys LockAhead locks with a statement each.
const fewLocks = 4

// page reads up to limit rows from start on, or recalls them.
func (r *reader) page(table string, start []byte, limit int) ([][][]byte, error) {
	mk := fmt.Sprintf("%s\x00%x\x00%d", table, start, limit)
	if p, ok := r.pages[mk]; ok {
		return p, nil
	}
	page, err := r.rows(r.s.queriesFor(table).scan, table, start, limit)
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

// GetLocked is store.Locker's: a Get that locks the row (FOR UPDATE),
// waiting for a transaction that holds it. In a serializable transaction
// (or a read-only one) it is a plain Get: the isolation protects the read.
func (r *reader) GetLocked(table string, key []byte) ([]byte, error) {
	if !r.locking {
		return r.Get(table, key)
	}
	// Locked by LockAhead already (or on the way: its round trip goes
	// now); else the statement below carries any read still announced.
	mk := table + "\x00" + string(key)
	if r.lockQueued[mk] {
		if _, _, err := r.query(""); err != nil {
			return nil, fmt.Errorf("postgres: get: %w", err)
		}
	}
	if v, ok := r.lockedGets[mk]; ok {
		if v == nil {
			return nil, store.ErrNotFound
		}
		return bytes.Clone(v), nil
	}
	rows, err := r.rows(r.s.queriesFor(table).getLocked, table, key)
	if err != nil {
		return nil, fmt.Errorf("postgres: get: %w", err)
	}
	var v []byte
	if len(rows) > 0 {
		v = rows[0][0]
	}
	if r.gets == nil {
		r.gets = map[string][]byte{}
	}
	r.gets[table+"\x00"+string(key)] = v // what later plain Gets see
	if v == nil {
		return nil, store.ErrNotFound
	}
	return bytes.Clone(v), nil
}

// lockedRange is what ScanLocked locked of one range: its rows in key
// order, and whether they are all the range held.
type lockedRange struct {
	rows [][][]byte
	done bool
}

// lockPage is how many rows an unbounded ScanLocked reads and locks at
// first (then more at a time).
const lockPage = 16

// ScanLocked is store.Locker's: rows locked with FOR UPDATE SKIP LOCKED,
// the first limit rows of a range in one statement (with no limit, in
// pages of 16 rows first, growing), and never a row more than limit: a
// row locked and not taken would hide from every other claimer until the
// transaction ends. The rows a transaction locked in a range are read
// again from memory by its later scans of the range (the rows are its
// own until it ends; the overlays above hide those it deleted), and only
// what lies past them is fetched: the claims of one batch share one
// round trip when the first asks for all of them (see store.Grouped). In
// a serializable transaction it is a plain Scan.
func (r *reader) ScanLocked(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	if !r.locking {
		n := 0
		return r.Scan(table, start, end, func(k, v []byte) bool {
			n++
			return fn(k, v) && (limit <= 0 || n < limit)
		})
	}
	if start == nil {
		start = []byte{}
	}
	target := r.valuesOf[table+"\x00"+string(start)]
	mk := fmt.Sprintf("%s\x00%x\x00%x\x00%t", table, start, end, end == nil)
	lr := r.locked[mk]
	if lr == nil {
		if r.locked == nil {
			r.locked = map[string]*lockedRange{}
		}
		lr = &lockedRange{}
		r.locked[mk] = lr
	}
	left := limit // rows still allowed; ≤ 0: no bound
	for _, kv := range lr.rows {
		if !fn(bytes.Clone(kv[0]), bytes.Clone(kv[1])) {
			return nil
		}
		if left > 0 {
			if left--; left == 0 {
				return nil
			}
		}
	}
	if lr.done {
		return nil
	}
	if n := len(lr.rows); n > 0 {
		last := lr.rows[n-1][0]
		start = append(append(make([]byte, 0, len(last)+1), last...), 0)
	}
	page := lockPage
	for {
		fetch := page
		if left > 0 {
			// A bounded scan reads all it may return in one statement
			// (one snapshot: store.Locker's contract), and no more.
			fetch = left
		}
		var rows [][][]byte
		var err error
		switch q := r.s.queriesFor(table); {
		case target != "":
			rows, err = r.scanLockedWith(q, table, start, end, fetch, target)
		case end == nil:
			rows, err = r.rows(q.scanLockedFrom, table, start, fetch)
		default:
			rows, err = r.rows(q.scanLocked, table, start, end, fetch)
		}
		if err != nil {
			return fmt.Errorf("postgres: scan: %w", err)
		}
		lr.rows = append(lr.rows, rows...)
		lr.done = len(rows) < fetch
		for _, kv := range rows {
			if !fn(bytes.Clone(kv[0]), bytes.Clone(kv[1])) {
				return nil
			}
			if left > 0 {
				if left--; left == 0 {
					return nil
				}
			}
		}
		if lr.done {
			return nil
		}
		last := rows[len(rows)-1][0]
		start = append(append(make([]byte, 0, len(last)+1), last...), 0)
		page = min(4*page, 1024)
	}
}

// ScanLatest is store.LatestScanner's: the range as committed now (in a
// row-locked transaction each statement reads the latest commits), in
// pages as Scan reads, but never recalled from, nor remembered for, any
// other read of the transaction. It locks nothing. In a serializable or
// read-only transaction it reads the transaction's snapshot.
func (r *reader) ScanLatest(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	if start == nil {
		start = []byte{}
	}
	page, n := 16, 0
	if limit > 0 {
		page = min(limit, 1024)
	}
	for {
		rows, err := r.rows(r.s.queriesFor(table).scan, table, start, page)
		if err != nil {
			return fmt.Errorf("postgres: scan: %w", err)
		}
		for _, kv := range rows {
			if end != nil && bytes.Compare(kv[0], end) >= 0 {
				return nil
			}
			if !fn(kv[0], kv[1]) {
				return nil
			}
			if n++; limit > 0 && n >= limit {
				return nil
			}
		}
		if len(rows) < page {
			return nil
		}
		last := rows[len(rows)-1][0]
		start = append(append(make([]byte, 0, len(last)+1), last...), 0)
		page = min(4*page, 1024)
	}
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
// place it tells every watcher to re-check (store.Resync): whatever was
// notified before was not heard here; then it calls listening.
func (s *Store) listenOnce(ctx context.Context, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `LISTEN `+s.channel); err != nil {
		return err
	}
	s.listening.Store(true)
	defer s.listening.Store(false)
	// Resync first, then say LISTEN is in place: Open returns on the
	// first attempt's listening, so a watcher registered after Open never
	// gets that first, empty resync.
	s.deliver(store.Resync)
	listening()
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
