package switchboard_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/switchboardhq/switchboard/internal/model"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/memory"
)

// The library's promises as a model (package internal/model): random
// histories of every public verb, each outcome predicted by a reference
// model and every invariant checked after each step, on the memory and
// the bolt store. A failing history is shrunk, printed as a script, and
// kept under testdata/rapid to run first from then on. By default 100
// histories of about 100 steps on memory and 50 on bolt; longer runs:
// go test -run TestModel -rapid.checks 2000 -rapid.steps 300.
func TestModel(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		model.Check(t, model.Options{Open: func(string) (store.Store, error) { return memory.New(), nil }})
	})
	t.Run("bolt", func(t *testing.T) {
		// Half as many histories as on memory by default: each commit is
		// an fsync, and the model is the same.
		if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
			_ = f.Value.Set("50")
			defer f.Value.Set(f.DefValue)
		}
		model.Check(t, model.Options{Open: func(dir string) (store.Store, error) {
			return bolt.Open(filepath.Join(dir, "switchboard.db"), nil)
		}})
	})
}
