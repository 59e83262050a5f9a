// Package bolt is the default switchboard store: a single bbolt file.
//
// Each table is a top-level bucket, created by its first Put. bbolt allows
// one writer at a time and any number of readers, each reading a consistent
// snapshot.
//
// # Group commit
//
// A bbolt commit costs an fsync (about a millisecond), so one transaction per
// Update would cap a store near a thousand writes a second. Instead, Update
// calls that arrive while a commit is in progress are queued, and the next
// commit runs them back to back inside one read-write transaction: each
// function writes into its own overlay (so it sees the writes of those before
// it, and its own), which is applied only if it returns nil — a function that
// fails or panics is undone alone. One fsync then makes the whole batch
// durable, and every caller returns after it. Functions run one at a time, so
// the result is the same as running them serially. If the batch cannot be
// committed, each function is run again in a transaction of its own (the
// store contract allows a function to run more than once).
// Options.CommitEachUpdate turns this off.
package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/internal/group"
)

// Options configures Open. A nil *Options means the defaults.
type Options struct {
	// Timeout bounds how long Open waits for the file lock held by another
	// process. Zero means 5 seconds; a negative value waits forever.
	Timeout time.Duration
	// Mode is the permission of a newly created file. Zero means 0600.
	Mode os.FileMode
	// CommitEachUpdate commits every Update in a transaction of its own
	// instead of grouping concurrent ones (see Group commit).
	CommitEachUpdate bool
	// MaxBatch bounds how many Update calls one commit groups. Zero means
	// 256.
	MaxBatch int
	// NoSync skips the fsync of every commit. A crash (of the machine, not
	// only the process) can then lose commits that Update acknowledged, or
	// corrupt the file: it is for bulk loads that can be redone and for
	// benchmarks measuring CPU cost, never for work that must not be lost.
	NoSync bool
}

// Store is a bbolt-backed store.
type Store struct {
	db    *bbolt.DB
	each  bool
	group *group.Committer
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the bbolt file at path.
func Open(path string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	} else if o.Timeout < 0 {
		o.Timeout = 0 // bbolt: wait forever
	}
	if o.Mode == 0 {
		o.Mode = 0o600
	}
	db, err := bbolt.Open(path, o.Mode, &bbolt.Options{Timeout: o.Timeout, NoSync: o.NoSync})
	if err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	st := &Store{db: db, each: o.CommitEachUpdate}
	st.group = group.New(group.Config{Name: "bolt", MaxBatch: o.MaxBatch}, func(_ context.Context, fn func(store.Tx) error) error {
		return st.db.Update(func(btx *bbolt.Tx) error { return fn(&tx{btx: btx}) })
	})
	return st, nil
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.db.Path() }

// View runs fn in a bbolt read-only transaction.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bolt: view: %w", err)
	}
	return mapErr(s.db.View(func(btx *bbolt.Tx) error { return fn(&tx{btx: btx}) }))
}

// Update runs fn in a read-write transaction — grouped with concurrent
// Updates, see Group commit — and returns after fn's writes are durable, or
// fn's error with nothing written. A panic in fn is re-raised in the caller's
// goroutine, with nothing written.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bolt: update: %w", err)
	}
	if s.each {
		return mapErr(s.db.Update(func(btx *bbolt.Tx) error { return fn(&tx{btx: btx}) }))
	}
	return mapErr(s.group.Update(ctx, fn))
}

// Close closes the file, waiting for transactions in flight.
func (s *Store) Close() error { return s.db.Close() }

func mapErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w (%v)", store.ErrClosed, err)
	}
	if errors.Is(err, berrors.ErrTxNotWritable) {
		return fmt.Errorf("%w (%v)", store.ErrReadOnly, err)
	}
	return err
}

type tx struct{ btx *bbolt.Tx }

func (t *tx) Get(table string, key []byte) ([]byte, error) {
	b := t.btx.Bucket([]byte(table))
	if b == nil {
		return nil, store.ErrNotFound
	}
	v := b.Get(key)
	if v == nil {
		return nil, store.ErrNotFound
	}
	return bytes.Clone(v), nil
}

func (t *tx) Put(table string, key, value []byte) error {
	// bbolt keeps references until commit; hand it private copies.
	v := make([]byte, len(value))
	copy(v, value)
	return t.PutOwned(table, bytes.Clone(key), v)
}

// PutOwned is Put for a key and value nobody touches again (an overlay
// applying its buffers, see overlay.Owner): bbolt keeps them as they are.
func (t *tx) PutOwned(table string, key, value []byte) error {
	if !t.btx.Writable() {
		return store.ErrReadOnly
	}
	if len(key) == 0 {
		return store.ErrEmptyKey
	}
	b, err := t.btx.CreateBucketIfNotExists([]byte(table))
	if err != nil {
		return fmt.Errorf("bolt: table %q: %w", table, err)
	}
	return b.Put(key, value)
}

func (t *tx) Delete(table string, key []byte) error {
	if !t.btx.Writable() {
		return store.ErrReadOnly
	}
	b := t.btx.Bucket([]byte(table))
	if b == nil {
		return nil
	}
	return b.Delete(key)
}

func (t *tx) Scan(table string, start, end []byte, fn func(k, v []byte) bool) error {
	b := t.btx.Bucket([]byte(table))
	if b == nil {
		return nil
	}
	c := b.Cursor()
	var k, v []byte
	if start == nil {
		k, v = c.First()
	} else {
		k, v = c.Seek(start)
	}
	for ; k != nil; k, v = c.Next() {
		if end != nil && bytes.Compare(k, end) >= 0 {
			return nil
		}
		if v == nil {
			continue // nested bucket; switchboard never creates one
		}
		if !fn(bytes.Clone(k), bytes.Clone(v)) {
			return nil
		}
	}
	return nil
}
