// Package store defines the storage contract switchboard runs on: an ordered,
// transactional key-value store.
//
// All of switchboard's domain logic — records, secondary indexes, state
// machines — lives in the root package and is written once against the
// [Store] and [Tx] interfaces. A backend only has to provide ordered keys and
// atomic, serializable transactions, so a new backend is small, and the
// conformance suite in package storetest proves it behaves.
//
// # Contract
//
// Every backend must honour the following, and storetest checks each point:
//
//   - Tables are created implicitly by the first Put; a Get from a table that
//     does not exist returns [ErrNotFound], a Scan over it visits nothing and a
//     Delete from it succeeds.
//   - Keys are compared as raw bytes (bytes.Compare). Scan visits keys in
//     ascending order within [start, end); a nil start means from the first key
//     and a nil end means through the last.
//   - View runs fn in a read-only transaction over a consistent snapshot.
//     Writing inside View returns [ErrReadOnly].
//   - Update runs fn in a serializable read-write transaction and commits if
//     and only if fn returns nil. If fn returns an error or panics, everything
//     fn wrote is rolled back; the error is returned, the panic propagates.
//   - fn may run more than once (a backend may retry it, or group several
//     callers into one commit), so it must have no effects outside the
//     transaction other than assigning results that the caller reads after
//     Update returns.
//   - Keys and values passed to or returned from a Tx are valid only inside
//     the transaction. A backend copies what it is given and what it hands
//     out, so mutating either slice afterwards changes nothing stored.
//   - Reads inside an Update see the transaction's own earlier writes.
//   - A committed Update is durable before Update returns, for backends that
//     persist at all (bolt: after fsync).
//   - After Close, View and Update return [ErrClosed].
//   - If ctx is already done when View or Update is called, the call returns
//     ctx.Err() (wrapped) and runs nothing. A transaction already running is
//     not interrupted.
//
// # Optional capabilities
//
// A backend may offer more, found by type assertion (as io.WriterTo is);
// switchboard uses what is there and works the same without it:
//
//   - [Watcher] (on the Store) and [Notifier] (on its Tx): commits announced
//     to every process sharing the store, so blocked claims and
//     subscriptions in other processes wake at once instead of at their
//     next poll. The PostgreSQL store offers both (LISTEN/NOTIFY).
//   - [Prefetcher], [ScanPrefetcher] and [ValuePrefetcher] (on the Tx):
//     hints that some keys, the first rows of a range, or the rows a
//     locked scan's values name are about to be read, for a backend whose
//     reads are round trips to a server.
//   - [LockingStore] (on the Store) and [Locker] (on its Tx): a write
//     transaction that is not serializable but protected by the row locks
//     it takes, skipping rows others hold — how a queue on a database
//     claims work without conflicting with every other claimer (SELECT …
//     FOR UPDATE SKIP LOCKED). switchboard claims through it when present.
//     The PostgreSQL store offers it, [AheadLocker] (rows locked with
//     the transaction's next read, not in a round trip of their own) and
//     [LatestScanner] (a range as last committed, so that a short locked
//     scan can tell an empty range from rows others hold); it takes the
//     rows an UpdateLocked call marks with [LockFirst] ahead, with the
//     transaction's first read.
//   - [Grouped] (on the Tx of a group-commit batch): how many functions
//     of the batch follow this one, so a function may read ahead for
//     them.
//   - [Appender] (on the Tx): keys assigned by the store at commit and
//     numbers unique across processes, for a backend whose write
//     transactions run concurrently: switchboard then takes no counter
//     that every writer would have to read and move. The PostgreSQL store
//     offers it; without it, a store's writers run one at a time (bolt,
//     memory) and a counter costs nothing.
//   - [Inserter] (on the Tx): a write of a row the caller knows is new,
//     cheaper than Put where a Put must look for the row first (an INSERT
//     without ON CONFLICT). switchboard writes the audit log's entries
//     so. The PostgreSQL store sends it as such; the bolt store's grouped
//     transactions take it as a Put.
package store

import (
	"context"
	"errors"
)

// Sentinel errors every backend returns, matched with errors.Is.
var (
	// ErrNotFound is returned by Tx.Get when the key (or its table) is absent.
	ErrNotFound = errors.New("store: not found")
	// ErrClosed is returned by View and Update after Close.
	ErrClosed = errors.New("store: closed")
	// ErrReadOnly is returned by Put and Delete inside a View.
	ErrReadOnly = errors.New("store: write in read-only transaction")
	// ErrCommitUnknown is wrapped by the error of an Update whose outcome
	// is unknown: the caller's context ended, or the connection to the
	// server failed, after its commit was on the way, so it may or may not
	// have landed. It is never run again as if it had not. A caller that
	// must know reads the store again (a CreateFor with a dedup key can
	// simply be repeated).
	ErrCommitUnknown = errors.New("store: the commit's outcome is unknown: it may or may not have landed")
)

// Store is an ordered, transactional key-value store. Implementations are
// safe for concurrent use by multiple goroutines.
type Store interface {
	// View runs fn in a read-only transaction over a consistent snapshot.
	View(ctx context.Context, fn func(Tx) error) error
	// Update runs fn in a serializable read-write transaction and commits
	// iff fn returns nil. fn may be run more than once.
	Update(ctx context.Context, fn func(Tx) error) error
	// Close releases the store. Transactions in flight finish first.
	Close() error
}

// Tx is one transaction. A Tx must not be used after the function it was
// passed to returns, nor from more than one goroutine.
type Tx interface {
	// Get returns a copy of the value stored under key in table, or
	// ErrNotFound.
	Get(table string, key []byte) ([]byte, error)
	// Put stores a copy of value under key in table, creating the table if
	// needed. Keys must be non-empty.
	Put(table string, key, value []byte) error
	// Delete removes key from table. Deleting an absent key is not an error.
	Delete(table string, key []byte) error
	// Scan calls fn for each key in [start, end) in ascending order until fn
	// returns false. A nil start or end leaves that side unbounded. fn must not
	// write to the transaction.
	Scan(table string, start, end []byte, fn func(k, v []byte) bool) error
}

// ErrEmptyKey is returned by Put when the key is empty.
var ErrEmptyKey = errors.New("store: empty key")

// Notifier is implemented by the Tx of a store that several processes can
// share and that can tell them about a commit: Notify(key) delivers key to
// the Watch callbacks of every process (this one included) after the
// transaction commits, and never if it rolls back. Delivery is best effort
// — a process that was disconnected misses what was sent meanwhile — so a
// waiter must still re-check the store from time to time; but the process
// whose transaction committed hears its own notifications even while
// disconnected (a store that commits them itself delivers them to its
// watchers then), so it never needs to signal itself as well.
type Notifier interface {
	Notify(key string)
}

// Watcher is implemented by a store whose transactions are Notifiers: Watch
// registers fn to be called with each key notified by a committed
// transaction of any process sharing the store, until stop is called or the
// store is closed. fn is called from one goroutine and must not block.
//
// Whenever notifications may have been missed — each time the store
// (re)establishes its channel to the other processes, the first time
// included — it calls fn with [Resync], so waiters re-check at once instead
// of at their next poll.
type Watcher interface {
	Watch(fn func(key string)) (stop func())
}

// Resync is the key a [Watcher] passes to its callbacks when notifications
// may have been lost: every waiter, whatever it waits for, should re-check
// the store. No Notify key may equal it.
const Resync = "\x00resync"

// LockingStore is implemented by a store that can run a write transaction
// protected by row locks instead of serializable isolation.
type LockingStore interface {
	// UpdateLocked runs fn in a read-write transaction like Update —
	// atomic, durable once it returns, fn possibly run more than once —
	// but not serializable: each read sees the latest committed data, and
	// the only protection against concurrent writers is the locks fn
	// takes through the Tx's Locker methods. fn must read through them
	// every row whose value it writes or decides on; a row read plainly
	// may change before commit. Concurrent serializable transactions
	// (Update) that write a row this transaction locked wait for it, and
	// fail with a retry if they read it before.
	UpdateLocked(ctx context.Context, fn func(Tx) error) error
}

// Locker is implemented by the Tx of a LockingStore's UpdateLocked (and
// may be by others, where it then simply reads).
type Locker interface {
	// ScanLocked is Scan over at most limit rows of [start, end) that no
	// other transaction holds locked (limit ≤ 0: no bound), each locked
	// for the rest of this transaction; rows other transactions hold are
	// skipped, not waited for. Every row read is locked, whether or not
	// fn goes on past it, and no row past the limit is: pass the limit
	// the caller needs, since a row locked and left alone hides from
	// every other transaction's ScanLocked until this one ends. A later
	// scan of a range this transaction scanned before sees the rows it
	// locked then (unless this transaction deleted them) before any it
	// locks now. The first scan of a range with limit > 0 reads its rows
	// at one instant: every row committed before then with a key below
	// the last one it returns is among them, unless another transaction
	// holds it locked.
	ScanLocked(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error
	// GetLocked is Get, locking the row for the rest of this transaction
	// and waiting for a transaction that holds it; it returns the row as
	// that one left it.
	GetLocked(table string, key []byte) ([]byte, error)
}

// LatestScanner is implemented by a Locker whose ScanLocked skips the rows
// other transactions hold. ScanLatest is Scan over at most limit rows of
// [start, end) (limit ≤ 0: no bound) as they are committed when it is
// called — never recalled from an earlier read of this transaction —
// merged with this transaction's own writes; it locks nothing and skips
// nothing. A caller whose ScanLocked came back short tells with it "the
// range is empty" (ScanLatest finds nothing either, at one instant) from
// "others hold rows of it" (ScanLatest finds them: wait for their
// holders, GetLocked in a transaction that holds nothing else, and look
// again) — so that a queue never answers "empty" while work it could take
// is merely locked by another claimer.
type LatestScanner interface {
	ScanLatest(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error
}

// Grouped is implemented by the Tx a store hands each function of a
// group-commit batch (several callers' functions run back to back in one
// transaction). Later is how many functions the transaction runs after
// this one — a hint for a function that locks rows for work it shares
// with its batch (switchboard's claims lock rows for the claims after
// them in the batch, so that one round trip serves the batch): Later is
// zero outside a batch and for its last function. A function must not
// depend on it for correctness: a later function may fail, or do
// something else.
type Grouped interface {
	Later() int
}

// AheadLocker is implemented by a Locker whose reads are round trips:
// LockAhead(table, keys) locks those rows (in a row-locked transaction;
// elsewhere it may do nothing) with the transaction's next read, before
// that read, so a scan that follows sees what was committed once the
// locks were held — and the locks cost no round trip of their own.
// GetLocked of one of them then returns the row as that lock found it.
// The rows stay locked for the rest of the transaction whether or not
// GetLocked follows; if no read follows, nothing is locked.
type AheadLocker interface {
	LockAhead(table string, keys [][]byte) error
}

// Appender is implemented by the Tx of a store whose write transactions run
// concurrently — several processes, no global lock — where a counter kept
// under one key would make every writer conflict on it. switchboard then
// writes its audit events as pending entries with Append, sequences them
// into the audit log after commit, and numbers new todos with Sequence.
// On a store without it, events are sequenced inside the transaction that
// writes them. A read-only transaction's Append returns ErrReadOnly.
type Appender interface {
	// Append adds value to table under a key the store assigns as the
	// transaction commits: 8 bytes, big-endian, from one counter for the
	// whole store, taken after every read the transaction made — so if
	// one transaction read what another committed, its keys are larger
	// than the other's. The keys of one transaction follow the order of
	// its Append calls. Keys are never reused, may leave gaps, and
	// transactions may commit out of key order. A transaction that rolls
	// back adds nothing.
	//
	// A store may join the values one transaction appends to a table
	// into one row, their concatenation in the order they were appended
	// (one row written instead of many): callers append values that
	// delimit themselves, and read a row as one or more of them.
	Append(table string, value []byte) error
	// Sequence returns a positive number that no other call returns, in
	// this process or any other sharing the store; in one process, a
	// later call returns a larger number. A rolled-back transaction's
	// numbers are simply never used.
	Sequence() (uint64, error)
}

// Prefetcher is implemented by the Tx of a store whose reads are round
// trips (a database server): Prefetch(table, keys) is a hint that the
// transaction is about to Get those keys, so the store may fetch them in
// one round trip. A hint changes no result: a Get afterwards returns
// what it would have returned had it read when the hint's round trip
// did (in a snapshot, exactly what it would have returned; in
// UpdateLocked's transaction, which sees each read's latest commits, the
// rows as they were then).
type Prefetcher interface {
	Prefetch(table string, keys [][]byte) error
}

// Inserter is implemented by the Tx of a store for which writing a row it
// knows is new costs less than Put. Insert is Put of a key that is not in
// the table — neither committed nor written earlier in this transaction.
// If it is there after all, the store may fail the transaction (its
// commit returns an error, and nothing is written) or treat the Insert as
// a Put; it never leaves both rows. The PostgreSQL store fails it.
type Inserter interface {
	Insert(table string, key, value []byte) error
}

// ScanPrefetcher is implemented by a Prefetcher that can read a range
// ahead too: PrefetchScan(table, start, limit) is a hint that the
// transaction will Scan table from start and read about limit rows, so
// the store may fetch them with its next read, in the same round trip.
// Like Prefetch's, the hint changes no result.
type ScanPrefetcher interface {
	PrefetchScan(table string, start []byte, limit int) error
}

// ValuePrefetcher is implemented by a Prefetcher that can read, with a
// locked scan of an index, the rows its values name in another table:
// PrefetchValues(table, start, target) is a hint that the transaction's
// next ScanLocked of table from start will be followed by Gets, in table
// target, of the values of the rows it returns — switchboard's claim,
// which reads the todos its ready entries name. The store may read those
// rows with the scan, in its round trip. Like Prefetch's, the hint
// changes no result: each Get returns what it would have returned had it
// read when the scan did.
type ValuePrefetcher interface {
	PrefetchValues(table string, start []byte, target string) error
}

type aloneKey struct{}

// Alone returns ctx marked so that an Update (or UpdateLocked) made with
// it runs in a transaction of its own rather than grouped with other
// callers' (group commit), on a store that honors the hint (the PostgreSQL
// store): for a transaction whose latency matters more than sharing a
// commit — switchboard's audit log sequencer, which would otherwise wait
// for a whole batch of other functions' reads. Stores may ignore it.
func Alone(ctx context.Context) context.Context { return context.WithValue(ctx, aloneKey{}, true) }

// IsAlone reports whether ctx was marked by Alone.
func IsAlone(ctx context.Context) bool { v, _ := ctx.Value(aloneKey{}).(bool); return v }

// lockedFirst is a row an UpdateLocked function locks first (LockFirst).
type lockedFirst struct {
	table string
	key   []byte
}

type lockFirstKey struct{}

// LockFirst returns ctx marked with a row the function of an UpdateLocked
// call made with it locks (Locker.GetLocked) before it decides on
// anything — switchboard's CompleteAndClaim, which locks the todo it
// completes. A store whose reads are round trips may then lock the row
// with its transaction's first read (AheadLocker), and with one statement
// the rows of every function a group-commit batch runs, rather than with a
// round trip per function. It moves a lock earlier and changes no result:
// the function still calls GetLocked, which returns the row as that lock
// found it. The row is locked before the function runs, so before it has
// checked anything of its caller's: a store holds it only for the
// transaction. Stores may ignore the mark; a Locker that is no
// AheadLocker does. A context derived from a marked one carries the mark:
// mark only the context of the call that locks the row.
func LockFirst(ctx context.Context, table string, key []byte) context.Context {
	rows := locksFirst(ctx)
	rows = append(rows[:len(rows):len(rows)], lockedFirst{table: table, key: key})
	return context.WithValue(ctx, lockFirstKey{}, rows)
}

// locksFirst returns the rows ctx was marked with by LockFirst.
func locksFirst(ctx context.Context) []lockedFirst {
	rows, _ := ctx.Value(lockFirstKey{}).([]lockedFirst)
	return rows
}

// LockMarked locks ahead (AheadLocker), on tx, the rows each live context
// of ctxs was marked with by LockFirst, with one LockAhead per table. A tx
// that is no AheadLocker locks nothing.
func LockMarked(tx Tx, ctxs ...context.Context) error {
	al, ok := tx.(AheadLocker)
	if !ok {
		return nil
	}
	var tables []string
	keys := map[string][][]byte{}
	for _, ctx := range ctxs {
		if ctx.Err() != nil {
			continue // its function will not run
		}
		for _, r := range locksFirst(ctx) {
			if _, ok := keys[r.table]; !ok {
				tables = append(tables, r.table)
			}
			keys[r.table] = append(keys[r.table], r.key)
		}
	}
	for _, t := range tables {
		if err := al.LockAhead(t, keys[t]); err != nil {
			return err
		}
	}
	return nil
}

type callersTxKey struct{}

// InCallersTx returns ctx marked as running inside a transaction of the
// caller's own, which commits (or rolls back) only after the call returns —
// a store sets it on a context whose calls join an application's
// transaction (store/postgres's WithTx). Nothing a call writes under it is
// committed when the call returns, so a call must not report part of its
// work as done while another part failed: the caller's rollback undoes
// both.
func InCallersTx(ctx context.Context) context.Context {
	return context.WithValue(ctx, callersTxKey{}, true)
}

// IsInCallersTx reports whether ctx was marked by InCallersTx (and not
// since by OwnTx).
func IsInCallersTx(ctx context.Context) bool { v, _ := ctx.Value(callersTxKey{}).(bool); return v }

type ownTxKey struct{}

// OwnTx returns ctx marked so that a store runs a call under it in a
// transaction of its own even when ctx joins a caller's transaction
// (InCallersTx): what the call writes commits when it returns, whatever
// the caller's transaction then does. For a write that must hold either
// way — switchboard spends a DPoP proof so, good for one request however
// the request ends. A store that joins callers' transactions must honor
// it (store/postgres does).
func OwnTx(ctx context.Context) context.Context {
	return context.WithValue(context.WithValue(ctx, callersTxKey{}, false), ownTxKey{}, true)
}

// IsOwnTx reports whether ctx was marked by OwnTx.
func IsOwnTx(ctx context.Context) bool { v, _ := ctx.Value(ownTxKey{}).(bool); return v }
