package memory_test

import (
	"testing"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
	t.Run("appender", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return memory.NewWithOptions(memory.Options{Appender: true}) })
	})
}
