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
	"github.com/switchboardhq/switchboard/internal/strictjson"
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
	kid, err := verify(c, keys, algorithms)
	return kid, wrap("verify card", err)
}

func verify(c Card, keys *jose.JSONWebKeySet, algorithms []string) (string, error) {
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
	alg, kid, err := header(hb)
	if err != nil {
		return "", fmt.Errorf("protected header: %w", err)
	}
	if alg == "" || kid == "" {
		return "", errors.New("protected header must carry alg and kid")
	}
	if !slices.Contains(algs, jose.SignatureAlgorithm(alg)) {
		return "", fmt.Errorf("algorithm %q not allowed", alg)
	}
	if keys == nil {
		return "", errors.New("no trusted keys")
	}
	found := keys.Key(kid)
	if len(found) == 0 {
		return "", fmt.Errorf("key %q is not trusted", kid)
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
			return kid, nil
		}
	}
	return "", fmt.Errorf("signature does not verify with key %q", kid)
}

// Sign signs c with key — a private JSON Web Key whose KeyID and
// Algorithm are set (for example ES256 with an *ecdsa.PrivateKey) — and
// returns c with the signature appended to its signatures. The protected
// header carries alg, kid and typ "JOSE", so any A2A client that trusts the
// public key can verify the card. The returned card has no Raw: it is
// served as encoded.
func Sign(c Card, key jose.JSONWebKey) (Card, error) {
	c, err := sign(c, key)
	return c, wrap("sign card", err)
}

func sign(c Card, key jose.JSONWebKey) (Card, error) {
	c.raw, c.doc, c.v03 = nil, nil, false
	if err := c.validate(); err != nil {
		return Card{}, err
	}
	payload, err := canonical(c)
	if err != nil {
		return Card{}, err
	}
	sig, err := signPayload(payload, key)
	if err != nil {
		return Card{}, err
	}
	c.Signatures = append(slices.Clone(c.Signatures), sig)
	return c, nil
}

// Payload returns the bytes a signature on c covers (see
// Verify for the recipe), for hosts that sign with a key
// Sign cannot hold, such as one in a KMS: sign Payload(c) as a JWS
// with alg, kid and typ "JOSE" in the protected header and append the
// detached result to c.Signatures.
func Payload(c Card) ([]byte, error) {
	b, err := canonical(c)
	return b, wrap("card payload", err)
}

// canonical is the payload card signatures cover: the card's normalized
// document (the one its fields were read from, or for a card built in Go the
// normalized form of its encoding) without signatures, with plain bools at
// their default (false) dropped and then empties dropped at every depth, in
// RFC 8785 form.
func canonical(c Card) ([]byte, error) {
	doc, err := c.document()
	if err != nil {
		return nil, err
	}
	body := make(map[string]any, len(doc))
	for k, v := range doc {
		if k != "signatures" {
			body[k] = v
		}
	}
	var kept any = body
	if !c.v03 {
		kept = cardShape.dropDefaults(body)
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

// document returns the normalized document c was read from, or for a card
// built in Go, the normalized form of its encoding.
func (c Card) document() (map[string]any, error) {
	if c.doc != nil {
		return c.doc, nil
	}
	src := c.raw
	if src == nil {
		var err error
		if src, err = json.Marshal(c); err != nil {
			return nil, invalid("agent card: %v", err)
		}
	}
	tree, err := strictjson.Decode(src)
	if err != nil {
		return nil, invalid("agent card: %v", err)
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, invalid("agent card is not a JSON object")
	}
	if c.v03 {
		return obj, nil
	}
	n, err := cardShape.normalize(obj, "")
	if err != nil {
		return nil, invalid("agent card: %v", err)
	}
	return n.(map[string]any), nil
}

// dropDefaults removes plain bools (kFlag) that are false from a normalized
// document, as protobuf's JSON encoding leaves out default values.
func (s *shape) dropDefaults(v any) any {
	switch s.kind {
	case kFlag:
		if b, ok := v.(bool); ok && !b {
			return nil
		}
	case kList:
		if arr, ok := v.([]any); ok {
			out := make([]any, 0, len(arr))
			for _, e := range arr {
				if d := s.elem.dropDefaults(e); d != nil {
					out = append(out, d)
				}
			}
			return out
		}
	case kMap, kMsg:
		if obj, ok := v.(map[string]any); ok {
			out := make(map[string]any, len(obj))
			for k, e := range obj {
				sub := s.elem
				if s.kind == kMsg {
					sub = s.fields[k]
				}
				if d := sub.dropDefaults(e); d != nil {
					out[k] = d
				}
			}
			return out
		}
	}
	return v
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
