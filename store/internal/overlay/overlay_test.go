package overlay_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/internal/overlay"
	"github.com/switchboardhq/switchboard/store/memory"
)

// The bolt and PostgreSQL stores run their Updates through overlays (group
// commit), so their conformance suites cover the overlay's reads, scans and
// undo; these tests add the merge cases one by one, on the memory store as
// the base.

// Scans merge base and overlay keys at every position, with deletions and
// early stops.
func TestOverlayScanMerge(t *testing.T) {
	s := memory.New()
	ctx := context.Background()
	err := s.Update(ctx, func(tx store.Tx) error {
		for _, k := range []string{"b", "d", "f", "h"} {
			if err := tx.Put("t", []byte(k), []byte("base-"+k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Update(ctx, func(base store.Tx) error {
		ov := overlay.New(base)
		_ = ov.Put("t", []byte("a"), []byte("ov-a"))
		_ = ov.Put("t", []byte("d"), []byte("ov-d")) // shadows base
		_ = ov.Delete("t", []byte("f"))
		_ = ov.Put("t", []byte("g"), []byte("ov-g"))
		_ = ov.Put("t", []byte("z"), []byte("ov-z"))
		var got []string
		_ = ov.Scan("t", nil, nil, func(k, v []byte) bool { got = append(got, string(k)+"="+string(v)); return true })
		want := []string{"a=ov-a", "b=base-b", "d=ov-d", "g=ov-g", "h=base-h", "z=ov-z"}
		if len(got) != len(want) {
			t.Fatalf("scan = %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("scan = %v, want %v", got, want)
			}
		}
		got = nil
		_ = ov.Scan("t", []byte("c"), []byte("h"), func(k, _ []byte) bool { got = append(got, string(k)); return len(got) < 2 })
		if len(got) != 2 || got[0] != "d" || got[1] != "g" {
			t.Fatalf("bounded scan stopping after two = %v, want [d g]", got)
		}
		got = nil
		_ = ov.Scan("t", nil, nil, func(k, _ []byte) bool { got = append(got, string(k)); return false })
		if len(got) != 1 || got[0] != "a" {
			t.Fatalf("scan stopping at once = %v", got)
		}
		return nil
	})
}

// notes is a base that records what Notify passed on.
type notes struct {
	store.Tx
	got []string
}

func (n *notes) Notify(key string) { n.got = append(n.got, key) }

// Notify is buffered with the writes: Apply passes each key on once, in
// order, to a base that is a store.Notifier; an overlay never applied
// passes nothing.
func TestOverlayNotify(t *testing.T) {
	s := memory.New()
	err := s.Update(context.Background(), func(tx store.Tx) error {
		base := &notes{Tx: tx}
		dropped := overlay.New(base)
		dropped.Notify("never")
		ov := overlay.New(base)
		ov.Notify("q1")
		ov.Notify("q2")
		ov.Notify("q1")
		if len(base.got) != 0 {
			t.Errorf("notified before Apply: %v", base.got)
		}
		if err := ov.Apply(base); err != nil {
			return err
		}
		if want := []string{"q1", "q2"}; len(base.got) != 2 || base.got[0] != want[0] || base.got[1] != want[1] {
			t.Errorf("after Apply: %v, want %v", base.got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hints is a base that records Prefetch hints.
type hints struct {
	store.Tx
	got []string
}

func (h *hints) Prefetch(table string, keys [][]byte) error {
	for _, k := range keys {
		h.got = append(h.got, table+"/"+string(k))
	}
	return nil
}

func (h *hints) PrefetchScan(table string, start []byte, limit int) error {
	h.got = append(h.got, fmt.Sprintf("%s/%s..%d", table, start, limit))
	return nil
}

// Exposed offers Prefetch exactly when the base does, and passes the hints
// on.
func TestOverlayExposedPrefetch(t *testing.T) {
	s := memory.New()
	err := s.Update(context.Background(), func(tx store.Tx) error {
		if _, ok := overlay.New(tx).Exposed().(store.Prefetcher); ok {
			t.Error("an overlay over a base without Prefetch offers it")
		}
		base := &hints{Tx: tx}
		p, ok := overlay.New(base).Exposed().(store.Prefetcher)
		if !ok {
			t.Fatal("an overlay over a Prefetcher hides it")
		}
		if err := p.Prefetch("t", [][]byte{[]byte("a"), []byte("b")}); err != nil {
			return err
		}
		if err := p.(store.ScanPrefetcher).PrefetchScan("t", []byte("c"), 7); err != nil {
			return err
		}
		if want := []string{"t/a", "t/b", "t/c..7"}; !slices.Equal(base.got, want) {
			t.Errorf("hints passed on: %v, want %v", base.got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Insert reads back like Put; Apply passes a key still last written by
// Insert on as an Insert where the destination takes one, else as a Put,
// and a later Put or Delete of the key in the overlay wins.
func TestOverlayInsert(t *testing.T) {
	s := memory.New()
	err := s.Update(context.Background(), func(tx store.Tx) error {
		ov := overlay.New(tx)
		var ins store.Inserter = ov.Exposed().(store.Inserter) // every overlay offers it
		for _, k := range []string{"a", "b", "c"} {
			if err := ins.Insert("t", []byte(k), []byte("v-"+k)); err != nil {
				return err
			}
		}
		if v, err := ov.Get("t", []byte("a")); err != nil || string(v) != "v-a" {
			t.Errorf("Get after Insert = %q, %v", v, err)
		}
		_ = ov.Put("t", []byte("b"), []byte("put-b"))
		_ = ov.Delete("t", []byte("c"))
		// A key the overlay deleted (or put) before and then inserts may
		// be in the base: a Put, never an Insert that would meet the row.
		_ = ov.Delete("t", []byte("e"))
		_ = ins.Insert("t", []byte("e"), []byte("v-e"))
		_ = ov.Put("t", []byte("f"), []byte("put-f"))
		_ = ins.Insert("t", []byte("f"), []byte("v-f"))
		dst := &inserts{Tx: tx}
		if err := ov.Apply(dst); err != nil {
			return err
		}
		if want := []string{"insert t/a=v-a", "put t/b=put-b", "delete t/c", "put t/e=v-e", "put t/f=v-f"}; !slices.Equal(dst.got, want) {
			t.Errorf("applied %v, want %v", dst.got, want)
		}

		// To a destination without Insert: a Put.
		ov = overlay.New(tx)
		_ = ov.Insert("t", []byte("d"), []byte("v-d"))
		if err := ov.Apply(tx); err != nil {
			return err
		}
		if v, err := tx.Get("t", []byte("d")); err != nil || string(v) != "v-d" {
			t.Errorf("Insert applied to a plain Tx: Get = %q, %v", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// inserts records what Apply writes to it.
type inserts struct {
	store.Tx
	got []string
}

func (d *inserts) Put(table string, key, value []byte) error {
	d.got = append(d.got, fmt.Sprintf("put %s/%s=%s", table, key, value))
	return nil
}

func (d *inserts) Insert(table string, key, value []byte) error {
	d.got = append(d.got, fmt.Sprintf("insert %s/%s=%s", table, key, value))
	return nil
}

func (d *inserts) Delete(table string, key []byte) error {
	d.got = append(d.got, fmt.Sprintf("delete %s/%s", table, key))
	return nil
}
