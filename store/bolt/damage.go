package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"

	bbolt "go.etcd.io/bbolt"
)

// ErrDamaged is matched (errors.Is) by the error of Open, or of a read,
// that found the bbolt file damaged: pages that do not parse, keys out of
// order, or a read through bbolt's memory map that faulted.
//
// bbolt reads its pages through a memory map without bounds checks, so a
// damaged page can make a read fault, which would otherwise kill the
// process; the store turns such faults in its reads into this error.
// Values have no checksums of their own in the bbolt file: damage inside
// a value is found by what reads it (a record that does not decode, an
// audit event whose hash is wrong — see switchboard's VerifyAudit).
var ErrDamaged = errors.New("bolt: the file is damaged")

// check reads every key of every table of the bbolt file once, in order,
// before the store is used (about 30 ms per million keys): a page that
// faults, panics bbolt or yields keys out of order refuses the Open with
// ErrDamaged naming the file, instead of a store that reads wrong records
// or faults in the middle of a call later.
func (s *Store) check() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: reading it failed: %v", ErrDamaged, s.path, r)
		}
	}()
	return s.db.View(func(btx *bbolt.Tx) error {
		return btx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			var prev []byte
			c := b.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				if prev != nil && bytes.Compare(prev, k) >= 0 {
					return fmt.Errorf("%w: %s: table %q: key %q after %q", ErrDamaged, s.path, name, k, prev)
				}
				prev = append(prev[:0], k...)
			}
			return nil
		})
	})
}

// faulted turns a panic while reading the bbolt file into ErrDamaged:
// any panic when only bbolt ran (all), or else a memory fault at or past
// the start of the memory map (a nil dereference in a caller's function
// faults near zero, and is re-raised).
func faulted(r any, path string, mapStart uintptr, all bool) error {
	if f, ok := r.(interface{ Addr() uintptr }); ok && f.Addr() >= mapStart && mapStart != 0 {
		return fmt.Errorf("%w: %s: a read faulted at %#x", ErrDamaged, path, f.Addr())
	}
	if all {
		return fmt.Errorf("%w: %s: %v", ErrDamaged, path, r)
	}
	return nil
}
