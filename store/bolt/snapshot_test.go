package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
)

// Snapshot copies a store another opener holds and is writing, without a
// lock: each copy opens on its own, holds every commit acknowledged before
// it began, and holds a prefix of the writes (never a later commit without
// an earlier one) — while the writer, with tiny checkpoints and log
// segments so both land during the copies, never waits for it.
func TestSnapshotOfALiveStore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "live.db")
	s, err := bolt.Open(path, &bolt.Options{CheckpointBytes: 4 << 10, LogSegmentSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Update(context.Background(), func(tx store.Tx) error {
				return tx.Put("t", fmt.Appendf(nil, "%08d", i), make([]byte, 200))
			}); err != nil {
				t.Error(err)
				return
			}
			acked.Store(int64(i + 1))
		}
	})
	// A copy must fit between two checkpoints, and this writer
	// checkpoints every few milliseconds while the file grows: on a slow
	// machine a snapshot may find no such gap within its budget. It must
	// then say so (ErrSnapshotBusy) and leave nothing behind.
	defer bolt.SetSnapshotBudget(bolt.SetSnapshotBudget(time.Second))
	taken := 0
	for n := range 15 {
		before := acked.Load()
		dst := filepath.Join(dir, fmt.Sprintf("snap%d.db", n))
		if err := bolt.Snapshot(path, dst); errors.Is(err, bolt.ErrSnapshotBusy) {
			if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("snapshot %d: busy, but %s is there (%v)", n, dst, err)
			}
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		taken++
		c, err := bolt.Open(dst, nil)
		if err != nil {
			t.Fatal(err)
		}
		var keys int64
		err = c.View(context.Background(), func(tx store.Tx) error {
			return tx.Scan("t", nil, nil, func(k, _ []byte) bool {
				if string(k) != fmt.Sprintf("%08d", keys) {
					t.Errorf("snapshot %d: key %s where %08d was due: not a prefix", n, k, keys)
					return false
				}
				keys++
				return true
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		if keys < before {
			t.Fatalf("snapshot %d holds %d writes; %d were acknowledged before it began", n, keys, before)
		}
	}
	close(stop)
	wg.Wait()
	if acked.Load() == 0 {
		t.Fatal("the writer wrote nothing")
	}
	if taken == 0 {
		t.Fatal("no snapshot found a gap between two checkpoints")
	}
	t.Logf("%d of 15 snapshots taken; %d writes", taken, acked.Load())
}

// Snapshot polls only the two meta pages of a bbolt file while it waits
// for a checkpoint: twice the page size the first records.
func TestSnapshotPollsTheMetaPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := bolt.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	head, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bolt.MetaSpan(head), 2*os.Getpagesize(); got != want {
		t.Fatalf("meta span of a fresh bbolt file: %d, want %d (two pages)", got, want)
	}
	garbage := make([]byte, 4096)
	if got := bolt.MetaSpan(garbage); got != len(garbage) {
		t.Fatalf("meta span of a file that is no bbolt file: %d, want all %d bytes", got, len(garbage))
	}
}
