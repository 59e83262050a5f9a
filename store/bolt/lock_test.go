package bolt_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/switchboardhq/switchboard/store/bolt"
)

// A second Open of a file another process (here, another Store) holds
// waits Options.Timeout, then says why, not only "timeout".
func TestOpenOfAHeldFileSaysWhy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "switchboard.db")
	first, err := bolt.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = bolt.Open(path, &bolt.Options{Timeout: 50 * time.Millisecond})
	if !errors.Is(err, berrors.ErrTimeout) || !strings.Contains(err.Error(), "another process holds the file") {
		t.Fatalf("second open: %v", err)
	}
}
