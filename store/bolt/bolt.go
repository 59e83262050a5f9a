// Package bolt is the default switchboard store: a bbolt file, with a
// write-ahead log beside it.
//
// Each table is a top-level bucket, created by its first Put. Any number of
// readers run at once, each over a consistent snapshot; writes are
// serialized.
//
// # Commits
//
// A bbolt commit writes every page it changed — a leaf and the branches
// above it in each B+tree it touched, scattered over the file — and syncs
// twice. A switchboard write touches several trees (a record, its indexes,
// an audit event), so committing each one to bbolt would cost several times
// a single Put. Instead, a commit appends one record holding everything the
// transaction wrote to a write-ahead log ("<path>.wal0" and "<path>.wal1",
// preallocated, so the append is one write and one fdatasync of file data),
// and returns once that is durable. The writes are kept in an in-memory
// ordered tree that every transaction reads over the bbolt file, and a
// checkpoint, running in the background, applies them to the bbolt file in
// one bbolt transaction every so often (about every megabyte of log, or
// sooner after many deletions). Only then is that part of the log reused.
//
// Open replays what the log holds past the last checkpoint into the bbolt
// file, so a crash loses nothing that Update acknowledged; Close checkpoints
// everything and removes the log, leaving a plain bbolt file. The bbolt file
// itself is only ever changed by bbolt's own synced commits, so it is a
// consistent bbolt file at every moment. A log write or sync that fails
// leaves the outcome of that commit unknown: the store then refuses writes
// (returning the error) until it is reopened, which recovers what reached
// the disk.
//
// # Group commit
//
// Update calls that arrive while a commit is in progress are queued, and the
// next commit runs them back to back inside one transaction: each function
// writes into its own overlay (so it sees the writes of those before it, and
// its own), which is applied only if it returns nil — a function that fails
// or panics is undone alone. One log record and one sync then make the whole
// batch durable, and every caller returns after it. Functions run one at a
// time, so the result is the same as running them serially. If the batch
// cannot be committed, each function is run again in a transaction of its
// own (the store contract allows a function to run more than once).
// Options.CommitEachUpdate turns this off.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
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
	// Mode is the permission of a newly created file (the bbolt file and
	// its log's). Zero means 0600.
	Mode os.FileMode
	// CommitEachUpdate commits every Update in a transaction of its own
	// instead of grouping concurrent ones (see Group commit).
	CommitEachUpdate bool
	// MaxBatch bounds how many Update calls one commit groups. Zero means
	// 256.
	MaxBatch int
	// NoSync skips every fsync (of the log and of the bbolt file). A crash
	// (of the machine, not only the process) can then lose commits that
	// Update acknowledged, or corrupt the file: it is for bulk loads that
	// can be redone and for benchmarks measuring CPU cost, never for work
	// that must not be lost.
	NoSync bool
	// LogSegmentSize is the size of each of the two write-ahead log files
	// past which the log moves to the other one. Zero means 8 MiB. The
	// checkpoint runs far more often (see CheckpointBytes), so this mostly
	// bounds the disk the log takes.
	LogSegmentSize int64
	// CheckpointBytes is how many bytes of writes are logged before a
	// checkpoint applies them to the bbolt file. Zero means 1 MiB. The
	// writes not yet checkpointed are held in memory: about twice this,
	// plus the trees holding them.
	CheckpointBytes int

	// fileNoSync skips the bbolt file's syncs but not the log's: for
	// tests on the simulated filesystem, which take the bbolt file's
	// crash image from a snapshot of its last commit.
	fileNoSync bool
}

// Store is a bbolt-backed store.
type Store struct {
	db    *bbolt.DB
	fs    vfs // the log's filesystem
	path  string
	each  bool
	group *group.Committer
	opts  Options

	// wmu serializes writers; everything below it is the writer's.
	wmu     sync.Mutex
	log     *wal
	mem     *tree // the writes since the running checkpoint began
	applied uint64
	// logged since the last checkpoint began: bytes of log, deletions
	sinceBytes, sinceDels int
	ck                    *checkpoint
	scratch               []byte
	broken                error // a log write failed: writes are refused
	closed                bool

	// vmu guards pub: a reader takes its bbolt snapshot and pub together,
	// under RLock, so that a checkpoint's tree is dropped from what it
	// reads only along with its bbolt snapshot showing that checkpoint.
	vmu sync.RWMutex
	pub layers // what readers see over the bbolt file; never changed
}

// layers are the trees of writes not yet in the bbolt file: mem, and under
// it the tree a running checkpoint is applying (nil if none is).
type layers struct{ mem, frozen *tree }

// maxRecord bounds one log record (a record's length is 32 bits).
const maxRecord = 1<<31 - 1

// checkpointDeletes is how many deletions start a checkpoint whatever
// their size: until it, a deleted key is an entry that every scan over it
// steps past (the queue's ready index, emptied from its front by claims).
const checkpointDeletes = 512

// checkpoint is one background application of a tree to the bbolt file.
type checkpoint struct {
	m    *tree
	upTo uint64 // the last LSN it covers
	done chan struct{}
	err  error
}

var (
	_ store.Store = (*Store)(nil)
	_ io.WriterTo = (*Store)(nil)
)

// Open opens (creating if needed) the bbolt file at path, applying to it
// whatever its write-ahead log holds that is not in it yet.
func Open(path string, opts *Options) (*Store, error) {
	return open(path, opts, osFS{})
}

// open is Open with the log on fs.
func open(path string, opts *Options, fs vfs) (*Store, error) {
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
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.LogSegmentSize <= 0 {
		o.LogSegmentSize = 8 << 20
	}
	if o.CheckpointBytes <= 0 {
		o.CheckpointBytes = 1 << 20
	}
	db, err := bbolt.Open(path, o.Mode, &bbolt.Options{Timeout: o.Timeout, NoSync: o.NoSync || o.fileNoSync})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("bolt: open %s: %w: another process holds the file (one process opens a bolt store at a time; read a running host's file with cmd/switchboard, which reads a snapshot)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	st := &Store{db: db, fs: fs, path: path, each: o.CommitEachUpdate, opts: o, mem: newTree()}
	st.pub = layers{mem: st.mem.Clone()}
	if err := st.recover(); err != nil {
		_ = db.Close()
		return nil, err
	}
	st.group = group.New(group.Config{
		Name: "bolt", MaxBatch: o.MaxBatch,
		Final: func(err error) bool { return errors.Is(err, errLog) },
	}, st.write)
	return st, nil
}

// recover checks the bbolt file, applies the log's records past the last
// checkpoint to it and starts a fresh log.
func (s *Store) recover() error {
	if err := s.check(); err != nil {
		return err
	}
	err := s.db.View(func(btx *bbolt.Tx) error {
		if b := btx.Bucket([]byte(walTable)); b != nil {
			if v := b.Get(appliedKey); len(v) == 8 {
				s.applied = binary.BigEndian.Uint64(v)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bolt: open %s: %w", s.path, err)
	}
	recs, err := readLog(s.fs, s.path, s.applied)
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		last := recs[len(recs)-1].lsn
		err := s.db.Update(func(btx *bbolt.Tx) error {
			for _, r := range recs {
				if err := applyOps(btx, r.payload); err != nil {
					return fmt.Errorf("record %d: %w", r.lsn, err)
				}
			}
			return putApplied(btx, last)
		})
		if err != nil {
			return fmt.Errorf("bolt: recover %s from its write-ahead log: %w", s.path, err)
		}
		s.applied = last
	}
	s.log, err = openWAL(s.fs, s.path, s.applied+1, s.opts.LogSegmentSize, s.opts.Mode, s.opts.NoSync)
	return err
}

func putApplied(btx *bbolt.Tx, lsn uint64) error {
	b, err := btx.CreateBucketIfNotExists([]byte(walTable))
	if err != nil {
		return err
	}
	return b.Put(appliedKey, binary.BigEndian.AppendUint64(nil, lsn))
}

// Path returns the bbolt file the store was opened on. While the store is
// open, its write-ahead log is beside it, in Path()+".wal0" and ".wal1".
func (s *Store) Path() string { return s.path }

// begin opens a bbolt read transaction and takes the tree readers see with
// it, so that the two agree.
func (s *Store) begin() (*bbolt.Tx, layers, error) {
	s.vmu.RLock()
	defer s.vmu.RUnlock()
	btx, err := s.db.Begin(false)
	if err != nil {
		return nil, layers{}, mapErr(err)
	}
	return btx, s.pub, nil
}

// View runs fn in a read-only transaction over a snapshot of the store.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bolt: view: %w", err)
	}
	btx, l, err := s.begin()
	if err != nil {
		return err
	}
	defer func() { _ = btx.Rollback() }()
	return fn(&tx{btx: btx, mem: l.mem, frozen: l.frozen})
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
		return s.write(ctx, fn)
	}
	return s.group.Update(ctx, fn)
}

// write runs fn in one transaction and logs what it wrote.
func (s *Store) write(_ context.Context, fn func(store.Tx) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	if s.broken != nil {
		return s.broken
	}
	if err := s.settle(false); err != nil {
		return err
	}
	btx, err := s.db.Begin(false)
	if err != nil {
		return mapErr(err)
	}
	w := s.mem.Clone()
	p := &pending{ops: s.scratch[:0]}
	frozen := s.frozen()
	err = func() error {
		// The read transaction ends with fn: waiting for a checkpoint
		// (below) while holding it could deadlock, as a bbolt commit
		// that grows the file waits for every reader.
		defer func() { _ = btx.Rollback() }()
		return fn(&tx{btx: btx, mem: w, frozen: frozen, log: p})
	}()
	if err != nil {
		return err
	}
	if cap(p.ops) <= 1<<20 {
		defer func() { s.scratch = p.ops[:0] }()
	}
	if p.n == 0 {
		return nil // nothing written: nothing to log
	}
	if len(p.ops) > maxRecord {
		return fmt.Errorf("bolt: one commit of %d bytes is over the log's limit of %d", len(p.ops), maxRecord)
	}
	if !s.log.fits(len(p.ops)) {
		if err := s.rotate(); err != nil {
			return err
		}
		// Rotating may have started and finished checkpoints: put the
		// writes on the tree as it is now.
		w, frozen = s.mem.Clone(), s.frozen()
		if err := decodeOps(p.ops, func(o walOp) error {
			w.ReplaceOrInsert(&item{table: string(o.table), key: string(o.key), val: bytes.Clone(o.value), del: o.del})
			return nil
		}); err != nil {
			return err
		}
	}
	lsn, err := s.log.append(p.ops)
	if err != nil {
		if errors.Is(err, errLog) {
			s.broken = err
		}
		return err
	}
	s.mem = w
	s.publish(layers{mem: w.Clone(), frozen: frozen})
	s.sinceBytes += len(p.ops)
	s.sinceDels += p.dels
	if s.ck == nil && (s.sinceBytes >= s.opts.CheckpointBytes || s.sinceDels >= checkpointDeletes) {
		s.startCheckpoint(lsn)
	}
	return nil
}

// checkpointHold, when a test sets it, is a channel each checkpoint waits
// on before it applies anything: the writes meanwhile read through its
// tree (frozen). Nil outside tests.
var checkpointHold chan struct{}

// frozen is the tree of the running checkpoint, or nil.
func (s *Store) frozen() *tree {
	if s.ck == nil {
		return nil
	}
	return s.ck.m
}

func (s *Store) publish(l layers) {
	s.vmu.Lock()
	s.pub = l
	s.vmu.Unlock()
}

// startCheckpoint applies everything logged up to lsn to the bbolt file,
// in the background: the writer's tree is frozen for it, and a new one
// takes the writes from now on.
func (s *Store) startCheckpoint(lsn uint64) {
	ck := &checkpoint{m: s.mem, upTo: lsn, done: make(chan struct{})}
	s.ck, s.sinceBytes, s.sinceDels = ck, 0, 0
	s.mem = newTree()
	s.publish(layers{mem: s.mem.Clone(), frozen: ck.m})
	hold := checkpointHold
	go func() {
		defer close(ck.done)
		if hold != nil {
			<-hold // a test keeping the checkpoint running
		}
		ck.err = s.db.Update(func(btx *bbolt.Tx) error {
			if err := applyTree(btx, ck.m); err != nil {
				return err
			}
			return putApplied(btx, ck.upTo)
		})
	}()
}

// settle finishes the checkpoint that was started, if it is done (or,
// with wait, once it is): readers stop reading its tree, which is in their
// bbolt snapshots from now on.
func (s *Store) settle(wait bool) error {
	ck := s.ck
	if ck == nil {
		return nil
	}
	if wait {
		<-ck.done
	} else {
		select {
		case <-ck.done:
		default:
			return nil
		}
	}
	s.ck = nil
	if ck.err != nil {
		s.broken = fmt.Errorf("%w: checkpoint: %w", errLog, ck.err)
		return s.broken
	}
	s.applied = ck.upTo
	s.publish(layers{mem: s.mem.Clone()})
	return nil
}

// rotate moves the log to its other segment, once every record there is
// in the bbolt file.
func (s *Store) rotate() error {
	if o := s.log.other(); o != nil {
		for o.last > s.applied {
			if s.ck == nil {
				s.startCheckpoint(s.log.next - 1)
			}
			if err := s.settle(true); err != nil {
				return err
			}
		}
	}
	if err := s.log.rotate(); err != nil {
		if errors.Is(err, errLog) {
			s.broken = err
		}
		return err
	}
	return nil
}

// WriteTo writes a consistent copy of the store to w as a plain bbolt file
// (no log beside it) holding every write committed before the call, while
// writes go on: a hot backup. Writes wait only while what is logged is
// checkpointed into the bbolt file; the copy itself is read from a bbolt
// snapshot.
func (s *Store) WriteTo(w io.Writer) (int64, error) {
	btx, err := s.snapshot()
	if err != nil {
		return 0, err
	}
	defer func() { _ = btx.Rollback() }()
	n, err := btx.WriteTo(w)
	if err != nil {
		return n, fmt.Errorf("bolt: copy %s: %w", s.path, err)
	}
	return n, nil
}

// snapshot checkpoints everything logged and opens a bbolt read
// transaction holding it all.
func (s *Store) snapshot() (*bbolt.Tx, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	if err := s.settle(true); err != nil {
		return nil, err
	}
	if s.log.next-1 > s.applied {
		s.startCheckpoint(s.log.next - 1)
		if err := s.settle(true); err != nil {
			return nil, err
		}
	}
	btx, err := s.db.Begin(false)
	return btx, mapErr(err)
}

// Close checkpoints every logged write into the bbolt file, removes the
// log and closes the file, waiting for transactions in flight. If the
// checkpoint fails, the log is kept, so the next Open recovers from it.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.settle(true)
	if err == nil && s.log.next-1 > s.applied {
		err = s.db.Update(func(btx *bbolt.Tx) error {
			if err := applyTree(btx, s.mem); err != nil {
				return err
			}
			return putApplied(btx, s.log.next-1)
		})
		if err != nil {
			err = fmt.Errorf("bolt: close %s: checkpoint: %w", s.path, err)
		}
	}
	if err == nil {
		err = s.log.remove()
	} else {
		_ = s.log.close()
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

func mapErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w (%v)", store.ErrClosed, err)
	}
	if errors.Is(err, berrors.ErrTxNotWritable) {
		return fmt.Errorf("%w (%v)", store.ErrReadOnly, err)
	}
	return err
}
