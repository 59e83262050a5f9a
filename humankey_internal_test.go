package switchboard

import (
	"math/rand/v2"
	"net/url"
	"testing"
	"unicode/utf8"
)

// Human.key is stored in index keys: it must stay byte for byte what
// url.QueryEscape of each part, joined by "#", has always written.
func TestHumanKeyIsQueryEscape(t *testing.T) {
	want := func(h Human) string { return url.QueryEscape(h.Issuer) + "#" + url.QueryEscape(h.Subject) }
	cases := []Human{
		{},
		{Issuer: "https://accounts.google.com", Subject: "1234567890"},
		{Issuer: "http://127.0.0.1:43707/dev/issuer", Subject: "bob"},
		{Issuer: "https://idp.example/a b?c=d&e#f", Subject: "a+b %20 ~-_. é 日本 \x00\xff"},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b [2][]byte
		for i := range b {
			for range rng.IntN(24) {
				switch rng.IntN(3) {
				case 0:
					b[i] = append(b[i], byte(rng.IntN(256)))
				case 1:
					b[i] = append(b[i], " #%+&=?/:~-_.aZ09"[rng.IntN(17)])
				default:
					b[i] = utf8.AppendRune(b[i], rune(rng.IntN(0x3000)))
				}
			}
		}
		cases = append(cases, Human{Issuer: string(b[0]), Subject: string(b[1])})
	}
	for _, h := range cases {
		if got, w := h.key(), want(h); got != w {
			t.Fatalf("key(%q, %q) = %q, want %q", h.Issuer, h.Subject, got, w)
		}
	}
}

func BenchmarkHumanKey(b *testing.B) {
	h := Human{Issuer: "https://accounts.example.com/tenant/1", Subject: "248289761001"}
	b.ReportAllocs()
	for b.Loop() {
		_ = h.key()
	}
}
