package agentcard_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/agentcard"
)

type cardKey struct {
	priv jose.JSONWebKey
	pub  *jose.JSONWebKeySet
}

func newCardKey(t *testing.T, kid string) cardKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return cardKey{
		priv: jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: "ES256"},
		pub:  &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.Public(), KeyID: kid, Algorithm: "ES256", Use: "sig"}}},
	}
}

// signedFixture signs the v1.0 fixture and returns the signed card's JSON,
// as a directory would receive it.
func signedFixture(t *testing.T, key jose.JSONWebKey) string {
	t.Helper()
	c, err := agentcard.Parse(readFixture(t, "card-v1.json"))
	require.NoError(t, err)
	c.Signatures = nil
	signed, err := agentcard.Sign(c, key)
	require.NoError(t, err)
	b, err := json.Marshal(signed)
	require.NoError(t, err)
	return string(b)
}

func reparse(t *testing.T, s string) agentcard.Card {
	t.Helper()
	c, err := agentcard.Parse([]byte(s))
	require.NoError(t, err)
	return c
}

// reorder re-encodes JSON with sorted keys and indentation: equal JSON,
// different bytes.
func reorder(t *testing.T, s string) string {
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v))
	b, err := json.MarshalIndent(v, "", "    ")
	require.NoError(t, err)
	require.NotEqual(t, s, string(b))
	return string(b)
}

// forgeSig signs card's payload with an arbitrary protected header, as a
// third-party signer might.
func forgeSig(t *testing.T, card string, hdr map[string]any, key any, alg jose.SignatureAlgorithm) string {
	t.Helper()
	c := reparse(t, card)
	c.Signatures = nil
	payload, err := agentcard.Payload(c)
	require.NoError(t, err)
	opts := &jose.SignerOptions{}
	for k, v := range hdr {
		opts = opts.WithHeader(jose.HeaderKey(k), v)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	require.NoError(t, err)
	jws, err := signer.Sign(payload)
	require.NoError(t, err)
	compact, err := jws.CompactSerialize()
	require.NoError(t, err)
	p := strings.Split(compact, ".")
	c.Signatures = []agentcard.Signature{{Protected: p[0], Signature: p[2]}}
	b, err := json.Marshal(c)
	require.NoError(t, err)
	return string(b)
}

// edit replaces the first old in s, which must be there.
func edit(t *testing.T, s, old, new string) string {
	t.Helper()
	require.Contains(t, s, old)
	return strings.Replace(s, old, new, 1)
}

func TestCardSignatures(t *testing.T) {
	good := newCardKey(t, "port-1")
	other := newCardKey(t, "port-1") // same kid, different key: an untrusted signer
	signed := signedFixture(t, good.priv)

	kid, err := agentcard.Verify(reparse(t, signed), good.pub, nil)
	require.NoError(t, err, "a signed card verifies")
	assert.Equal(t, "port-1", kid)

	var hdr map[string]any
	c := reparse(t, signed)
	hb, err := base64.RawURLEncoding.DecodeString(c.Signatures[0].Protected)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(hb, &hdr))
	assert.Equal(t, map[string]any{"alg": "ES256", "kid": "port-1", "typ": "JOSE"}, hdr)

	k384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)
	p384 := jose.JSONWebKey{Key: k384}
	edKeyPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	edSigned := signedFixture(t, jose.JSONWebKey{Key: edKey, KeyID: "ed-1", Algorithm: "EdDSA"})
	edTrust := &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: edKeyPub, KeyID: "ed-1"}}}

	for _, tc := range []struct {
		name  string
		card  string
		keys  *jose.JSONWebKeySet
		algs  []string
		valid bool
	}{
		{"as signed", signed, good.pub, nil, true},
		{"reordered but equal JSON", reorder(t, signed), good.pub, nil, true},
		{"an unknown field added (unsigned, ignored)", edit(t, signed, `"name":`, `"x-note":"hi","name":`), good.pub, nil, true},
		{"one field changed", edit(t, signed, `"version":"3.4.1"`, `"version":"3.4.2"`), good.pub, nil, false},
		{"a field removed", edit(t, signed, `"documentationUrl":"https://docs.port.example.org/berths",`, ""), good.pub, nil, false},
		{"an explicit false removed", edit(t, signed, `"pushNotifications":false,`, ""), good.pub, nil, false},
		{"signed by an untrusted key", signedFixture(t, other.priv), good.pub, nil, false},
		{"no trusted keys", signed, nil, nil, false},
		{"EdDSA allowed by default", edSigned, edTrust, nil, true},
		{"EdDSA not on the allow-list", edSigned, edTrust, []string{"ES256"}, false},
		{"a third-party signer", forgeSig(t, signed, map[string]any{"kid": "port-1", "typ": "JOSE"}, good.priv.Key, jose.ES256), good.pub, nil, true},
		{"no kid in the protected header", forgeSig(t, signed, map[string]any{"typ": "JOSE"}, good.priv.Key, jose.ES256), good.pub, nil, false},
		{"ES384 not on the allow-list", forgeSig(t, signed, map[string]any{"kid": "p384"}, p384.Key, jose.ES384),
			&jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: p384.Key.(*ecdsa.PrivateKey).Public(), KeyID: "p384"}}}, nil, false},
		{"a second signature verifies", func() string {
			c := reparse(t, forgeSig(t, signed, map[string]any{"kid": "nobody"}, other.priv.Key, jose.ES256))
			c2, err := agentcard.Sign(c, good.priv)
			require.NoError(t, err)
			b, _ := json.Marshal(c2)
			return string(b)
		}(), good.pub, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := agentcard.Verify(reparse(t, tc.card), tc.keys, tc.algs)
			if tc.valid {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, agentcard.ErrSignature)
			}
		})
	}

	_, err = agentcard.Verify(reparse(t, signed), good.pub, []string{"HS256"})
	require.ErrorIs(t, err, agentcard.ErrInvalid, "HMAC is never allowed")
	unsigned := reparse(t, signed)
	unsigned.Signatures = nil
	_, err = agentcard.Verify(unsigned, good.pub, nil)
	require.ErrorIs(t, err, agentcard.ErrSignature)
	_, err = agentcard.Sign(unsigned, jose.JSONWebKey{Key: good.priv.Key, Algorithm: "ES256"})
	require.ErrorIs(t, err, agentcard.ErrInvalid, "a signing key needs a kid")
}
