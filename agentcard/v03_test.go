package agentcard_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/agentcard"
)

// EncodeV03 writes what a v0.3 reader needs, Parse reads it back to the
// same card (but what v0.3 cannot say), and a signature made over the
// v0.3 bytes verifies — and fails once a byte of what it covers changes.
// The card's own v1.0 signatures are not carried over: they cover other
// bytes.
func TestEncodeV03(t *testing.T) {
	c, err := agentcard.Parse(readFixture(t, "card-v1.json"))
	require.NoError(t, err)
	key := newCardKey(t, "v03-key")
	c1, err := agentcard.Sign(c, key.priv) // a v1.0 signature
	require.NoError(t, err)

	b, err := agentcard.EncodeV03(c1)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	main := c.SupportedInterfaces[0]
	assert.Equal(t, main.URL, doc["url"])
	assert.Equal(t, main.ProtocolBinding, doc["preferredTransport"])
	assert.Contains(t, doc["protocolVersion"], "0.3")
	assert.NotContains(t, doc, "supportedInterfaces")
	assert.NotContains(t, doc, "signatures", "v1.0 signatures cover other bytes")
	for name, s := range doc["securitySchemes"].(map[string]any) {
		assert.NotEmpty(t, s.(map[string]any)["type"], "scheme %s is tagged by its type", name)
	}

	back, err := agentcard.Parse(b)
	require.NoError(t, err)
	assert.Equal(t, c.Name, back.Name)
	assert.Equal(t, c.Skills, back.Skills)
	assert.Equal(t, len(c.SecuritySchemes), len(back.SecuritySchemes))
	assert.Equal(t, c.SupportedInterfaces[0].URL, back.SupportedInterfaces[0].URL)
	assert.Equal(t, c.Capabilities.ExtendedAgentCard, back.Capabilities.ExtendedAgentCard)

	signed, err := agentcard.EncodeV03(c, key.priv)
	require.NoError(t, err)
	sc, err := agentcard.Parse(signed)
	require.NoError(t, err)
	require.Len(t, sc.Signatures, 1)
	kid, err := agentcard.Verify(sc, key.pub, nil)
	require.NoError(t, err)
	assert.Equal(t, "v03-key", kid)
	tampered := bytes.Replace(signed, []byte(c.Name), []byte(c.Name+"!"), 1)
	tc, err := agentcard.Parse(tampered)
	require.NoError(t, err)
	_, err = agentcard.Verify(tc, key.pub, nil)
	require.ErrorIs(t, err, agentcard.ErrSignature)

	_, err = agentcard.EncodeV03(agentcard.Card{Name: "no interfaces"})
	require.ErrorIs(t, err, agentcard.ErrInvalid)
}
