// Package memory is an in-memory switchboard store, for tests and for
// embedding where durability is not wanted.
//
// It keeps each table as a sorted slice of keys and holds a single lock: one
// writer or many readers at a time. Update writes into a private overlay that
// is merged on commit, so an error or panic in fn discards it untouched.
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

// Update runs fn under the write lock and commits its overlay iff fn
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
	t := &tx{s: s, writable: true, overlay: make(map[string]map[string][]byte)}
	if err := fn(t); err != nil {
		return err
	}
	t.commit()
	return nil
}

// Close marks the store closed; later calls return store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

type tx struct {
	s        *Store
	writable bool
	// overlay holds this transaction's writes; a nil value is a deletion.
	overlay map[string]map[string][]byte
}

func (t *tx) Get(tbl string, key []byte) ([]byte, error) {
	if ov, ok := t.overlay[tbl]; ok {
		if v, ok := ov[string(key)]; ok {
			if v == nil {
				return nil, store.ErrNotFound
			}
			return bytes.Clone(v), nil
		}
	}
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
	ov := t.overlay[tbl]
	if ov == nil {
		ov = make(map[string][]byte)
		t.overlay[tbl] = ov
	}
	v := make([]byte, len(value)) // non-nil even when empty: nil marks deletion
	copy(v, value)
	ov[string(key)] = v
	return nil
}

func (t *tx) Delete(tbl string, key []byte) error {
	if !t.writable {
		return store.ErrReadOnly
	}
	ov := t.overlay[tbl]
	if ov == nil {
		ov = make(map[string][]byte)
		t.overlay[tbl] = ov
	}
	ov[string(key)] = nil
	return nil
}

func inRange(k string, start, end []byte) bool {
	return (start == nil || k >= string(start)) && (end == nil || k < string(end))
}

func (t *tx) Scan(tbl string, start, end []byte, fn func(k, v []byte) bool) error {
	var base []string
	var vals map[string][]byte
	if tb := t.s.tables[tbl]; tb != nil {
		lo := 0
		if start != nil {
			lo = sort.SearchStrings(tb.keys, string(start))
		}
		hi := len(tb.keys)
		if end != nil {
			hi = sort.SearchStrings(tb.keys, string(end))
		}
		if lo < hi {
			base = tb.keys[lo:hi]
		}
		vals = tb.vals
	}
	ov := t.overlay[tbl]
	var extra []string
	for k := range ov {
		if inRange(k, start, end) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	// Merge the committed keys with the overlay's, the overlay winning.
	i, j := 0, 0
	for i < len(base) || j < len(extra) {
		var k string
		var v []byte
		switch {
		case j >= len(extra) || (i < len(base) && base[i] < extra[j]):
			k = base[i]
			i++
			if ov != nil {
				if _, shadowed := ov[k]; shadowed {
					continue // the overlay entry is visited in key order
				}
			}
			v = vals[k]
		default:
			k = extra[j]
			j++
			if i < len(base) && base[i] == k {
				i++
			}
			v = ov[k]
			if v == nil {
				continue // deleted in this transaction
			}
		}
		if !fn([]byte(k), bytes.Clone(v)) {
			return nil
		}
	}
	return nil
}

// commit applies the overlay. Keys are inserted and removed by binary search,
// so a commit costs O(k log n) comparisons plus the slice moves.
func (t *tx) commit() {
	for name, ov := range t.overlay {
		tb := t.s.tables[name]
		if tb == nil {
			tb = &table{vals: make(map[string][]byte)}
			t.s.tables[name] = tb
		}
		for k, v := range ov {
			_, exists := tb.vals[k]
			switch {
			case v == nil && exists:
				delete(tb.vals, k)
				i := sort.SearchStrings(tb.keys, k)
				tb.keys = slices.Delete(tb.keys, i, i+1)
			case v != nil:
				if !exists {
					i := sort.SearchStrings(tb.keys, k)
					tb.keys = slices.Insert(tb.keys, i, k)
				}
				tb.vals[k] = v
			}
		}
	}
}
