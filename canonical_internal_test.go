package switchboard

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/require"
)

// The request nonce's text and the replay key are RFC 8785 (JCS) forms
// written directly; these are the reference implementations they replace
// (encoding/json, then github.com/gowebpki/jcs), run side by side on
// random input: strings with every kind of escape, invalid UTF-8, U+2028,
// HTML characters; numbers in every spelling.

func referenceNonceInput(r FriendRequest, jkt string) []byte {
	type entry struct {
		Queue string   `json:"queue"`
		Verbs []string `json:"verbs"`
	}
	scope := make([]entry, 0, len(r.Scope))
	for _, e := range r.Scope {
		verbs := make([]string, 0, len(e.Verbs))
		for _, v := range e.Verbs {
			verbs = append(verbs, string(v))
		}
		scope = append(scope, entry{validUTF8(e.Queue), verbs})
	}
	b, err := json.Marshal(struct {
		V      int     `json:"v"`
		From   string  `json:"from"`
		To     string  `json:"to"`
		Scope  []entry `json:"scope"`
		Why    string  `json:"why"`
		Pickup string  `json:"pickup"`
		JKT    string  `json:"jkt,omitempty"`
	}{3, validUTF8(r.From), validUTF8(r.To), scope, validUTF8(r.Why), validUTF8(r.Pickup), jkt})
	if err != nil {
		panic(err)
	}
	canon, err := jcs.Transform(b)
	if err != nil {
		panic(err)
	}
	return canon
}

func referenceReplayKey(claims map[string]any) string {
	k := map[string]any{}
	for _, name := range []string{"iss", "sub", "nonce", "jti"} {
		if v, ok := claims[name]; ok {
			k[name] = v.(string)
		}
	}
	for _, name := range []string{"iat", "exp"} {
		if v, ok := claims[name]; ok {
			k[name] = v
		}
	}
	switch aud := claims["aud"].(type) {
	case string:
		k["aud"] = []string{aud}
	case []any:
		var list []string
		for _, a := range aud {
			list = append(list, a.(string))
		}
		slices.Sort(list)
		k["aud"] = slices.Compact(list)
	}
	b, err := json.Marshal(k)
	if err != nil {
		panic(err)
	}
	canon, err := jcs.Transform(b)
	if err != nil {
		panic(err)
	}
	h := sha256.Sum256(canon)
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func randomText(rng *rand.Rand) string {
	pieces := []string{"a", "Zz", "é", "日本", "\x00", "\x01", "\x1f", "\b", "\t", "\n", "\f", "\r", `"`, `\`, "/", "<", ">", "&",
		"\u2028", "\u2029", "\u007f", "\ufeff", "\U0001F600", "\xff", "\xc3", "\xed\xa0\x80", " ", "é\u0301"}
	var s string
	for range rng.IntN(6) {
		s += pieces[rng.IntN(len(pieces))]
	}
	return s
}

func TestRequestNonceInputIsJCS(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		r := FriendRequest{From: randomText(rng), To: randomText(rng), Why: randomText(rng), Pickup: randomText(rng)}
		for range rng.IntN(3) {
			e := ScopeEntry{Queue: randomText(rng)}
			for range rng.IntN(3) {
				e.Verbs = append(e.Verbs, Verb(randomText(rng)))
			}
			r.Scope = append(r.Scope, e)
		}
		jkt := ""
		if i%5 == 0 {
			r.Key = json.RawMessage(`{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}`)
			var err error
			jkt, err = keyThumbprint(r.Key)
			require.NoError(t, err)
		}
		require.Equal(t, string(referenceNonceInput(r, jkt)), string(RequestNonceInput(r)), "%+q", r)
	}
}

func TestReplayKeyIsJCS(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	numbers := []string{"0", "-0", "1", "1.0", "1e3", "1E+3", "123456789012345678901", "1.5e-7", "0.000001", "1700000000", "1.7e9", "9007199254740993", "-12.50"}
	for range 20000 {
		claims := map[string]any{}
		for _, name := range []string{"iss", "sub", "nonce", "jti"} {
			if rng.IntN(4) > 0 {
				claims[name] = randomText(rng)
			}
		}
		for _, name := range []string{"iat", "exp"} {
			if rng.IntN(4) > 0 {
				claims[name] = json.Number(numbers[rng.IntN(len(numbers))])
			}
		}
		switch rng.IntN(4) {
		case 1:
			claims["aud"] = randomText(rng)
		case 2, 3:
			var aud []any
			for range rng.IntN(4) {
				aud = append(aud, randomText(rng))
			}
			claims["aud"] = aud
		}
		claims["name"] = randomText(rng) // not part of the key
		got, err := replayKey(claims)
		require.NoError(t, err)
		require.Equal(t, referenceReplayKey(claims), got, "%v", claims)
	}
}
