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
)

// node runs an interop script of the official A2A JS SDK with input on
// stdin. The SDK is installed by `npm ci --prefix interop/js` (.ci/run does
// it); without it — a machine with only Go — the test is skipped, saying so.
func node(t *testing.T, script string, input any) (string, error) {
	t.Helper()
	if _, err := os.Stat("../interop/js/node_modules/@a2a-js/sdk"); err != nil {
		t.Skip("the A2A JS SDK is not installed: run `npm ci --prefix interop/js` (CI does)")
	}
	bin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; CI runs this test with Node.js")
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
