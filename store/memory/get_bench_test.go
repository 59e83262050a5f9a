package memory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
)

// BenchmarkGet measures one Get in a table of 100,000 keys, inside a View.
func BenchmarkGet(b *testing.B) {
	s := memory.New()
	ctx := context.Background()
	const n = 100_000
	if err := s.Update(ctx, func(tx store.Tx) error {
		for i := range n {
			if err := tx.Put("t", fmt.Appendf(nil, "key-%08d", i), []byte("value")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%08d", (i*7919)%n)
	}
	b.ResetTimer()
	_ = s.View(ctx, func(tx store.Tx) error {
		for i := 0; i < b.N; i++ {
			if _, err := tx.Get("t", keys[i%len(keys)]); err != nil {
				b.Fatal(err)
			}
		}
		return nil
	})
}
