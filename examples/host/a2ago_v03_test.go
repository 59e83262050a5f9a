package main

import (
	"context"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	a2acard "github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
)

// An agent built on the official A2A Go SDK (a2a-go v0.3.3, A2A v0.3)
// discovers a persona on this host: asking with A2A-Version 0.3, it reads
// the endpoint, the protocol version, the security schemes and the skills
// of the card the persona published (v1.0 stays the default, which that
// SDK reads without its endpoint).
func TestA2AGoSDKResolvesOurCards(t *testing.T) {
	e := newEnv(t, "")
	bob := e.signIn("bob")
	card := switchboard.PersonaCard(switchboard.CardFields{
		Name: "Bob's desk", Description: "pays invoices", Version: "1.0",
		URL:    e.srv.URL + "/agents/bob-desk",
		Skills: []agentcard.Skill{{ID: "pay", Name: "Pay", Description: "pays an invoice", Tags: []string{"finance"}}},
	})

	yes := true
	card.Capabilities.ExtendedAgentCard = &yes
	card.SecuritySchemes = map[string]agentcard.SecurityScheme{
		"switchboard": {HTTPAuth: &agentcard.HTTPAuthSecurityScheme{Scheme: "Bearer", Description: "a switchboard grant's credential"}},
		"oauth": {OAuth2: &agentcard.OAuth2SecurityScheme{Flows: agentcard.OAuthFlows{
			AuthorizationCode: &agentcard.OAuthFlow{AuthorizationURL: "https://id.example/authorize", TokenURL: "https://id.example/token", Scopes: map[string]string{"inbox": "hand over work"}}}}},
	}
	card.SecurityRequirements = []agentcard.SecurityRequirement{{Schemes: map[string]agentcard.StringList{"oauth": {List: []string{"inbox"}}}}}
	code, out, _ := bob.do("PUT", "/me/personas/bob-desk", map[string]any{"card": card, "discoverable": true})
	require.Equal(t, 200, code, out)

	ctx := context.Background()
	resolver := a2acard.NewResolver(nil)
	base := e.srv.URL + "/agents/bob-desk"

	// The default, v1.0: the SDK loses the endpoint.
	v1, err := resolver.Resolve(ctx, base)
	if err == nil {
		assert.Empty(t, v1.URL, "v1.0 moved url into supportedInterfaces")
	}

	got, err := resolver.Resolve(ctx, base, a2acard.WithRequestHeader("A2A-Version", "0.3"))
	require.NoError(t, err)
	assert.Equal(t, "Bob's desk", got.Name)
	assert.Equal(t, e.srv.URL+"/agents/bob-desk", got.URL)
	assert.Equal(t, a2a.TransportProtocol(switchboard.BindingSwitchboard), got.PreferredTransport)
	assert.Equal(t, agentcard.V03Version, got.ProtocolVersion)
	assert.True(t, got.SupportsAuthenticatedExtendedCard)
	require.Len(t, got.Skills, 1)
	assert.Equal(t, []string{"finance"}, got.Skills[0].Tags)
	require.Len(t, got.SecuritySchemes, 2)
	bearer, ok := got.SecuritySchemes["switchboard"].(a2a.HTTPAuthSecurityScheme)
	require.True(t, ok, "%T", got.SecuritySchemes["switchboard"])
	assert.Equal(t, "Bearer", bearer.Scheme)
	oauth, ok := got.SecuritySchemes["oauth"].(a2a.OAuth2SecurityScheme)
	require.True(t, ok, "%T", got.SecuritySchemes["oauth"])
	require.NotNil(t, oauth.Flows.AuthorizationCode)
	assert.Equal(t, "https://id.example/token", oauth.Flows.AuthorizationCode.TokenURL)
	require.Len(t, got.Security, 1)
	assert.Equal(t, a2a.SecuritySchemeScopes{"inbox"}, got.Security[0]["oauth"])
}
