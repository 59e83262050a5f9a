// Package memory is an in-memory switchboard store, for tests and for
// embedding where durability is not wanted.
//
// It keeps each table as a sorted slice of keys and holds a single lock: one
// writer or many readers at a time. Update writes into a private overlay that
// is applied on commit, so an error or panic in fn discards it untouched.
// Keys and values are copied in and out.
package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/internal/overlay"
)

// Store is an in-memory store. The zero value is not usable; call New.
type Store struct {
	mu     sync.RWMutex
	tables map[string]*table
	closed bool
}

var _ store.Store = (*Store)(nil)

type table struct {
	keys []string // sorted
	vals map[string][]byte
}

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
	ov := overlay.New(&tx{s: s})
	if err := fn(ov); err != nil {
		return err
	}
	return ov.Apply(&tx{s: s, writable: true})
}

// Close marks the store closed; later calls return store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// tx reads the tables directly; a writable one (used only to apply an
// overlay) writes them directly too, keeping keys sorted by binary search.
type tx struct {
	s        *Store
	writable bool
}

func (t *tx) Get(tbl string, key []byte) ([]byte, error) {
	if tb := t.s.tables[tbl]; tb != nil {
		if v, ok := tb.vals[string(key)]; ok {
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
		tb = &table{vals: make(map[string][]byte)}
		t.s.tables[tbl] = tb
	}
	k := string(key)
	if _, exists := tb.vals[k]; !exists {
		i := sort.SearchStrings(tb.keys, k)
		tb.keys = slices.Insert(tb.keys, i, k)
	}
	tb.vals[k] = bytes.Clone(value)
	return nil
}

func (t *tx) Delete(tbl string, key []byte) error {
	if !t.writable {
		return store.ErrReadOnly
	}
	tb := t.s.tables[tbl]
	if tb == nil {
		return nil
	}
	k := string(key)
	if _, exists := tb.vals[k]; exists {
		delete(tb.vals, k)
		i := sort.SearchStrings(tb.keys, k)
		tb.keys = slices.Delete(tb.keys, i, i+1)
	}
	return nil
}

func (t *tx) Scan(tbl string, start, end []byte, fn func(k, v []byte) bool) error {
	tb := t.s.tables[tbl]
	if tb == nil {
		return nil
	}
	lo, hi := 0, len(tb.keys)
	if start != nil {
		lo = sort.SearchStrings(tb.keys, string(start))
	}
	if end != nil {
		hi = sort.SearchStrings(tb.keys, string(end))
	}
	for _, k := range tb.keys[lo:max(lo, hi)] {
		if !fn([]byte(k), bytes.Clone(tb.vals[k])) {
			return nil
		}
	}
	return nil
}
