package bolt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"syscall"
)

// simFS is a strict simulated filesystem for the log: it keeps, besides
// what a reader sees, what would survive a power cut — each file's data and
// size as of its last Sync, the directory's entries as of its last SyncDir
// — and the operations since, so that a crash image can keep exactly what
// was synced, or that plus a subset of what was not (in the order it was
// issued, with the last write torn at a sector boundary).
//
// Every operation that changes something counts as a step; at the step
// set by CrashAt the filesystem crashes: OnCrash runs (the test copies
// the bbolt file there, at the same instant) and every call from then on
// fails. Faults are injected by step too.
type simFS struct {
	mu      sync.Mutex
	dir     map[string]*simFile // what readers see
	durable map[string]*simFile // the entries a power cut keeps
	steps   int
	crashAt int // 0: never
	crashed bool
	// OnCrash runs at the crash, under the filesystem's lock.
	OnCrash func()
	// SyncFails makes the Sync at this step fail with EIO (0: none). The
	// data it would have made durable may or may not survive a crash.
	SyncFails int
	// Space bounds the bytes all files may hold (0: no bound); a write
	// past it is cut short and fails with ENOSPC.
	Space int64
	// ShortWriteAt makes the write at this step write half of its bytes
	// and fail with EIO (0: none).
	ShortWriteAt int
}

type simFile struct {
	data    []byte  // what readers see
	synced  []byte  // what survives a crash for sure
	pending []simOp // the changes since the last Sync, in order
}

// simOp is one unsynced change: a write, or a truncation to zero.
type simOp struct {
	trunc bool
	off   int64
	b     []byte
}

var errCrashed = errors.New("simfs: crashed")

func newSimFS() *simFS {
	return &simFS{dir: map[string]*simFile{}, durable: map[string]*simFile{}}
}

// seed makes files durable with the given contents (a crash image).
func (fs *simFS) seed(files map[string][]byte) {
	for name, b := range files {
		f := &simFile{data: clone(b), synced: clone(b)}
		fs.dir[name], fs.durable[name] = f, f
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// CrashAt sets the crash at step n from now (n ≥ 1), or none (n = 0).
func (fs *simFS) CrashAt(n int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashAt = 0
	if n > 0 {
		fs.crashAt = fs.steps + n
	}
}

// Steps is how many steps have run.
func (fs *simFS) Steps() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.steps
}

// Crashed reports whether the crash happened.
func (fs *simFS) Crashed() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.crashed
}

// Crash crashes now, if it has not yet.
func (fs *simFS) Crash() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.crashed {
		fs.crash()
	}
}

func (fs *simFS) crash() {
	fs.crashed = true
	if fs.OnCrash != nil {
		fs.OnCrash()
	}
}

// step counts one change, crashing if it is the one set; it returns the
// step's number or errCrashed. The caller holds mu.
func (fs *simFS) step() (int, error) {
	if fs.crashed {
		return 0, errCrashed
	}
	fs.steps++
	if fs.steps == fs.crashAt {
		fs.crash()
		return 0, errCrashed
	}
	return fs.steps, nil
}

func (fs *simFS) used() int64 {
	var n int64
	for _, f := range fs.dir {
		n += int64(len(f.data))
	}
	return n
}

func (fs *simFS) Create(name string, _ os.FileMode) (vfile, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if _, err := fs.step(); err != nil {
		return nil, err
	}
	f := fs.dir[name]
	if f == nil {
		f = &simFile{}
		fs.dir[name] = f
	} else {
		f.data = f.data[:0:0]
		f.pending = append(f.pending, simOp{trunc: true})
	}
	return &simHandle{fs: fs, f: f}, nil
}

func (fs *simFS) ReadFile(name string) ([]byte, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.crashed {
		return nil, errCrashed
	}
	f := fs.dir[name]
	if f == nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}
	return clone(f.data), nil
}

func (fs *simFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if _, err := fs.step(); err != nil {
		return err
	}
	f := fs.dir[name]
	if f == nil {
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	}
	delete(fs.dir, name)
	return nil
}

func (fs *simFS) SyncDir(string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if _, err := fs.step(); err != nil {
		return err
	}
	fs.durable = map[string]*simFile{}
	for name, f := range fs.dir {
		fs.durable[name] = f
	}
	return nil
}

type simHandle struct {
	fs     *simFS
	f      *simFile
	closed bool
}

func (h *simHandle) WriteAt(b []byte, off int64) (int, error) {
	fs := h.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.step()
	if err != nil {
		return 0, err
	}
	if h.closed {
		return 0, os.ErrClosed
	}
	want, fail := b, error(nil)
	if n == fs.ShortWriteAt {
		want, fail = b[:len(b)/2], syscall.EIO
	}
	if fs.Space > 0 {
		if grow := off + int64(len(want)) - int64(len(h.f.data)); grow > 0 && fs.used()+grow > fs.Space {
			room := max(0, fs.Space-fs.used()+int64(len(h.f.data))-off)
			want, fail = want[:min(int64(len(want)), room)], syscall.ENOSPC
		}
	}
	if end := off + int64(len(want)); end > int64(len(h.f.data)) {
		h.f.data = append(h.f.data, make([]byte, end-int64(len(h.f.data)))...)
	}
	copy(h.f.data[off:], want)
	if len(want) > 0 {
		h.f.pending = append(h.f.pending, simOp{off: off, b: clone(want)})
	}
	return len(want), fail
}

func (h *simHandle) Sync() error {
	fs := h.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.step()
	if err != nil {
		return err
	}
	if h.closed {
		return os.ErrClosed
	}
	if n == fs.SyncFails {
		// As Linux does after a failed writeback: the pages are marked
		// clean, so a later sync would report success without writing
		// them. What they held may or may not be on the disk.
		return syscall.EIO
	}
	for _, op := range h.f.pending {
		if op.trunc {
			h.f.synced = h.f.synced[:0]
		} else {
			h.f.synced = writeAt(h.f.synced, op.off, op.b)
		}
	}
	h.f.pending = nil
	return nil
}

func (h *simHandle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	h.closed = true
	return nil
}

// keep says which unsynced changes a crash image keeps.
type keep int

const (
	keepSynced keep = iota // exactly what was synced
	keepSome               // a random subset, in order, a write torn
	keepTorn               // everything but the last write, which is torn
	keepAll                // everything (what a process kill leaves)
)

func (k keep) String() string {
	return [...]string{"synced only", "some unsynced", "last write torn", "all"}[k]
}

// image is what a power cut at the crash leaves: each file the directory
// durably holds, with its synced data and the unsynced changes k keeps.
func (fs *simFS) image(rng *rand.Rand, k keep) map[string][]byte {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	names := make([]string, 0, len(fs.durable))
	for name := range fs.durable {
		names = append(names, name)
	}
	sort.Strings(names) // the same seed, the same image
	out := map[string][]byte{}
	for _, name := range names {
		f := fs.durable[name]
		b := clone(f.synced)
		if k == keepAll {
			out[name] = clone(f.data)
			continue
		}
		ops := f.pending
		if k == keepSynced {
			ops = nil
		}
		for i, op := range ops {
			last := i == len(ops)-1
			switch {
			case op.trunc:
				b = b[:0] // (kept in order: a later write never lands without it)
			case k == keepTorn && !last:
				b = writeAt(b, op.off, op.b)
			case k == keepTorn:
				b = tear(rng, b, op, false)
			case rng.IntN(2) == 0:
				// dropped
			case rng.IntN(4) == 0:
				b = tear(rng, b, op, true)
			default:
				b = writeAt(b, op.off, op.b)
			}
			if op.trunc && k == keepSome && rng.IntN(2) == 0 {
				// The truncation, and so everything after it, is lost.
				b = clone(f.synced)
				break
			}
		}
		out[name] = b
	}
	return out
}

// sector is the unit a write is torn at: whole sectors land or do not.
const sector = 512

func writeAt(b []byte, off int64, p []byte) []byte {
	if end := off + int64(len(p)); end > int64(len(b)) {
		b = append(b, make([]byte, end-int64(len(b)))...)
	}
	copy(b[off:], p)
	return b
}

// tear applies some of op's sectors: a prefix of them, or (scatter) an
// arbitrary subset.
func tear(rng *rand.Rand, b []byte, op simOp, scatter bool) []byte {
	end := op.off + int64(len(op.b))
	first := op.off / sector * sector
	cut := first + rng.Int64N((end-first)/sector+1)*sector // a prefix up to cut
	for s := first; s < end; s += sector {
		lo, hi := max(s, op.off), min(s+sector, end)
		if scatter && rng.IntN(2) == 0 || !scatter && s >= cut {
			continue
		}
		b = writeAt(b, lo, op.b[lo-op.off:hi-op.off])
	}
	return b
}

// describe names an image's files and sizes, for failure messages.
func describe(files map[string][]byte) string {
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	s := ""
	for _, n := range names {
		s += fmt.Sprintf(" %s:%d", n, len(files[n]))
	}
	return s
}
