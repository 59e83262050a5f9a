package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/switchboardhq/switchboard/store"
)

var bg = context.Background()

// crashCopy copies the store's files as a crash would leave them: the
// bbolt file and both log segments, without Close. It waits for a running
// checkpoint first (its bbolt commit is in the file or not, never half of
// it, but a copy taken while bbolt writes could be).
func crashCopy(t *testing.T, s *Store) string {
	t.Helper()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.ck != nil {
		<-s.ck.done
	}
	dst := filepath.Join(t.TempDir(), "copy.db")
	for _, suffix := range []string{"", ".wal0", ".wal1"} {
		b, err := os.ReadFile(s.path + suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// contents reads every key of the tables into one map, "table/key" → value.
func contents(t *testing.T, s store.Store, tables ...string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := s.View(bg, func(tx store.Tx) error {
		for _, tb := range tables {
			if err := tx.Scan(tb, nil, nil, func(k, v []byte) bool {
				got[tb+"/"+string(k)] = string(v)
				return true
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func sameContents(t *testing.T, want, got map[string]string) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Fatalf("%s = %q (present %v), want %q", k, g, ok, v)
		}
	}
}

func put(t *testing.T, s store.Store, writes func(tx store.Tx) error) {
	t.Helper()
	if err := s.Update(bg, writes); err != nil {
		t.Fatal(err)
	}
}

// Every acknowledged write survives a crash at any point — before its
// checkpoint, while the log is in its second segment, after rotations —
// and a crashed store reopens to exactly what was acknowledged.
func TestRecoverFromLog(t *testing.T) {
	for _, o := range []Options{
		{}, // nothing checkpointed yet when the copy is taken
		{CheckpointBytes: 4 << 10, LogSegmentSize: 16 << 10}, // checkpoints and rotations along the way
		{CheckpointBytes: 1, LogSegmentSize: 1},              // a checkpoint and a rotation every commit
	} {
		t.Run(fmt.Sprintf("checkpoint=%d,segment=%d", o.CheckpointBytes, o.LogSegmentSize), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sb.db")
			s, err := Open(path, &o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := map[string]string{}
			r := rand.New(rand.NewPCG(1, 2))
			for i := range 400 {
				k := fmt.Sprintf("k%04d", i)
				v := strings.Repeat("v", r.IntN(300))
				gone := fmt.Sprintf("k%04d", i-7)
				put(t, s, func(tx store.Tx) error {
					if err := tx.Put("t", []byte(k), []byte(v)); err != nil {
						return err
					}
					if i%3 == 0 {
						if err := tx.Delete("t", []byte(gone)); err != nil {
							return err
						}
					}
					return tx.Put("u", []byte("last"), []byte(k))
				})
				want["t/"+k] = v
				if i%3 == 0 {
					delete(want, "t/"+gone)
				}
				want["u/last"] = k
				if i == 50 || i == 201 || i == 399 {
					cp := crashCopy(t, s)
					c, err := Open(cp, nil)
					if err != nil {
						t.Fatalf("reopen after %d writes: %v", i+1, err)
					}
					sameContents(t, want, contents(t, c, "t", "u"))
					if err := c.Close(); err != nil {
						t.Fatal(err)
					}
					for _, p := range walPaths(cp) {
						if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
							t.Fatalf("%s left after Close: %v", p, err)
						}
					}
				}
			}
			sameContents(t, want, contents(t, s, "t", "u"))
		})
	}
}

// A closed store is a plain bbolt file holding everything, with no log.
func TestCloseLeavesPlainFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v")) })
	if _, err := os.Stat(path + ".wal0"); err != nil {
		t.Fatalf("no log while open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(bg, func(tx store.Tx) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("update after close: %v", err)
	}
	for _, p := range walPaths(path) {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left after Close: %v", p, err)
		}
	}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(btx *bbolt.Tx) error {
		b := btx.Bucket([]byte("t"))
		if b == nil || string(b.Get([]byte("k"))) != "v" {
			t.Fatal("the write is not in the bbolt file")
		}
		return nil
	})
}

// logged writes n updates (one key each) to a store that checkpoints
// nothing, and returns a crash copy of it with the offsets of its records.
func logged(t *testing.T, n int, value func(i int) []byte) (string, []int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sb.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var offs []int64
	for i := range n {
		offs = append(offs, s.log.seg[0].off)
		put(t, s, func(tx store.Tx) error { return tx.Put("t", fmt.Appendf(nil, "k%02d", i), value(i)) })
	}
	return crashCopy(t, s), offs
}

func keys(t *testing.T, path string) []string {
	t.Helper()
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ks []string
	for k := range contents(t, s, "t") {
		ks = append(ks, k)
	}
	return ks
}

func damage(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// A record torn by a crash (it was being written, so it was never
// acknowledged) ends the log: everything before it is recovered.
func TestTornLastRecord(t *testing.T) {
	small := func(int) []byte { return []byte("v") }
	t.Run("damaged", func(t *testing.T) {
		cp, offs := logged(t, 10, small)
		damage(t, cp+".wal0", offs[9]+walRecHeader)
		if got := keys(t, cp); len(got) != 9 || slices.Contains(got, "t/k09") {
			t.Fatalf("recovered %v, want k00..k08", got)
		}
	})
	t.Run("cut short", func(t *testing.T) {
		cp, offs := logged(t, 10, func(int) []byte { return make([]byte, 2000) })
		if err := os.Truncate(cp+".wal0", offs[9]+700); err != nil {
			t.Fatal(err)
		}
		if got := keys(t, cp); len(got) != 9 {
			t.Fatalf("recovered %d keys, want 9", len(got))
		}
	})
}

// Damage in the middle of the log, with acknowledged records after it, is
// an error on Open — never a store quietly missing those records.
func TestDamagedLogRefused(t *testing.T) {
	cp, offs := logged(t, 10, func(int) []byte { return []byte("v") })
	damage(t, cp+".wal0", offs[4]+walRecHeader)
	_, err := Open(cp, nil)
	if err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("open of a damaged log: %v", err)
	}
}

// A value shaped like log records (block-aligned, with CRCs a writer who
// does not know the segment's salt would compute, and far higher LSNs) is
// never read as one: a torn record holding such a value still just ends the
// log.
func TestValueShapedLikeRecords(t *testing.T) {
	forged := func(int) []byte {
		v := make([]byte, 8*walBlock)
		for o := 0; o+walBlock <= len(v); o += walBlock {
			r := v[o:]
			binary.BigEndian.PutUint32(r[4:], 8)
			binary.BigEndian.PutUint64(r[8:], 1<<40)
			binary.BigEndian.PutUint32(r, crc32.Checksum(r[4:24], castagn))
		}
		return v
	}
	cp, offs := logged(t, 3, forged)
	damage(t, cp+".wal0", offs[2]+walRecHeader) // the last record, torn
	if got := keys(t, cp); len(got) != 2 {
		t.Fatalf("recovered %d keys, want 2", len(got))
	}
}

// Readers see each commit whole while checkpoints move the writes into the
// bbolt file underneath them: a and b are always written together.
func TestSnapshotsAcrossCheckpoints(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "sb.db"), &Options{CheckpointBytes: 1, LogSegmentSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := s.View(bg, func(tx store.Tx) error {
					a, errA := tx.Get("t", []byte("a"))
					var b []byte
					n := 0
					if err := tx.Scan("t", nil, nil, func(k, v []byte) bool {
						if string(k) == "b" {
							b = v
						}
						n++
						return true
					}); err != nil {
						return err
					}
					if errA == nil && (!bytes.Equal(a, b) || n != 2) {
						return fmt.Errorf("a=%q b=%q keys=%d", a, b, n)
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 2000 {
		v := fmt.Appendf(nil, "%d", i)
		put(t, s, func(tx store.Tx) error {
			if err := tx.Put("t", []byte("a"), v); err != nil {
				return err
			}
			return tx.Put("t", []byte("b"), v)
		})
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// The log's files get the permission the bbolt file gets.
func TestLogFilesTakeMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb.db")
	s, err := Open(path, &Options{Mode: 0o640, LogSegmentSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 { // the second write rotates into segment 1
		put(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v")) })
	}
	wp := walPaths(path)
	for _, p := range []string{path, wp[0], wp[1]} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o640 {
			t.Fatalf("%s: mode %o, want 640", p, got)
		}
	}
}

// A delete hides a key whichever layer holds it — the tree of writes not
// yet checkpointed, the running checkpoint's tree, the bbolt file: across
// checkpoints starting and settling at every point (a tiny
// CheckpointBytes), and while one is held running, a key deleted stays
// deleted and one put stays put — read by Get, by Scan, from a crash copy
// (the log replayed) and after a reopen.
func TestDeletesAcrossCheckpoints(t *testing.T) {
	for _, cpBytes := range []int{1, 200, 3000, 1 << 20} {
		t.Run(fmt.Sprint(cpBytes), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sb.db")
			s, err := Open(path, &Options{CheckpointBytes: cpBytes, LogSegmentSize: 4 << 20}) // no rotation, which would wait for the held checkpoint
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(cpBytes), 7))
			model := map[string]string{}
			check := func(s *Store) {
				t.Helper()
				err := s.View(bg, func(tx store.Tx) error {
					seen := map[string]string{}
					if err := tx.Scan("t", nil, nil, func(k, v []byte) bool { seen[string(k)] = string(v); return true }); err != nil {
						return err
					}
					if !maps.Equal(seen, model) {
						return fmt.Errorf("scan: %d keys, the model %d", len(seen), len(model))
					}
					for i := range 64 {
						k := fmt.Sprintf("k%02d", i)
						v, err := tx.Get("t", []byte(k))
						if want, ok := model[k]; ok != (err == nil) || (ok && string(v) != want) {
							return fmt.Errorf("get %s: %q, %v; the model %q, %v", k, v, err, want, ok)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			var release func()
			for i := range 1500 {
				// From the 500th write to the 1000th, checkpoints wait:
				// the one running meanwhile holds writes the deletes
				// must hide (a tree between the log's and the file).
				switch i {
				case 500:
					release = HoldCheckpoints()
				case 1000:
					release()
				}
				put(t, s, func(tx store.Tx) error {
					for range 1 + rng.IntN(4) {
						k := fmt.Sprintf("k%02d", rng.IntN(64))
						if rng.IntN(2) == 0 {
							v := fmt.Sprint(i)
							model[k] = v
							if err := tx.Put("t", []byte(k), []byte(v)); err != nil {
								return err
							}
						} else {
							delete(model, k)
							if err := tx.Delete("t", []byte(k)); err != nil {
								return err
							}
						}
					}
					return nil
				})
				if i%7 == 0 {
					check(s)
				}
			}
			check(s)
			// A crash copy (the log not yet checkpointed replays on
			// open), then the store closed and reopened.
			c, err := Open(crashCopy(t, s), nil)
			if err != nil {
				t.Fatal(err)
			}
			check(c)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			check(s)
		})
	}
}
