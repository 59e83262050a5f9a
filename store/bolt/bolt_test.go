package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/storetest"
)

func conformance(t *testing.T, opts *bolt.Options) {
	open := func(t *testing.T, path string) store.Store {
		t.Helper()
		s, err := bolt.Open(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Run(t,
		func(t *testing.T) store.Store { return open(t, filepath.Join(t.TempDir(), "sb.db")) },
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			path := s.(*bolt.Store).Path()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, path)
		}))
}

func TestConformance(t *testing.T) { conformance(t, nil) }

func TestConformanceCommitEachUpdate(t *testing.T) {
	conformance(t, &bolt.Options{CommitEachUpdate: true})
}

// The suite again with a checkpoint and a log rotation on every commit, so
// that every read crosses the log's trees and the bbolt file in every
// state.
func TestConformanceCheckpointEachCommit(t *testing.T) {
	conformance(t, &bolt.Options{CheckpointBytes: 1, LogSegmentSize: 1})
}

func TestOpenRefusesBadPath(t *testing.T) {
	if _, err := bolt.Open(filepath.Join(t.TempDir(), "missing-dir", "sb.db"), nil); err == nil {
		t.Fatal("open in a missing directory succeeded")
	}
}

// A write bbolt refuses only when it is applied (a key over its 32 KiB
// limit) spoils a grouped commit; every other update in that batch is run
// again alone and lands, and only the bad one fails.
func TestBatchWithAnUnwritableKey(t *testing.T) {
	s, err := bolt.Open(filepath.Join(t.TempDir(), "sb.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const n = 32
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%02d", i)
			if i == 7 {
				key = strings.Repeat("x", 40<<10)
			}
			errs[i] = s.Update(ctx, func(tx store.Tx) error { return tx.Put("t", []byte(key), []byte("v")) })
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if (i == 7) != (err != nil) {
			t.Fatalf("update %d: err = %v", i, err)
		}
	}
	count := 0
	_ = s.View(ctx, func(tx store.Tx) error {
		return tx.Scan("t", nil, nil, func(_, _ []byte) bool { count++; return true })
	})
	if count != n-1 {
		t.Fatalf("%d keys stored, want %d", count, n-1)
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return errors.New("still usable") }); err == nil || err.Error() != "still usable" {
		t.Fatalf("store unusable after the failed batch: %v", err)
	}
}

// WriteTo copies the store while it is written to: the copy is a plain
// bbolt file (no log) holding everything committed before the call.
func TestWriteToIsAHotBackup(t *testing.T) {
	dir := t.TempDir()
	s, err := bolt.Open(filepath.Join(dir, "sb.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 500 {
		if err := s.Update(ctx, func(tx store.Tx) error {
			return tx.Put("t", fmt.Appendf(nil, "k%03d", i), []byte("v"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // writes go on during the copy
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = s.Update(ctx, func(tx store.Tx) error { return tx.Put("u", fmt.Appendf(nil, "%d", i), []byte("x")) })
		}
	}()
	backup := filepath.Join(dir, "backup.db")
	f, err := os.Create(backup)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(backup + ".wal0"); !os.IsNotExist(err) {
		t.Fatalf("a log beside the backup: %v", err)
	}
	c, err := bolt.Open(backup, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := 0
	if err := c.View(ctx, func(tx store.Tx) error {
		return tx.Scan("t", nil, nil, func(_, _ []byte) bool { n++; return true })
	}); err != nil {
		t.Fatal(err)
	}
	if n != 500 {
		t.Fatalf("backup holds %d keys, want 500", n)
	}
}
