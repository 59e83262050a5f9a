package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// snapshotHead is how much of the start of the bbolt file Snapshot compares
// before and after copying: it holds both meta pages for any page size up
// to 64 KiB, and every commit rewrites one of them.
const snapshotHead = 128 << 10

// snapshotBudget is how long Snapshot keeps trying for a copy no
// checkpoint lands in.
var snapshotBudget = 10 * time.Second

// ErrSnapshotBusy is returned by Snapshot when a checkpoint landed during
// every copy it took for as long as it tried: the store's owner writes
// faster than the files can be copied between two of its checkpoints (a
// larger Options.CheckpointBytes spaces them further). Nothing was left
// at dst; try again later.
var ErrSnapshotBusy = errors.New("the store checkpointed during every copy")

// Snapshot copies the store at path — which another process may hold open
// and be writing — to dst as a plain bbolt file holding a consistent state
// of it (every commit acknowledged before Snapshot began, at least), for
// tools that must look at a live store: it takes no lock, writes nothing at
// path, and so never blocks or disturbs the owner.
//
// It copies the bbolt file and then the write-ahead log, and keeps the copy
// only if the start of the bbolt file — its two meta pages, one of which
// every bbolt commit rewrites — did not change meanwhile: bbolt never
// overwrites the pages the latest commit reaches, so the copy is that
// commit's state, and the log copied after it holds every record since.
// The copy's log is then replayed into it, as Open does after a crash. If
// a checkpoint lands during a copy, it waits for the next one to land and
// copies again at once (the most time before the one after), for up to
// ten seconds, then returns ErrSnapshotBusy. dst must not exist.
func Snapshot(path, dst string) error {
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("bolt: snapshot: %s exists", dst)
	}
	deadline := time.Now().Add(snapshotBudget)
	for copies := 1; ; copies++ {
		began := time.Now()
		ok, err := snapshotOnce(path, dst)
		if err != nil {
			removeSnapshot(dst)
			return fmt.Errorf("bolt: snapshot %s: %w", path, err)
		}
		if ok {
			s, err := Open(dst, nil) // replays the copied log
			if err != nil {
				removeSnapshot(dst)
				return fmt.Errorf("bolt: snapshot %s: %w", path, err)
			}
			return s.Close() // checkpoints it: a plain bbolt file
		}
		removeSnapshot(dst)
		if time.Now().After(deadline) {
			return fmt.Errorf("bolt: snapshot %s: %w (%d copies)", path, ErrSnapshotBusy, copies)
		}
		if err := nextCheckpoint(path, 2*time.Since(began)); err != nil {
			return fmt.Errorf("bolt: snapshot %s: %w", path, err)
		}
	}
}

// nextCheckpoint waits until the start of the bbolt file at path changes
// (a commit: a checkpoint landed, and the next is furthest off), or for
// quiet if none does (the writes may have stopped).
func nextCheckpoint(path string, quiet time.Duration) error {
	head, err := readHead(path)
	if err != nil {
		return err
	}
	head = head[:min(len(head), metaSpan(head))] // the part polled
	for end := time.Now().Add(max(quiet, time.Millisecond)); time.Now().Before(end); {
		time.Sleep(200 * time.Microsecond)
		now, err := readPrefix(path, len(head))
		if err != nil || !bytes.Equal(head, now) {
			return err
		}
	}
	return nil
}

// metaSpan is how much of the start of a bbolt file holds its two meta
// pages: twice the page size its first meta page records (bbolt writes it
// in the machine's byte order: little-endian here, or the check fails), or
// all of head if that does not read as a bbolt meta page.
func metaSpan(head []byte) int {
	const magic = 0xED0CDAED // bbolt's, after the 16-byte page header
	if len(head) < 28 || binary.LittleEndian.Uint32(head[16:]) != magic {
		return len(head)
	}
	ps := int(binary.LittleEndian.Uint32(head[24:]))
	if ps < 512 || ps > snapshotHead/2 || ps&(ps-1) != 0 {
		return len(head)
	}
	return 2 * ps
}

func removeSnapshot(dst string) {
	for _, p := range []string{dst, dst + ".wal0", dst + ".wal1", dst + ".lock"} {
		_ = os.Remove(p)
	}
}

// snapshotOnce copies the files once and reports whether the copy is
// consistent.
func snapshotOnce(path, dst string) (bool, error) {
	before, err := readHead(path)
	if err != nil {
		return false, err
	}
	if err := copyFile(path, dst); err != nil {
		return false, err
	}
	if mid, err := readHead(path); err != nil || !bytes.Equal(before, mid) {
		return false, err
	}
	for _, suffix := range []string{".wal0", ".wal1"} {
		if err := copyFile(path+suffix, dst+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	after, err := readHead(path)
	return err == nil && bytes.Equal(before, after), err
}

func readHead(path string) ([]byte, error) { return readPrefix(path, snapshotHead) }

// readPrefix reads up to n bytes from the start of the file at path.
func readPrefix(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	got, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	return b[:got], nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
