// Package memory is an in-memory switchboard store, for tests and for
// embedding where durability is not wanted.
//
// It keeps each table as a B-tree (github.com/google/btree: O(log n) inserts
// and ordered range scans) and holds a single lock: one writer or many
// readers at a time. Update writes straight into the tables under the write
// lock and keeps an undo log, replayed backwards if fn returns an error or
// panics, so a failed Update leaves nothing behind and readers (who wait
// for the lock) never see a half-done one. Keys and values are copied in
// and out.
package memory

import (
	"bytes"
	"context"
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
}

var _ store.Store = (*Store)(nil)

// table is one table's keys in order; an item owns its copies.
type table = btree.BTreeG[item]

type item struct {
	k string
	v []byte
}

func less(a, b item) bool { return a.k < b.k }

// New returns an empty in-memory store.
func New() *Store {
	return &Store{tables: make(map[string]*table)}
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
	t := &tx{s: s, writable: true}
	done := false
	defer func() {
		if !done { // fn failed or panicked: undo, newest first
			t.rollback()
		}
	}()
	if err := fn(t); err != nil {
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

// remember logs key's current value before a write.
func (t *tx) remember(name string, tb *table, key string) {
	it, ok := tb.Get(item{k: key})
	t.undo = append(t.undo, undo{table: name, key: key, old: it.v, existed: ok})
}

func (t *tx) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		tb := t.s.tables[u.table]
		if u.existed {
			tb.ReplaceOrInsert(item{k: u.key, v: u.old})
		} else {
			tb.Delete(item{k: u.key})
		}
	}
	t.undo = nil
}

func (t *tx) Get(tbl string, key []byte) ([]byte, error) {
	if tb := t.s.tables[tbl]; tb != nil {
		if it, ok := tb.Get(item{k: string(key)}); ok {
			return bytes.Clone(it.v), nil
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
		tb = btree.NewG(32, less)
		t.s.tables[tbl] = tb
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	t.remember(tbl, tb, string(key))
	tb.ReplaceOrInsert(item{k: string(key), v: v})
	return nil
}

func (t *tx) Delete(tbl string, key []byte) error {
	if !t.writable {
		return store.ErrReadOnly
	}
	if tb := t.s.tables[tbl]; tb != nil {
		if _, ok := tb.Get(item{k: string(key)}); ok {
			t.remember(tbl, tb, string(key))
			tb.Delete(item{k: string(key)})
		}
	}
	return nil
}

func (t *tx) Scan(tbl string, start, end []byte, fn func(k, v []byte) bool) error {
	tb := t.s.tables[tbl]
	if tb == nil {
		return nil
	}
	visit := func(it item) bool { return fn([]byte(it.k), bytes.Clone(it.v)) }
	switch {
	case start == nil && end == nil:
		tb.Ascend(visit)
	case start == nil:
		tb.AscendLessThan(item{k: string(end)}, visit)
	case end == nil:
		tb.AscendGreaterOrEqual(item{k: string(start)}, visit)
	case string(start) < string(end):
		tb.AscendRange(item{k: string(start)}, item{k: string(end)}, visit)
	}
	return nil
}
