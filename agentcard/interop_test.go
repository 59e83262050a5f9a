package agentcard_test

import (
	"bytes"
	"crypto/ecdsa"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// node runs an interop script of the official A2A JS SDK with input on
// stdin. The SDK is installed by `npm ci --prefix interop/js` (.ci/run does
// it); without it — a machine with only Go — the test is skipped, saying so.
func node(t *testing.T, script string, input any) (string, error) {
	t.Helper()
	if _, err := os.Stat("../interop/js/node_modules/@a2a-js/sdk"); err != nil {
		switchboardtest.Skip(t, "the A2A JS SDK is not installed: run `npm ci --prefix interop/js` (CI does)")
	}
	bin, err := exec.LookPath("node")
	if err != nil {
		switchboardtest.Skip(t, "node is not installed; CI runs this test with Node.js")
	}
	in, err := json.Marshal(input)
	require.NoError(t, err)
	cmd := exec.Command(bin, script)
	cmd.Dir = "../interop/js"
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if errb.Len() > 0 {
		t.Logf("%s stderr: %s", script, errb.String())
	}
	return out.String(), err
}

// Cards signed by the A2A JS SDK verify here, and cards switchboard signs
// verify with the SDK — over the full v1.0 fixture, explicit false flags and
// extension params included.
func TestCardSignaturesInteroperateWithA2AJSSDK(t *testing.T) {
	key := newCardKey(t, "interop-1")
	priv, err := json.Marshal(key.priv)
	require.NoError(t, err)
	pub, err := json.Marshal(jose.JSONWebKey{Key: key.priv.Key.(*ecdsa.PrivateKey).Public(), KeyID: "interop-1", Algorithm: "ES256"})
	require.NoError(t, err)

	c, err := agentcard.Parse(readFixture(t, "card-v1.json"))
	require.NoError(t, err)
	c.Signatures = nil
	cardJSON, err := json.Marshal(c)
	require.NoError(t, err)

	// JS signs, Go verifies.
	out, err := node(t, "sign.mjs", map[string]json.RawMessage{"card": cardJSON, "jwk": priv})
	require.NoError(t, err, out)
	fromJS, err := agentcard.Parse([]byte(out))
	require.NoError(t, err)
	kid, err := agentcard.Verify(fromJS, key.pub, nil)
	require.NoError(t, err, "a card signed by the JS SDK verifies with switchboard")
	assert.Equal(t, "interop-1", kid)
	tampered, err := agentcard.Parse([]byte(strings.Replace(out, "Harbour Berth Scheduler", "Harbour Berth Schedulr", 1)))
	require.NoError(t, err)
	_, err = agentcard.Verify(tampered, key.pub, nil)
	require.ErrorIs(t, err, agentcard.ErrSignature)

	// Go signs, JS verifies.
	signed, err := agentcard.Sign(c, key.priv)
	require.NoError(t, err)
	signedJSON, err := json.Marshal(signed)
	require.NoError(t, err)
	out, err = node(t, "verify.mjs", map[string]json.RawMessage{"card": signedJSON, "jwk": pub})
	require.NoError(t, err, "a card switchboard signs verifies with the JS SDK: %s", out)
	assert.Equal(t, "verified\n", out)
	out, err = node(t, "verify.mjs", map[string]json.RawMessage{
		"card": []byte(strings.Replace(string(signedJSON), `"3.4.1"`, `"3.4.2"`, 1)), "jwk": pub})
	require.Error(t, err, "the JS SDK refuses a tampered card: %s", out)
}

// Proto-named fields and oneofs get the same verdict here and in the JS SDK,
// in both directions.
func TestProtoNamesAndOneofsInteroperateWithA2AJSSDK(t *testing.T) {
	key := newCardKey(t, "interop-2")
	priv, err := json.Marshal(key.priv)
	require.NoError(t, err)
	pub, err := json.Marshal(jose.JSONWebKey{Key: key.priv.Key.(*ecdsa.PrivateKey).Public(), KeyID: "interop-2", Algorithm: "ES256"})
	require.NoError(t, err)
	jsSign := func(card string) string {
		t.Helper()
		out, err := node(t, "sign.mjs", map[string]json.RawMessage{"card": json.RawMessage(card), "jwk": priv})
		require.NoError(t, err, out)
		return out
	}
	jsVerifies := func(card string) bool {
		t.Helper()
		out, err := node(t, "verify.mjs", map[string]json.RawMessage{"card": json.RawMessage(card), "jwk": pub})
		return err == nil && out == "verified\n"
	}
	base := `{"name":"Proto Agent","description":"d","version":"1","defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],` +
		`"supported_interfaces":[{"url":"https://p.example","protocol_binding":"JSONRPC","protocol_version":"1.0"}],` +
		`"documentation_url":"https://docs.p.example","capabilities":{"push_notifications":false,"streaming":true},` +
		`"security_schemes":{"b":{"http_auth_security_scheme":{"scheme":"Bearer","bearer_format":"JWT"}},` +
		`"o":{"oauth2SecurityScheme":{"flows":{"client_credentials":{"token_url":"https://p.example/token"}}}}},` +
		`"skills":[{"id":"s","name":"S","description":"d","tags":["t"],"input_modes":["application/json"]}]}`

	// JS signs a proto-named card; switchboard reads the proto names and
	// verifies it.
	signed := jsSign(base)
	c, err := agentcard.Parse([]byte(signed))
	require.NoError(t, err)
	_, err = agentcard.Verify(c, key.pub, nil)
	require.NoError(t, err, "a JS-signed card with proto-named fields verifies here")
	assert.Equal(t, "https://docs.p.example", c.DocumentationURL)
	assert.Equal(t, "JWT", c.SecuritySchemes["b"].HTTPAuth.BearerFormat)
	assert.Equal(t, "https://p.example/token", c.SecuritySchemes["o"].OAuth2.Flows.ClientCredentials.TokenURL)
	assert.Equal(t, []string{"application/json"}, c.Skills[0].InputModes)
	require.NotNil(t, c.Capabilities.PushNotifications)
	assert.False(t, *c.Capabilities.PushNotifications)

	// A proto-named field added after signing breaks the signature in both.
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(signed), &doc))
	doc["icon_url"] = "https://evil.example/icon.png"
	added, err := json.Marshal(doc)
	require.NoError(t, err)
	assert.False(t, jsVerifies(string(added)), "the JS SDK refuses the added proto-named field")
	c, err = agentcard.Parse(added)
	require.NoError(t, err)
	_, err = agentcard.Verify(c, key.pub, nil)
	require.ErrorIs(t, err, agentcard.ErrSignature, "so does switchboard")

	// Both names given: the JSON name wins in both, so adding a
	// proto-named twin changes nothing either reads and verifies in both.
	delete(doc, "icon_url")
	doc["documentationUrl"] = "https://docs.p.example"
	both, err := json.Marshal(doc)
	require.NoError(t, err)
	assert.True(t, jsVerifies(string(both)))
	c, err = agentcard.Parse(both)
	require.NoError(t, err)
	_, err = agentcard.Verify(c, key.pub, nil)
	require.NoError(t, err)

	// switchboard signs the card it read; the JS SDK verifies it, and
	// refuses it once a proto-named field is added.
	c.Signatures = nil
	mine, err := agentcard.Sign(c, key.priv)
	require.NoError(t, err)
	mineJSON, err := json.Marshal(mine)
	require.NoError(t, err)
	assert.True(t, jsVerifies(string(mineJSON)), "the JS SDK verifies what switchboard signed")
	tampered := strings.Replace(string(mineJSON), `"name":"Proto Agent"`, `"name":"Proto Agent","icon_url":"https://evil.example"`, 1)
	require.NotEqual(t, string(mineJSON), tampered)
	assert.False(t, jsVerifies(tampered))
	c, err = agentcard.Parse([]byte(tampered))
	require.NoError(t, err)
	_, err = agentcard.Verify(c, key.pub, nil)
	require.ErrorIs(t, err, agentcard.ErrSignature)

	// A oneof with two members: the JS SDK signs only the first member it
	// reads; switchboard refuses such a card rather than verify half of it,
	// and refuses to sign one.
	two := strings.Replace(base, `"http_auth_security_scheme":{"scheme":"Bearer","bearer_format":"JWT"}`,
		`"http_auth_security_scheme":{"scheme":"Bearer"},"mtlsSecurityScheme":{"description":"m"}`, 1)
	require.NotEqual(t, base, two)
	_, err = agentcard.Parse([]byte(jsSign(two)))
	require.ErrorIs(t, err, agentcard.ErrInvalid)
	flows := strings.Replace(base, `"client_credentials":{"token_url":"https://p.example/token"}`,
		`"client_credentials":{"token_url":"https://p.example/token"},"deviceCode":{"tokenUrl":"https://p.example/t"}`, 1)
	require.NotEqual(t, base, flows)
	_, err = agentcard.Parse([]byte(jsSign(flows)))
	require.ErrorIs(t, err, agentcard.ErrInvalid)
	var goCard agentcard.Card
	require.NoError(t, json.Unmarshal([]byte(`{"name":"n","description":"d","version":"1","defaultInputModes":["a"],"defaultOutputModes":["a"],`+
		`"supportedInterfaces":[{"url":"https://p.example","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],`+
		`"securitySchemes":{"x":{"mtlsSecurityScheme":{},"apiKeySecurityScheme":{"name":"k","location":"header"}}}}`), &goCard))
	_, err = agentcard.Sign(goCard, key.priv)
	require.ErrorIs(t, err, agentcard.ErrInvalid)
}

// TestMain runs the tests, then names on stderr each test that skipped
// for want of something on this machine, and why (switchboardtest.Skip).
func TestMain(m *testing.M) { switchboardtest.Main(m) }
