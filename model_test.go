package switchboard_test

import (
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
// kept under testdata/rapid to run first from then on. Longer runs:
// go test -run TestModel -rapid.checks 2000 -rapid.steps 200.
func TestModel(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		model.Check(t, model.Options{Open: func(string) (store.Store, error) { return memory.New(), nil }})
	})
	t.Run("bolt", func(t *testing.T) {
		model.Check(t, model.Options{Open: func(dir string) (store.Store, error) {
			return bolt.Open(filepath.Join(dir, "switchboard.db"), nil)
		}})
	})
}
