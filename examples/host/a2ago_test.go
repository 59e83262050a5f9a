package main

import (
	"encoding/json"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/agentcard"
)

// sdkCard is a card as the official A2A Go SDK (a2a-go v0.3.3, A2A v0.3)
// makes it: every security scheme kind, an OAuth 2.0 scheme listing two
// flows (v0.3 allows any number), a second interface and a skill.
func sdkCard() a2a.AgentCard {
	return a2a.AgentCard{
		Name: "Invoice agent", Description: "pays invoices", Version: "1.2.0", ProtocolVersion: "0.3.0",
		URL: "https://invoices.example.net/a2a", PreferredTransport: a2a.TransportProtocolJSONRPC,
		AdditionalInterfaces: []a2a.AgentInterface{
			{URL: "https://invoices.example.net/a2a", Transport: a2a.TransportProtocolJSONRPC},
			{URL: "https://invoices.example.net/grpc", Transport: a2a.TransportProtocolGRPC},
		},
		Capabilities:       a2a.AgentCapabilities{Streaming: true, StateTransitionHistory: true},
		DefaultInputModes:  []string{"application/json"},
		DefaultOutputModes: []string{"application/json"},
		SecuritySchemes: a2a.NamedSecuritySchemes{
			"oauth": a2a.OAuth2SecurityScheme{Flows: a2a.OAuthFlows{
				AuthorizationCode: &a2a.AuthorizationCodeOAuthFlow{AuthorizationURL: "https://id.example.net/authorize", TokenURL: "https://id.example.net/token", Scopes: map[string]string{"invoices": "pay invoices"}},
				ClientCredentials: &a2a.ClientCredentialsOAuthFlow{TokenURL: "https://id.example.net/token", Scopes: map[string]string{"invoices": "pay invoices"}},
			}},
			"key":    a2a.APIKeySecurityScheme{In: a2a.APIKeySecuritySchemeInHeader, Name: "X-Key"},
			"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", BearerFormat: "JWT"},
			"oidc":   a2a.OpenIDConnectSecurityScheme{OpenIDConnectURL: "https://id.example.net/.well-known/openid-configuration"},
			"mtls":   a2a.MutualTLSSecurityScheme{},
		},
		Security: []a2a.SecurityRequirements{{"oauth": {"invoices"}}},
		Skills:   []a2a.AgentSkill{{ID: "pay", Name: "Pay", Description: "pays an invoice", Tags: []string{"finance"}}},
	}
}

// agentcard.Parse's doc: a v0.3 card is "never refused for what v0.3
// allows", and "an error about a v0.3 card names the v0.3 field". A card
// the official A2A Go SDK makes parses — every scheme kind, the OAuth 2.0
// scheme's two flows mapped to the one v1.0 holds (authorization code
// first) while Raw keeps both — and one with an empty url is refused
// naming url, not a v1.0 path its author never wrote.
func TestCardsOfTheA2AGoSDK(t *testing.T) {
	raw, err := json.Marshal(sdkCard())
	require.NoError(t, err)
	c, err := agentcard.Parse(raw)
	require.NoError(t, err)
	assert.Equal(t, []agentcard.Interface{
		{URL: "https://invoices.example.net/a2a", ProtocolBinding: "JSONRPC", ProtocolVersion: "0.3.0"},
		{URL: "https://invoices.example.net/grpc", ProtocolBinding: "GRPC", ProtocolVersion: "0.3.0"},
	}, c.SupportedInterfaces)
	require.Len(t, c.SecuritySchemes, 5, "every scheme kind carried over")
	oauth := c.SecuritySchemes["oauth"].OAuth2
	require.NotNil(t, oauth)
	require.NotNil(t, oauth.Flows.AuthorizationCode, "the first of the flows")
	assert.Nil(t, oauth.Flows.ClientCredentials, "v1.0 holds one flow")
	assert.Contains(t, string(c.Raw()), "clientCredentials", "the card as read keeps both")
	assert.Equal(t, "X-Key", c.SecuritySchemes["key"].APIKey.Name)
	assert.Equal(t, "JWT", c.SecuritySchemes["bearer"].HTTPAuth.BearerFormat)
	assert.NotNil(t, c.SecuritySchemes["mtls"].MutualTLS)
	require.NoError(t, c.Validate())

	bad := sdkCard()
	bad.URL = ""
	raw, err = json.Marshal(bad)
	require.NoError(t, err)
	_, err = agentcard.Parse(raw)
	require.ErrorIs(t, err, agentcard.ErrInvalid)
	assert.Contains(t, err.Error(), "missing url")
	assert.NotContains(t, err.Error(), "supportedInterfaces")
	bad = sdkCard()
	bad.AdditionalInterfaces[1].Transport = ""
	raw, err = json.Marshal(bad)
	require.NoError(t, err)
	_, err = agentcard.Parse(raw)
	require.ErrorIs(t, err, agentcard.ErrInvalid)
	assert.Contains(t, err.Error(), "additionalInterfaces[1].transport")
}
