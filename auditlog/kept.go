package auditlog

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// CheckpointStore keeps a log's latest signed checkpoint outside the
// log's own store: somewhere whoever can write that store cannot also
// rewrite — a file beside the log key (File), an object store, another
// database. Before every signature the log is checked against it.
type CheckpointStore interface {
	// Load returns the checkpoint Save was last given (a signed note),
	// or nil if none was.
	Load(ctx context.Context) ([]byte, error)
	// Save keeps signed (a signed note, cosignatures included) in place
	// of the last one, durably before it returns.
	Save(ctx context.Context, signed []byte) error
}

// File is a CheckpointStore in the file at path: written whole to a
// temporary file in the same directory, synced and renamed over the last
// (and the directory synced), so a crash leaves one checkpoint or the
// other. A missing or empty file is no checkpoint (Load returns nil): an
// empty file is how cmd/switchboard is told to keep one there. Deleting or
// emptying the file drops the anchor it is (the store's own checkpoint is
// still checked): keep it where whoever can write the store cannot.
func File(path string) CheckpointStore { return file(path) }

type file string

func (f file) Load(context.Context) ([]byte, error) {
	b, err := os.ReadFile(string(f))
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(b) == 0 {
		return nil, nil
	}
	return b, err
}

func (f file) Save(_ context.Context, signed []byte) error {
	dir := filepath.Dir(string(f))
	tmp, err := os.CreateTemp(dir, filepath.Base(string(f))+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(signed); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), string(f)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
