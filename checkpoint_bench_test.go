package switchboard_test

import (
	"flag"
	"sync"
	"sync/atomic"
	"testing"

	sb "github.com/switchboardhq/switchboard"
)

var checkpointEvents = flag.Int("checkpoint.events", 20000, "audit events in the log BenchmarkCheckpoint signs over")

// BenchmarkCheckpoint measures one Checkpoint that signs a new checkpoint
// over a log of -checkpoint.events events grown by a few since the last
// one (the work Reap does each pass under load): its checks, its
// signature and its commit. Growing the log is not timed.
func BenchmarkCheckpoint(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			st := be.open(b)
			defer st.Close()
			h := newHarness(b, st)
			skey, _, err := sb.NewLogKey("bench.example/log")
			if err != nil {
				b.Fatal(err)
			}
			s, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: testQuotas, LogKey: skey})
			if err != nil {
				b.Fatal(err)
			}
			h.sb = s
			_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			var n atomic.Int64
			grow := func(count int) {
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						for n.Add(1) <= int64(count) {
							if _, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				n.Store(0)
			}
			grow(*checkpointEvents)
			if _, err := h.sb.Checkpoint(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				grow(4)
				b.StartTimer()
				if _, err := h.sb.Checkpoint(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
