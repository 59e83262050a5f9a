package agentcard_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/agentcard"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	return b
}

// A v1.0 card with every field round-trips: parse, encode, same JSON —
// including explicit false capabilities, which must not be confused with
// absent ones.
func TestAgentCardRoundTripV1(t *testing.T) {
	raw := readFixture(t, "card-v1.json")
	c, err := agentcard.Parse(raw)
	require.NoError(t, err)
	assert.Equal(t, raw, c.Raw())
	assert.Equal(t, "Harbour Berth Scheduler", c.Name)
	require.Len(t, c.SupportedInterfaces, 3)
	assert.Equal(t, agentcard.Interface{URL: "https://berths.example.org/a2a/grpc", ProtocolBinding: "GRPC", Tenant: "north-quay", ProtocolVersion: "1.0"}, c.SupportedInterfaces[1])
	require.NotNil(t, c.Capabilities.PushNotifications)
	assert.False(t, *c.Capabilities.PushNotifications, "explicit false is kept")
	require.NotNil(t, c.Capabilities.ExtendedAgentCard)
	assert.True(t, *c.Capabilities.Streaming)
	assert.Equal(t, "https://id.port.example.org/.well-known/openid-configuration", c.SecuritySchemes["portid"].OpenIDConnect.OpenIDConnectURL)
	assert.Equal(t, "X-Port-Key", c.SecuritySchemes["key"].APIKey.Name)
	assert.Equal(t, []string{"openid", "profile"}, c.SecurityRequirements[0].Schemes["portid"].List)
	assert.Equal(t, "Berth planner", c.Skills[0].Name)
	require.Len(t, c.Signatures, 1)

	out, err := json.Marshal(c)
	require.NoError(t, err)
	assert.JSONEq(t, string(raw), string(out))

	// A card without the optional flags encodes none of them.
	bare := strings.Replace(string(raw), `"pushNotifications": false,`, "", 1)
	c2, err := agentcard.Parse([]byte(bare))
	require.NoError(t, err)
	assert.Nil(t, c2.Capabilities.PushNotifications)
	out, err = json.Marshal(c2)
	require.NoError(t, err)
	assert.NotContains(t, string(out), "pushNotifications")

	// Empties are not covered by a signature (the canonical form drops
	// them), so they are not read either: a scheme named with no scopes, an
	// empty string, an empty list.
	empties := strings.Replace(string(raw), `"key": {"list": ["partner"]}`, `"key": {}`, 1)
	empties = strings.Replace(empties, `"tenant": "north-quay"`, `"tenant": ""`, 1)
	c3, err := agentcard.Parse([]byte(empties))
	require.NoError(t, err)
	assert.Empty(t, c3.Skills[0].SecurityRequirements)
	assert.Empty(t, c3.SupportedInterfaces[1].Tenant)
}

// A v0.3 card is read and mapped to v1.0.
func TestAgentCardReadsV03(t *testing.T) {
	raw := readFixture(t, "card-v03.json")
	c, err := agentcard.Parse(raw)
	require.NoError(t, err)
	assert.Equal(t, raw, c.Raw())
	assert.Equal(t, []agentcard.Interface{
		{URL: "https://invoices.example.net/a2a", ProtocolBinding: "JSONRPC", ProtocolVersion: "0.3.0"},
		{URL: "https://invoices.example.net/grpc", ProtocolBinding: "GRPC", ProtocolVersion: "0.3.0"},
	}, c.SupportedInterfaces)
	assert.True(t, *c.Capabilities.ExtendedAgentCard, "supportsAuthenticatedExtendedCard")
	assert.False(t, *c.Capabilities.Streaming)
	assert.Equal(t, "https://id.example.net/.well-known/openid-configuration", c.SecuritySchemes["oidc"].OpenIDConnect.OpenIDConnectURL)
	assert.Equal(t, &agentcard.APIKeySecurityScheme{Location: "header", Name: "X-Key"}, c.SecuritySchemes["apikey"].APIKey)
	assert.Equal(t, []string{"openid", "email"}, c.SecurityRequirements[0].Schemes["oidc"].List)
	assert.Contains(t, c.Skills[0].SecurityRequirements[0].Schemes, "apikey")

	// Encoding gives the v1.0 form.
	out, err := json.Marshal(c)
	require.NoError(t, err)
	assert.Contains(t, string(out), `"supportedInterfaces"`)
	assert.NotContains(t, string(out), `"preferredTransport"`)
	again, err := agentcard.Parse(out)
	require.NoError(t, err)
	assert.Equal(t, c.SupportedInterfaces, again.SupportedInterfaces)
}

func TestAgentCardRejectsBadInput(t *testing.T) {
	raw := string(readFixture(t, "card-v1.json"))
	for _, tc := range []struct {
		name, card, want string
	}{
		{"not JSON", "{", "not a JSON object"},
		{"an array", "[]", "not a JSON object"},
		{"no name", strings.Replace(raw, `"name": "Harbour Berth Scheduler",`, "", 1), "missing name"},
		{"no interfaces", strings.Replace(raw, `"supportedInterfaces": [`, `"supportedInterfaces": [], "x": [`, 1), "supportedInterfaces"},
		{"interface without url", strings.Replace(raw, `"url": "https://berths.example.org/a2a/v1", `, "", 1), "supportedInterfaces[0].url"},
		{"no output modes", strings.Replace(raw, `"defaultOutputModes": ["application/json", "text/html"],`, "", 1), "defaultOutputModes"},
		{"skill without tags", strings.Replace(raw, `"tags": ["port", "reporting"]`, `"tags": []`, 1), "skills[1].tags"},
		{"wrong type", strings.Replace(raw, `"version": "3.4.1"`, `"version": 3`, 1), "agent card"},
		{"control character in name", strings.Replace(raw, `Harbour Berth`, `Harbour\u202eBerth`, 1), "control character"},
		{"over 256 KiB", raw[:len(raw)-2] + `, "pad": "` + strings.Repeat("x", 256<<10) + `"}`, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := agentcard.Parse([]byte(tc.card))
			require.ErrorIs(t, err, agentcard.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A card without skills is served with "skills": [], as A2A requires: an
// array, never null.
func TestCardArraysAreArrays(t *testing.T) {
	b, err := json.Marshal(agentcard.Card{Name: "x"})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"skills", "supportedInterfaces", "defaultInputModes", "defaultOutputModes"} {
		require.Equal(t, []any{}, m[k], k)
	}
}
