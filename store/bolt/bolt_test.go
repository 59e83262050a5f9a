package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/storetest"
)

func TestConformance(t *testing.T) {
	open := func(t *testing.T, path string) store.Store {
		t.Helper()
		s, err := bolt.Open(path, nil)
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

func TestOpenRefusesBadPath(t *testing.T) {
	if _, err := bolt.Open(filepath.Join(t.TempDir(), "missing-dir", "sb.db"), nil); err == nil {
		t.Fatal("open in a missing directory succeeded")
	}
}
