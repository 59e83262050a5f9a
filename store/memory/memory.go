// Package memory is an in-memory switchboard store, for tests and for
// embedding where durability is not wanted.
//
// It keeps each table as a B-tree (github.com/google/btree: O(log n) inserts
// and ordered range scans) beside a map for point reads, and holds a single lock: one writer or many
// readers at a time. Update writes straight into the tables under the write
// lock and keeps an undo log, replayed backwards if fn returns an error or
// panics, so a failed Update leaves nothing behind and readers (who wait
// for the lock) never see a half-done one. Keys and values are copied in
// and out.
package memory

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/google/btree"

	"github.com/switchboardhq/switchboard/store"
)

// Store is an in-memory store. The zero value is not usable; call New.
type Store struct {
	mu     sync.RWMutex
	tables map[string]*table
	closed bool
	opts   Options
	// appended and sequenced are the last key Append assigned and the
	// last number Sequence returned (under mu's write lock).
	appended, sequenced uint64
}

// Options configures NewWithOptions.
type Options struct {
	// Appender makes the write transactions offer store.Appender, as a
	// store whose writers run concurrently does (the PostgreSQL store), so
	// that tests run switchboard's code paths for such stores — audit
	// events sequenced after commit — without a database server.
	Appender bool
}

var _ store.Store = (*Store)(nil)

// table is one table's keys in order, and by key for Get: the tree and the
// map hold the same items (an item owns its copies; the two share them).
type table struct {
	tree  *btree.BTreeG[item]
	byKey map[string][]byte
}

func newTable() *table { return &table{tree: btree.NewG(32, less), byKey: map[string][]byte{}} }

// set stores v under k and returns what was there.
func (tb *table) set(k string, v []byte) (old []byte, existed bool) {
	prev, existed := tb.tree.ReplaceOrInsert(item{k: k, v: v})
	tb.byKey[k] = v
	return prev.v, existed
}

func (tb *table) remove(k string) {
	tb.tree.Delete(item{k: k})
	delete(tb.byKey, k)
}

type item struct {
	k string
	v []byte
}

func less(a, b item) bool { return a.k < b.k }

// New returns an empty in-memory store.
func New() *Store {
	return &Store{tables: make(map[string]*table)}
}

// NewWithOptions returns an empty in-memory store configured by o.
func NewWithOptions(o Options) *Store {
	return &Store{tables: make(map[string]*table), opts: o}
}

// View runs fn over a consistent snapshot (readers hold a shared lock).
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: view: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	if s.opts.Appender {
		return fn(appendingTx{&tx{s: s}})
	}
	return fn(&tx{s: s})
}

// Update runs fn under the write lock and applies its overlay iff fn
// returns nil.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: update: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	t := &tx{s: s, writable: true, undo: make([]undo, 0, 16)}
	done := false
	defer func() {
		if !done { // fn failed or panicked: undo, newest first
			t.rollback()
		}
	}()
	var ftx store.Tx = t
	if s.opts.Appender {
		ftx = appendingTx{t}
	}
	if err := fn(ftx); err != nil {
		return err
	}
	done = true
	return nil
}

// Close marks the store closed; later calls return store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// tx reads and writes the tables directly; a writable one (an Update's)
// logs what each write replaced.
type tx struct {
	s        *Store
	writable bool
	undo     []undo
}

// undo restores one key of one table: to old, or to absent.
type undo struct {
	table, key string
	old        []byte
	existed    bool
}

func (t *tx) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		tb := t.s.tables[u.table]
		if u.existed {
			tb.set(u.key, u.old)
		} else {
			tb.remove(u.key)
		}
	}
	t.undo = nil
}

func (t *tx) Get(tbl string, key []byte) ([]byte, error) {
	if tb := t.s.tables[tbl]; tb != nil {
		if v, ok := tb.byKey[string(key)]; ok {
			return bytes.Clone(v), nil
		}
	}
	return nil, store.ErrNotFound
}

func (t *tx) Put(tbl string, key, value []byte) error {
	if !t.writable {
		return store.ErrReadOnly
	}
	if len(key) == 0 {
		return store.ErrEmptyKey
	}
	tb := t.s.tables[tbl]
	if tb == nil {
		tb = newTable()
		t.s.tables[tbl] = tb
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	k := string(key)
	old, existed := tb.set(k, v)
	t.undo = append(t.undo, undo{table: tbl, key: k, old: old, existed: existed})
	return nil
}

func (t *tx) Delete(tbl string, key []byte) error {
	if !t.writable {
		return store.ErrReadOnly
	}
	if tb := t.s.tables[tbl]; tb != nil {
		k := string(key)
		if old, ok := tb.byKey[k]; ok {
			t.undo = append(t.undo, undo{table: tbl, key: k, old: old, existed: true})
			tb.remove(k)
		}
	}
	return nil
}

// appendingTx is the tx of a store with Options.Appender. An Update holds
// the write lock for its whole transaction, so a key taken at Append is
// larger than every key of the transactions that committed before.
type appendingTx struct{ *tx }

func (t appendingTx) Append(tbl string, value []byte) error {
	if !t.writable {
		return store.ErrReadOnly
	}
	t.s.appended++
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], t.s.appended)
	return t.Put(tbl, k[:], value)
}

func (t appendingTx) Sequence() (uint64, error) {
	if !t.writable {
		return 0, store.ErrReadOnly
	}
	t.s.sequenced++
	return t.s.sequenced, nil
}

func (t *tx) Scan(tbl string, start, end []byte, fn func(k, v []byte) bool) error {
	tb := t.s.tables[tbl]
	if tb == nil {
		return nil
	}
	tree := tb.tree
	visit := func(it item) bool { return fn([]byte(it.k), bytes.Clone(it.v)) }
	switch {
	case start == nil && end == nil:
		tree.Ascend(visit)
	case start == nil:
		tree.AscendLessThan(item{k: string(end)}, visit)
	case end == nil:
		tree.AscendGreaterOrEqual(item{k: string(start)}, visit)
	case string(start) < string(end):
		tree.AscendRange(item{k: string(start)}, item{k: string(end)}, visit)
	}
	return nil
}
