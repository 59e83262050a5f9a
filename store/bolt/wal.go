package bolt

// The write-ahead log. A commit appends one record (everything the
// transaction wrote) to the active segment file and syncs it: one write at
// the end of a preallocated file, against the bbolt commit's pages scattered
// over its B+trees and its two syncs. The records are applied to the bbolt
// file later, many commits at once, by a checkpoint (see startCheckpoint in
// bolt.go), which stores the LSN of the last record it applied in the bbolt
// file in the same bbolt transaction (table "_wal", key "applied").
//
// # On-disk format
//
// There are two segment files, path+".wal0" and path+".wal1", used in
// turn. All integers are big-endian. A segment is a sequence of 512-byte
// blocks (walBlock). Block 0 is the header:
//
//	offset  size  field
//	     0     8  magic: "sbwal\x00\x00\x01" (the last byte is the format version)
//	     8     8  start: the LSN of the segment's first record
//	    16     8  salt: random, chosen anew each time the segment is (re)started
//	    24     4  CRC-32C (Castagnoli) of bytes 0–23
//	    28   484  zero
//
// Records follow, each starting on a block boundary, so that a record torn
// by a crash never shares a sector with one that was acknowledged:
//
//	offset  size  field
//	     0     4  CRC-32C, seeded with CRC-32C(salt), over bytes 4 … 16+n-1
//	     4     4  n: the payload's length
//	     8     8  LSN: the start's for the first record, then one more each
//	    16     n  payload
//	  16+n     …  zero, up to the next block boundary
//
// A payload is a sequence of operations (uvarint is encoding/binary's):
//
//	0x01 | uvarint len(table) | table | uvarint len(key) | key | uvarint len(value) | value   put
//	0x02 | uvarint len(table) | table | uvarint len(key) | key                               delete
//
// After the last record the file holds zeros (a segment is preallocated
// ahead of its records, so that a record's sync writes data and no file
// size), or records of the segment's earlier use: under another salt, and
// with lower LSNs, since LSNs only grow.
//
// # Reading it back
//
// Open reads both segments and replays, in LSN order, the records past the
// one the bbolt file says was applied. Reading a segment stops at the first
// record that is cut short, fails its CRC or does not carry the next LSN:
// it was being written at the crash, and was never acknowledged. Damage is
// an error, never a silent loss: a whole record with a later LSN after the
// stopping point, a gap between what the bbolt file holds and the first
// record read, or an unreadable header with anything but zeros after it
// (records there may have been acknowledged) refuse the Open, naming the
// file, and leave the files as they are. An unreadable header followed by
// zeros is a segment whose creation a crash interrupted: its header is
// synced before any record is written, so it held nothing. The salt means
// that bytes stored inside a record — a todo's payload, say, shaped like a
// record — are never taken for one.
//
// # Durability
//
// A record is acknowledged only after fdatasync of its segment returned.
// A new segment's file is synced (header, and zeros ahead) and then its
// directory, before any record goes into it; a reused one has its header
// rewritten and synced, and is reused only once every record in it is in
// the bbolt file. A failed write or sync leaves the commit's outcome
// unknown, and the store refuses writes from then on until it is reopened
// (errLog): a sync is never retried, because after a failed fsync the
// kernel may have dropped the data while marking it clean (PostgreSQL's
// "fsyncgate", 2018). A full disk while the log grows is the exception
// (errNoSpace): nothing of the record was written, so the commit is
// refused and the store carries on.
//
// # Concurrency
//
// The wal and its segments belong to the Store's writer: every method is
// called with Store.wmu held (Update's write, rotate, snapshot, Close,
// and recover before the Store is shared), so no field has a lock of its
// own. Readers never touch the log; they read the Store's trees and the
// bbolt file.

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
)

// The on-disk format: changing any of these changes the format (see the
// file's comment), and needs a new magic version and a reader for the old.
const (
	walBlock     = 512 // the unit of the header and of record alignment
	walRecHeader = 16  // CRC, length, LSN
	opPut        = 1
	opDelete     = 2
)

// walMagic starts every segment; its last byte is the format version.
var walMagic = [8]byte{'s', 'b', 'w', 'a', 'l', 0, 0, 1}

// Tuning: not part of the format.
const (
	walFirstChunk = 64 << 10 // zeros written when a segment is created
	walMaxChunk   = 1 << 20  // most zeros written at once when one grows
)

var (
	zeros   = make([]byte, walFirstChunk) // what grow writes; never written to
	castagn = crc32.MakeTable(crc32.Castagnoli)
	// errLog marks a failed log write or sync. The record may or may not
	// have reached the disk, so the outcome of the commit is unknown: the
	// store refuses further writes until it is reopened (which recovers
	// whatever did reach the disk).
	errLog = errors.New("bolt: write-ahead log failed")
	// errNoSpace marks a log that could not be grown because the disk is
	// full. Nothing was written where a record goes, so the commit is
	// known not to have happened: it is refused, and writes go on once
	// there is space again.
	errNoSpace = errors.New("bolt: write-ahead log: no space to grow it")
)

// segment is one log file.
type segment struct {
	f     vfile
	path  string
	start uint64 // LSN of its first record
	salt  uint32 // the CRC of the header's salt: where every record's CRC starts
	last  uint64 // LSN of its last record; start-1 while empty
	off   int64  // where the next record goes
	size  int64  // bytes of the file written (zeros ahead of off)
}

// wal is the log: two segments, one active.
type wal struct {
	fs     vfs
	seg    [2]*segment
	paths  [2]string
	act    int
	next   uint64 // LSN of the next record
	max    int64  // a segment takes no more records past this size
	mode   os.FileMode
	noSync bool
	buf    []byte
}

func walPaths(path string) [2]string { return [2]string{path + ".wal0", path + ".wal1"} }

// createSegment creates (or truncates) the segment file at path with a
// header for start, makes it durable — the file's contents and its entry
// in the directory — and returns it ready for records.
func createSegment(fs vfs, path string, start uint64, mode os.FileMode, noSync bool) (*segment, error) {
	f, err := fs.Create(path, mode)
	if err != nil {
		return nil, fmt.Errorf("%w: create %s: %w", logFailure(err), path, err)
	}
	s := &segment{f: f, path: path}
	if err := s.grow(walFirstChunk); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := s.reset(start, noSync); err != nil {
		_ = f.Close()
		return nil, err
	}
	if !noSync {
		if err := syncDir(fs, filepath.Dir(path)); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	return s, nil
}

// reset makes s an empty segment starting at start: its header is
// rewritten and synced. What follows the header is left as it is; every
// record there carries an LSN below start, so no reader takes it.
func (s *segment) reset(start uint64, noSync bool) error {
	h := make([]byte, walBlock)
	copy(h, walMagic[:])
	binary.BigEndian.PutUint64(h[8:], start)
	if _, err := rand.Read(h[16:24]); err != nil {
		return fmt.Errorf("%w: salt: %w", errLog, err)
	}
	binary.BigEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagn))
	if _, err := s.f.WriteAt(h, 0); err != nil {
		return fmt.Errorf("%w: %s: %w", errLog, s.path, err)
	}
	if !noSync {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("%w: sync %s: %w", errLog, s.path, err)
		}
	}
	s.start, s.last, s.off = start, start-1, walBlock
	s.salt = crc32.Checksum(h[16:24], castagn)
	return nil
}

// grow writes zeros from the end of what is written up to at least want
// bytes, so that appending a record overwrites file contents instead of
// extending the file (a sync then writes the data and no file metadata).
func (s *segment) grow(want int64) error {
	if want <= s.size {
		return nil
	}
	n := max(want-s.size, min(max(s.size, walFirstChunk), walMaxChunk))
	n = (n + walBlock - 1) / walBlock * walBlock
	for end := s.size + n; s.size < end; {
		z := zeros[:min(int64(len(zeros)), end-s.size)]
		if _, err := s.f.WriteAt(z, s.size); err != nil {
			return fmt.Errorf("%w: grow %s: %w", logFailure(err), s.path, err)
		}
		s.size += int64(len(z))
	}
	return nil
}

// openWAL starts a fresh log whose first record will be next: segment 0
// created anew, segment 1 removed (it is created when first needed).
func openWAL(fs vfs, path string, next uint64, max int64, mode os.FileMode, noSync bool) (*wal, error) {
	w := &wal{fs: fs, paths: walPaths(path), next: next, max: max, mode: mode, noSync: noSync}
	if err := fs.Remove(w.paths[1]); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", errLog, err)
	}
	s, err := createSegment(fs, w.paths[0], next, mode, noSync)
	if err != nil {
		return nil, err
	}
	w.seg[0] = s
	return w, nil
}

// fits reports whether a record of n payload bytes fits in the active
// segment. An empty segment takes a record of any size.
func (w *wal) fits(n int) bool {
	s := w.seg[w.act]
	return s.off == walBlock || s.off+recordSize(n) <= w.max
}

// other is the segment that is not active, or nil if it was never created.
func (w *wal) other() *segment { return w.seg[1-w.act] }

// rotate makes the other segment the active one, starting at the next LSN.
// Its records must all be checkpointed: the caller checks.
func (w *wal) rotate() error {
	o := 1 - w.act
	if w.seg[o] == nil {
		s, err := createSegment(w.fs, w.paths[o], w.next, w.mode, w.noSync)
		if err != nil {
			return err
		}
		w.seg[o] = s
	} else if err := w.seg[o].reset(w.next, w.noSync); err != nil {
		return err
	}
	w.act = o
	return nil
}

func recordSize(n int) int64 {
	return (int64(walRecHeader+n) + walBlock - 1) / walBlock * walBlock
}

// append writes payload as the next record of the active segment and syncs
// it. It returns the record's LSN.
func (w *wal) append(payload []byte) (uint64, error) {
	s := w.seg[w.act]
	size := recordSize(len(payload))
	if err := s.grow(s.off + size); err != nil {
		return 0, err
	}
	lsn := w.next
	b := w.buf[:0]
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b, crc32.Update(s.salt, castagn, b[4:]))
	for int64(len(b)) < size {
		b = append(b, 0)
	}
	w.buf = b[:0]
	if _, err := s.f.WriteAt(b, s.off); err != nil {
		return 0, fmt.Errorf("%w: %s: %w", errLog, s.path, err)
	}
	if !w.noSync {
		if err := s.f.Sync(); err != nil {
			return 0, fmt.Errorf("%w: sync %s: %w", errLog, s.path, err)
		}
	}
	s.off += size
	s.last = lsn
	w.next++
	return lsn, nil
}

// close closes the segment files, keeping them.
func (w *wal) close() error {
	var first error
	for _, s := range w.seg {
		if s != nil {
			if err := s.f.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// remove closes and deletes the segment files: everything in them is in
// the bbolt file.
func (w *wal) remove() error {
	first := w.close()
	for _, p := range w.paths {
		if err := w.fs.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

// walRecord is one record read back.
type walRecord struct {
	lsn     uint64
	payload []byte
}

// readSegment reads the records of the segment file at path, stopping at
// the first that is torn, damaged or out of sequence. A missing file has no
// records. So has one whose header is unreadable while nothing follows the
// header but zeros: a crash while the segment was being created (its header
// is synced before any record is written). An unreadable header with
// anything else after it is damage — the records there may have been
// acknowledged, and without the header they cannot be read — and is an
// error naming the file, which is left as it is.
func readSegment(fs vfs, path string) ([]walRecord, error) {
	b, err := fs.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bolt: read %s: %w", path, err)
	}
	if len(b) < walBlock || [8]byte(b[:8]) != walMagic ||
		binary.BigEndian.Uint32(b[24:]) != crc32.Checksum(b[:24], castagn) {
		if i := slices.IndexFunc(b[min(len(b), walBlock):], func(c byte) bool { return c != 0 }); i >= 0 {
			return nil, fmt.Errorf("bolt: write-ahead log %s is damaged: its header is unreadable and data follows it (from byte %d), which may be acknowledged commits; "+
				"the file is left as it is (move it away only to give those commits up)", path, walBlock+i)
		}
		return nil, nil
	}
	next := binary.BigEndian.Uint64(b[8:])
	salt := crc32.Checksum(b[16:24], castagn)
	var recs []walRecord
	off := int64(walBlock)
	for ; ; next++ {
		lsn, payload, ok := recordAt(b, off, salt)
		if !ok || lsn != next {
			break
		}
		recs = append(recs, walRecord{lsn: lsn, payload: payload})
		off += recordSize(len(payload))
	}
	// The log ends here: the record here was being written when the
	// process stopped. Any whole record further on with a later LSN was
	// acknowledged after this one was, so this one is not a torn tail but
	// damage, and the records after it would be lost quietly.
	for o := off + walBlock; o < int64(len(b)); o += walBlock {
		if lsn, _, ok := recordAt(b, o, salt); ok && lsn > next {
			return nil, fmt.Errorf("bolt: write-ahead log %s is damaged: record %d is unreadable, record %d follows it", path, next, lsn)
		}
	}
	return recs, nil
}

// recordAt decodes the record at off in b, if a whole one with a good CRC
// under salt is there.
func recordAt(b []byte, off int64, salt uint32) (lsn uint64, payload []byte, ok bool) {
	if off+walRecHeader > int64(len(b)) {
		return 0, nil, false
	}
	h := b[off:]
	n := int64(binary.BigEndian.Uint32(h[4:]))
	if n > int64(len(h))-walRecHeader || binary.BigEndian.Uint32(h) != crc32.Update(salt, castagn, h[4:walRecHeader+n]) {
		return 0, nil, false
	}
	return binary.BigEndian.Uint64(h[8:]), h[walRecHeader : walRecHeader+n], true
}

// readLog returns the records of both segments after applied, in order. A
// gap — a record after applied missing while a later one is there — means
// acknowledged commits are lost, and is an error rather than a store
// quietly missing them.
func readLog(fs vfs, path string, applied uint64) ([]walRecord, error) {
	var all []walRecord
	for _, p := range walPaths(path) {
		recs, err := readSegment(fs, p)
		if err != nil {
			return nil, err
		}
		all = append(all, recs...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].lsn < all[j].lsn })
	out := all[:0]
	want := applied + 1
	for _, r := range all {
		switch {
		case r.lsn < want:
			continue // checkpointed already (or a duplicate)
		case r.lsn > want:
			return nil, fmt.Errorf("bolt: write-ahead log of %s: record %d missing before %d", path, want, r.lsn)
		}
		out = append(out, r)
		want++
	}
	return out, nil
}

// walOp is one decoded operation of a record's payload.
type walOp struct {
	del               bool
	table, key, value []byte
}

// decodeOps calls fn for each operation in payload.
func decodeOps(payload []byte, fn func(walOp) error) error {
	field := func() ([]byte, error) {
		n, k := binary.Uvarint(payload)
		if k <= 0 || n > uint64(len(payload)-k) {
			return nil, io.ErrUnexpectedEOF
		}
		f := payload[k : k+int(n)]
		payload = payload[k+int(n):]
		return f, nil
	}
	for len(payload) > 0 {
		op := payload[0]
		payload = payload[1:]
		if op != opPut && op != opDelete {
			return fmt.Errorf("bolt: write-ahead log: operation %d", op)
		}
		var o walOp
		var err error
		o.del = op == opDelete
		if o.table, err = field(); err != nil {
			return fmt.Errorf("bolt: write-ahead log: %w", err)
		}
		if o.key, err = field(); err != nil {
			return fmt.Errorf("bolt: write-ahead log: %w", err)
		}
		if !o.del {
			if o.value, err = field(); err != nil {
				return fmt.Errorf("bolt: write-ahead log: %w", err)
			}
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// appendOp encodes one operation onto b.
func appendOp(b []byte, del bool, table string, key, value []byte) []byte {
	if del {
		b = append(b, opDelete)
	} else {
		b = append(b, opPut)
	}
	b = binary.AppendUvarint(b, uint64(len(table)))
	b = append(b, table...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	if !del {
		b = binary.AppendUvarint(b, uint64(len(value)))
		b = append(b, value...)
	}
	return b
}

func syncDir(fs vfs, dir string) error {
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("%w: sync directory %s: %w", errLog, dir, err)
	}
	return nil
}

// logFailure is the mark for a failed write of zeros or a failed create:
// errNoSpace when the disk is full (the commit is known not to have
// happened, and the store carries on), errLog otherwise.
func logFailure(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return errNoSpace
	}
	return errLog
}
