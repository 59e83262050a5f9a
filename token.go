// ID-token input: the one reading of an ID token every entry point goes
// through. A token is accepted only in its canonical compact spelling, and it
// is known (for replay protection) by the claims that identify the
// authentication (replayKey), so no re-spelling or re-signing of one token's
// claims is a new token.

package switchboard

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/gowebpki/jcs"

	"github.com/switchboardhq/switchboard/internal/strictjson"
	"github.com/switchboardhq/switchboard/internal/text"
)

// idToken is an ID token read once, before its signature is checked.
type idToken struct {
	jws     *jose.JSONWebSignature
	payload []byte         // the signed payload, as decoded from its segment
	claims  map[string]any // the payload, decoded strictly
	hash    string         // the replay key: see replayKey
}

// readClaimNames are the claims switchboard or go-oidc read; a key that
// differs from one of them only by case would be read as that claim by
// encoding/json and ignored by exact-match readers, so it is refused.
var readClaimNames = []string{
	"iss", "sub", "aud", "exp", "iat", "nbf", "nonce", "name", "email",
	"amr", "acr", "azp", "at_hash", "c_hash", "_claim_names", "_claim_sources",
}

// headerNames are the JOSE header parameters a verifier acts on.
var headerNames = []string{"alg", "kid", "typ", "cty", "crit", "jwk", "jku", "x5c", "x5u", "b64"}

// parseIDToken reads raw as an ID token. It accepts exactly the compact
// serialization in canonical form — three dot-separated segments of the
// unpadded base64url alphabet, each the canonical encoding of its bytes — and
// refuses everything a lenient reader would read as the same token (inner or
// surrounding whitespace, padding, the JSON serialization, non-zero trailing
// bits). Header and payload are JSON objects without duplicate keys or case
// twins of the names verifiers read. The returned hash is the token's
// replay key (replayKey): it covers the claims that identify one
// authentication, not their spelling.
func parseIDToken(raw string, maxLen int, algs []jose.SignatureAlgorithm) (*idToken, error) {
	if raw == "" {
		return nil, errors.New("missing ID token")
	}
	if len(raw) > maxLen {
		return nil, fmt.Errorf("ID token is %d bytes, limit %d", len(raw), maxLen)
	}
	segs := strings.Split(raw, ".")
	if len(segs) != 3 {
		return nil, errors.New("ID token is not a compact JWS (three dot-separated segments)")
	}
	var dec [3][]byte
	for i, s := range segs {
		b, err := canonicalSegment(s)
		if err != nil {
			return nil, fmt.Errorf("ID token segment %d: %w", i+1, err)
		}
		dec[i] = b
	}
	if _, err := strictObject(dec[0], headerNames...); err != nil {
		return nil, fmt.Errorf("ID token header: %w", err)
	}
	claims, err := strictObject(dec[1], readClaimNames...)
	if err != nil {
		return nil, fmt.Errorf("ID token claims: %w", err)
	}
	jws, err := jose.ParseSignedCompact(raw, algs)
	if err != nil {
		return nil, fmt.Errorf("ID token: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("ID token must carry exactly one signature")
	}
	key, err := replayKey(claims)
	if err != nil {
		return nil, fmt.Errorf("ID token claims: %w", err)
	}
	return &idToken{jws: jws, payload: dec[1], claims: claims, hash: key}, nil
}

// replayKey is what identifies one ID token for replay protection,
// however its claims are spelled, ordered or re-signed: base64url SHA-256
// of the RFC 8785 (JCS) form of {"iss", "sub", "aud" (as a sorted array of
// strings), "nonce", "iat", "exp", "jti"} — the members present in the
// token, numbers canonical. Claims that do not identify the authentication
// (name, email, anything added) do not change it.
func replayKey(claims map[string]any) (string, error) {
	// The JCS form written directly: members in sorted order (aud, exp,
	// iat, iss, jti, nonce, sub), strings as appendJCSString, numbers in
	// their ES6 form.
	var str [4]string // iss, jti, nonce, sub
	var has [4]bool
	for i, name := range [...]string{"iss", "jti", "nonce", "sub"} {
		if v, ok := claims[name]; ok {
			s, ok := v.(string)
			if !ok {
				return "", fmt.Errorf("claim %s is not a string", name)
			}
			str[i], has[i] = validUTF8(s), true
		}
	}
	var num [2]string // exp, iat
	for i, name := range [...]string{"exp", "iat"} {
		if v, ok := claims[name]; ok {
			n, ok := v.(json.Number)
			if !ok {
				return "", fmt.Errorf("claim %s is not a number", name)
			}
			f, err := strconv.ParseFloat(string(n), 64)
			if err != nil {
				return "", err
			}
			if num[i], err = jcs.NumberToJSON(f); err != nil {
				return "", err
			}
		}
	}
	var aud []string
	audSet, audNull := false, false
	switch a := claims["aud"].(type) {
	case nil:
	case string:
		aud, audSet = []string{a}, true
	case []any:
		for _, x := range a {
			s, ok := x.(string)
			if !ok {
				return "", errors.New("claim aud holds a non-string")
			}
			aud = append(aud, s)
		}
		slices.Sort(aud)
		aud, audSet, audNull = slices.Compact(aud), true, len(aud) == 0
	default:
		return "", errors.New("claim aud is neither a string nor an array")
	}
	b := make([]byte, 0, 256)
	b = append(b, '{')
	sep := func() {
		if len(b) > 1 {
			b = append(b, ',')
		}
	}
	if audSet {
		b = append(b, `"aud":`...)
		if audNull {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for i, s := range aud {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendJCSString(b, validUTF8(s))
			}
			b = append(b, ']')
		}
	}
	for i, name := range [...]string{`"exp":`, `"iat":`} {
		if num[i] != "" {
			sep()
			b = append(b, name...)
			b = append(b, num[i]...)
		}
	}
	for i, name := range [...]string{`"iss":`, `"jti":`, `"nonce":`, `"sub":`} {
		if has[i] {
			sep()
			b = append(b, name...)
			b = appendJCSString(b, str[i])
		}
	}
	b = append(b, '}')
	h := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(h[:]), nil
}

// canonicalSegment decodes one segment of a compact JWS, refusing any
// spelling but the canonical unpadded base64url encoding of its bytes.
func canonicalSegment(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, fmt.Errorf("byte %d (%q) is not in the unpadded base64url alphabet", i, c)
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not canonical base64url: %w", err)
	}
	return b, nil
}

// strictObject decodes an outside JSON object strictly (strictjson.Decode)
// and refuses a key that differs from one of names — the keys its readers
// act on — only by case. Every issuer document (ID-token header and claims,
// discovery document, JWKS) goes through it before any lenient reader sees
// it, so all readers read the same keys.
func strictObject(b []byte, names ...string) (map[string]any, error) {
	v, err := strictjson.Decode(b)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	if k, f := strictjson.CaseTwin(obj, names...); k != "" {
		return nil, fmt.Errorf("key %q differs from %q only by case", k, f)
	}
	return obj, nil
}

// claimString returns a string claim ("" when absent or not a string).
func (t *idToken) claimString(name string) string {
	s, _ := t.claims[name].(string)
	return s
}

// idClaims are the claims verify checks, read from the one strict decoding
// of the payload.
type idClaims struct {
	iss, sub           string
	exp, iat, nbf      time.Time // nbf zero when absent
	nonce, name, email string
	acr                string
	amr                []string
}

// readClaims reads and type-checks the claims of a token whose signature
// verified: iss and sub non-empty strings, aud (a string or an array of
// strings) naming clientID, exp and iat present NumericDates, and the
// optional ones of the right type when present.
func (t *idToken) readClaims(clientID string) (idClaims, error) {
	var c idClaims
	var err error
	str := func(name string, required bool) string {
		v, ok := t.claims[name]
		if err != nil || (!ok && !required) {
			return ""
		}
		s, isStr := v.(string)
		if !isStr || (required && s == "") {
			err = fmt.Errorf("claim %q must be a non-empty string", name)
			if !required {
				err = fmt.Errorf("claim %q must be a string", name)
			}
		}
		return s
	}
	date := func(name string, required bool) time.Time {
		v, ok := t.claims[name]
		if err != nil || (!ok && !required) {
			return time.Time{}
		}
		n, isNum := v.(json.Number)
		if !isNum {
			err = fmt.Errorf("claim %q must be a NumericDate", name)
			return time.Time{}
		}
		f, ferr := n.Float64()
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1e12 {
			err = fmt.Errorf("claim %q is not a NumericDate in range", name)
			return time.Time{}
		}
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC()
	}
	c.iss, c.sub = str("iss", true), str("sub", true)
	c.exp, c.iat, c.nbf = date("exp", true), date("iat", true), date("nbf", false)
	c.nonce, c.name, c.email, c.acr = str("nonce", false), str("name", false), str("email", false), str("acr", false)
	if err != nil {
		return idClaims{}, err
	}
	// What a person will read of the human — on an approval, a consent
	// page, a history — is exactly what the issuer attested: no claim
	// shown may hold a character that reorders or hides text.
	for _, c := range [...]struct {
		what, v string
		max     int
		joiners bool
	}{{`claim "iss"`, c.iss, 512, false}, {`claim "sub"`, c.sub, 255, false}, {`claim "name"`, c.name, 256, true}, {`claim "email"`, c.email, 320, false}, {`claim "acr"`, c.acr, 256, false}} {
		if err := text.CheckIdentity(c.what, c.v, c.max, c.joiners); err != nil {
			return idClaims{}, err
		}
	}
	switch aud := t.claims["aud"].(type) {
	case string:
		if aud != clientID {
			return idClaims{}, errors.New("audience does not name this client")
		}
	case []any:
		found := false
		for _, a := range aud {
			s, ok := a.(string)
			if !ok {
				return idClaims{}, errors.New(`claim "aud" must be a string or an array of strings`)
			}
			found = found || s == clientID
		}
		if !found {
			return idClaims{}, errors.New("audience does not name this client")
		}
	default:
		return idClaims{}, errors.New(`claim "aud" must be a string or an array of strings`)
	}
	if v, ok := t.claims["amr"]; ok {
		list, isList := v.([]any)
		if !isList {
			return idClaims{}, errors.New(`claim "amr" must be an array of strings`)
		}
		for _, m := range list {
			s, ok := m.(string)
			if !ok {
				return idClaims{}, errors.New(`claim "amr" must be an array of strings`)
			}
			if err := text.CheckIdentity(`claim "amr"`, s, 64, false); err != nil {
				return idClaims{}, err
			}
			c.amr = append(c.amr, s)
		}
	}
	return c, nil
}
