package agentcard_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"unicode"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/agentcard"
)

// tree decodes JSON into a generic tree (numbers kept exact).
func tree(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return v
}

// objects calls fn for every JSON object in v with its path.
func objects(v any, path string, fn func(path string, obj map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		fn(path, x)
		for _, k := range sortedKeys(x) {
			objects(x[k], path+"."+k, fn)
		}
	case []any:
		for i, e := range x {
			objects(e, fmt.Sprintf("%s[%d]", path, i), fn)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// changed returns a value of v's type that differs from v.
func changed(v any) any {
	switch x := v.(type) {
	case string:
		return x + " (changed)"
	case bool:
		return !x
	case []any:
		return append([]any{"changed"}, x...)
	case map[string]any:
		return map[string]any{"changed": "yes"}
	}
	return v
}

// upperFirstLetter turns the first lower-case letter of k to upper case.
func upperFirstLetter(k string) string {
	for i, r := range k {
		if unicode.IsLower(r) {
			return k[:i] + string(unicode.ToUpper(r)) + k[i+len(string(r)):]
		}
	}
	return strings.ToUpper(k)
}

// snake is the proto name of a lowerCamel JSON name.
func snake(k string) string {
	var b strings.Builder
	for _, r := range k {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// mutate applies fn to a deep copy of the signed card's tree at the object
// at path and returns the JSON.
func mutate(t *testing.T, signed string, path string, fn func(obj map[string]any)) string {
	t.Helper()
	v := tree(t, signed)
	objects(v, "", func(p string, obj map[string]any) {
		if p == path {
			fn(obj)
		}
	})
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// sameCard is the property every accepted variant must have: if the card
// parses and its signature verifies, it reads exactly as the signed card.
func sameCard(t *testing.T, signedCard agentcard.Card, variant string, key cardKey) {
	t.Helper()
	c, err := agentcard.Parse([]byte(variant))
	if err != nil {
		require.ErrorIs(t, err, agentcard.ErrInvalid)
		return
	}
	if _, err := agentcard.Verify(c, key.pub, nil); err != nil {
		require.ErrorIs(t, err, agentcard.ErrSignature)
		return
	}
	want, err := json.Marshal(signedCard)
	require.NoError(t, err)
	got, err := json.Marshal(c)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got), "a verified card must read as it was signed; variant:\n%s", variant)
}

// Every key of every object of a signed card, at every depth, given a
// case-variant twin with a different value: no variant verifies and reads
// differently from the signed card; those naming a schema field are refused
// outright.
func TestCaseVariantKeysNeverChangeAVerifiedCard(t *testing.T) {
	key := newCardKey(t, "port-1")
	signed := signedFixture(t, key.priv)
	signedCard := reparse(t, signed)
	n := 0
	objects(tree(t, signed), "", func(path string, obj map[string]any) {
		for _, k := range sortedKeys(obj) {
			for _, twin := range []string{strings.ToUpper(k), upperFirstLetter(k)} {
				if twin == k {
					continue
				}
				variant := mutate(t, signed, path, func(o map[string]any) { o[twin] = changed(o[k]) })
				sameCard(t, signedCard, variant, key)
				n++
			}
		}
	})
	assert.Greater(t, n, 100, "the fixture exercises many keys")

	for _, tc := range []struct{ path, key string }{
		{"", "NAME"}, {"", "Name"}, {".skills[0]", "Tags"}, {".supportedInterfaces[0]", "URL"},
		{".capabilities", "Streaming"}, {".securitySchemes.key", "ApiKeySecurityScheme"},
		{".securitySchemes.oauth.oauth2SecurityScheme.flows.clientCredentials", "TokenUrl"},
		{"", "Documentation_URL"},
	} {
		variant := mutate(t, signed, tc.path, func(o map[string]any) { o[tc.key] = "x" })
		_, err := agentcard.Parse([]byte(variant))
		require.ErrorIs(t, err, agentcard.ErrInvalid, "%s.%s", tc.path, tc.key)
		assert.Contains(t, err.Error(), "only by case")
	}
}

// A key repeated in any object, at any depth, is refused: readers disagree
// on which one counts.
func TestDuplicateKeysAreRefused(t *testing.T) {
	key := newCardKey(t, "port-1")
	signed := signedFixture(t, key.priv)
	n := 0
	// Find each `"key":` in the compact JSON and repeat that member.
	dec := json.NewDecoder(strings.NewReader(signed))
	var offsets []int
	for {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if s, ok := tok.(string); ok && signed[off] == ',' || ok && signed[off] == '{' {
			_ = s
			offsets = append(offsets, int(off)+1)
		}
	}
	for _, off := range offsets {
		// The member at off runs to its value's end; repeat the key with a
		// string value, which is enough to make it a duplicate.
		end := strings.IndexByte(signed[off:], ':')
		require.Positive(t, end)
		k := signed[off : off+end]
		variant := signed[:off] + k + `:"dup",` + signed[off:]
		_, err := agentcard.Parse([]byte(variant))
		require.ErrorIs(t, err, agentcard.ErrInvalid, "duplicate %s", k)
		n++
	}
	assert.Greater(t, n, 50)

	// Escaped spellings of one key are the same key.
	_, err := agentcard.Parse([]byte(strings.Replace(signed, `"name":`, `"name":"a","\u006eame":`, 1)))
	require.ErrorIs(t, err, agentcard.ErrInvalid)
	assert.Contains(t, err.Error(), "appears twice")
}

// Proto names are read as the official SDKs read them: a field given only
// under its proto name is that field (and part of the signed payload); when
// both names are given the JSON name wins, in the card and in the payload.
func TestProtoNamesReadAsTheSDKsDo(t *testing.T) {
	key := newCardKey(t, "port-1")
	signed := signedFixture(t, key.priv)
	signedCard := reparse(t, signed)

	// Every field renamed to its proto name, one at a time: the card reads
	// the same and the signature still verifies.
	renamed := 0
	objects(tree(t, signed), "", func(path string, obj map[string]any) {
		for _, k := range sortedKeys(obj) {
			p := snake(k)
			if p == k || strings.Contains(path, ".params") {
				continue
			}
			variant := mutate(t, signed, path, func(o map[string]any) { o[p] = o[k]; delete(o, k) })
			c, err := agentcard.Parse([]byte(variant))
			if strings.Contains(path, "securitySchemes") && !strings.Contains(path, "Scheme") || strings.HasSuffix(path, ".schemes") || strings.HasSuffix(path, ".scopes") {
				// a map key, not a field: renaming it changes the card
				continue
			}
			require.NoError(t, err, "%s.%s as %s", path, k, p)
			_, err = agentcard.Verify(c, key.pub, nil)
			require.NoError(t, err, "%s.%s as %s verifies", path, k, p)
			sameCard(t, signedCard, variant, key)
			renamed++
		}
	})
	assert.Greater(t, renamed, 20)

	// Both names: the JSON name wins, and the proto-named value is ignored
	// everywhere, so the signature holds and nothing reads differently.
	variant := mutate(t, signed, "", func(o map[string]any) { o["documentation_url"] = "https://evil.example" })
	c := reparse(t, variant)
	assert.Equal(t, "https://docs.port.example.org/berths", c.DocumentationURL)
	_, err := agentcard.Verify(c, key.pub, nil)
	require.NoError(t, err)

	// A proto-named field added after signing, where the JSON name is
	// absent, is read — so it breaks the signature.
	variant = mutate(t, signed, ".securitySchemes.bearer.httpAuthSecurityScheme", func(o map[string]any) {
		delete(o, "bearerFormat")
	})
	resigned, err := agentcard.Sign(stripSigs(reparse(t, variant)), key.priv)
	require.NoError(t, err)
	b, err := json.Marshal(resigned)
	require.NoError(t, err)
	added := mutate(t, string(b), ".securitySchemes.bearer.httpAuthSecurityScheme", func(o map[string]any) {
		o["bearer_format"] = "opaque"
	})
	c = reparse(t, added)
	assert.Equal(t, "opaque", c.SecuritySchemes["bearer"].HTTPAuth.BearerFormat)
	_, err = agentcard.Verify(c, key.pub, nil)
	require.ErrorIs(t, err, agentcard.ErrSignature)
}

func stripSigs(c agentcard.Card) agentcard.Card {
	c.Signatures = nil
	return c
}

// A oneof (one security-scheme type, one OAuth flow) with several members
// set is refused when read and when signed.
func TestOneofsAllowOneMember(t *testing.T) {
	key := newCardKey(t, "port-1")
	signed := signedFixture(t, key.priv)
	for _, tc := range []struct{ path, add string }{
		{".securitySchemes.key", "httpAuthSecurityScheme"},
		{".securitySchemes.key", "mtls_security_scheme"},
		{".securitySchemes.oauth.oauth2SecurityScheme.flows", "authorizationCode"},
		{".securitySchemes.oauth.oauth2SecurityScheme.flows", "device_code"},
	} {
		variant := mutate(t, signed, tc.path, func(o map[string]any) { o[tc.add] = map[string]any{"description": "x"} })
		_, err := agentcard.Parse([]byte(variant))
		require.ErrorIs(t, err, agentcard.ErrInvalid, tc.add)
		assert.Contains(t, err.Error(), "set only one")
	}
	// A null member is not set.
	_, err := agentcard.Parse([]byte(mutate(t, signed, ".securitySchemes.key", func(o map[string]any) { o["httpAuthSecurityScheme"] = nil })))
	require.NoError(t, err)

	c := reparse(t, signed)
	c.Signatures = nil
	s := c.SecuritySchemes["key"]
	s.MutualTLS = &agentcard.MutualTLSSecurityScheme{Description: "both"}
	c.SecuritySchemes["key"] = s
	_, err = agentcard.Sign(c, key.priv)
	require.ErrorIs(t, err, agentcard.ErrInvalid, "a card with two scheme types is not signed")
}

// Values of the wrong type, invalid UTF-8 and trailing data are refused
// rather than coerced.
func TestCardDecodingIsStrict(t *testing.T) {
	good := string(readFixture(t, "card-v1.json"))
	for name, card := range map[string]string{
		"number for string":  strings.Replace(good, `"version": "3.4.1"`, `"version": 341`, 1),
		"string for bool":    strings.Replace(good, `"streaming": true`, `"streaming": "false"`, 1),
		"null in a list":     strings.Replace(good, `"tags": ["port", "reporting"]`, `"tags": ["port", null]`, 1),
		"object for string":  strings.Replace(good, `"iconUrl": "https://berths.example.org/icon.png"`, `"iconUrl": {}`, 1),
		"trailing data":      good + `{}`,
		"invalid UTF-8":      strings.Replace(good, "Harbour", "Harb\xffour", 1),
		"params not object":  strings.Replace(good, `"params": {"unit": "m", "precision": 2}`, `"params": [1]`, 1),
		"deep nesting":       strings.Replace(good, `"params": {"unit": "m", "precision": 2}`, `"params": `+strings.Repeat(`{"a":`, 100)+"1"+strings.Repeat("}", 100), 1),
		"null scheme value":  strings.Replace(good, `"mtls": {"mtlsSecurityScheme": {"description": "Port network only"}}`, `"mtls": null`, 1),
		"array at top level": `[` + good + `]`,
	} {
		require.NotEqual(t, good, card, name)
		_, err := agentcard.Parse([]byte(card))
		require.ErrorIs(t, err, agentcard.ErrInvalid, name)
	}
	// Whitespace around the document is fine.
	_, err := agentcard.Parse([]byte("\n " + good + " \n"))
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(readFixture(t, "card-v1.json"), []byte("{")))
}

// A protected header read one way by switchboard and another by a JOSE
// library is refused: a case twin of kid (or alg) names no key.
func TestProtectedHeaderCaseTwinsAreRefused(t *testing.T) {
	key := newCardKey(t, "k1")
	other := newCardKey(t, "k2")
	c, err := agentcard.Parse([]byte(signedFixture(t, key.priv)))
	require.NoError(t, err)
	c = stripSigs(c)
	payload, err := agentcard.Payload(c)
	require.NoError(t, err)
	for _, twin := range []string{"KID", "Kid", "ALG"} {
		opts := (&jose.SignerOptions{}).WithHeader("kid", "k1").WithHeader(jose.HeaderKey(twin), "k2")
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key.priv.Key}, opts)
		require.NoError(t, err)
		jws, err := signer.Sign(payload)
		require.NoError(t, err)
		compact, err := jws.CompactSerialize()
		require.NoError(t, err)
		parts := strings.Split(compact, ".")
		sc := c
		sc.Signatures = []agentcard.Signature{{Protected: parts[0], Signature: parts[2]}}
		keys := &jose.JSONWebKeySet{Keys: append(key.pub.Keys, other.pub.Keys...)}
		_, err = agentcard.Verify(sc, keys, nil)
		require.ErrorIs(t, err, agentcard.ErrSignature, twin)
		assert.Contains(t, err.Error(), "only by case", twin)
	}
}
