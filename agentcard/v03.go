// The v0.3 rendering of a card, for clients on an A2A v0.3 SDK.

package agentcard

import (
	"encoding/json"
	"strings"

	"github.com/go-jose/go-jose/v4"
)

// V03Version is the protocol version EncodeV03 writes when the card's
// first interface does not name a 0.3 version of its own.
const V03Version = "0.3.0"

// EncodeV03 renders c as an A2A v0.3 Agent Card, for clients built on a
// v0.3 SDK (such as a2a-go v0.3), which read the endpoint from url,
// preferredTransport and protocolVersion and a security scheme tagged by
// its type — fields A2A v1.0 moved into supportedInterfaces and wrapped.
// The first of c's SupportedInterfaces becomes url and preferredTransport;
// every interface is listed in additionalInterfaces; extendedAgentCard
// becomes supportsAuthenticatedExtendedCard. What v0.3 cannot say is left
// out: an OAuth 2.0 device code flow, PKCE flags.
//
// c's own signatures cover its v1.0 form, not these bytes, so they are not
// carried over. Each key given signs the v0.3 bytes themselves (a private
// JSON Web Key with KeyID and Algorithm, as for Sign): the signature
// covers the RFC 8785 form of the rendered card without its signatures,
// as a v0.3 verifier — and Verify, on the card Parse reads from these
// bytes — checks it. A host chooses the rendering by what the client
// asks for (see the example host: the A2A-Version request header).
func EncodeV03(c Card, keys ...jose.JSONWebKey) ([]byte, error) {
	b, err := encodeV03(c, keys)
	return b, wrap("encode v0.3 card", err)
}

func encodeV03(c Card, keys []jose.JSONWebKey) ([]byte, error) {
	c.raw, c.doc, c.v03 = nil, nil, false
	if err := c.validate(); err != nil {
		return nil, err
	}
	doc := v03Document(c)
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return b, nil
	}
	read, err := parse(b)
	if err != nil {
		return nil, invalid("the v0.3 rendering does not read back: %v", err)
	}
	payload, err := canonical(read)
	if err != nil {
		return nil, err
	}
	var sigs []Signature
	for _, key := range keys {
		sig, err := signPayload(payload, key)
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, sig)
	}
	doc["signatures"] = sigs
	return json.Marshal(doc)
}

// v03Document is c's v0.3 JSON document.
func v03Document(c Card) map[string]any {
	doc := map[string]any{
		"name": c.Name, "description": c.Description, "version": c.Version,
		"defaultInputModes": nonNil(c.DefaultInputModes), "defaultOutputModes": nonNil(c.DefaultOutputModes),
	}
	main := c.SupportedInterfaces[0]
	ver := main.ProtocolVersion
	if !strings.HasPrefix(ver, "0.3") {
		ver = V03Version
	}
	doc["protocolVersion"] = ver
	doc["url"] = main.URL
	doc["preferredTransport"] = main.ProtocolBinding
	var ifaces []map[string]string
	for _, i := range c.SupportedInterfaces {
		ifaces = append(ifaces, map[string]string{"url": i.URL, "transport": i.ProtocolBinding})
	}
	doc["additionalInterfaces"] = ifaces
	if c.Provider != nil {
		doc["provider"] = c.Provider
	}
	if c.IconURL != "" {
		doc["iconUrl"] = c.IconURL
	}
	if c.DocumentationURL != "" {
		doc["documentationUrl"] = c.DocumentationURL
	}
	caps := map[string]any{}
	if c.Capabilities.Streaming != nil {
		caps["streaming"] = *c.Capabilities.Streaming
	}
	if c.Capabilities.PushNotifications != nil {
		caps["pushNotifications"] = *c.Capabilities.PushNotifications
	}
	if len(c.Capabilities.Extensions) > 0 {
		caps["extensions"] = c.Capabilities.Extensions
	}
	doc["capabilities"] = caps
	if c.Capabilities.ExtendedAgentCard != nil {
		doc["supportsAuthenticatedExtendedCard"] = *c.Capabilities.ExtendedAgentCard
	}
	if len(c.SecuritySchemes) > 0 {
		schemes := map[string]any{}
		for name, s := range c.SecuritySchemes {
			schemes[name] = schemeV03Of(s)
		}
		doc["securitySchemes"] = schemes
	}
	if len(c.SecurityRequirements) > 0 {
		doc["security"] = requirementsOfV03(c.SecurityRequirements)
	}
	skills := []map[string]any{}
	for _, s := range c.Skills {
		m := map[string]any{"id": s.ID, "name": s.Name, "description": s.Description, "tags": nonNil(s.Tags)}
		if len(s.Examples) > 0 {
			m["examples"] = s.Examples
		}
		if len(s.InputModes) > 0 {
			m["inputModes"] = s.InputModes
		}
		if len(s.OutputModes) > 0 {
			m["outputModes"] = s.OutputModes
		}
		if len(s.SecurityRequirements) > 0 {
			m["security"] = requirementsOfV03(s.SecurityRequirements)
		}
		skills = append(skills, m)
	}
	doc["skills"] = skills
	return doc
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// requirementsOfV03 is the v0.3 form of security requirements: a list of
// scheme name → scopes.
func requirementsOfV03(rs []SecurityRequirement) []map[string][]string {
	out := make([]map[string][]string, 0, len(rs))
	for _, r := range rs {
		m := map[string][]string{}
		for name, scopes := range r.Schemes {
			m[name] = nonNil(scopes.List)
		}
		out = append(out, m)
	}
	return out
}

// schemeV03Of is s as an OpenAPI-style scheme tagged by type.
func schemeV03Of(s SecurityScheme) map[string]any {
	m := map[string]any{}
	desc := func(d string) {
		if d != "" {
			m["description"] = d
		}
	}
	switch {
	case s.APIKey != nil:
		m["type"], m["in"], m["name"] = "apiKey", s.APIKey.Location, s.APIKey.Name
		desc(s.APIKey.Description)
	case s.HTTPAuth != nil:
		m["type"], m["scheme"] = "http", s.HTTPAuth.Scheme
		if s.HTTPAuth.BearerFormat != "" {
			m["bearerFormat"] = s.HTTPAuth.BearerFormat
		}
		desc(s.HTTPAuth.Description)
	case s.OAuth2 != nil:
		flows := map[string]any{}
		f := s.OAuth2.Flows
		for name, fl := range map[string]*OAuthFlow{"authorizationCode": f.AuthorizationCode, "clientCredentials": f.ClientCredentials, "implicit": f.Implicit, "password": f.Password} {
			if fl != nil {
				flows[name] = flowV03(fl)
			}
		}
		m["type"], m["flows"] = "oauth2", flows
		if s.OAuth2.OAuth2MetadataURL != "" {
			m["oauth2MetadataUrl"] = s.OAuth2.OAuth2MetadataURL
		}
		desc(s.OAuth2.Description)
	case s.OpenIDConnect != nil:
		m["type"], m["openIdConnectUrl"] = "openIdConnect", s.OpenIDConnect.OpenIDConnectURL
		desc(s.OpenIDConnect.Description)
	case s.MutualTLS != nil:
		m["type"] = "mutualTLS"
		desc(s.MutualTLS.Description)
	}
	return m
}

// flowV03 is an OAuth 2.0 flow as v0.3 (OpenAPI) writes it: scopes always
// present.
func flowV03(f *OAuthFlow) map[string]any {
	m := map[string]any{"scopes": map[string]string{}}
	if f.Scopes != nil {
		m["scopes"] = f.Scopes
	}
	for k, v := range map[string]string{"authorizationUrl": f.AuthorizationURL, "tokenUrl": f.TokenURL, "refreshUrl": f.RefreshURL} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// signPayload signs payload as a card signature with key: a JWS with
// alg, kid and typ "JOSE" in the protected header, the payload detached.
func signPayload(payload []byte, key jose.JSONWebKey) (Signature, error) {
	if key.KeyID == "" || key.Algorithm == "" {
		return Signature{}, invalid("signing key needs a KeyID and an Algorithm")
	}
	if key.IsPublic() {
		return Signature{}, invalid("signing key %q is a public key", key.KeyID)
	}
	algs, err := allowedAlgorithms([]string{key.Algorithm})
	if err != nil {
		return Signature{}, err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: algs[0], Key: key.Key},
		(&jose.SignerOptions{}).WithType("JOSE").WithHeader(jose.HeaderKey("kid"), key.KeyID))
	if err != nil {
		return Signature{}, invalid("signing key %q: %v", key.KeyID, err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return Signature{}, err
	}
	compact, err := jws.CompactSerialize()
	if err != nil {
		return Signature{}, err
	}
	parts := strings.Split(compact, ".")
	return Signature{Protected: parts[0], Signature: parts[2]}, nil
}
