// The Agent Card model, Parse (v1.0 and v0.3) and Validate.

package agentcard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/switchboardhq/switchboard/internal/strictjson"
)

// Card is an A2A Agent Card (A2A v1.0, specification/a2a.proto), the
// JSON document an agent announces itself with. The JSON names are those of
// the v1.0 specification; Parse also reads v0.3 cards and maps
// them. switchboard uses cards for discovery only: all work between agents
// arrives as todos under a human-approved grant, never as A2A tasks.
type Card struct {
	Name                 string                    `json:"name"`                           // human-readable name of the agent (required)
	Description          string                    `json:"description"`                    // what the agent does (required)
	SupportedInterfaces  []Interface               `json:"supportedInterfaces"`            // where and how to reach the agent, preferred first (required)
	Provider             *Provider                 `json:"provider,omitempty"`             // the organisation behind the agent
	Version              string                    `json:"version"`                        // the agent's own version (required)
	DocumentationURL     string                    `json:"documentationUrl,omitempty"`     // human documentation of the agent
	Capabilities         Capabilities              `json:"capabilities"`                   // optional A2A features the agent supports
	SecuritySchemes      map[string]SecurityScheme `json:"securitySchemes,omitempty"`      // how callers authenticate, by scheme name
	SecurityRequirements []SecurityRequirement     `json:"securityRequirements,omitempty"` // which schemes a caller must satisfy (any one entry)
	DefaultInputModes    []string                  `json:"defaultInputModes"`              // media types the agent accepts (required)
	DefaultOutputModes   []string                  `json:"defaultOutputModes"`             // media types the agent produces (required)
	Skills               []Skill                   `json:"skills"`                         // what the agent can do
	Signatures           []Signature               `json:"signatures,omitempty"`           // detached JWS signatures over the card's canonical form
	IconURL              string                    `json:"iconUrl,omitempty"`              // an icon for the agent

	raw []byte         // the JSON the card was read from, if it was read
	doc map[string]any // the normalized document read from raw: fields and signed payload both come from it
	v03 bool           // read from a v0.3 card
	// v03Ifaces names, for a card read from v0.3, where each of
	// SupportedInterfaces came from: "" for the card's top-level url,
	// "additionalInterfaces[k]" for the others — so an error names the
	// field the card's author wrote.
	v03Ifaces []string
}

// MarshalJSON writes the card with its schema's arrays as arrays: skills,
// supportedInterfaces and the default modes are [] when empty, never null
// (A2A v1.0 requires them).
func (c Card) MarshalJSON() ([]byte, error) {
	type plain Card // without this method
	p := plain(c)
	if p.Skills == nil {
		p.Skills = []Skill{}
	}
	if p.SupportedInterfaces == nil {
		p.SupportedInterfaces = []Interface{}
	}
	if p.DefaultInputModes == nil {
		p.DefaultInputModes = []string{}
	}
	if p.DefaultOutputModes == nil {
		p.DefaultOutputModes = []string{}
	}
	return json.Marshal(p)
}

// Interface is one way to reach an agent: a URL and the protocol
// binding spoken there.
type Interface struct {
	URL             string `json:"url"`              // the endpoint
	ProtocolBinding string `json:"protocolBinding"`  // JSONRPC, GRPC, HTTP+JSON, or a URI for a custom binding
	Tenant          string `json:"tenant,omitempty"` // a tenant id to send with requests, if the endpoint serves several
	ProtocolVersion string `json:"protocolVersion"`  // the A2A protocol version spoken there, e.g. "1.0"
}

// Provider is the organisation behind an agent.
type Provider struct {
	URL          string `json:"url"`          // the organisation's website
	Organization string `json:"organization"` // the organisation's name
}

// Capabilities are the optional A2A features an agent supports. The
// flags are pointers so that an explicit false is kept apart from absent:
// the difference is part of a signed card.
type Capabilities struct {
	Streaming         *bool       `json:"streaming,omitempty"`         // streaming responses
	PushNotifications *bool       `json:"pushNotifications,omitempty"` // push notifications to a client's webhook
	Extensions        []Extension `json:"extensions,omitempty"`        // protocol extensions supported
	ExtendedAgentCard *bool       `json:"extendedAgentCard,omitempty"` // an extended card for authenticated callers
}

// Extension declares a protocol extension the agent supports.
type Extension struct {
	URI         string         `json:"uri,omitempty"`         // identifies the extension
	Description string         `json:"description,omitempty"` // what the agent uses it for
	Required    bool           `json:"required,omitempty"`    // whether a client must support it
	Params      map[string]any `json:"params,omitempty"`      // extension-specific configuration
}

// Skill is one capability an agent advertises.
type Skill struct {
	ID                   string                `json:"id"`                             // unique within the card (required)
	Name                 string                `json:"name"`                           // human-readable name (required)
	Description          string                `json:"description"`                    // what the skill does (required)
	Tags                 []string              `json:"tags"`                           // keywords, used by directory search (at least one)
	Examples             []string              `json:"examples,omitempty"`             // example prompts or requests
	InputModes           []string              `json:"inputModes,omitempty"`           // media types accepted, if not the card's defaults
	OutputModes          []string              `json:"outputModes,omitempty"`          // media types produced, if not the card's defaults
	SecurityRequirements []SecurityRequirement `json:"securityRequirements,omitempty"` // security needed for this skill, if not the card's
}

// Signature is a detached JWS over the card's canonical form
// (A2A v1.0 §8.4): the base64url protected header, the base64url
// signature, and an optional unprotected header.
type Signature struct {
	Protected string         `json:"protected"`        // base64url JSON protected header: alg, kid, typ
	Signature string         `json:"signature"`        // base64url signature
	Header    map[string]any `json:"header,omitempty"` // unprotected header; not covered by the signature
}

// SecurityRequirement names security schemes (keys of
// Card.SecuritySchemes) and the scopes each needs; all must be met.
type SecurityRequirement struct {
	Schemes map[string]StringList `json:"schemes,omitempty"` // scheme name → scopes required
}

// StringList is a list of strings (a protobuf wrapper in the A2A schema).
type StringList struct {
	List []string `json:"list,omitempty"` // the strings
}

// SecurityScheme is how an agent authenticates its callers. Exactly one
// field is set.
type SecurityScheme struct {
	APIKey        *APIKeySecurityScheme        `json:"apiKeySecurityScheme,omitempty"`        // an API key
	HTTPAuth      *HTTPAuthSecurityScheme      `json:"httpAuthSecurityScheme,omitempty"`      // HTTP authentication
	OAuth2        *OAuth2SecurityScheme        `json:"oauth2SecurityScheme,omitempty"`        // OAuth 2.0
	OpenIDConnect *OpenIDConnectSecurityScheme `json:"openIdConnectSecurityScheme,omitempty"` // OpenID Connect
	MutualTLS     *MutualTLSSecurityScheme     `json:"mtlsSecurityScheme,omitempty"`          // mutual TLS
}

// APIKeySecurityScheme is an API key sent in a header, query or cookie.
type APIKeySecurityScheme struct {
	Description string `json:"description,omitempty"` // for humans
	Location    string `json:"location"`              // where the key goes: header, query or cookie
	Name        string `json:"name"`                  // the header, query parameter or cookie name
}

// HTTPAuthSecurityScheme is HTTP authentication (Basic, Bearer, …).
type HTTPAuthSecurityScheme struct {
	Description  string `json:"description,omitempty"`  // for humans
	Scheme       string `json:"scheme"`                 // the HTTP auth scheme, e.g. Bearer or Basic
	BearerFormat string `json:"bearerFormat,omitempty"` // a hint at the bearer token's format, e.g. JWT
}

// OAuth2SecurityScheme is OAuth 2.0 with one flow.
type OAuth2SecurityScheme struct {
	Description       string     `json:"description,omitempty"`       // for humans
	Flows             OAuthFlows `json:"flows"`                       // the one flow the agent supports
	OAuth2MetadataURL string     `json:"oauth2MetadataUrl,omitempty"` // RFC 8414 authorization server metadata
}

// OpenIDConnectSecurityScheme is OpenID Connect discovery.
type OpenIDConnectSecurityScheme struct {
	Description      string `json:"description,omitempty"` // for humans
	OpenIDConnectURL string `json:"openIdConnectUrl"`      // the OpenID Connect discovery URL
}

// MutualTLSSecurityScheme is mutual TLS.
type MutualTLSSecurityScheme struct {
	Description string `json:"description,omitempty"` // for humans
}

// OAuthFlows holds one OAuth 2.0 flow.
type OAuthFlows struct {
	AuthorizationCode *OAuthFlow `json:"authorizationCode,omitempty"` // the authorization code flow
	ClientCredentials *OAuthFlow `json:"clientCredentials,omitempty"` // the client credentials flow
	Implicit          *OAuthFlow `json:"implicit,omitempty"`          // deprecated in A2A v1.0
	Password          *OAuthFlow `json:"password,omitempty"`          // deprecated in A2A v1.0
	DeviceCode        *OAuthFlow `json:"deviceCode,omitempty"`        // the device authorization flow (RFC 8628)
}

// OAuthFlow is one OAuth 2.0 flow's endpoints and scopes; which fields
// apply depends on the flow.
type OAuthFlow struct {
	AuthorizationURL       string            `json:"authorizationUrl,omitempty"`       // authorization endpoint (authorization code, implicit)
	DeviceAuthorizationURL string            `json:"deviceAuthorizationUrl,omitempty"` // device authorization endpoint (device code)
	TokenURL               string            `json:"tokenUrl,omitempty"`               // token endpoint
	RefreshURL             string            `json:"refreshUrl,omitempty"`             // refresh endpoint
	Scopes                 map[string]string `json:"scopes,omitempty"`                 // scope name → description
	PKCERequired           bool              `json:"pkceRequired,omitempty"`           // whether PKCE is required (authorization code)
}

// Raw returns the JSON the card was read from (nil for a card built in
// Go). Signatures are verified over it, not over a re-encoding.
func (c Card) Raw() []byte { return bytes.Clone(c.raw) }

// MaxBytes is the largest Agent Card switchboard reads or stores.
const MaxBytes = 256 << 10

// Parse reads an Agent Card from JSON: a v1.0 card, or a v0.3 card
// (top-level url, protocolVersion, preferredTransport, additionalInterfaces,
// security …), which is mapped to v1.0 and never refused for what v0.3
// allows: an OAuth 2.0 scheme listing several flows (v1.0 holds one) keeps
// the first of authorizationCode, clientCredentials, implicit and password
// (Raw keeps them all), and an error about a v0.3 card names the v0.3 field
// (url, additionalInterfaces[k].transport). The input is kept (see Raw) and the
// card is validated. A card over MaxBytes, malformed JSON, or a card
// missing required fields is an error wrapping ErrInvalid (this package
// imports nothing from switchboard; switchboard's own calls that read a
// card wrap it with switchboard.ErrInvalidArgument too, and
// switchboard.StatusOf answers it as invalid_argument).
func Parse(data []byte) (Card, error) {
	c, err := parse(data)
	return c, wrap("parse card", err)
}

func parse(data []byte) (Card, error) {
	if len(data) > MaxBytes {
		return Card{}, invalid("agent card is %d bytes, limit %d", len(data), MaxBytes)
	}
	tree, err := strictjson.Decode(data)
	if err != nil {
		return Card{}, invalid("agent card is not a JSON object: %v", err)
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return Card{}, invalid("agent card is not a JSON object")
	}
	var c Card
	_, hasIfaces := obj["supportedInterfaces"]
	_, hasIfacesProto := obj["supported_interfaces"]
	_, hasURL := obj["url"]
	if !hasIfaces && !hasIfacesProto && hasURL {
		// No key of the tree differs from a v0.3 field but for case and
		// none appears twice, so encoding/json reads exactly the keys the
		// signed payload (the whole tree) holds.
		if err := checkKeys(obj, reflect.TypeOf(cardV03{}), ""); err != nil {
			return Card{}, invalid("v0.3 agent card: %v", err)
		}
		var old cardV03
		if err := fill(obj, &old); err != nil {
			return Card{}, invalid("v0.3 agent card: %v", err)
		}
		c = old.toV1()
		c.v03, c.doc = true, obj
	} else {
		n, err := cardShape.normalize(obj, "")
		if err != nil {
			return Card{}, invalid("agent card: %v", err)
		}
		// The normalized document holds only schema fields under their
		// exact JSON names, each once, and none of the empties a signature
		// cannot cover (the canonical form drops them): the struct read from
		// it is exactly the card the signed payload describes.
		doc, _ := cleanEmpty(cardShape.dropDefaults(n)).(map[string]any)
		if doc == nil {
			doc = map[string]any{}
		}
		if err := fill(doc, &c); err != nil {
			return Card{}, invalid("agent card: %v", err)
		}
		c.doc = doc
	}
	c.raw = bytes.Clone(data)
	if err := c.validate(); err != nil {
		return Card{}, err
	}
	return c, nil
}

// Validate checks the fields A2A v1.0 requires — name, description, version,
// at least one supported interface (url, protocolBinding, protocolVersion),
// default input and output modes, and for each skill an id, name,
// description and at least one tag — and that names are clean single-line
// text.
func (c Card) Validate() error { return wrap("validate card", c.validate()) }

func (c Card) validate() error {
	var missing []string
	need := func(ok bool, what string) {
		if !ok {
			missing = append(missing, what)
		}
	}
	need(strings.TrimSpace(c.Name) != "", "name")
	need(strings.TrimSpace(c.Description) != "", "description")
	need(strings.TrimSpace(c.Version) != "", "version")
	need(len(c.SupportedInterfaces) > 0, "supportedInterfaces")
	for i, in := range c.SupportedInterfaces {
		url, binding, version := fmt.Sprintf("supportedInterfaces[%d].url", i), fmt.Sprintf("supportedInterfaces[%d].protocolBinding", i), fmt.Sprintf("supportedInterfaces[%d].protocolVersion", i)
		if c.v03 && i < len(c.v03Ifaces) {
			// The v0.3 fields the interface was read from.
			if p := c.v03Ifaces[i]; p == "" {
				url, binding, version = "url", "preferredTransport", "protocolVersion"
			} else {
				url, binding, version = p+".url", p+".transport", "protocolVersion"
			}
		}
		need(in.URL != "", url)
		need(in.ProtocolBinding != "", binding)
		need(in.ProtocolVersion != "", version)
	}
	need(len(c.DefaultInputModes) > 0, "defaultInputModes")
	need(len(c.DefaultOutputModes) > 0, "defaultOutputModes")
	for i, sk := range c.Skills {
		need(sk.ID != "", fmt.Sprintf("skills[%d].id", i))
		need(sk.Name != "", fmt.Sprintf("skills[%d].name", i))
		need(sk.Description != "", fmt.Sprintf("skills[%d].description", i))
		need(len(sk.Tags) > 0, fmt.Sprintf("skills[%d].tags", i))
	}
	for i, s := range c.Signatures {
		need(s.Protected != "" && s.Signature != "", fmt.Sprintf("signatures[%d].protected and .signature", i))
	}
	for name, s := range c.SecuritySchemes {
		if n := count(s.APIKey != nil, s.HTTPAuth != nil, s.OAuth2 != nil, s.OpenIDConnect != nil, s.MutualTLS != nil); n != 1 {
			return invalid("securitySchemes.%s sets %d scheme types; set exactly one", name, n)
		}
		if f := s.OAuth2; f != nil {
			fl := f.Flows
			if n := count(fl.AuthorizationCode != nil, fl.ClientCredentials != nil, fl.Implicit != nil, fl.Password != nil, fl.DeviceCode != nil); n > 1 {
				return invalid("securitySchemes.%s.oauth2SecurityScheme.flows sets %d flows; set only one", name, n)
			}
		}
	}
	if len(missing) > 0 {
		return invalid("agent card is missing %s", strings.Join(missing, ", "))
	}
	if err := checkText("card name", c.Name, 128, false); err != nil {
		return err
	}
	for _, sk := range c.Skills {
		if err := checkText("skill name", sk.Name, 128, false); err != nil {
			return err
		}
	}
	return nil
}

func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// cardV03 is the v0.3 Agent Card, read only to map it to v1.0.
type cardV03 struct {
	ProtocolVersion      string `json:"protocolVersion"`
	Name                 string `json:"name"`
	Description          string `json:"description"`
	URL                  string `json:"url"`
	PreferredTransport   string `json:"preferredTransport"`
	AdditionalInterfaces []struct {
		URL       string `json:"url"`
		Transport string `json:"transport"`
	} `json:"additionalInterfaces"`
	IconURL          string    `json:"iconUrl"`
	Provider         *Provider `json:"provider"`
	Version          string    `json:"version"`
	DocumentationURL string    `json:"documentationUrl"`
	Capabilities     struct {
		Streaming         *bool       `json:"streaming"`
		PushNotifications *bool       `json:"pushNotifications"`
		Extensions        []Extension `json:"extensions"`
	} `json:"capabilities"`
	SecuritySchemes                   map[string]schemeV03  `json:"securitySchemes"`
	Security                          []map[string][]string `json:"security"`
	DefaultInputModes                 []string              `json:"defaultInputModes"`
	DefaultOutputModes                []string              `json:"defaultOutputModes"`
	Skills                            []skillV03            `json:"skills"`
	SupportsAuthenticatedExtendedCard *bool                 `json:"supportsAuthenticatedExtendedCard"`
	Signatures                        []Signature           `json:"signatures"`
}

type skillV03 struct {
	ID          string                `json:"id"`
	Name        string                `json:"name"`
	Description string                `json:"description"`
	Tags        []string              `json:"tags"`
	Examples    []string              `json:"examples"`
	InputModes  []string              `json:"inputModes"`
	OutputModes []string              `json:"outputModes"`
	Security    []map[string][]string `json:"security"`
}

// schemeV03 is an OpenAPI-style security scheme, tagged by type.
type schemeV03 struct {
	Type             string `json:"type"`
	Description      string `json:"description"`
	In               string `json:"in"`
	Name             string `json:"name"`
	Scheme           string `json:"scheme"`
	BearerFormat     string `json:"bearerFormat"`
	OpenIDConnectURL string `json:"openIdConnectUrl"`
	Flows            struct {
		AuthorizationCode *OAuthFlow `json:"authorizationCode"`
		ClientCredentials *OAuthFlow `json:"clientCredentials"`
		Implicit          *OAuthFlow `json:"implicit"`
		Password          *OAuthFlow `json:"password"`
	} `json:"flows"`
	OAuth2MetadataURL string `json:"oauth2MetadataUrl"`
}

func requirementsV03(sec []map[string][]string) []SecurityRequirement {
	var out []SecurityRequirement
	for _, m := range sec {
		r := SecurityRequirement{Schemes: map[string]StringList{}}
		for k, scopes := range m {
			r.Schemes[k] = StringList{List: scopes}
		}
		out = append(out, r)
	}
	return out
}

func (o cardV03) toV1() Card {
	binding := o.PreferredTransport
	if binding == "" {
		binding = "JSONRPC"
	}
	ver := o.ProtocolVersion
	if ver == "" {
		ver = "0.3"
	}
	c := Card{
		Name: o.Name, Description: o.Description, Provider: o.Provider, Version: o.Version,
		DocumentationURL: o.DocumentationURL, IconURL: o.IconURL,
		DefaultInputModes: o.DefaultInputModes, DefaultOutputModes: o.DefaultOutputModes,
		SecurityRequirements: requirementsV03(o.Security), Signatures: o.Signatures,
		Capabilities: Capabilities{
			Streaming: o.Capabilities.Streaming, PushNotifications: o.Capabilities.PushNotifications,
			Extensions: o.Capabilities.Extensions, ExtendedAgentCard: o.SupportsAuthenticatedExtendedCard,
		},
	}
	c.SupportedInterfaces = append(c.SupportedInterfaces, Interface{URL: o.URL, ProtocolBinding: binding, ProtocolVersion: ver})
	c.v03Ifaces = append(c.v03Ifaces, "")
	for k, a := range o.AdditionalInterfaces {
		if a.URL == o.URL && a.Transport == binding {
			continue // v0.3 cards often repeat the main interface here
		}
		c.SupportedInterfaces = append(c.SupportedInterfaces, Interface{URL: a.URL, ProtocolBinding: a.Transport, ProtocolVersion: ver})
		c.v03Ifaces = append(c.v03Ifaces, fmt.Sprintf("additionalInterfaces[%d]", k))
	}
	if len(o.SecuritySchemes) > 0 {
		c.SecuritySchemes = map[string]SecurityScheme{}
		for k, s := range o.SecuritySchemes {
			var v SecurityScheme
			switch s.Type {
			case "apiKey":
				v.APIKey = &APIKeySecurityScheme{Description: s.Description, Location: s.In, Name: s.Name}
			case "http":
				v.HTTPAuth = &HTTPAuthSecurityScheme{Description: s.Description, Scheme: s.Scheme, BearerFormat: s.BearerFormat}
			case "oauth2":
				// v0.3 (OpenAPI) lists any number of flows; v1.0 holds one.
				// The first of these is kept; Raw keeps them all.
				var fl OAuthFlows
				switch f := s.Flows; {
				case f.AuthorizationCode != nil:
					fl.AuthorizationCode = f.AuthorizationCode
				case f.ClientCredentials != nil:
					fl.ClientCredentials = f.ClientCredentials
				case f.Implicit != nil:
					fl.Implicit = f.Implicit
				case f.Password != nil:
					fl.Password = f.Password
				}
				v.OAuth2 = &OAuth2SecurityScheme{Description: s.Description, OAuth2MetadataURL: s.OAuth2MetadataURL, Flows: fl}
			case "openIdConnect":
				v.OpenIDConnect = &OpenIDConnectSecurityScheme{Description: s.Description, OpenIDConnectURL: s.OpenIDConnectURL}
			case "mutualTLS":
				v.MutualTLS = &MutualTLSSecurityScheme{Description: s.Description}
			default:
				continue // unknown scheme types are not carried over
			}
			c.SecuritySchemes[k] = v
		}
	}
	for _, s := range o.Skills {
		c.Skills = append(c.Skills, Skill{
			ID: s.ID, Name: s.Name, Description: s.Description, Tags: s.Tags, Examples: s.Examples,
			InputModes: s.InputModes, OutputModes: s.OutputModes, SecurityRequirements: requirementsV03(s.Security),
		})
	}
	return c
}
