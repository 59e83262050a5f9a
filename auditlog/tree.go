// The tree as a store keeps it: each entry's record with the tree hashes
// it adds, the log's state, the hashes that outlive purged entries, and
// entries committed pending, for a sequencer to add after commit.

package auditlog

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/store"
)

// Layout says where a log keeps its records in a store (package store's
// ordered key-value contract). Entries, Hashes and Pending are the log's
// own tables; Meta may be shared with the log's user, who then keeps no
// record of its own under StateKey there.
type Layout struct {
	// Entries: an entry's record, under one of two keys. Its seq (8
	// bytes, big-endian) → the entry's bytes, then the tree hashes it
	// adds (golang.org/x/mod/sumdb/tlog's stored hashes: its own and one
	// per subtree it completes; see SplitEntry). Or, for a run of entries
	// appended together (Tx.Packed), the seq of the run's last entry and
	// one byte 0x01 → a uvarint of the run's length, then each entry as a
	// uvarint of its length, its bytes and its tree hashes: a block,
	// at most 64 entries or about 8 KiB. Either way no tree hash has a key
	// of its own to write, and the record holding seq is the first at or
	// after the key of seq.
	Entries string
	// Hashes: tlog's stored hash index (8 bytes, big-endian) → the
	// 32-byte hash, for the few hashes proofs still need after their
	// entries were purged (FrontierIndexes of the purged count).
	Hashes string
	// Pending: a key the store assigns at commit (store.Appender) → the
	// entries of one commit, not yet in the tree (see AppendPending).
	Pending string
	// Meta and StateKey: where the log's State is kept (32 bytes).
	Meta     string
	StateKey string
}

// State is a log's shape, kept under Layout.StateKey.
type State struct {
	Size   uint64 // entries in the tree
	Offset uint64 // the seq of entry i is Offset+i+1 (see Seq)
	Purged uint64 // entries [0, Purged) were deleted by retention (Purge)
	// Counter is a number the log's user keeps beside the state, written
	// with it (package switchboard numbers todos with it on stores whose
	// writers run one at a time). The log never reads it.
	Counter uint64
}

// Seq is the seq of entry n: the key its record is stored under.
func (st *State) Seq(n uint64) uint64 { return st.Offset + n + 1 }

const stateLen = 32

func (st *State) encode() []byte {
	b := make([]byte, 0, stateLen)
	for _, v := range []uint64{st.Size, st.Offset, st.Purged, st.Counter} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b
}

// Tx is a log's part in one store transaction: its state, read once and
// written back with SaveState, and the tree's stored hashes, read through
// a Cache where one is given (Use). A Tx is a value made by Layout.In for
// each transaction; it must not outlive it.
type Tx struct {
	tx     store.Tx
	layout *Layout
	locker store.Locker
	state  State
	read   bool
	cache  *Cache
	// added: the stored hashes Append added so far in its current call,
	// from stored hash index addedFrom on (a block is written whole, after
	// its entries' hashes are needed by the next ones).
	added     []tlog.Hash
	addedFrom int64
	seeker    *seeker
	// Rewrite makes Append write entries with Put, over records under the
	// same keys (an upgrade rewriting an older log in place), instead of
	// store.Inserter's Insert, which a store may refuse over a record
	// that is there. Records under other keys (a block's, where the old
	// record was an entry's alone) are the caller's to delete first.
	Rewrite bool
	// Packed makes Append write the entries of one call several to a
	// record (a block; see Layout.Entries), which saves a database most
	// of each entry's row overhead and lets it compress the rows. Reads
	// find entries in either form, whatever Packed says; a reader older
	// than blocks cannot, which is why writing them is the caller's
	// choice (package switchboard writes them from its layout 9 on).
	Packed bool
}

// In returns the log's part in tx. locker, if not nil, is tx's row locks
// (a row-locked transaction: LockState locks the state's record).
func (l *Layout) In(tx store.Tx, locker store.Locker) Tx {
	return Tx{tx: tx, layout: l, locker: locker}
}

// State returns the transaction's copy of the log's state, read once;
// changes to it are written by SaveState (or Append, Purge).
func (x *Tx) State() (*State, error) {
	if x.read {
		return &x.state, nil
	}
	b, err := x.tx.Get(x.layout.Meta, []byte(x.layout.StateKey))
	return x.setState(b, err)
}

// LockState is State for a transaction that will write the state back:
// in a row-locked transaction it locks the state's record first, so that a
// concurrent change to it (a purge moving the log's start) either commits
// before the read or waits for this transaction — and is not overwritten
// with the state as it was before.
func (x *Tx) LockState() (*State, error) {
	if x.locker == nil || x.read {
		return x.State()
	}
	b, err := x.locker.GetLocked(x.layout.Meta, []byte(x.layout.StateKey))
	return x.setState(b, err)
}

func (x *Tx) setState(b []byte, err error) (*State, error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		x.state = State{}
	case err != nil:
		return nil, fmt.Errorf("read the audit log's state: %w", err)
	case len(b) != stateLen:
		return nil, fmt.Errorf("the audit log's state is %d bytes, want %d", len(b), stateLen)
	default:
		x.state = State{
			Size:    binary.BigEndian.Uint64(b),
			Offset:  binary.BigEndian.Uint64(b[8:]),
			Purged:  binary.BigEndian.Uint64(b[16:]),
			Counter: binary.BigEndian.Uint64(b[24:]),
		}
	}
	x.read = true
	return &x.state, nil
}

// SaveState writes the transaction's copy of the state back.
func (x *Tx) SaveState() error {
	return x.tx.Put(x.layout.Meta, []byte(x.layout.StateKey), x.state.encode())
}

// Use makes the transaction read and add tree hashes through c (see
// Cache); nil reads every hash from the store.
func (x *Tx) Use(c *Cache) { x.cache = c }

// Append adds n entries to the tree as its next leaves, each written under
// its seq with the tree hashes it adds (or, Packed, in blocks of several
// under the seq of each block's last), and saves the state. entry appends
// entry i's bytes to b and returns the result; it is told the entry's seq
// (an entry may hold it).
func (x *Tx) Append(n int, entry func(i int, seq uint64, b []byte) []byte) error {
	st, err := x.State()
	if err != nil {
		return err
	}
	c := x.cache
	if c != nil {
		c.begin(st.Size)
	}
	if _, ok := x.tx.(store.ScanPrefetcher); ok && n > 1 && (c == nil || !c.full) {
		// A server store: fetch the records holding the hashes the new
		// leaves will build on (the tree's frontier) in one round trip.
		for _, ix := range FrontierIndexes(st.Size) {
			if k := completedBy(ix); k >= st.Purged {
				x.seekAhead(st.Seq(k))
			}
		}
	}
	if c != nil && !c.full {
		// Read the whole frontier (fetched above) into the cache: the
		// next pass then reads none of it.
		if _, err := x.ReadHashes(FrontierIndexes(st.Size)); err != nil {
			return fmt.Errorf("read the audit log's tree: %w", err)
		}
	}
	err = x.appendEntries(st, n, entry)
	x.added = x.added[:0]
	if err != nil {
		return err
	}
	return x.SaveState()
}

// appendEntries is Append's loop.
func (x *Tx) appendEntries(st *State, n int, entry func(i int, seq uint64, b []byte) []byte) error {
	c := x.cache
	packed := x.Packed
	x.added, x.addedFrom = x.added[:0], tlog.StoredHashCount(int64(st.Size))
	var block []byte // Packed: the block being filled, from its count's room on
	count := 0
	var buf []byte
	for i := range n {
		k := st.Size
		seq := st.Seq(k)
		v := entry(i, seq, buf[:0])
		if len(v) == 0 {
			// Its record would be its hash alone, which no reader
			// could tell from a record without its hashes.
			return fmt.Errorf("entry %d is empty: an entry holds at least one byte", seq)
		}
		hashes, err := tlog.StoredHashes(int64(k), v, x)
		if err != nil {
			return fmt.Errorf("add entry %d to the audit log's tree: %w", seq, err)
		}
		c.add(k, hashes)
		x.added = append(x.added, hashes...)
		if packed {
			if block == nil {
				// Room for the count, and about what the rest of the
				// call's entries (up to a block's) will take.
				block = make([]byte, binary.MaxVarintLen64, binary.MaxVarintLen64+min(n-i, blockEntries)*(len(v)+2*tlog.HashSize+3))
			}
			block = binary.AppendUvarint(block, uint64(len(v)))
			block = append(block, v...)
			for _, h := range hashes {
				block = append(block, h[:]...)
			}
			count++
			buf = v
			st.Size++
			if count == blockEntries || len(block) >= blockBytes || i == n-1 {
				// The count goes right before the entries, in the
				// room left for it.
				w := binary.PutUvarint(block[:binary.MaxVarintLen64], uint64(count))
				at := binary.MaxVarintLen64 - w
				copy(block[at:], block[:w])
				if err := x.insert(x.layout.Entries, blockKey(seq), block[at:]); err != nil {
					return err
				}
				block, count = nil, 0 // the store may keep what it was given
			}
			continue
		}
		buf = nil // the record keeps v
		for _, h := range hashes {
			v = append(v, h[:]...)
		}
		if err := x.insert(x.layout.Entries, be64(seq), v); err != nil {
			return err
		}
		st.Size++
	}
	return nil
}

// A block (Tx.Packed) closes at blockEntries entries or once it holds
// blockBytes: a reader of one entry reads its whole block.
const (
	blockEntries = 64
	blockBytes   = 8 << 10
	blockTag     = 0x01 // ends a block's key, after its last entry's seq
)

func blockKey(last uint64) []byte {
	k := make([]byte, 9)
	binary.BigEndian.PutUint64(k, last)
	k[8] = blockTag
	return k
}

// decodeRecord calls fn with each entry of the record stored under key k
// (value v), in order, until fn returns false (more is then false). A
// record that cannot be read, or holds an entry at or before the log's
// start, is an *AuditError.
func decodeRecord(st *State, k, v []byte, fn func(seq uint64, entry, hashes []byte) bool) (more bool, err error) {
	switch {
	case len(k) == 8:
		seq := binary.BigEndian.Uint64(k)
		if seq <= st.Offset {
			return false, &AuditError{Seq: seq, Reason: "stored before the log's start"}
		}
		entry, hashes, err := SplitEntry(seq-st.Offset-1, v)
		if err != nil {
			return false, &AuditError{Seq: seq, Reason: err.Error()}
		}
		return fn(seq, entry, hashes), nil
	case len(k) == 9 && k[8] == blockTag:
	default:
		return false, &AuditError{Seq: recordLast(k), Reason: fmt.Sprintf("an event record is stored under a key of %d bytes", len(k))}
	}
	last := binary.BigEndian.Uint64(k)
	count, w := binary.Uvarint(v)
	if w <= 0 || count == 0 || count > last {
		return false, &AuditError{Seq: last, Reason: "the record of the events up to this one does not say how many it holds"}
	}
	first := last - count + 1
	if first <= st.Offset {
		return false, &AuditError{Seq: first, Reason: "stored before the log's start"}
	}
	v = v[w:]
	// The whole record is checked before any of its entries is given:
	// a damaged block yields none.
	for pass := range 2 {
		b := v
		for seq := first; seq <= last; seq++ {
			l, w := binary.Uvarint(b)
			h := LeafHashes(seq-st.Offset-1) * tlog.HashSize
			if w <= 0 || l == 0 || l > uint64(len(b)-w) || len(b)-w-int(l) < h {
				return false, &AuditError{Seq: seq, Reason: fmt.Sprintf("the record of events %d to %d cannot hold this one's bytes and its %d tree hashes", first, last, h/tlog.HashSize)}
			}
			e := b[w : w+int(l)]
			hs := b[w+int(l) : w+int(l)+h]
			b = b[w+int(l)+h:]
			if pass == 1 && !fn(seq, e, hs) {
				return false, nil
			}
		}
		if len(b) != 0 {
			return false, &AuditError{Seq: last, Reason: fmt.Sprintf("the record of events %d to %d has %d bytes past its last event", first, last, len(b))}
		}
	}
	return true, nil
}

// recordLast is the seq of the last entry the record under k holds: the
// key's first 8 bytes, in either form.
func recordLast(k []byte) uint64 { return keySeq(k[:min(len(k), 8)]) }

// recordFirst is the seq of the first entry the record under k holds
// (without reading it whole).
func recordFirst(k, v []byte) uint64 {
	last := recordLast(k)
	if len(k) == 9 {
		if count, w := binary.Uvarint(v); w > 0 && count > 0 && count <= last {
			return last - count + 1
		}
	}
	return last
}

// scan calls fn with each entry stored from seq from on, in order, until
// fn returns false, reading the records whose keys are before end (nil:
// to the table's end). The store reads its next records as it goes.
func (x *Tx) scan(st *State, from uint64, end []byte, fn func(seq uint64, entry, hashes []byte) bool) error {
	var bad error
	var prev uint64 // the last seq read: records never overlap
	err := x.tx.Scan(x.layout.Entries, be64(from), end, func(k, v []byte) bool {
		if f := recordFirst(k, v); f <= prev {
			bad = &AuditError{Seq: f, Reason: fmt.Sprintf("event %d is stored twice (a record of events %d to %d follows one up to %d)", f, f, recordLast(k), prev)}
			return false
		}
		more, err := decodeRecord(st, k, v, func(seq uint64, entry, hashes []byte) bool {
			prev = seq
			return seq < from || fn(seq, entry, hashes) // a block's entries before from are passed over
		})
		bad = err
		return more
	})
	if err != nil {
		return err
	}
	return bad
}

// seekAhead tells a server store that the record holding seq is about to
// be read (seek): the first record at or after seq's key.
func (x *Tx) seekAhead(seq uint64) {
	if p, ok := x.tx.(store.ScanPrefetcher); ok {
		// A hint: an error here would come back from the read.
		_ = p.PrefetchScan(x.layout.Entries, be64(seq), 1)
	}
}

// seek returns entry seq and its tree hashes from the one record that
// would hold it: an error wrapping store.ErrNotFound if that record does
// not.
func (x *Tx) seek(st *State, seq uint64) (entry, hashes []byte, err error) {
	x.seekAhead(seq)
	s := x.seeker
	if s == nil {
		// Made once per Tx: a proof or a tree's frontier seeks many
		// times, and the function handed to the store's Scan escapes.
		s = &seeker{}
		s.visit = func(k, v []byte) bool {
			_, s.bad = decodeRecord(s.st, k, v, func(n uint64, e, h []byte) bool {
				if n < s.seq {
					return true
				}
				s.entry, s.hashes, s.found = e, h, n == s.seq
				return false
			})
			return false // the first record is the one
		}
		x.seeker = s
	}
	*s = seeker{visit: s.visit, st: st, seq: seq}
	err = x.getFirst(s)
	if err == nil && !s.found && s.bad == nil {
		err = x.tx.Scan(x.layout.Entries, binary.BigEndian.AppendUint64(s.key[:0], seq), nil, s.visit)
	}
	switch {
	case err != nil:
	case s.bad != nil && !s.found:
		err = s.bad
	case !s.found:
		err = fmt.Errorf("entry %d: %w", seq, store.ErrNotFound)
	}
	entry, hashes = s.entry, s.hashes
	*s = seeker{visit: s.visit} // holds no record past the call
	return entry, hashes, err
}

// getFirst is seek's first try on a store whose reads are local (no
// store.ScanPrefetcher), where a Get costs less than a Scan: the record
// keyed by seq itself — a block ending at it (as each of a transaction's
// last event is, on bolt) if the log is written Packed, else the entry's
// own. A miss leaves s as it was, for the Scan.
func (x *Tx) getFirst(s *seeker) error {
	if _, remote := x.tx.(store.ScanPrefetcher); remote {
		return nil // one round trip, the Scan's
	}
	k := binary.BigEndian.AppendUint64(s.key[:0], s.seq)
	if x.Packed {
		k = append(k, blockTag)
	}
	v, err := x.tx.Get(x.layout.Entries, k)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	s.visit(k, v)
	return nil
}

// seeker is seek's state, kept by a Tx.
type seeker struct {
	visit         func(k, v []byte) bool
	st            *State
	seq           uint64
	key           [9]byte
	entry, hashes []byte
	found         bool
	bad           error
}

// Entry returns the entry stored under seq and the tree hashes stored
// after it: an error wrapping store.ErrNotFound if none is, an
// *AuditError if the record cannot hold its hashes or seq is at or before
// the log's start (State.Offset).
func (x *Tx) Entry(seq uint64) (entry, hashes []byte, err error) {
	st, err := x.State()
	if err != nil {
		return nil, nil, err
	}
	if seq <= st.Offset {
		return nil, nil, &AuditError{Seq: seq, Reason: "stored before the log's start"}
	}
	return x.seek(st, seq)
}

// Entries calls fn with the entries stored under seqs from from on, in
// order, each with the tree hashes stored after it, until fn returns
// false, or, if limit > 0, limit were read (a server store fetches the
// first records with the state's read: store.ScanPrefetcher). A gap in
// the seqs is not skipped silently: fn is told each entry's own seq. A
// record stored under a seq at or before the log's start, or that cannot
// hold its hashes, is an *AuditError.
func (x *Tx) Entries(from uint64, limit int, fn func(seq uint64, entry, hashes []byte) bool) error {
	if p, ok := x.tx.(store.ScanPrefetcher); ok && limit > 0 && !x.read {
		// The entries travel with the state's read: one round trip. Of
		// blocks (up to 8 KiB each), a few hold the newest entries; a
		// reader needing more reads on.
		rows := limit
		if x.Packed {
			rows = min(limit, 8)
		}
		if err := p.PrefetchScan(x.layout.Entries, be64(from), rows); err != nil {
			return err
		}
	}
	st, err := x.State()
	if err != nil {
		return err
	}
	n := 0
	return x.scan(st, from, nil, func(seq uint64, entry, hashes []byte) bool {
		n++
		return fn(seq, entry, hashes) && (limit <= 0 || n < limit)
	})
}

// Strays checks that no record is stored outside the log's kept entries
// — before the first kept one, or past the end — as retention or a
// rewrite could leave one: such a record is an *AuditError naming it.
func (x *Tx) Strays() error {
	st, err := x.State()
	if err != nil {
		return err
	}
	var k, v []byte
	first := func(from []byte) error {
		k, v = nil, nil
		if p, ok := x.tx.(store.ScanPrefetcher); ok {
			if err := p.PrefetchScan(x.layout.Entries, from, 1); err != nil { // one record, not a page of blocks
				return err
			}
		}
		return x.tx.Scan(x.layout.Entries, from, nil, func(key, val []byte) bool {
			k, v = bytes.Clone(key), bytes.Clone(val)
			return false
		})
	}
	if err := first(nil); err != nil {
		return err
	}
	if k != nil && recordFirst(k, v) < st.Seq(st.Purged) {
		return &AuditError{Seq: recordFirst(k, v), Reason: "an event is stored before the log's first kept event"}
	}
	end := st.Seq(st.Size)
	if err := first(be64(end)); err != nil {
		return err
	}
	if k != nil {
		return &AuditError{Seq: max(recordFirst(k, v), end), Reason: fmt.Sprintf("an event is stored past the log's end (%d events)", st.Size)}
	}
	return nil
}

// insert writes a record under a key that is new (store.Inserter where
// the store has it, unless Rewrite).
func (x *Tx) insert(table string, key, value []byte) error {
	if ins, ok := x.tx.(store.Inserter); ok && !x.Rewrite {
		return ins.Insert(table, key, value)
	}
	return x.tx.Put(table, key, value)
}

// completedBy is the entry whose leaf completed the subtree of stored
// hash index ix: the hash is stored in its record.
func completedBy(ix int64) uint64 {
	level, k := tlog.SplitStoredHashIndex(ix)
	return uint64(k+1)<<level - 1
}

// ReadHashes reads the tree's stored hashes (tlog.HashReader): a hash is
// in the record of the entry that completed its subtree, or, if that
// entry was purged, in Layout.Hashes while proofs still need it, and
// ErrHashGone after.
func (x *Tx) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	st, err := x.State()
	if err != nil {
		return nil, err
	}
	out := make([]tlog.Hash, len(indexes))
	for i, ix := range indexes {
		if ix < 0 {
			return nil, fmt.Errorf("tree hash %d: no such index", ix)
		}
		if h, ok := x.cache.get(ix); ok {
			out[i] = h
			continue
		}
		if j := ix - x.addedFrom; j >= 0 && j < int64(len(x.added)) {
			out[i] = x.added[j]
			continue
		}
		n := completedBy(ix)
		if n < st.Purged {
			b, err := x.tx.Get(x.layout.Hashes, be64(uint64(ix)))
			if errors.Is(err, store.ErrNotFound) {
				return nil, ErrHashGone
			}
			if err != nil {
				return nil, err
			}
			if len(b) != tlog.HashSize {
				return nil, fmt.Errorf("tree hash %d is %d bytes", ix, len(b))
			}
			copy(out[i][:], b)
			x.cache.remember(ix, n, out[i])
			continue
		}
		seq := st.Seq(n)
		_, hs, err := x.seek(st, seq)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("tree hash %d: entry %d is missing", ix, seq)
		}
		if err != nil {
			return nil, fmt.Errorf("tree hash %d: entry %d: %w", ix, seq, err)
		}
		level, _ := tlog.SplitStoredHashIndex(ix)
		copy(out[i][:], hs[level*tlog.HashSize:])
		x.cache.remember(ix, n, out[i])
	}
	return out, nil
}

// Purge deletes the records of entries [Purged, to) and moves Purged to
// to; a block holding entries on both sides of to is written again with
// the later ones only. Of the tree hashes those records held, the few
// that proofs about kept entries, and between trees of at least to
// entries, still read (the frontier of the first to leaves) move to
// Layout.Hashes first. The caller checks first that the entries may go.
func (x *Tx) Purge(to uint64) error {
	st, err := x.State()
	if err != nil {
		return err
	}
	from := st.Purged
	if to <= from {
		return nil
	}
	if to > st.Size {
		return fmt.Errorf("purge to %d: the log holds %d entries", to, st.Size)
	}
	keep := FrontierIndexes(to)
	hs, err := x.ReadHashes(keep)
	if err != nil {
		return fmt.Errorf("read the tree hashes to keep: %w", err)
	}
	for i, ix := range keep {
		if err := x.tx.Put(x.layout.Hashes, be64(uint64(ix)), hs[i][:]); err != nil {
			return err
		}
	}
	for _, ix := range FrontierIndexes(from) {
		if !slices.Contains(keep, ix) {
			if err := x.tx.Delete(x.layout.Hashes, be64(uint64(ix))); err != nil {
				return err
			}
		}
	}
	// The records to delete, and the block to write again, found first:
	// a store's Scan must not meet its own writes.
	cut := st.Seq(to)
	var gone [][]byte
	var split []byte // the key of a block holding entries on both sides of cut
	var rest []byte  // what it keeps
	var bad error
	err = x.tx.Scan(x.layout.Entries, be64(st.Seq(from)), nil, func(k, v []byte) bool {
		if recordFirst(k, v) >= cut {
			return false
		}
		if recordLast(k) < cut {
			gone = append(gone, bytes.Clone(k))
			return true
		}
		var kept [][]byte
		_, bad = decodeRecord(st, k, v, func(seq uint64, e, h []byte) bool {
			if seq >= cut {
				kept = append(kept, binary.AppendUvarint(nil, uint64(len(e))), e, h)
			}
			return true
		})
		rest = binary.AppendUvarint(nil, uint64(len(kept)/3))
		for _, b := range kept {
			rest = append(rest, b...)
		}
		split = bytes.Clone(k)
		return false
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return err
	}
	for _, k := range gone {
		if err := x.tx.Delete(x.layout.Entries, k); err != nil {
			return err
		}
	}
	if split != nil {
		if err := x.tx.Put(x.layout.Entries, split, rest); err != nil {
			return err
		}
	}
	st.Purged = to
	return x.SaveState()
}

// AddPending writes entries committed in this transaction, for a
// sequencer to Append after commit, as one row of Layout.Pending under a
// key the store assigns (a store.Appender's transaction; see
// AppendPending for the row).
func (x *Tx) AddPending(row []byte) error {
	a, ok := x.tx.(store.Appender)
	if !ok {
		return errors.New("the store assigns no keys (store.Appender): append to the tree instead")
	}
	// Checked here, as Append checks it: a row the sequencer cannot
	// append would stop every pass after it.
	err := ParsePending(row, func(entry []byte) error {
		if len(entry) == 0 {
			return errors.New("an entry is empty: an entry holds at least one byte")
		}
		return nil
	})
	if err != nil || len(row) == 0 {
		return fmt.Errorf("pending row refused: %w", cmp.Or(err, errors.New("it holds no entry")))
	}
	if err := a.Append(x.layout.Pending, row); err != nil {
		return fmt.Errorf("append pending entries: %w", err)
	}
	return nil
}

// PendingRows calls fn with each pending row (see AppendPending) and its
// key, in the order a Sequencer takes them, until fn returns false.
func (x *Tx) PendingRows(fn func(key, row []byte) bool) error {
	return x.tx.Scan(x.layout.Pending, nil, nil, fn)
}

// AppendPending appends one entry to a pending row: a uvarint of its
// length, then its bytes.
func AppendPending(row, entry []byte) []byte {
	row = binary.AppendUvarint(row, uint64(len(entry)))
	return append(row, entry...)
}

// ParsePending calls fn with each entry of a pending row, in order.
func ParsePending(row []byte, fn func(entry []byte) error) error {
	for len(row) > 0 {
		n, w := binary.Uvarint(row)
		if w <= 0 || n > uint64(len(row)-w) {
			return errors.New("pending audit entries: bad length")
		}
		if err := fn(row[w : w+int(n)]); err != nil {
			return err
		}
		row = row[w+int(n):]
	}
	return nil
}

// LeafHashes is how many tree hashes entry n adds: its own and one per
// subtree it completes (one per trailing 1 bit of n).
func LeafHashes(n uint64) int { return 1 + bits.TrailingZeros64(^n) }

// SplitEntry splits the stored record of entry n into the entry's bytes
// and the tree hashes stored after them.
func SplitEntry(n uint64, v []byte) (entry, hashes []byte, err error) {
	h := LeafHashes(n) * tlog.HashSize
	if len(v) <= h {
		return nil, nil, fmt.Errorf("entry record of %d bytes cannot hold its %d tree hashes", len(v), h/tlog.HashSize)
	}
	return v[:len(v)-h], v[len(v)-h:], nil
}

// FrontierIndexes returns the stored hash indexes of the perfect subtrees
// that together cover leaves [0, n), largest first: the only hashes over
// those leaves that proofs about later leaves and trees ever need, and
// what the next leaves build on.
func FrontierIndexes(n uint64) []int64 {
	var out []int64
	var start uint64
	for level := 63; level >= 0; level-- {
		if n&(1<<level) != 0 {
			out = append(out, tlog.StoredHashIndex(level, int64(start>>level)))
			start += 1 << level
		}
	}
	return out
}

func be64(n uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), n) }

// Cache is a sequencer's copy of the hashes new leaves build on — the
// stored hashes of the tree's frontier — so a transaction appending reads
// none of them from the store (Tx.Use). It holds only hashes of committed
// trees: a stored hash covers a complete subtree, which never changes
// while the log is only appended to; what a transaction adds joins it
// only once the caller says it committed (Committed). Hashes it lacks are
// read from the store. A log restored from a backup, or rewritten, is not
// only appended to: the copy may then be of a tree the store no longer
// holds, so a Cache serves one log, and its user drops it (a zero Cache)
// when the store may have changed under it — the Sequencer does whenever
// the lease record is not the one its last pass wrote. The zero Cache is
// empty and ready; a Cache serves one transaction at a time.
type Cache struct {
	hashes map[int64]tlog.Hash // by stored hash index: committed trees' frontier hashes
	added  map[int64]tlog.Hash // what the current transaction added, until it commits
	full   bool                // hashes hold the whole frontier the transaction started from
	start  uint64              // the tree size the transaction started from
}

// begin readies c for a transaction adding leaves to a tree of size n,
// dropping what a failed attempt added.
func (c *Cache) begin(n uint64) {
	if c.hashes == nil {
		c.hashes, c.added = map[int64]tlog.Hash{}, map[int64]tlog.Hash{}
	}
	clear(c.added)
	c.keep(n)
	c.full, c.start = len(c.hashes) == len(FrontierIndexes(n)), n
}

// keep drops every hash but the frontier of a tree of size n.
func (c *Cache) keep(n uint64) {
	front := FrontierIndexes(n)
	maps.DeleteFunc(c.hashes, func(x int64, _ tlog.Hash) bool { return !slices.Contains(front, x) })
}

func (c *Cache) get(x int64) (tlog.Hash, bool) {
	if c == nil {
		return tlog.Hash{}, false
	}
	if h, ok := c.added[x]; ok {
		return h, true
	}
	h, ok := c.hashes[x]
	return h, ok
}

// add records the stored hashes leaf n added (tlog numbers them from
// StoredHashCount(n) on).
func (c *Cache) add(n uint64, hashes []tlog.Hash) {
	if c == nil {
		return
	}
	first := tlog.StoredHashCount(int64(n))
	for i, h := range hashes {
		c.added[first+int64(i)] = h
	}
}

// remember records stored hash x, completed by leaf n and read from the
// store, if it is of the committed tree the transaction builds on.
func (c *Cache) remember(x int64, n uint64, h tlog.Hash) {
	if c != nil && c.hashes != nil && n < c.start {
		c.hashes[x] = h
	}
}

// Committed records that the transaction that last appended through c
// committed, leaving the tree at n entries.
func (c *Cache) Committed(n uint64) {
	if c.hashes == nil {
		return
	}
	maps.Copy(c.hashes, c.added)
	clear(c.added)
	c.keep(n)
}
