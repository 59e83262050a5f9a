//go:build !linux

package bolt

import "os"

// fdatasync flushes f (a full fsync where fdatasync is not offered).
func fdatasync(f *os.File) error { return f.Sync() }
