// Package overlay buffers one transaction's writes over a base store.Tx, so
// that a function can run against a shared write transaction and be undone
// alone: its reads see the base plus its own writes, and nothing reaches the
// base until Apply.
package overlay

import (
	"bytes"
	"errors"
	"slices"

	"github.com/switchboardhq/switchboard/store"
)

// Tx is a store.Tx whose writes are buffered until Apply.
type Tx struct {
	base store.Tx
	// writes per table; a nil value is a deletion.
	writes map[string]map[string][]byte
	// notes are the keys passed to Notify, in order, without repeats.
	notes []string
	// appends are the values passed to Append, in order.
	appends []appended
	// inserted are the keys last written by Insert.
	inserted map[string]map[string]bool // table → key: per table, so a write to a table without inserts hashes no key
	// later is how many functions of its batch run after this overlay's
	// (store.Grouped).
	later int
}

type appended struct {
	table string
	value []byte
}

var (
	_ store.Tx       = (*Tx)(nil)
	_ store.Inserter = (*Tx)(nil)
	_ store.Grouped  = (*Tx)(nil)
)

// New returns an overlay over base.
func New(base store.Tx) *Tx { return &Tx{base: base, writes: map[string]map[string][]byte{}} }

// SetLater records how many functions of a group-commit batch run after
// the one this overlay is handed to: what Later returns.
func (t *Tx) SetLater(n int) { t.later = n }

// Later is store.Grouped's: every overlay, and every Tx Exposed returns,
// answers it (zero outside a batch).
func (t *Tx) Later() int { return t.later }

// Get returns the overlay's value for key, else the base's.
func (t *Tx) Get(table string, key []byte) ([]byte, error) {
	if v, ok := t.writes[table][string(key)]; ok {
		if v == nil {
			return nil, store.ErrNotFound
		}
		return bytes.Clone(v), nil
	}
	return t.base.Get(table, key)
}

func (t *Tx) set(table string, key, v []byte) {
	if m := t.inserted[table]; m != nil {
		delete(m, string(key))
	}
	w := t.writes[table]
	if w == nil {
		w = map[string][]byte{}
		t.writes[table] = w
	}
	w[string(key)] = v
}

// Put buffers a write.
func (t *Tx) Put(table string, key, value []byte) error {
	if len(key) == 0 {
		return store.ErrEmptyKey
	}
	v := make([]byte, len(value)) // non-nil even when empty: nil marks deletion
	copy(v, value)
	t.set(table, key, v)
	return nil
}

// Insert buffers a write of a key the caller knows is new
// (store.Inserter): Apply passes it on as an Insert where its destination
// takes one, else as a Put. Every overlay offers it, whatever its base
// (unlike the capabilities Exposed offers only when the base has them):
// an Insert taken as a Put is a correct Insert. Two functions of one
// group-commit batch that insert one key leave the last one's row, as
// two Puts would. An Insert of a key the overlay has written before — put
// it, or deleted it (so the row may be in the base) — is a Put.
func (t *Tx) Insert(table string, key, value []byte) error {
	_, written := t.writes[table][string(key)]
	if err := t.Put(table, key, value); err != nil || written {
		return err
	}
	if t.inserted == nil {
		t.inserted = map[string]map[string]bool{}
	}
	m := t.inserted[table]
	if m == nil {
		m = map[string]bool{}
		t.inserted[table] = m
	}
	m[string(key)] = true
	return nil
}

// Delete buffers a deletion.
func (t *Tx) Delete(table string, key []byte) error {
	t.set(table, key, nil)
	return nil
}

// Scan merges the base's keys in [start, end) with the overlay's, in key
// order, the overlay winning.
func (t *Tx) Scan(table string, start, end []byte, fn func(k, v []byte) bool) error {
	return t.merge(table, start, end, fn, t.base.Scan)
}

// merge runs scan over the base and merges its keys with the overlay's.
func (t *Tx) merge(table string, start, end []byte, fn func(k, v []byte) bool, scan func(string, []byte, []byte, func(k, v []byte) bool) error) error {
	w := t.writes[table]
	if len(w) == 0 {
		return scan(table, start, end, fn) // nothing of the overlay's to merge in
	}
	var mine []string
	for k := range w {
		if (start == nil || k >= string(start)) && (end == nil || k < string(end)) {
			mine = append(mine, k)
		}
	}
	slices.Sort(mine)
	i, stopped := 0, false
	// emit sends the overlay's keys below limit (all of them if limit is
	// nil); it reports whether to go on.
	emit := func(limit []byte) bool {
		for ; i < len(mine) && (limit == nil || mine[i] < string(limit)); i++ {
			if v := w[mine[i]]; v != nil && !fn([]byte(mine[i]), bytes.Clone(v)) {
				i++
				return false
			}
		}
		return true
	}
	err := scan(table, start, end, func(k, v []byte) bool {
		if !emit(k) {
			stopped = true
			return false
		}
		if i < len(mine) && mine[i] == string(k) {
			ov := w[mine[i]]
			i++
			if ov == nil {
				return true // deleted here
			}
			v = bytes.Clone(ov)
		}
		if !fn(k, v) {
			stopped = true
			return false
		}
		return true
	})
	if err != nil || stopped {
		return err
	}
	emit(nil)
	return nil
}

// Exposed returns the Tx to hand a function: t itself, or t with the
// optional capabilities of the base — a Prefetch (and PrefetchScan) that
// passes hints on (store.Prefetcher), an Append buffered until Apply and a
// Sequence that asks the base (store.Appender), locked reads merged with
// the overlay's writes (store.Locker) and LockAhead (store.AheadLocker) —
// so a function sees a capability exactly when it does something.
func (t *Tx) Exposed() store.Tx {
	p, isP := t.base.(store.Prefetcher)
	a, isA := t.base.(store.Appender)
	l, isL := t.base.(store.Locker)
	al, isAL := t.base.(store.AheadLocker)
	switch {
	case isP && isA && isL && isAL:
		return lockingAheadTx{lockingTx{prefetchAppendTx{prefetchTx{t, p}, a}, l}, al}
	case isP && isA && isL:
		return lockingTx{prefetchAppendTx{prefetchTx{t, p}, a}, l}
	case isP && isA:
		return prefetchAppendTx{prefetchTx{t, p}, a}
	case isP:
		return prefetchTx{t, p}
	case isA:
		return appendTx{t, a}
	}
	return t
}

type prefetchTx struct {
	*Tx
	p store.Prefetcher
}

func (t prefetchTx) Prefetch(table string, keys [][]byte) error { return t.p.Prefetch(table, keys) }

// PrefetchScan passes the hint on if the base takes it (it changes no
// result, so dropping it is correct too).
func (t prefetchTx) PrefetchScan(table string, start []byte, limit int) error {
	if sp, ok := t.p.(store.ScanPrefetcher); ok {
		return sp.PrefetchScan(table, start, limit)
	}
	return nil
}

// PrefetchValues passes the hint on if the base takes it (it changes no
// result, so dropping it is correct too).
func (t prefetchTx) PrefetchValues(table string, start []byte, target string) error {
	if vp, ok := t.p.(store.ValuePrefetcher); ok {
		return vp.PrefetchValues(table, start, target)
	}
	return nil
}

type appendTx struct {
	*Tx
	a store.Appender
}

func (t appendTx) Append(table string, value []byte) error { return t.append(table, value) }
func (t appendTx) Sequence() (uint64, error)               { return t.a.Sequence() }

type prefetchAppendTx struct {
	prefetchTx
	a store.Appender
}

func (t prefetchAppendTx) Append(table string, value []byte) error { return t.append(table, value) }
func (t prefetchAppendTx) Sequence() (uint64, error)               { return t.a.Sequence() }

// lockingTx adds the base's store.Locker, its reads merged with the
// overlay's writes as Get and Scan merge them.
type lockingTx struct {
	prefetchAppendTx
	l store.Locker
}

// GetLocked returns the overlay's value for key, which this transaction
// wrote (the write takes the row's lock at commit), else locks and reads
// the base's.
func (t lockingTx) GetLocked(table string, key []byte) ([]byte, error) {
	if v, ok := t.writes[table][string(key)]; ok {
		if v == nil {
			return nil, store.ErrNotFound
		}
		return bytes.Clone(v), nil
	}
	return t.l.GetLocked(table, key)
}

// ScanLatest is store.LatestScanner's: the base's latest rows (a plain
// Scan where the base's locked reads offer nothing fresher) merged with
// the overlay's writes, so rows this transaction deleted stay hidden.
func (t lockingTx) ScanLatest(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	scan := t.base.Scan
	if ls, ok := t.l.(store.LatestScanner); ok {
		// As for ScanLocked: the base returns the rows this
		// transaction deleted too, so it is asked for that many more.
		baseLimit := limit
		if limit > 0 {
			for k, v := range t.writes[table] {
				if v == nil && (start == nil || k >= string(start)) && (end == nil || k < string(end)) {
					baseLimit++
				}
			}
		}
		scan = func(table string, start, end []byte, fn func(k, v []byte) bool) error {
			return ls.ScanLatest(table, start, end, baseLimit, fn)
		}
	}
	n := 0
	return t.merge(table, start, end, func(k, v []byte) bool {
		n++
		return fn(k, v) && (limit <= 0 || n < limit)
	}, scan)
}

// lockingAheadTx adds the base's store.AheadLocker: the overlay's writes
// take their rows' locks at commit anyway.
type lockingAheadTx struct {
	lockingTx
	al store.AheadLocker
}

func (t lockingAheadTx) LockAhead(table string, keys [][]byte) error {
	return t.al.LockAhead(table, keys)
}

// ScanLocked merges the base's locked rows with the overlay's writes, and
// returns at most limit of them. The base is asked for limit rows beyond
// those this transaction deleted in the range (which it would return
// again: its own locks do not hide them), so when it stops at its limit,
// at least limit merged rows come before the last row it returned: the
// overlay's keys past that row, which committed rows it did not return may
// precede, are never reached.
func (t lockingTx) ScanLocked(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	baseLimit := limit
	if limit > 0 {
		for k, v := range t.writes[table] {
			if v == nil && (start == nil || k >= string(start)) && (end == nil || k < string(end)) {
				baseLimit++
			}
		}
		n, each := 0, fn
		fn = func(k, v []byte) bool {
			n++
			return each(k, v) && n < limit
		}
	}
	return t.merge(table, start, end, fn, func(table string, start, end []byte, fn func(k, v []byte) bool) error {
		return t.l.ScanLocked(table, start, end, baseLimit, fn)
	})
}

// append buffers an Append until Apply.
func (t *Tx) append(table string, value []byte) error {
	t.appends = append(t.appends, appended{table, bytes.Clone(value)})
	return nil
}

// Notify buffers a notification (see store.Notifier) until Apply.
func (t *Tx) Notify(key string) {
	if !slices.Contains(t.notes, key) {
		t.notes = append(t.notes, key)
	}
}

// Owner is a store.Tx that can take the key and value of a Put as they are,
// without copying them: the caller promises never to touch either again.
// Apply hands its buffers to an Owner that way, since the overlay is done
// with them.
type Owner interface {
	PutOwned(table string, key, value []byte) error
}

// Apply writes the buffered writes to dst, in table and key order, passes
// the buffered notifications on if dst is a store.Notifier, and the
// buffered appends, in order, to dst's Append. The
// overlay must not be used after Apply.
func (t *Tx) Apply(dst store.Tx) error {
	put := dst.Put
	if o, ok := dst.(Owner); ok {
		put = o.PutOwned
	}
	insert := put
	if ins, ok := dst.(store.Inserter); ok {
		insert = ins.Insert
	}
	if n, ok := dst.(store.Notifier); ok {
		for _, k := range t.notes {
			n.Notify(k)
		}
	}
	if len(t.appends) > 0 {
		a, ok := dst.(store.Appender)
		if !ok {
			return errors.New("overlay: Append on a transaction that cannot append")
		}
		for _, w := range t.appends {
			if err := a.Append(w.table, w.value); err != nil {
				return err
			}
		}
	}
	tables := make([]string, 0, len(t.writes))
	for name := range t.writes {
		tables = append(tables, name)
	}
	slices.Sort(tables)
	for _, name := range tables {
		w := t.writes[name]
		ins := t.inserted[name]
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			var err error
			switch v := w[k]; {
			case v == nil:
				err = dst.Delete(name, []byte(k))
			case ins[k]:
				err = insert(name, []byte(k), v)
			default:
				err = put(name, []byte(k), v)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}
