package bolt_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
)

// BenchmarkWriterDuringCopy measures what a copy of a live store costs the
// process writing it: a writer commits one small transaction after another
// while the store (about 16 MiB) is copied b.N times — by nobody (the
// baseline), by Snapshot (what the command line does with a file a host
// holds: no lock) and by WriteTo (the host's own hot backup). It reports
// the writer's commit latency, p99 and max, and its commits per second.
func BenchmarkWriterDuringCopy(b *testing.B) {
	for _, how := range []string{"none", "Snapshot", "WriteTo"} {
		b.Run(how, func(b *testing.B) {
			dir := b.TempDir()
			path := filepath.Join(dir, "live.db")
			st, err := bolt.Open(path, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			ctx := context.Background()
			val := make([]byte, 1024)
			for i := 0; i < 16; i++ {
				if err := st.Update(ctx, func(tx store.Tx) error {
					for j := 0; j < 1024; j++ {
						if err := tx.Put("fill", []byte(fmt.Sprintf("%02d-%04d", i, j)), val); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			stop := make(chan struct{})
			var lat []time.Duration
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					t0 := time.Now()
					if err := st.Update(ctx, func(tx store.Tx) error { return tx.Put("w", []byte(fmt.Sprint(i%4096)), val[:64]) }); err != nil {
						panic(err)
					}
					lat = append(lat, time.Since(t0))
				}
			})
			start := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				switch how {
				case "none":
					time.Sleep(50 * time.Millisecond)
				case "Snapshot":
					dst := filepath.Join(dir, fmt.Sprintf("snap-%d.db", i))
					if err := bolt.Snapshot(path, dst); err != nil {
						b.Fatal(err)
					}
					left, _ := filepath.Glob(dst + "*")
					for _, f := range left {
						_ = os.Remove(f)
					}
				case "WriteTo":
					if _, err := st.WriteTo(io.Discard); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			el := time.Since(start)
			slices.Sort(lat)
			if len(lat) == 0 {
				b.Fatal("no commits")
			}
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-commit-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-commit-µs")
			b.ReportMetric(float64(len(lat))/el.Seconds(), "commits/s")
		})
	}
}
