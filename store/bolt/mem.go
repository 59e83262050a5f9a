package bolt

// The writes logged but not yet checkpointed into the bbolt file live in an
// ordered in-memory tree, and every transaction reads that tree over a bbolt
// read transaction: the tree's entry for a key, when there is one, wins.
//
// Trees are copy-on-write (btree.Clone is O(1) and shares nodes until one
// side writes): a commit works on a clone of the writer's tree and, once
// logged, publishes a clone of the result for readers, so a reader's tree
// never changes under it.

import (
	"bytes"
	"fmt"
	"runtime/debug"

	"github.com/google/btree"
	bbolt "go.etcd.io/bbolt"

	"github.com/switchboardhq/switchboard/store"
)

// item is a key's newest write not yet in the bbolt file.
type item struct {
	table string
	key   string
	val   []byte // never nil for a put; never changed once in a tree
	del   bool
}

type tree = btree.BTreeG[*item]

func itemLess(a, b *item) bool {
	if a.table != b.table {
		return a.table < b.table
	}
	return a.key < b.key
}

func newTree() *tree { return btree.NewG(32, itemLess) }

// walTable is the bbolt bucket holding the LSN of the last record
// checkpointed. No store table can be named so (see checkTable).
const walTable = "\x00bolt-wal"

var appliedKey = []byte("applied")

// tx is a store.Tx over a bbolt read transaction and the trees of writes
// not yet in it: mem, and under it (while a checkpoint applies it) frozen.
// An entry of mem wins over one of frozen, which wins over the bbolt file's.
// A writable tx (log non-nil) puts into mem and encodes each write onto
// log.
type tx struct {
	btx    *bbolt.Tx
	mem    *tree
	frozen *tree // nil when no checkpoint is running
	log    *pending
	// buckets are the bbolt buckets this transaction opened, by table
	// (bbolt allocates a bucket on every Tx.Bucket of a read transaction).
	buckets [6]openBucket
}

type openBucket struct {
	table string
	b     *bbolt.Bucket // nil: the file has no such table
}

// bucket is t.btx.Bucket(table), opened once per transaction for the
// first few tables it reads.
func (t *tx) bucket(table string) *bbolt.Bucket {
	for i := range t.buckets {
		switch o := &t.buckets[i]; {
		case o.table == table:
			return o.b
		case o.table == "":
			o.table, o.b = table, t.btx.Bucket([]byte(table))
			return o.b
		}
	}
	return t.btx.Bucket([]byte(table))
}

// pending is what a write transaction has logged so far.
type pending struct {
	ops  []byte // encoded operations (see appendOp)
	n    int    // number of operations
	dels int    // of which deletions
}

func (t *tx) Get(table string, key []byte) ([]byte, error) {
	pivot := &item{table: table, key: string(key)}
	it, ok := t.mem.Get(pivot)
	if !ok && t.frozen != nil {
		it, ok = t.frozen.Get(pivot)
	}
	if ok {
		if it.del {
			return nil, store.ErrNotFound
		}
		return bytes.Clone(it.val), nil
	}
	return t.baseGet(table, key)
}

// baseGet reads key from the bbolt file; a damaged page is ErrDamaged.
func (t *tx) baseGet(table string, key []byte) (v []byte, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = faulted(r, t.btx.DB().Path(), t.btx.DB().Info().Data, true)
		}
	}()
	b := t.bucket(table)
	if b == nil {
		return nil, store.ErrNotFound
	}
	v = b.Get(key)
	if v == nil {
		return nil, store.ErrNotFound
	}
	return bytes.Clone(v), nil
}

// checkWrite refuses what a checkpoint could not apply to bbolt later: an
// acknowledged write must always fit.
func (t *tx) checkWrite(table string, key []byte) error {
	if t.log == nil {
		return store.ErrReadOnly
	}
	if len(key) == 0 {
		return store.ErrEmptyKey
	}
	if len(key) > bbolt.MaxKeySize {
		return fmt.Errorf("bolt: key of %d bytes in %q is over bbolt's limit of %d", len(key), table, bbolt.MaxKeySize)
	}
	if table == "" || len(table) > bbolt.MaxKeySize || table == walTable {
		return fmt.Errorf("bolt: table name %q not allowed", table)
	}
	return nil
}

func (t *tx) Put(table string, key, value []byte) error {
	return t.PutOwned(table, bytes.Clone(key), bytes.Clone(value))
}

// PutOwned is Put for a key and value nobody touches again (an overlay
// applying its buffers, see overlay.Owner): they are kept as they are.
func (t *tx) PutOwned(table string, key, value []byte) error {
	if err := t.checkWrite(table, key); err != nil {
		return err
	}
	if len(value) > bbolt.MaxValueSize {
		return fmt.Errorf("bolt: value of %d bytes is over bbolt's limit of %d", len(value), bbolt.MaxValueSize)
	}
	if value == nil {
		value = []byte{}
	}
	t.mem.ReplaceOrInsert(&item{table: table, key: string(key), val: value})
	t.log.ops = appendOp(t.log.ops, false, table, key, value)
	t.log.n++
	return nil
}

func (t *tx) Delete(table string, key []byte) error {
	if t.log == nil {
		return store.ErrReadOnly
	}
	if len(key) == 0 || len(key) > bbolt.MaxKeySize || table == "" || len(table) > bbolt.MaxKeySize || table == walTable {
		return nil // nothing can be stored there
	}
	t.mem.ReplaceOrInsert(&item{table: table, key: string(key), del: true})
	t.log.ops = appendOp(t.log.ops, true, table, key, nil)
	t.log.n++
	t.log.dels++
	return nil
}

// Scan merges the keys in [start, end) of mem, frozen and the bbolt
// bucket, in key order, the first of them to hold a key giving its value
// (or hiding it, for a deletion).
//
// A read of a damaged page of the bbolt file that faults is ErrDamaged.
func (t *tx) Scan(table string, start, end []byte, fn func(k, v []byte) bool) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if err = faulted(r, t.btx.DB().Path(), t.btx.DB().Info().Data, false); err == nil {
				panic(r) // fn's own
			}
		}
	}()
	top := newTreeSource(t.mem, table, start, end)
	var mid *treeSource
	if t.frozen != nil {
		mid = newTreeSource(t.frozen, table, start, end)
	}
	var c *bbolt.Cursor
	var k, v []byte
	if b := t.bucket(table); b != nil {
		c = b.Cursor()
		if start == nil {
			k, v = c.First()
		} else {
			k, v = c.Seek(start)
		}
	}
	nextBase := func() {
		for k, v = c.Next(); k != nil && v == nil; k, v = c.Next() {
			// a nested bucket; no store table has any
		}
	}
	if k != nil && v == nil {
		nextBase()
	}
	if k != nil && end != nil && bytes.Compare(k, end) >= 0 {
		k = nil
	}
	for {
		ti, mi := top.peek(), mid.peek()
		// The smallest key of the three, and which of them hold it.
		var least string
		have := false
		for _, it := range [2]*item{ti, mi} {
			if it != nil && (!have || it.key < least) {
				least, have = it.key, true
			}
		}
		if k != nil && (!have || string(k) < least) {
			if !fn(bytes.Clone(k), bytes.Clone(v)) {
				return nil
			}
			nextBase()
			if k != nil && end != nil && bytes.Compare(k, end) >= 0 {
				k = nil
			}
			continue
		}
		if !have {
			return nil
		}
		var win *item
		if ti != nil && ti.key == least {
			win = ti
			top.advance()
		}
		if mi != nil && mi.key == least {
			if win == nil {
				win = mi
			}
			mid.advance()
		}
		if k != nil && string(k) == least {
			nextBase() // shadowed
			if k != nil && end != nil && bytes.Compare(k, end) >= 0 {
				k = nil
			}
		}
		if !win.del && !fn([]byte(win.key), bytes.Clone(win.val)) {
			return nil
		}
	}
}

// treeSource reads a tree's entries of one table in [start, end) in
// order, a chunk at a time (the tree has no cursor to hold).
type treeSource struct {
	t          *tree
	table, end string
	bounded    bool // end applies
	buf        []*item
	i          int
	more       bool // the tree may hold entries past buf
}

const treeChunk = 32

func newTreeSource(t *tree, table string, start, end []byte) *treeSource {
	s := &treeSource{t: t, table: table, end: string(end), bounded: end != nil}
	s.fill(&item{table: table, key: string(start)}, false)
	return s
}

func (s *treeSource) fill(pivot *item, skipPivot bool) {
	s.buf, s.i, s.more = s.buf[:0], 0, false
	s.t.AscendGreaterOrEqual(pivot, func(it *item) bool {
		if it.table != s.table || (s.bounded && it.key >= s.end) {
			return false
		}
		if skipPivot && it.key == pivot.key {
			return true
		}
		if len(s.buf) == treeChunk {
			s.more = true
			return false
		}
		s.buf = append(s.buf, it)
		return true
	})
}

// peek returns the next entry, or nil at the end (or for a nil source).
func (s *treeSource) peek() *item {
	if s == nil {
		return nil
	}
	if s.i == len(s.buf) {
		if !s.more {
			return nil
		}
		s.fill(&item{table: s.table, key: s.buf[len(s.buf)-1].key}, true)
		if len(s.buf) == 0 {
			return nil
		}
	}
	return s.buf[s.i]
}

func (s *treeSource) advance() { s.i++ }

// applyTree writes every entry of m to the bbolt transaction.
func applyTree(btx *bbolt.Tx, m *tree) error {
	var err error
	var b *bbolt.Bucket
	bt := ""
	m.Ascend(func(it *item) bool {
		if b == nil || it.table != bt {
			bt = it.table
			if it.del {
				b = btx.Bucket([]byte(bt))
			} else if b, err = btx.CreateBucketIfNotExists([]byte(bt)); err != nil {
				err = fmt.Errorf("bolt: table %q: %w", bt, err)
				return false
			}
		}
		switch {
		case it.del && b != nil:
			err = b.Delete([]byte(it.key))
		case !it.del:
			err = b.Put([]byte(it.key), it.val)
		}
		return err == nil
	})
	return err
}

// applyOps writes the operations of a log record to the bbolt transaction.
func applyOps(btx *bbolt.Tx, payload []byte) error {
	return decodeOps(payload, func(o walOp) error {
		if o.del {
			if b := btx.Bucket(o.table); b != nil {
				return b.Delete(o.key)
			}
			return nil
		}
		b, err := btx.CreateBucketIfNotExists(o.table)
		if err != nil {
			return fmt.Errorf("bolt: table %q: %w", o.table, err)
		}
		return b.Put(o.key, o.value)
	})
}
