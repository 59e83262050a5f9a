// Signing and verifying Agent Cards: the canonical form (A2A v1.0 §8.4, RFC 8785), Sign, Verify and Payload.

package agentcard

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/gowebpki/jcs"
)

// Verify checks c's signatures (A2A v1.0 §8.4) and returns the
// key id of the first that verifies. The payload is c's canonical form: the
// JSON the card was read from (Raw) — or, for a card built in Go, its
// encoding — restricted to the fields of the v1.0 schema, without
// signatures, with empty strings, nulls, empty lists and empty objects
// removed, in RFC 8785 (JCS) form; this is what the official A2A SDKs sign.
// For a card read as v0.3 no fields are dropped as unknown. Each signature's
// protected header must name alg (one of algorithms, default
// DefaultAlgorithms) and kid (a key in keys). Errors wrap ErrSignature.
func Verify(c Card, keys *jose.JSONWebKeySet, algorithms []string) (string, error) {
	if len(c.Signatures) == 0 {
		return "", fmt.Errorf("%w: the card is not signed", ErrSignature)
	}
	algs, err := allowedAlgorithms(algorithms)
	if err != nil {
		return "", err
	}
	payload, err := canonical(c)
	if err != nil {
		return "", err
	}
	var reasons []string
	for i, s := range c.Signatures {
		kid, err := verifyCardSig(s, payload, keys, algs)
		if err == nil {
			return kid, nil
		}
		reasons = append(reasons, fmt.Sprintf("signature %d: %v", i, err))
	}
	return "", fmt.Errorf("%w: %s", ErrSignature, strings.Join(reasons, "; "))
}

func allowedAlgorithms(names []string) ([]jose.SignatureAlgorithm, error) {
	if len(names) == 0 {
		names = DefaultAlgorithms()
	}
	var out []jose.SignatureAlgorithm
	for _, a := range names {
		if a == "none" || strings.HasPrefix(a, "HS") {
			return nil, invalid("card signature algorithm %q is never allowed", a)
		}
		out = append(out, jose.SignatureAlgorithm(a))
	}
	return out, nil
}

func verifyCardSig(s Signature, payload []byte, keys *jose.JSONWebKeySet, algs []jose.SignatureAlgorithm) (string, error) {
	hb, err := base64.RawURLEncoding.DecodeString(s.Protected)
	if err != nil {
		return "", errors.New("protected header is not base64url")
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return "", errors.New("protected header is not a JSON object")
	}
	if hdr.Alg == "" || hdr.Kid == "" {
		return "", errors.New("protected header must carry alg and kid")
	}
	if !slices.Contains(algs, jose.SignatureAlgorithm(hdr.Alg)) {
		return "", fmt.Errorf("algorithm %q not allowed", hdr.Alg)
	}
	if keys == nil {
		return "", errors.New("no trusted keys")
	}
	found := keys.Key(hdr.Kid)
	if len(found) == 0 {
		return "", fmt.Errorf("key %q is not trusted", hdr.Kid)
	}
	// The signature covers the protected header and the payload only; the
	// unprotected header is not signed, so nothing in it is used. Verifying
	// the compact form over the payload we computed means what is verified
	// is exactly what is used.
	compact := s.Protected + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + s.Signature
	jws, err := jose.ParseSignedCompact(compact, algs)
	if err != nil {
		return "", fmt.Errorf("malformed JWS: %v", err)
	}
	for _, k := range found {
		if !k.IsPublic() {
			k = k.Public()
		}
		if got, err := jws.Verify(k); err == nil && bytes.Equal(got, payload) {
			return hdr.Kid, nil
		}
	}
	return "", fmt.Errorf("signature does not verify with key %q", hdr.Kid)
}

// Sign signs c with key — a private JSON Web Key whose KeyID and
// Algorithm are set (for example ES256 with an *ecdsa.PrivateKey) — and
// returns c with the signature appended to its signatures. The protected
// header carries alg, kid and typ "JOSE", so any A2A client that trusts the
// public key can verify the card. The returned card has no Raw: it is
// served as encoded.
func Sign(c Card, key jose.JSONWebKey) (Card, error) {
	if key.KeyID == "" || key.Algorithm == "" {
		return Card{}, invalid("signing key needs a KeyID and an Algorithm")
	}
	if key.IsPublic() {
		return Card{}, invalid("signing key %q is a public key", key.KeyID)
	}
	algs, err := allowedAlgorithms([]string{key.Algorithm})
	if err != nil {
		return Card{}, err
	}
	c.raw, c.v03 = nil, false
	if err := c.Validate(); err != nil {
		return Card{}, err
	}
	payload, err := canonical(c)
	if err != nil {
		return Card{}, err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: algs[0], Key: key.Key},
		(&jose.SignerOptions{}).WithType("JOSE").WithHeader(jose.HeaderKey("kid"), key.KeyID))
	if err != nil {
		return Card{}, invalid("signing key %q: %v", key.KeyID, err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return Card{}, fmt.Errorf("switchboard: sign card: %w", err)
	}
	compact, err := jws.CompactSerialize()
	if err != nil {
		return Card{}, fmt.Errorf("switchboard: sign card: %w", err)
	}
	parts := strings.Split(compact, ".")
	c.Signatures = append(slices.Clone(c.Signatures), Signature{Protected: parts[0], Signature: parts[2]})
	return c, nil
}

// Payload returns the bytes a signature on c covers (see
// Verify for the recipe), for hosts that sign with a key
// Sign cannot hold, such as one in a KMS: sign Payload(c) as a JWS
// with alg, kid and typ "JOSE" in the protected header and append the
// detached result to c.Signatures.
func Payload(c Card) ([]byte, error) { return canonical(c) }

// canonical is the payload card signatures cover.
func canonical(c Card) ([]byte, error) {
	src := c.raw
	if src == nil {
		var err error
		if src, err = json.Marshal(c); err != nil {
			return nil, err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, invalid("agent card: %v", err)
	}
	delete(v, "signatures")
	var kept any = v
	if !c.v03 {
		kept = cardShape.filter(v)
	}
	cleaned := cleanEmpty(kept)
	if cleaned == nil {
		cleaned = map[string]any{}
	}
	b, err := json.Marshal(cleaned)
	if err != nil {
		return nil, err
	}
	out, err := jcs.Transform(b)
	if err != nil {
		return nil, invalid("agent card cannot be canonicalized: %v", err)
	}
	return out, nil
}

// shape describes which JSON fields the v1.0 schema has, for dropping the
// rest before signing or verifying.
type shape struct {
	fields map[string]*shape // a message: its known fields
	values *shape            // a map<string, X>: the shape of X
	any    bool              // google.protobuf.Struct: kept whole
	flag   bool              // a non-optional bool: false is its default and is dropped
}

var (
	scalar   = &shape{}
	flag     = &shape{flag: true}
	anything = &shape{any: true}
)

func msg(f map[string]*shape) *shape { return &shape{fields: f} }
func mapOf(s *shape) *shape          { return &shape{values: s} }

var (
	requirementShape = msg(map[string]*shape{"schemes": mapOf(msg(map[string]*shape{"list": scalar}))})
	flowShape        = func(names ...string) *shape {
		f := map[string]*shape{"scopes": mapOf(scalar)}
		for _, n := range names {
			f[n] = scalar
		}
		return msg(f)
	}
	cardShape = msg(map[string]*shape{
		"name": scalar, "description": scalar, "version": scalar,
		"documentationUrl": scalar, "iconUrl": scalar,
		"defaultInputModes": scalar, "defaultOutputModes": scalar,
		"supportedInterfaces": msg(map[string]*shape{"url": scalar, "protocolBinding": scalar, "tenant": scalar, "protocolVersion": scalar}),
		"provider":            msg(map[string]*shape{"url": scalar, "organization": scalar}),
		"capabilities": msg(map[string]*shape{
			"streaming": scalar, "pushNotifications": scalar, "extendedAgentCard": scalar,
			"extensions": msg(map[string]*shape{"uri": scalar, "description": scalar, "required": flag, "params": anything}),
		}),
		"securitySchemes": mapOf(msg(map[string]*shape{
			"apiKeySecurityScheme":   msg(map[string]*shape{"description": scalar, "location": scalar, "name": scalar}),
			"httpAuthSecurityScheme": msg(map[string]*shape{"description": scalar, "scheme": scalar, "bearerFormat": scalar}),
			"oauth2SecurityScheme": msg(map[string]*shape{"description": scalar, "oauth2MetadataUrl": scalar,
				"flows": msg(map[string]*shape{
					"authorizationCode": func() *shape {
						s := flowShape("authorizationUrl", "tokenUrl", "refreshUrl")
						s.fields["pkceRequired"] = flag
						return s
					}(),
					"clientCredentials": flowShape("tokenUrl", "refreshUrl"),
					"implicit":          flowShape("authorizationUrl", "refreshUrl"),
					"password":          flowShape("tokenUrl", "refreshUrl"),
					"deviceCode":        flowShape("deviceAuthorizationUrl", "tokenUrl", "refreshUrl"),
				})}),
			"openIdConnectSecurityScheme": msg(map[string]*shape{"description": scalar, "openIdConnectUrl": scalar}),
			"mtlsSecurityScheme":          msg(map[string]*shape{"description": scalar}),
		})),
		"securityRequirements": requirementShape,
		"skills": msg(map[string]*shape{
			"id": scalar, "name": scalar, "description": scalar, "tags": scalar, "examples": scalar,
			"inputModes": scalar, "outputModes": scalar, "securityRequirements": requirementShape,
		}),
	})
)

// filter keeps what s describes; nil means "drop".
func (s *shape) filter(v any) any {
	if s.any {
		return v
	}
	switch x := v.(type) {
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			if f := s.filter(e); f != nil {
				out = append(out, f)
			}
		}
		return out
	case map[string]any:
		out := map[string]any{}
		switch {
		case s.values != nil:
			for k, e := range x {
				if f := s.values.filter(e); f != nil {
					out[k] = f
				}
			}
		case s.fields != nil:
			for k, e := range x {
				if sub, ok := s.fields[k]; ok {
					if f := sub.filter(e); f != nil {
						out[k] = f
					}
				}
			}
		default:
			return nil // an object where the schema has a scalar
		}
		return out
	case bool:
		if s.flag && !x {
			return nil
		}
		return x
	default:
		if s.fields != nil || s.values != nil {
			return nil // a scalar where the schema has a message
		}
		return x
	}
}

// cleanEmpty drops empty strings, nulls, and lists and objects that are
// empty once cleaned, at every depth; nil means "drop".
func cleanEmpty(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		if x == "" {
			return nil
		}
		return x
	case []any:
		var out []any
		for _, e := range x {
			if c := cleanEmpty(e); c != nil {
				out = append(out, c)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if c := cleanEmpty(e); c != nil {
				out[k] = c
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	default:
		return x
	}
}
