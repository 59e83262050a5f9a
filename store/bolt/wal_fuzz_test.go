package bolt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadLog writes a log of n records, damages it once (cut short, a
// byte flipped, or a block zeroed anywhere) and reads it back: reading
// never panics, returns the written records in order and unchanged up to
// some point — every record that ends before the damage at least — or
// refuses a log damaged in the middle (never one whose last record alone
// is damaged: that is a torn tail). It never returns a record that was
// not written, nor a torn one.
func FuzzReadLog(f *testing.F) {
	f.Add(uint8(5), uint16(300), uint32(2000), uint8(0), byte(1))
	f.Add(uint8(12), uint16(4000), uint32(700), uint8(1), byte(0x80))
	f.Add(uint8(3), uint16(10), uint32(1100), uint8(2), byte(0))
	f.Fuzz(func(t *testing.T, n uint8, size uint16, at uint32, kind uint8, flip byte) {
		dir, err := os.MkdirTemp("", "fuzzlog")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "sb.db")
		w, err := openWAL(osFS{}, path, 1, 1<<30, 0o600, true)
		if err != nil {
			t.Fatal(err)
		}
		count := int(n%20) + 1
		var payloads [][]byte
		var ends []int64 // where each record ends
		for i := range count {
			v := bytes.Repeat([]byte{byte(i)}, int(size)%5000*(i%3)/2)
			p := appendOp(nil, false, "t", fmt.Appendf(nil, "k%d", i), v)
			if i%4 == 3 {
				p = appendOp(p, true, "t", fmt.Appendf(nil, "k%d", i-1), nil)
			}
			if _, err := w.append(p); err != nil {
				t.Fatal(err)
			}
			payloads = append(payloads, p)
			ends = append(ends, w.seg[0].off)
		}
		if err := w.close(); err != nil {
			t.Fatal(err)
		}
		seg := w.paths[0]
		fi, err := os.Stat(seg)
		if err != nil {
			t.Fatal(err)
		}
		pos := int64(at) % fi.Size()
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		switch kind % 3 {
		case 0:
			b = b[:pos]
		case 1:
			b[pos] ^= flip | 1
		case 2:
			pos = pos / walBlock * walBlock
			clear(b[pos:min(pos+walBlock, int64(len(b)))])
		}
		if err := os.WriteFile(seg, b, 0o600); err != nil {
			t.Fatal(err)
		}

		recs, err := readLog(osFS{}, path, 0)
		if err != nil {
			if !strings.Contains(err.Error(), "damaged") {
				t.Fatalf("unexpected error: %v", err)
			}
			// Damage in the last record is what a crash while writing it
			// leaves: a torn tail, never refused.
			if lastStart := ends[count-1] - recordSize(len(payloads[count-1])); pos >= lastStart {
				t.Fatalf("damage at %d, in the last record (from %d), refused: %v", pos, lastStart, err)
			}
			return
		}
		if len(recs) > count {
			t.Fatalf("%d records read, %d written", len(recs), count)
		}
		for i, r := range recs {
			if r.lsn != uint64(i+1) || !bytes.Equal(r.payload, payloads[i]) {
				t.Fatalf("record %d: lsn %d, payload differs: %v", i, r.lsn, !bytes.Equal(r.payload, payloads[i]))
			}
			if err := decodeOps(r.payload, func(walOp) error { return nil }); err != nil {
				t.Fatalf("record %d does not decode: %v", i, err)
			}
		}
		if pos >= walBlock { // past the header: what ends before the damage is kept
			whole := 0
			for whole < count && ends[whole] <= pos {
				whole++
			}
			if len(recs) < whole {
				t.Fatalf("damage at %d (kind %d) lost records: %d read, %d end before it", pos, kind%3, len(recs), whole)
			}
		}
	})
}
