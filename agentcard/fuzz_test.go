package agentcard_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/json"
	"os"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/switchboardhq/switchboard/agentcard"
)

// fixedKey is a deterministic P-256 key, so fuzz inputs signed with it stay
// valid across runs (the corpus under testdata/fuzz depends on it).
func fixedKey() (jose.JSONWebKey, *jose.JSONWebKeySet) {
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), bytes.Repeat([]byte{7}, 32))
	if err != nil {
		panic(err)
	}
	return jose.JSONWebKey{Key: k, KeyID: "fuzz", Algorithm: "ES256"},
		&jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: "fuzz", Algorithm: "ES256"}}}
}

func isV03(data []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(data, &probe) != nil {
		return false
	}
	_, a := probe["supportedInterfaces"]
	_, b := probe["supported_interfaces"]
	_, u := probe["url"]
	return u && !a && !b
}

// FuzzParse: whatever Parse accepts, the card it returns describes exactly
// its signed payload — encoding the card and parsing it again gives the
// same payload — and nothing panics.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"card-v1.json", "card-v03.json"} {
		b, err := readFixtureFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"name":"n","NAME":"m","description":"d"}`))
	f.Add([]byte(`{"name":"n","documentation_url":"u","security_schemes":{"a":{"mtls_security_scheme":{}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := agentcard.Parse(data)
		if err != nil {
			return
		}
		p1, err := agentcard.Payload(c)
		if err != nil {
			t.Fatalf("Payload of a parsed card: %v", err)
		}
		if isV03(data) {
			return // a v0.3 card's payload is its own document
		}
		enc, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := agentcard.Parse(enc)
		if err != nil {
			t.Fatalf("the encoding of a parsed card does not parse: %v\n%s", err, enc)
		}
		p2, err := agentcard.Payload(c2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p1, p2) {
			t.Fatalf("the card read differs from its payload:\npayload %s\ncard    %s", p1, p2)
		}
	})
}

// FuzzVerify: a signed card mutated at random either fails to parse, fails
// to verify, or reads exactly as the card that was signed.
func FuzzVerify(f *testing.F) {
	priv, pub := fixedKey()
	raw, err := readFixtureFile("card-v1.json")
	if err != nil {
		f.Fatal(err)
	}
	c, err := agentcard.Parse(raw)
	if err != nil {
		f.Fatal(err)
	}
	c.Signatures = nil
	signed, err := agentcard.Sign(c, priv)
	if err != nil {
		f.Fatal(err)
	}
	want, err := json.Marshal(signed)
	if err != nil {
		f.Fatal(err)
	}
	wantCard, err := agentcard.Parse(want)
	if err != nil {
		f.Fatal(err)
	}
	wantJSON, _ := json.Marshal(wantCard)
	f.Add(want)
	f.Add([]byte(strings.Replace(string(want), `{"name":`, `{"NAME":"x","name":`, 1)))
	f.Add([]byte(strings.Replace(string(want), `"documentationUrl"`, `"documentation_url"`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := agentcard.Parse(data)
		if err != nil {
			return
		}
		if _, err := agentcard.Verify(c, pub, nil); err != nil {
			return
		}
		got, _ := json.Marshal(c)
		var a, b any
		_ = json.Unmarshal(got, &a)
		_ = json.Unmarshal(wantJSON, &b)
		ga, _ := json.Marshal(a)
		gb, _ := json.Marshal(b)
		// Signatures may differ (another valid signature of the same
		// payload); everything else must be the signed card.
		strip := func(v []byte) string {
			var m map[string]any
			_ = json.Unmarshal(v, &m)
			delete(m, "signatures")
			out, _ := json.Marshal(m)
			return string(out)
		}
		if strip(ga) != strip(gb) {
			t.Fatalf("a verified card reads differently from the signed one:\n got %s\nwant %s", ga, gb)
		}
	})
}

func readFixtureFile(name string) ([]byte, error) { return os.ReadFile("testdata/" + name) }
