// Package storetest is the conformance suite every switchboard store backend
// runs. It uses only the standard library's testing package.
//
// A backend's test calls Run with a function that returns a fresh, empty
// store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
//	}
//
// Backends that persist also pass WithReopen, so the suite can check that a
// committed Update survives Close and reopen.
package storetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchboardhq/switchboard/store"
)

// Option configures Run.
type Option func(*config)

type config struct {
	reopen func(t *testing.T, s store.Store) store.Store
}

// WithReopen tells the suite how to close s and open the same data again.
// Without it the durability test is skipped as not applicable.
func WithReopen(reopen func(t *testing.T, s store.Store) store.Store) Option {
	return func(c *config) { c.reopen = reopen }
}

// Run runs the conformance suite. newStore must return a fresh, empty store;
// the suite closes it when the subtest ends.
// errRollback ends a transaction a test only reads in.
var errRollback = errors.New("storetest: roll back")

func Run(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	open := func(t *testing.T) store.Store {
		t.Helper()
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ctx := context.Background()

	t.Run("GetPutDelete", func(t *testing.T) {
		s := open(t)
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v1")) })
		if got := get(t, s, "t", "k"); got != "v1" {
			t.Fatalf("get after put = %q, want v1", got)
		}
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v2")) })
		if got := get(t, s, "t", "k"); got != "v2" {
			t.Fatalf("get after overwrite = %q, want v2", got)
		}
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Delete("t", []byte("k")) })
		assertNotFound(t, s, "t", "k")
		// Deleting again, or from a table that does not exist, is fine.
		mustUpdate(t, s, func(tx store.Tx) error {
			if err := tx.Delete("t", []byte("k")); err != nil {
				return err
			}
			return tx.Delete("no-such-table", []byte("k"))
		})
	})

	t.Run("EmptyValueIsStored", func(t *testing.T) {
		s := open(t)
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("k"), nil) })
		err := s.View(ctx, func(tx store.Tx) error {
			v, err := tx.Get("t", []byte("k"))
			if err != nil {
				return err
			}
			if len(v) != 0 {
				return fmt.Errorf("value = %q, want empty", v)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("EmptyKeyRefused", func(t *testing.T) {
		s := open(t)
		err := s.Update(ctx, func(tx store.Tx) error { return tx.Put("t", nil, []byte("v")) })
		if !errors.Is(err, store.ErrEmptyKey) {
			t.Fatalf("put with empty key: err = %v, want ErrEmptyKey", err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		s := open(t)
		assertNotFound(t, s, "missing-table", "k")
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("a"), []byte("1")) })
		assertNotFound(t, s, "t", "b")
	})

	t.Run("ScanOrderAndBounds", func(t *testing.T) {
		s := open(t)
		keys := [][]byte{{0xff}, []byte("b"), {0x00}, []byte("a"), []byte("ab"), []byte("c"), {0x00, 0x01}}
		mustUpdate(t, s, func(tx store.Tx) error {
			for _, k := range keys {
				if err := tx.Put("t", k, k); err != nil {
					return err
				}
			}
			return tx.Put("other", []byte("a"), nil)
		})
		all := [][]byte{{0x00}, {0x00, 0x01}, []byte("a"), []byte("ab"), []byte("b"), []byte("c"), {0xff}}
		cases := []struct {
			name       string
			start, end []byte
			limit      int
			want       [][]byte
		}{
			{"unbounded", nil, nil, 0, all},
			{"from a", []byte("a"), nil, 0, all[2:]},
			{"to b exclusive", nil, []byte("b"), 0, all[:4]},
			{"a to c", []byte("a"), []byte("c"), 0, all[2:5]},
			{"start between keys", []byte("aa"), []byte("bz"), 0, all[3:5]},
			{"empty range", []byte("b"), []byte("b"), 0, nil},
			{"inverted range", []byte("c"), []byte("a"), 0, nil},
			{"stops when fn returns false", nil, nil, 2, all[:2]},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got := scan(t, s, "t", tc.start, tc.end, tc.limit)
				if !equalKeys(got, tc.want) {
					t.Fatalf("scan = %q, want %q", got, tc.want)
				}
			})
		}
		if got := scan(t, s, "missing", nil, nil, 0); len(got) != 0 {
			t.Fatalf("scan of missing table = %q, want nothing", got)
		}
	})

	t.Run("ReadsSeeOwnWrites", func(t *testing.T) {
		s := open(t)
		mustUpdate(t, s, func(tx store.Tx) error {
			for _, k := range []string{"a", "b", "c"} {
				if err := tx.Put("t", []byte(k), []byte("old")); err != nil {
					return err
				}
			}
			return nil
		})
		mustUpdate(t, s, func(tx store.Tx) error {
			if err := tx.Put("t", []byte("b"), []byte("new")); err != nil {
				return err
			}
			if err := tx.Put("t", []byte("bb"), []byte("added")); err != nil {
				return err
			}
			if err := tx.Delete("t", []byte("c")); err != nil {
				return err
			}
			v, err := tx.Get("t", []byte("b"))
			if err != nil || string(v) != "new" {
				return fmt.Errorf("get own write = %q, %v", v, err)
			}
			if _, err := tx.Get("t", []byte("c")); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("get own delete: err = %v, want ErrNotFound", err)
			}
			var seen []string
			err = tx.Scan("t", nil, nil, func(k, v []byte) bool {
				seen = append(seen, string(k)+"="+string(v))
				return true
			})
			if err != nil {
				return err
			}
			want := []string{"a=old", "b=new", "bb=added"}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				return fmt.Errorf("scan inside update = %v, want %v", seen, want)
			}
			return nil
		})
	})

	t.Run("RollbackOnError", func(t *testing.T) {
		s := open(t)
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("keep"), []byte("1")) })
		boom := errors.New("boom")
		err := s.Update(ctx, func(tx store.Tx) error {
			if err := tx.Put("t", []byte("new"), []byte("x")); err != nil {
				return err
			}
			if err := tx.Put("t2", []byte("new"), []byte("x")); err != nil {
				return err
			}
			if err := tx.Delete("t", []byte("keep")); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("update err = %v, want the error fn returned", err)
		}
		assertNotFound(t, s, "t", "new")
		assertNotFound(t, s, "t2", "new")
		if got := get(t, s, "t", "keep"); got != "1" {
			t.Fatalf("deleted key after rollback = %q, want 1", got)
		}
	})

	t.Run("RollbackOnPanic", func(t *testing.T) {
		s := open(t)
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("keep"), []byte("1")) })
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Fatal("panic in fn did not propagate")
				}
			}()
			_ = s.Update(ctx, func(tx store.Tx) error {
				_ = tx.Put("t", []byte("new"), []byte("x"))
				_ = tx.Delete("t", []byte("keep"))
				panic("boom")
			})
		}()
		assertNotFound(t, s, "t", "new")
		if got := get(t, s, "t", "keep"); got != "1" {
			t.Fatalf("deleted key after panic = %q, want 1", got)
		}
		// The store is still usable after a panicking transaction.
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Put("t", []byte("after"), []byte("1")) })
	})

	t.Run("ValuesAreCopied", func(t *testing.T) {
		s := open(t)
		key, val := []byte("k"), []byte("value")
		mustUpdate(t, s, func(tx store.Tx) error {
			if err := tx.Put("t", key, val); err != nil {
				return err
			}
			key[0], val[0] = 'X', 'X' // caller reuses its buffers inside fn
			return nil
		})
		key[0], val[0] = 'Y', 'Y' // and after
		if got := get(t, s, "t", "k"); got != "value" {
			t.Fatalf("stored value after caller mutated its slices = %q, want value", got)
		}
		mustUpdate(t, s, func(tx store.Tx) error {
			v, err := tx.Get("t", []byte("k"))
			if err != nil {
				return err
			}
			v[0] = 'Z'
			return tx.Scan("t", nil, nil, func(k, v []byte) bool {
				k[0], v[0] = 'Z', 'Z'
				return true
			})
		})
		err := s.View(ctx, func(tx store.Tx) error {
			v, err := tx.Get("t", []byte("k"))
			if err != nil {
				return err
			}
			v[0] = 'W'
			return tx.Scan("t", nil, nil, func(k, v []byte) bool {
				k[0], v[0] = 'W', 'W'
				return true
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := get(t, s, "t", "k"); got != "value" {
			t.Fatalf("stored value after mutating returned slices = %q, want value", got)
		}
	})

	t.Run("ViewIsReadOnly", func(t *testing.T) {
		s := open(t)
		err := s.View(ctx, func(tx store.Tx) error { return tx.Put("t", []byte("k"), []byte("v")) })
		if !errors.Is(err, store.ErrReadOnly) {
			t.Fatalf("put in view: err = %v, want ErrReadOnly", err)
		}
		err = s.View(ctx, func(tx store.Tx) error { return tx.Delete("t", []byte("k")) })
		if !errors.Is(err, store.ErrReadOnly) {
			t.Fatalf("delete in view: err = %v, want ErrReadOnly", err)
		}
		assertNotFound(t, s, "t", "k")
	})

	t.Run("ConcurrentUpdatesAreSerializable", func(t *testing.T) {
		s := open(t)
		const workers, each = 8, 50
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					err := s.Update(ctx, func(tx store.Tx) error {
						n := counter(tx, "n")
						// Two keys always move together; a reader must never
						// see them differ.
						if err := tx.Put("c", []byte("n"), u64(n+1)); err != nil {
							return err
						}
						return tx.Put("c", []byte("m"), u64(n+1))
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		stop := make(chan struct{})
		readerDone := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					readerDone <- nil
					return
				default:
				}
				var n, m uint64
				err := s.View(ctx, func(tx store.Tx) error {
					n, m = counter(tx, "n"), counter(tx, "m")
					return nil
				})
				if err != nil || n != m {
					readerDone <- fmt.Errorf("snapshot saw n=%d m=%d (err %v)", n, m, err)
					return
				}
			}
		}()
		wg.Wait()
		close(stop)
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if err := <-readerDone; err != nil {
			t.Fatal(err)
		}
		var n uint64
		_ = s.View(ctx, func(tx store.Tx) error { n = counter(tx, "n"); return nil })
		if n != workers*each {
			t.Fatalf("counter = %d after %d increments: updates were lost", n, workers*each)
		}
	})

	// Concurrent updates that fail or panic are undone alone: the others'
	// writes land, theirs do not, and each caller gets its own outcome.
	t.Run("ConcurrentFailuresAreIsolated", func(t *testing.T) {
		s := open(t)
		const n = 64
		boom := errors.New("boom")
		var wg sync.WaitGroup
		results := make([]error, n)
		panicked := make([]bool, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					if recover() != nil {
						panicked[i] = true
					}
				}()
				results[i] = s.Update(ctx, func(tx store.Tx) error {
					n := counter(tx, "total")
					if err := tx.Put("c", []byte("total"), u64(n+1)); err != nil {
						return err
					}
					if err := tx.Put("k", []byte(fmt.Sprintf("key-%02d", i)), []byte("v")); err != nil {
						return err
					}
					switch i % 3 {
					case 0:
						return boom
					case 1:
						panic("boom")
					}
					return nil
				})
			}()
		}
		wg.Wait()
		want := 0
		for i := range n {
			switch i % 3 {
			case 0:
				if !errors.Is(results[i], boom) || panicked[i] {
					t.Fatalf("update %d: got %v, panicked %v; want its own error", i, results[i], panicked[i])
				}
			case 1:
				if !panicked[i] {
					t.Fatalf("update %d: the panic did not reach its caller (got %v)", i, results[i])
				}
			default:
				want++
				if results[i] != nil || panicked[i] {
					t.Fatalf("update %d: got %v, panicked %v; want success", i, results[i], panicked[i])
				}
			}
		}
		var total uint64
		var keys []string
		_ = s.View(ctx, func(tx store.Tx) error {
			total = counter(tx, "total")
			return tx.Scan("k", nil, nil, func(k, _ []byte) bool { keys = append(keys, string(k)); return true })
		})
		if int(total) != want || len(keys) != want {
			t.Fatalf("total = %d and %d keys after %d successful updates", total, len(keys), want)
		}
		for _, k := range keys {
			var i int
			_, _ = fmt.Sscanf(k, "key-%d", &i)
			if i%3 != 2 {
				t.Fatalf("key %s from a failed update was stored", k)
			}
		}
	})

	t.Run("CancelledContextRunsNothing", func(t *testing.T) {
		s := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ran := false
		err := s.Update(cctx, func(tx store.Tx) error { ran = true; return tx.Put("t", []byte("k"), nil) })
		if !errors.Is(err, context.Canceled) || ran {
			t.Fatalf("update with cancelled ctx: err = %v, ran = %v", err, ran)
		}
		err = s.View(cctx, func(tx store.Tx) error { ran = true; return nil })
		if !errors.Is(err, context.Canceled) || ran {
			t.Fatalf("view with cancelled ctx: err = %v, ran = %v", err, ran)
		}
		assertNotFound(t, s, "t", "k")
	})

	t.Run("ClosedStore", func(t *testing.T) {
		s := newStore(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		err := s.Update(ctx, func(tx store.Tx) error { return nil })
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("update after close: err = %v, want ErrClosed", err)
		}
		err = s.View(ctx, func(tx store.Tx) error { return nil })
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("view after close: err = %v, want ErrClosed", err)
		}
	})

	// Close while calls are in flight: each call either runs or returns
	// ErrClosed, and Close returns (run with -race).
	t.Run("CloseDuringCalls", func(t *testing.T) {
		s := newStore(t)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for j := 0; ; j++ {
					err := s.Update(ctx, func(tx store.Tx) error { return tx.Put("t", fmt.Appendf(nil, "%d-%d", i, j), nil) })
					if err != nil {
						if !errors.Is(err, store.ErrClosed) {
							t.Errorf("update during close: %v", err)
						}
						return
					}
				}
			})
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	})

	t.Run("DurableAcrossReopen", func(t *testing.T) {
		if cfg.reopen == nil {
			t.Skip("backend does not persist (no WithReopen option)")
		}
		s := newStore(t)
		mustUpdate(t, s, func(tx store.Tx) error {
			if err := tx.Put("t", []byte("a"), []byte("1")); err != nil {
				return err
			}
			return tx.Put("t", []byte("b"), []byte("2"))
		})
		mustUpdate(t, s, func(tx store.Tx) error { return tx.Delete("t", []byte("a")) })
		_ = s.Update(ctx, func(tx store.Tx) error {
			_ = tx.Put("t", []byte("c"), []byte("3"))
			return errors.New("rolled back")
		})
		s = cfg.reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
		assertNotFound(t, s, "t", "a")
		assertNotFound(t, s, "t", "c")
		if got := get(t, s, "t", "b"); got != "2" {
			t.Fatalf("after reopen b = %q, want 2", got)
		}
	})

	// store.Appender, for the stores that offer it: keys in commit-causal
	// order, nothing from a rolled-back transaction, unique numbers.
	t.Run("Appender", func(t *testing.T) {
		s := open(t)
		appends := false
		mustUpdate(t, s, func(tx store.Tx) error { _, appends = tx.(store.Appender); return nil })
		if !appends {
			t.Skip("backend does not offer store.Appender")
		}
		appendAll := func(vals ...string) error {
			return s.Update(ctx, func(tx store.Tx) error {
				for _, v := range vals {
					if err := tx.(store.Appender).Append("log", []byte(v)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		// Values end with ';': a store may join one transaction's values
		// into one row.
		if err := appendAll("a1;", "a2;"); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx store.Tx) error {
			_ = tx.(store.Appender).Append("log", []byte("rolled back;"))
			return errors.New("roll back")
		}); err == nil {
			t.Fatal("the failing update committed")
		}
		// An empty value is a value: appended alone, it commits.
		if err := appendAll(""); err != nil {
			t.Fatalf("appending an empty value: %v", err)
		}
		// Many concurrent appenders: each transaction reads the
		// values already there, so its keys must come after theirs.
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for i := range 32 {
			wg.Go(func() {
				errs <- s.Update(ctx, func(tx store.Tx) error {
					var seen int
					if err := tx.Scan("log", nil, nil, func(_, v []byte) bool { seen += bytes.Count(v, []byte(";")); return true }); err != nil {
						return err
					}
					return tx.(store.Appender).Append("log", fmt.Appendf(nil, "c%02d saw %d;", i, seen))
				})
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		var keys []uint64
		var vals []string
		_ = s.View(ctx, func(tx store.Tx) error {
			return tx.Scan("log", nil, nil, func(k, v []byte) bool {
				if len(k) != 8 {
					t.Errorf("appended key %x is not 8 bytes", k)
				}
				keys = append(keys, binary.BigEndian.Uint64(k))
				for _, one := range strings.SplitAfter(string(v), ";") {
					if one != "" {
						vals = append(vals, one)
					}
				}
				return true
			})
		})
		if len(vals) != 34 || vals[0] != "a1;" || vals[1] != "a2;" {
			t.Fatalf("appended values %q", vals)
		}
		for i, v := range vals[2:] {
			// A transaction that saw n values committed after them, so
			// its key comes after the first n keys.
			var who, seen int
			if _, err := fmt.Sscanf(v, "c%02d saw %d;", &who, &seen); err != nil {
				t.Fatalf("value %q: %v", v, err)
			}
			if seen > i+2 {
				t.Fatalf("%q is stored at position %d, before values it read", v, i+2)
			}
		}
		nums := map[uint64]bool{}
		mustUpdate(t, s, func(tx store.Tx) error {
			for range 100 {
				n, err := tx.(store.Appender).Sequence()
				if err != nil {
					return err
				}
				if n == 0 || nums[n] {
					return fmt.Errorf("store: Sequence returned %d twice or zero", n)
				}
				nums[n] = true
			}
			return nil
		})
	})

	// store.Inserter, where a write transaction offers it: an inserted row
	// reads back in the transaction and after commit; inserting a key that
	// is there either fails the whole transaction or acts as Put, never
	// leaving both rows.
	t.Run("Inserter", func(t *testing.T) {
		s := open(t)
		updates := []func(context.Context, func(store.Tx) error) error{s.Update}
		if ls, ok := s.(store.LockingStore); ok {
			updates = append(updates, ls.UpdateLocked)
		}
		offered := false
		for i, update := range updates {
			table := fmt.Sprintf("ins%d", i)
			err := update(ctx, func(tx store.Tx) error {
				ins, ok := tx.(store.Inserter)
				if !ok {
					return tx.Put(table, []byte("a"), []byte("1"))
				}
				offered = true
				if err := ins.Insert(table, []byte("a"), []byte("1")); err != nil {
					return err
				}
				if v, err := tx.Get(table, []byte("a")); err != nil || string(v) != "1" {
					return fmt.Errorf("a read after Insert = %q, %v", v, err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := get(t, s, table, "a"); got != "1" {
				t.Fatalf("inserted row read back as %q", got)
			}
			err = update(ctx, func(tx store.Tx) error {
				if err := tx.Put(table, []byte("b"), []byte("2")); err != nil {
					return err
				}
				if ins, ok := tx.(store.Inserter); ok {
					offered = true
					return ins.Insert(table, []byte("a"), []byte("3"))
				}
				return tx.Put(table, []byte("a"), []byte("3"))
			})
			if err != nil {
				if got := get(t, s, table, "a"); got != "1" {
					t.Fatalf("a failed Insert over a row left it %q", got)
				}
				assertNotFound(t, s, table, "b")
				continue
			}
			if got := get(t, s, table, "a"); got != "3" {
				t.Fatalf("an Insert over a row that committed left it %q, want it written over", got)
			}
			if got := get(t, s, table, "b"); got != "2" {
				t.Fatalf("b = %q", got)
			}
			rows := 0
			err = s.View(ctx, func(tx store.Tx) error {
				return tx.Scan(table, nil, nil, func(_, _ []byte) bool { rows++; return true })
			})
			if err != nil || rows != 2 {
				t.Fatalf("%d rows after the Insert over a row (%v), want 2", rows, err)
			}
		}
		if !offered {
			t.Skip("backend's transactions do not offer store.Inserter")
		}
	})

	// store.LockingStore, for the stores that offer it: a bounded
	// ScanLocked reads its rows at one instant (a row committed while fn
	// runs is not returned, whatever its key), and LockAhead's rows read
	// back through GetLocked as they were, an absent one as absent.
	t.Run("LockingStore", func(t *testing.T) {
		s := open(t)
		ls, ok := s.(store.LockingStore)
		if !ok {
			t.Skip("backend does not offer store.LockingStore")
		}
		key := func(i int) []byte { return fmt.Appendf(nil, "k%03d", i) }
		var want []string
		mustUpdate(t, s, func(tx store.Tx) error {
			for i := 10; i < 400; i += 10 { // 39 rows: more than a small page
				want = append(want, string(key(i)))
				if err := tx.Put("t", key(i), []byte("0")); err != nil {
					return err
				}
			}
			return nil
		})
		var got []string
		runs := 0
		err := ls.UpdateLocked(ctx, func(tx store.Tx) error {
			got, runs = nil, runs+1
			l, ok := tx.(store.Locker)
			if !ok {
				return errors.New("UpdateLocked's Tx is no store.Locker")
			}
			var late error
			err := l.ScanLocked("t", nil, nil, 100, func(k, _ []byte) bool {
				if len(got) == 0 && runs == 1 {
					// Committed after the scan began: one key below
					// every row still to come, one past them all.
					late = s.Update(ctx, func(tx store.Tx) error {
						return errors.Join(tx.Put("t", key(15), []byte("late")), tx.Put("t", key(395), []byte("late")))
					})
				}
				got = append(got, string(k))
				return late == nil
			})
			return errors.Join(err, late)
		})
		if err != nil {
			t.Fatal(err)
		}
		if runs > 1 { // run again (a serializable store's retry): the late rows were there before it began
			want = append(want, string(key(395)))
			want = slices.Insert(want, 1, string(key(15)))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("bounded ScanLocked read %q, want the rows as they were when it began, %q", got, want)
		}
		err = ls.UpdateLocked(ctx, func(tx store.Tx) error {
			al, ok := tx.(store.AheadLocker)
			if !ok {
				return nil // optional
			}
			// A few keys, and more (a store may lock sets of either size
			// its own way).
			few := [][]byte{key(20), key(10), []byte("none")}
			many := [][]byte{key(90), key(30), key(80), []byte("none2"), key(40), key(70), key(50), key(60)}
			if err := errors.Join(al.LockAhead("t", few), al.LockAhead("t", many)); err != nil {
				return err
			}
			l := tx.(store.Locker)
			for _, k := range append(few, many...) {
				v, err := l.GetLocked("t", k)
				if bytes.HasPrefix(k, []byte("none")) {
					if !errors.Is(err, store.ErrNotFound) {
						return fmt.Errorf("GetLocked(%s) after LockAhead: %v, want ErrNotFound", k, err)
					}
				} else if err != nil || string(v) != "0" {
					return fmt.Errorf("GetLocked(%s) after LockAhead = %q, %v", k, v, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}

		// A bounded ScanLocked in a transaction that wrote keys of the
		// range returns at most limit rows: the first, in key order, of
		// what the transaction sees, its own writes and deletions
		// included — never a row of its own past committed rows it did
		// not return.
		mustUpdate(t, s, func(tx store.Tx) error {
			return errors.Join(tx.Put("lim", []byte("a"), []byte("0")), tx.Put("lim", []byte("b"), []byte("0")), tx.Put("lim", []byte("c"), []byte("0")))
		})
		for limit, want := range map[int][]string{1: {"a"}, 2: {"a", "a5"}, 3: {"a", "a5", "c"}, 4: {"a", "a5", "c", "d"}, 10: {"a", "a5", "c", "d"}, 0: {"a", "a5", "c", "d"}} {
			var got []string
			err := ls.UpdateLocked(ctx, func(tx store.Tx) error {
				got = nil
				if err := errors.Join(tx.Put("lim", []byte("d"), []byte("mine")), tx.Put("lim", []byte("a5"), []byte("mine")), tx.Delete("lim", []byte("b"))); err != nil {
					return err
				}
				if err := tx.(store.Locker).ScanLocked("lim", nil, nil, limit, func(k, _ []byte) bool {
					got = append(got, string(k))
					return true
				}); err != nil {
					return err
				}
				return errRollback // leave the rows as they were
			})
			if !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("ScanLocked with limit %d over its own writes read %q, want %q", limit, got, want)
			}
		}
	})

	// A bounded ScanLocked locks its limit and not a row more: another
	// transaction's locked scan, meanwhile, takes every row past it. What
	// one holds, the other's ScanLocked skips and its ScanLatest
	// (store.LatestScanner) still sees — as committed when it is called,
	// not as an earlier read of the transaction found it — while the rows
	// the transaction itself deleted stay hidden.
	t.Run("LockedScansLeaveTheRest", func(t *testing.T) {
		s := open(t)
		ls, ok := s.(store.LockingStore)
		if !ok {
			t.Skip("backend does not offer store.LockingStore")
		}
		key := func(i int) string { return fmt.Sprintf("r%02d", i) }
		mustUpdate(t, s, func(tx store.Tx) error {
			for i := 1; i <= 6; i++ {
				if err := tx.Put("q", []byte(key(i)), []byte("v")); err != nil {
					return err
				}
			}
			return nil
		})
		scanKeys := func(tx store.Tx, limit int) ([]string, error) {
			var got []string
			err := tx.(store.Locker).ScanLocked("q", []byte("r"), []byte("s"), limit, func(k, _ []byte) bool {
				got = append(got, string(k))
				return true
			})
			return got, err
		}
		holding, release := make(chan []string), make(chan struct{})
		holder := make(chan error, 1)
		go func() {
			holder <- ls.UpdateLocked(store.Alone(ctx), func(tx store.Tx) error {
				// Two claims in one transaction: each takes the first
				// row of the range the ones before it left.
				got, err := scanKeys(tx, 1)
				if err == nil && len(got) == 1 {
					err = tx.Delete("q", []byte(got[0]))
				}
				var more []string
				if err == nil {
					more, err = scanKeys(tx, 1)
				}
				if err != nil {
					close(holding)
					return err
				}
				holding <- append(got, more...)
				<-release
				return errors.New("roll back")
			})
		}()
		held, ok := <-holding
		if !ok {
			t.Fatal(<-holder)
		}
		if !slices.Equal(held, []string{key(1), key(2)}) {
			close(release)
			t.Fatalf("two ScanLocked with limit 1 read %q", held)
		}
		err := ls.UpdateLocked(store.Alone(ctx), func(tx store.Tx) error {
			got, err := scanKeys(tx, 10)
			if err != nil {
				return err
			}
			if len(got) > 0 && got[0] == key(1) {
				return errSerializableLocks
			}
			if want := []string{key(3), key(4), key(5), key(6)}; !slices.Equal(got, want) {
				return fmt.Errorf("a locked scan beside two that locked a row each read %q, want %q: rows past a limit were locked", got, want)
			}
			latest, ok := tx.(store.LatestScanner)
			if !ok {
				return nil // optional
			}
			// The transaction deletes one of its rows, and another row
			// is committed after its reads.
			if err := tx.Delete("q", []byte(key(3))); err != nil {
				return err
			}
			if err := s.Update(ctx, func(tx store.Tx) error { return tx.Put("q", []byte(key(0)), []byte("late")) }); err != nil {
				return err
			}
			var seen []string
			if err := latest.ScanLatest("q", []byte("r"), []byte("s"), 0, func(k, _ []byte) bool {
				seen = append(seen, string(k))
				return true
			}); err != nil {
				return err
			}
			if want := []string{key(0), key(1), key(2), key(4), key(5), key(6)}; !slices.Equal(seen, want) {
				return fmt.Errorf("ScanLatest read %q, want %q: the rows others hold, the row committed since, not the row deleted here", seen, want)
			}
			seen = nil
			if err := latest.ScanLatest("q", []byte("r"), []byte("s"), 2, func(k, _ []byte) bool {
				seen = append(seen, string(k))
				return true
			}); err != nil {
				return err
			}
			if want := []string{key(0), key(1)}; !slices.Equal(seen, want) {
				return fmt.Errorf("ScanLatest with limit 2 read %q, want %q", seen, want)
			}
			return errors.New("roll back")
		})
		close(release)
		if hErr := <-holder; hErr == nil || !strings.HasSuffix(hErr.Error(), "roll back") {
			t.Fatal(hErr)
		}
		if errors.Is(err, errSerializableLocks) {
			t.Skip("the store's UpdateLocked is serializable: its locked reads skip nothing")
		}
		if err == nil || !strings.HasSuffix(err.Error(), "roll back") {
			t.Fatal(err)
		}
	})
}

// errSerializableLocks ends a test of row locks on a store whose locked
// reads are plain reads in a serializable transaction.
var errSerializableLocks = errors.New("locked reads skip nothing")

func mustUpdate(t *testing.T, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.Update(context.Background(), fn); err != nil {
		t.Fatalf("update: %v", err)
	}
}

func get(t *testing.T, s store.Store, table, key string) string {
	t.Helper()
	var out string
	err := s.View(context.Background(), func(tx store.Tx) error {
		v, err := tx.Get(table, []byte(key))
		out = string(v)
		return err
	})
	if err != nil {
		t.Fatalf("get %s/%s: %v", table, key, err)
	}
	return out
}

func assertNotFound(t *testing.T, s store.Store, table, key string) {
	t.Helper()
	err := s.View(context.Background(), func(tx store.Tx) error {
		_, err := tx.Get(table, []byte(key))
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get %s/%s: err = %v, want ErrNotFound", table, key, err)
	}
}

func scan(t *testing.T, s store.Store, table string, start, end []byte, limit int) [][]byte {
	t.Helper()
	var out [][]byte
	err := s.View(context.Background(), func(tx store.Tx) error {
		return tx.Scan(table, start, end, func(k, v []byte) bool {
			if !bytes.Equal(k, v) {
				t.Errorf("scan value for %q = %q", k, v)
			}
			out = append(out, bytes.Clone(k))
			return limit == 0 || len(out) < limit
		})
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

func equalKeys(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func counter(tx store.Tx, key string) uint64 {
	v, err := tx.Get("c", []byte(key))
	if err != nil {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
