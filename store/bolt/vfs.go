package bolt

import (
	"os"
)

// vfs is the narrow filesystem the write-ahead log goes through: every file
// operation its durability depends on, directories included. Production
// uses osFS; the tests use a simulated filesystem that keeps, at a
// simulated power cut, only what was synced, and that can inject faults.
// (The bbolt file is bbolt's, opened and synced by bbolt itself.)
type vfs interface {
	// Create creates the file at name, or truncates it if it exists, open
	// for writing.
	Create(name string, perm os.FileMode) (vfile, error)
	// ReadFile returns the file's whole contents.
	ReadFile(name string) ([]byte, error)
	// Remove deletes the file's directory entry; it is durable only once
	// the directory is synced.
	Remove(name string) error
	// SyncDir makes the directory's entries durable: files created in it
	// and removed from it.
	SyncDir(dir string) error
}

// vfile is an open log segment.
type vfile interface {
	// WriteAt writes b at off, extending the file if it ends before.
	WriteAt(b []byte, off int64) (int, error)
	// Sync makes the file's data and size durable (fdatasync).
	Sync() error
	Close() error
}

// osFS is the operating system's filesystem.
type osFS struct{}

func (osFS) Create(name string, perm os.FileMode) (vfile, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }
func (osFS) Remove(name string) error             { return os.Remove(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type osFile struct{ f *os.File }

func (f osFile) WriteAt(b []byte, off int64) (int, error) { return f.f.WriteAt(b, off) }
func (f osFile) Sync() error                              { return fdatasync(f.f) }
func (f osFile) Close() error                             { return f.f.Close() }
