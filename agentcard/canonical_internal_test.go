package agentcard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The canonical form follows the official A2A SDKs' recipe: schema fields
// only, no signatures, empties dropped at every depth (but explicit false
// kept for optional flags, dropped for plain bools), then RFC 8785.
func TestCanonicalCardForm(t *testing.T) {
	raw := `{
	  "name": "Example Agent", "description": "",
	  "capabilities": {"streaming": false, "pushNotifications": false, "extensions": [
	    {"uri": "urn:x", "required": false, "params": {"b": 1.50, "a": "", "z": [null]}}
	  ]},
	  "skills": [], "unknownTopLevel": {"x": 1},
	  "supportedInterfaces": [{"url": "https://a.example", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "extra": "dropped"}],
	  "signatures": [{"protected": "p", "signature": "s"}],
	  "defaultInputModes": ["", "text/plain"],
	  "version": "1\u00e9<>"
	}`
	got, err := canonical(Card{raw: []byte(raw)})
	require.NoError(t, err)
	assert.Equal(t, `{"capabilities":{"extensions":[{"params":{"b":1.5},"uri":"urn:x"}],"pushNotifications":false,"streaming":false},`+
		`"defaultInputModes":["text/plain"],"name":"Example Agent",`+
		`"supportedInterfaces":[{"protocolBinding":"JSONRPC","protocolVersion":"1.0","url":"https://a.example"}],"version":"1é<>"}`, string(got))

	// A v0.3 card keeps its own fields.
	got, err = canonical(Card{raw: []byte(`{"url":"https://a.example","name":"n","signatures":[],"skills":[]}`), v03: true})
	require.NoError(t, err)
	assert.Equal(t, `{"name":"n","url":"https://a.example"}`, string(got))
}
