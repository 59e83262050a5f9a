package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/switchboardhq/switchboard/store"
)

// simStore opens a store with a tiny log on a fresh simulated filesystem.
func simStore(t *testing.T) (*Store, *simFS, *powerCut) {
	t.Helper()
	dir := t.TempDir()
	p := &powerCut{t: t, dir: dir, path: filepath.Join(dir, "sb.db"), rng: rand.New(rand.NewPCG(1, 2))}
	s, fs, _, err := p.openImage(crashImage{}, &Options{fileNoSync: true, CheckpointBytes: 4 << 10, LogSegmentSize: 16 << 10}, 0, keepSynced)
	if err != nil {
		t.Fatal(err)
	}
	return s, fs, p
}

// crashAndReopen cuts the power now and opens what each kind of image
// leaves, checking m against each.
func crashAndReopen(t *testing.T, s *Store, fs *simFS, p *powerCut, m *kvModel) {
	t.Helper()
	var bb []byte
	snapshotAtCrash(t, s, fs, &bb)
	fs.Crash()
	_ = s.Close()
	for k := keepSynced; k <= keepAll; k++ {
		img := crashImage{bbolt: bb, log: fs.image(p.rng, k)}
		r, _, _, err := p.openImage(img, &Options{fileNoSync: true}, 0, k)
		if err != nil {
			t.Fatalf("reopen (%s): %v", k, err)
		}
		// Each image settles the in-flight calls its own way.
		mm := &kvModel{next: m.next, live: copyKeys(m.live), deleted: copyKeys(m.deleted),
			maybeWrite: copyKeys(m.maybeWrite), maybeDelete: copyKeys(m.maybeDelete)}
		if err := mm.check(r); err != nil {
			t.Fatalf("after the cut (%s): %v", k, err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func copyKeys(m map[int]bool) map[int]bool {
	c := make(map[int]bool, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// A failed fsync of the log leaves the commit's outcome unknown (the data
// may or may not be on the disk, and Linux marks the pages clean, so a
// second fsync would report success without writing them): the store
// reports the error, never retries the sync, and refuses every write after
// it until reopened — while reads go on. Reopening recovers every
// acknowledged commit.
func TestSyncFailureStopsWrites(t *testing.T) {
	hit := 0
	// The failing sync lands on a record's sync, a rotation's header
	// sync or a new segment's directory sync, depending on the step.
	for d := 1; d <= 40; d++ {
		s, fs, p := simStore(t)
		m := newKVModel()
		rng := rand.New(rand.NewPCG(3, uint64(d)))
		for range 40 {
			if err := m.step(s, rng); err != nil {
				t.Fatal(err)
			}
		}
		fs.SyncFails = fs.Steps() + d
		var err error
		for i := 0; i < 20 && err == nil; i++ {
			err = m.step(s, rng)
		}
		if err == nil {
			_ = s.Close()
			continue // step d was no sync
		}
		hit++
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "sync") {
			t.Fatalf("step %d: commit whose sync failed: %v, want EIO from the sync", d, err)
		}
		steps := fs.Steps()
		for range 3 {
			if err := m.step(s, rng); !errors.Is(err, syscall.EIO) {
				t.Fatalf("step %d: write after a failed sync: %v, want the sticky EIO", d, err)
			}
		}
		if fs.Steps() != steps {
			t.Fatalf("step %d: the store touched the log %d more times after its sync failed", d, fs.Steps()-steps)
		}
		if err := m.verify(s, false); err != nil { // reads go on, and show the acknowledged writes
			t.Fatal(err)
		}
		crashAndReopen(t, s, fs, p, m)
	}
	if hit < 10 {
		t.Fatalf("only %d of 40 steps were syncs: the test tests little", hit)
	}
}

// A write that is cut short is an unknown outcome too: writes stop until
// the store is reopened, and nothing acknowledged is lost.
func TestShortWriteStopsWrites(t *testing.T) {
	s, fs, p := simStore(t)
	m := newKVModel()
	rng := rand.New(rand.NewPCG(5, 6))
	for range 30 {
		if err := m.step(s, rng); err != nil {
			t.Fatal(err)
		}
	}
	fs.ShortWriteAt = fs.Steps() + 1
	if err := m.step(s, rng); !errors.Is(err, syscall.EIO) {
		t.Fatalf("short write: %v", err)
	}
	if err := m.step(s, rng); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after a short write: %v, want the sticky error", err)
	}
	crashAndReopen(t, s, fs, p, m)
}

// A full disk while the log grows (it preallocates ahead of its records)
// refuses the commit with ENOSPC before anything of it is written — so the
// outcome is known, nothing acknowledged is lost, and writes go on by
// themselves once there is room again.
func TestDiskFull(t *testing.T) {
	s, fs, p := simStore(t)
	m := newKVModel()
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10 {
		if err := m.step(s, rng); err != nil {
			t.Fatal(err)
		}
	}
	fs.mu.Lock()
	fs.Space = fs.used() // what the log has preallocated, and no more
	fs.mu.Unlock()
	var full error
	for i := 0; i < 10000 && full == nil; i++ {
		full = m.step(s, rng)
	}
	if !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("writes into a full disk: %v, want ENOSPC", full)
	}
	if err := m.verify(s, false); err != nil {
		t.Fatal(err)
	}
	// Still full: a commit that fits in what is preallocated goes in,
	// one that does not is refused again, cleanly.
	for range 20 {
		if err := m.step(s, rng); err != nil && !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write into a full disk: %v", err)
		}
	}
	fs.mu.Lock()
	fs.Space = 0
	fs.mu.Unlock()
	for range 50 {
		if err := m.step(s, rng); err != nil {
			t.Fatalf("write after room was made: %v", err)
		}
	}
	if err := m.check(s); err != nil {
		t.Fatal(err)
	}
	crashAndReopen(t, s, fs, p, m)
}

// A crash after recovery applied the log to the bbolt file but before the
// log was restarted (or between a checkpoint's bbolt commit and the reuse of
// the log it covered) leaves records that are in the bbolt file already:
// opening again applies nothing twice and loses nothing.
func TestReplayIsIdempotent(t *testing.T) {
	s, fs, p := simStore(t)
	m := newKVModel()
	rng := rand.New(rand.NewPCG(9, 10))
	for range 60 {
		if err := m.step(s, rng); err != nil {
			t.Fatal(err)
		}
	}
	var bb []byte
	snapshotAtCrash(t, s, fs, &bb)
	fs.Crash()
	_ = s.Close()
	img := crashImage{bbolt: bb, log: fs.image(p.rng, keepSynced)}
	for i := range 3 {
		// Crash at the first log step of Open: after recovery's bbolt
		// commit, before the log is restarted.
		_, _, during, err := p.openImage(img, &Options{fileNoSync: true}, 1, keepSynced)
		if err != nil || during == nil {
			t.Fatalf("round %d: open crashing in recovery: %v (crashed: %v)", i, err, during != nil)
		}
		if bytes.Equal(during.bbolt, img.bbolt) && i == 0 {
			t.Fatal("recovery committed nothing to the bbolt file: the test tests nothing")
		}
		img = *during
	}
	r, _, _, err := p.openImage(img, &Options{fileNoSync: true}, 0, keepSynced)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := m.check(r); err != nil {
		t.Fatal(err)
	}
}

// One damaged byte in a log segment's header — its magic, its first LSN,
// its salt or its CRC — makes the records after it unreadable. Open must
// refuse, naming the file, and leave it as it is: reopening without those
// records would lose acknowledged commits silently, and restarting the log
// would erase them.
func TestDamagedSegmentHeaderRefused(t *testing.T) {
	cp, _ := logged(t, 10, func(int) []byte { return []byte("v") })
	seg := cp + ".wal0"
	orig, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 7, 8, 15, 16, 23, 24, 27} {
		t.Run(fmt.Sprint("byte ", off), func(t *testing.T) {
			if err := os.WriteFile(seg, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			damage(t, seg, off)
			before, _ := os.ReadFile(seg)
			s, err := Open(cp, nil)
			if err == nil {
				_ = s.Close()
				t.Fatal("a log with a damaged header opened")
			}
			if !strings.Contains(err.Error(), seg) || !strings.Contains(err.Error(), "damaged") {
				t.Fatalf("error does not name the damaged file: %v", err)
			}
			if after, _ := os.ReadFile(seg); !bytes.Equal(before, after) {
				t.Fatal("the damaged segment was changed by the refused Open")
			}
		})
	}
	// Restored, the log opens with every record.
	if err := os.WriteFile(seg, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cp); len(got) != 10 {
		t.Fatalf("recovered %d keys, want 10", len(got))
	}
}

// A segment whose header never reached the disk whole (a crash while it
// was created) holds nothing but zeros after it: no record was ever
// written there, so it is no damage, and Open goes on.
func TestUnwrittenSegmentOpens(t *testing.T) {
	cp, _ := logged(t, 3, func(int) []byte { return []byte("v") })
	b := make([]byte, 64<<10)
	copy(b, "sbwal\x00\x00") // a header cut short
	if err := os.WriteFile(cp+".wal1", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cp); len(got) != 3 {
		t.Fatalf("recovered %d keys, want 3", len(got))
	}
	for _, n := range []int{0, 100} { // and a file cut inside its header
		if err := os.WriteFile(cp+".wal1", make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(cp, nil)
		if err != nil {
			t.Fatalf("a %d-byte segment: %v", n, err)
		}
		_ = s.Close()
	}
}

// A byte flipped anywhere in the bbolt file never kills the process: bbolt
// reads its pages through a memory map without bounds checks, and the
// store turns what a damaged page does — a fault, a panic, keys out of
// order — into ErrDamaged, at Open or at the read that meets it.
func TestDamagedBboltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		put(t, s, func(tx store.Tx) error {
			for j := range 50 {
				if err := tx.Put(fmt.Sprint("t", j%3), fmt.Appendf(nil, "k%03d-%02d", i, j), bytes.Repeat([]byte{'v'}, 40)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	damaged, fine := 0, 0
	for range 600 {
		b := bytes.Clone(orig)
		off := 2*4096 + rng.IntN(len(b)-2*4096) // past bbolt's two meta pages, which carry checksums
		b[off] ^= byte(1 + rng.IntN(255))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, &Options{Timeout: -1})
		if err != nil {
			if !errors.Is(err, ErrDamaged) && !strings.Contains(err.Error(), path) {
				t.Fatalf("byte %d: open error names neither damage nor the file: %v", off, err)
			}
			damaged++
			continue
		}
		err = s.View(bg, func(tx store.Tx) error {
			for j := range 3 {
				if err := tx.Scan(fmt.Sprint("t", j), nil, nil, func(k, v []byte) bool { return true }); err != nil {
					return err
				}
				if _, err := tx.Get(fmt.Sprint("t", j), []byte("k020-00")); err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, ErrDamaged):
			damaged++
		case err != nil:
			t.Fatalf("byte %d: %v", off, err)
		default:
			fine++
		}
		_ = s.Close()
	}
	t.Logf("600 flips: %d found damaged, %d read without error (unused space, or a value's bytes)", damaged, fine)
	if damaged == 0 {
		t.Fatal("no flip was found: the test tests nothing")
	}
}
