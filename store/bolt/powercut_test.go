package bolt

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/switchboardhq/switchboard/store"
)

var powerCuts = flag.Int("powercuts", 0, "simulated power cuts TestPowerCut runs (default 300, 30 with -race; CI runs 2,000, the long run 100,000)")

// cutsOr is n, or def (a tenth of it with -race) when n is 0.
func cutsOr(n, def int) int {
	switch {
	case n > 0:
		return n
	case raceBuild:
		return max(1, def/10)
	}
	return def
}

// crashImage is what a power cut leaves: the bbolt file as of its last
// commit and the log's files as the simulated filesystem keeps them.
type crashImage struct {
	bbolt []byte
	log   map[string][]byte
}

// powerCut is one store's life on the simulated filesystem, from a crash
// image to the next crash.
type powerCut struct {
	t    *testing.T
	dir  string
	path string
	rng  *rand.Rand
}

// openImage writes img's bbolt file and opens the store on a simulated
// filesystem holding img's log, crashing at step crashAt (0: never). A
// crash during Open returns the image it leaves and a nil store.
func (p *powerCut) openImage(img crashImage, opts *Options, crashAt int, k keep) (*Store, *simFS, *crashImage, error) {
	if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.t.Fatal(err)
	}
	if img.bbolt != nil {
		if err := os.WriteFile(p.path, img.bbolt, 0o600); err != nil {
			p.t.Fatal(err)
		}
	}
	fs := newSimFS()
	fs.seed(img.log)
	fs.CrashAt(crashAt)
	s, err := open(p.path, opts, fs)
	if err != nil {
		if !fs.Crashed() {
			return nil, fs, nil, err
		}
		// Open closed the bbolt file: what it holds is every commit
		// recovery made.
		b, rerr := os.ReadFile(p.path)
		if rerr != nil {
			p.t.Fatal(rerr)
		}
		return nil, fs, &crashImage{bbolt: b, log: fs.image(p.rng, k)}, nil
	}
	return s, fs, nil, nil
}

// snapshotAtCrash makes fs copy s's bbolt file — its last commit — at the
// instant it crashes, into *out.
func snapshotAtCrash(t *testing.T, s *Store, fs *simFS, out *[]byte) {
	fs.OnCrash = func() {
		var buf bytes.Buffer
		if err := s.db.View(func(tx *bbolt.Tx) error {
			buf.Grow(int(tx.Size()))
			_, err := tx.WriteTo(&buf)
			return err
		}); err != nil {
			t.Errorf("snapshot at the crash: %v", err)
		}
		*out = buf.Bytes()
	}
}

// kvModel is what the writers were told: txn n writes n/a, n/b, n/c
// together; some txns instead delete all three keys of an earlier one.
type kvModel struct {
	mu      sync.Mutex
	next    int
	live    map[int]bool // acknowledged writes not acknowledged deleted
	deleted map[int]bool // acknowledged deletions
	// in flight at the crash (not acknowledged): may have happened or not
	maybeWrite, maybeDelete map[int]bool
}

func newKVModel() *kvModel {
	return &kvModel{live: map[int]bool{}, deleted: map[int]bool{}, maybeWrite: map[int]bool{}, maybeDelete: map[int]bool{}}
}

// step runs one transaction against s and records its outcome.
func (m *kvModel) step(s *Store, rng *rand.Rand) error {
	m.mu.Lock()
	del := -1
	// Deletions keep the data bounded (about 100 live txns), so each cut
	// costs the same however many came before.
	if len(m.live) > 4 && (rng.IntN(3) == 0 || len(m.live) > 100 && rng.IntN(3) > 0) {
		for n := range m.live {
			if !m.maybeDelete[n] {
				del = n
				break
			}
		}
	}
	n := m.next
	if del >= 0 {
		m.maybeDelete[del] = true
	} else {
		m.next++
		m.maybeWrite[n] = true
	}
	m.mu.Unlock()
	size := 10 + rng.IntN(600)
	if rng.IntN(20) == 0 {
		size = 3000 + rng.IntN(9000) // records over several sectors
	}
	err := s.Update(bg, func(tx store.Tx) error {
		for _, part := range []string{"a", "b", "c"} {
			if del >= 0 {
				if err := tx.Delete("t", fmt.Appendf(nil, "%08d/%s", del, part)); err != nil {
					return err
				}
				continue
			}
			if err := tx.Put("t", fmt.Appendf(nil, "%08d/%s", n, part), bytes.Repeat([]byte{byte(n)}, size)); err != nil {
				return err
			}
		}
		return nil
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		return err // still "maybe"
	}
	if del >= 0 {
		delete(m.maybeDelete, del)
		delete(m.live, del)
		m.deleted[del] = true
	} else {
		delete(m.maybeWrite, n)
		m.live[n] = true
	}
	return nil
}

// check compares what s, just reopened after a crash, holds with what was
// acknowledged, and settles the in-flight transactions by what s shows.
func (m *kvModel) check(s store.Store) error { return m.verify(s, true) }

// verify compares what s holds with what was acknowledged; with settle,
// the in-flight transactions become what s shows (only after a crash: a
// live store's view of a failed commit is not what the disk holds).
func (m *kvModel) verify(s store.Store, settle bool) error {
	parts := map[int]int{}
	err := s.View(bg, func(tx store.Tx) error {
		return tx.Scan("t", nil, nil, func(k, _ []byte) bool {
			n, _ := strconv.Atoi(strings.SplitN(string(k), "/", 2)[0])
			parts[n]++
			return true
		})
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, c := range parts {
		switch {
		case c != 3:
			return fmt.Errorf("txn %d: %d of its 3 keys (half applied)", n, c)
		case m.deleted[n]:
			return fmt.Errorf("txn %d: deleted (acknowledged), but its keys are back", n)
		case !m.live[n] && !m.maybeWrite[n]:
			return fmt.Errorf("txn %d: present, but never written", n)
		}
	}
	for n := range m.live {
		if parts[n] == 0 && !m.maybeDelete[n] {
			return fmt.Errorf("txn %d: acknowledged, lost", n)
		}
	}
	if !settle {
		return nil
	}
	// What the crash decided becomes what the store says.
	for n := range m.maybeWrite {
		if parts[n] == 3 {
			m.live[n] = true
		}
	}
	for n := range m.maybeDelete {
		if parts[n] == 0 {
			delete(m.live, n)
			m.deleted[n] = true
		}
	}
	clear(m.maybeWrite)
	clear(m.maybeDelete)
	return nil
}

// TestPowerCut crashes the store at random points of its writes, its
// checkpoints, its log rotations and its recovery, on a filesystem that
// keeps only what was synced (and, in some images, some of what was not,
// torn at sectors), chained: each crash image is the next run's start.
// After every crash the store must open, hold every acknowledged commit
// and each unacknowledged one whole or not at all.
func TestPowerCut(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d (a failure names the cut)", seed)
	dir := t.TempDir()
	p := &powerCut{t: t, dir: dir, path: filepath.Join(dir, "sb.db"), rng: rand.New(rand.NewPCG(seed, 1))}
	m := newKVModel()
	var img crashImage
	cuts, recoveries := 0, 0
	for want := cutsOr(*powerCuts, 300); cuts < want; {
		opts := &Options{
			fileNoSync:       true,                      // its crash image is a snapshot
			CheckpointBytes:  1 << (10 + p.rng.IntN(5)), // 1–16 KiB
			LogSegmentSize:   int64(8 << (10 + p.rng.IntN(3))),
			CommitEachUpdate: p.rng.IntN(3) == 0,
			MaxBatch:         1 + p.rng.IntN(8),
		}
		k := keep(p.rng.IntN(4))
		crashAt := 1 + p.rng.IntN(120)
		if p.rng.IntN(8) == 0 {
			crashAt = 1 + p.rng.IntN(6) // likely during recovery
		}
		s, fs, during, err := p.openImage(img, opts, crashAt, k)
		if err != nil {
			t.Fatalf("cut %d: open after a power cut (%s): %v; image%s", cuts, k, err, describe(img.log))
		}
		cuts++
		if during != nil {
			recoveries++
			img = *during
			continue
		}
		if err := m.check(s); err != nil {
			t.Fatalf("cut %d (image: %s%s): %v", cuts, k, describe(img.log), err)
		}
		var bb []byte
		snapshotAtCrash(t, s, fs, &bb)
		var wg sync.WaitGroup
		for w := range 1 + p.rng.IntN(4) {
			rng := rand.New(rand.NewPCG(seed, uint64(cuts*8+w)))
			wg.Go(func() {
				for !fs.Crashed() {
					if err := m.step(s, rng); err != nil && !errors.Is(err, errCrashed) && !errors.Is(err, errLog) {
						t.Errorf("write: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		_ = s.Close()
		img = crashImage{bbolt: bb, log: fs.image(p.rng, k)}
		if t.Failed() {
			return
		}
	}
	// The last image opens and is checked too.
	s, _, _, err := p.openImage(img, &Options{fileNoSync: true}, 0, keepAll)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := m.check(s); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d power cuts (%d during recovery), %d commits acknowledged", cuts, recoveries, len(m.live)+len(m.deleted))
}
