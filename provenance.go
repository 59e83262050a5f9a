package switchboard

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// Human is a person, identified by an OIDC issuer and the subject that
// issuer gives them. Human-facing calls (Publish, Approve, Deny, Withdraw,
// Revoke, Vend) take a Human the host has authenticated; friend requests
// prove the human with an ID token the library verifies itself.
type Human struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
}

func (h Human) validate() error {
	if h.Issuer == "" || h.Subject == "" {
		return invalid("human needs an issuer and a subject")
	}
	if len(h.Issuer) > 1024 || len(h.Subject) > 255 {
		return invalid("human issuer or subject too long")
	}
	return nil
}

// key is the human's identity as an index key component.
func (h Human) key() string { return url.QueryEscape(h.Issuer) + "#" + url.QueryEscape(h.Subject) }

// Provenance is what was verified about the human behind a friend request.
// It never holds the token itself, only its hash.
type Provenance struct {
	Issuer     string    `json:"iss"`
	Subject    string    `json:"sub"`
	Name       string    `json:"name,omitempty"`
	Email      string    `json:"email,omitempty"`
	AMR        []string  `json:"amr,omitempty"`
	ACR        string    `json:"acr,omitempty"`
	IssuedAt   time.Time `json:"issued_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	VerifiedAt time.Time `json:"verified_at"`
	TokenHash  string    `json:"token_hash"` // base64url SHA-256 of the ID token
}

// Human returns the verified human.
func (p Provenance) Human() Human { return Human{Issuer: p.Issuer, Subject: p.Subject} }

// Issuer is one allow-listed OIDC identity provider.
type Issuer struct {
	// URL is the issuer identifier; a token's iss must equal it exactly.
	URL string
	// ClientID is this deployment's client ID at the issuer; a token's aud
	// must contain it.
	ClientID string
	// Algorithms allowed to sign tokens. Default RS256, ES256, EdDSA. "none"
	// and the HMAC algorithms are always refused.
	Algorithms []string
	// Keys, if set, is a static key set used instead of discovery — for
	// offline deployments and tests. Otherwise the keys are found through
	// the issuer's discovery document and JWKS, fetched with
	// Config.HTTPClient.
	Keys *jose.JSONWebKeySet
}

// DefaultAlgorithms are the signing algorithms an Issuer accepts when it
// names none.
var DefaultAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// verifier holds one go-oidc verifier per allow-listed issuer.
type verifier struct {
	cfg     Config
	mu      sync.Mutex
	issuers map[string]*issuerState
}

type issuerState struct {
	Issuer
	algs []jose.SignatureAlgorithm
	v    *oidc.IDTokenVerifier // nil until discovery succeeded
}

func newVerifier(c Config) (*verifier, error) {
	v := &verifier{cfg: c, issuers: map[string]*issuerState{}}
	for _, is := range c.Issuers {
		if is.URL == "" || is.ClientID == "" {
			return nil, invalid("issuer needs a URL and a client ID")
		}
		if _, dup := v.issuers[is.URL]; dup {
			return nil, invalid("issuer %q listed twice", is.URL)
		}
		if len(is.Algorithms) == 0 {
			is.Algorithms = DefaultAlgorithms
		}
		st := &issuerState{Issuer: is}
		for _, a := range is.Algorithms {
			if a == "none" || strings.HasPrefix(a, "HS") {
				return nil, invalid("issuer %q: algorithm %q is never allowed", is.URL, a)
			}
			st.algs = append(st.algs, jose.SignatureAlgorithm(a))
		}
		if is.Keys != nil {
			var pubs []crypto.PublicKey
			for _, k := range is.Keys.Keys {
				if !k.IsPublic() {
					return nil, invalid("issuer %q: static key %q is not a public key", is.URL, k.KeyID)
				}
				pubs = append(pubs, k.Key)
			}
			st.v = oidc.NewVerifier(is.URL, &oidc.StaticKeySet{PublicKeys: pubs}, st.config(c))
		}
		v.issuers[is.URL] = st
	}
	return v, nil
}

func (st *issuerState) config(c Config) *oidc.Config {
	return &oidc.Config{ClientID: st.ClientID, SupportedSigningAlgs: st.Algorithms, Now: c.Clock.Now}
}

// forIssuer returns the go-oidc verifier for an allow-listed issuer,
// running discovery on first use. Discovery that fails is retried on the
// next token.
func (v *verifier) forIssuer(ctx context.Context, st *issuerState) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if st.v != nil {
		return st.v, nil
	}
	hctx := oidc.ClientContext(ctx, v.cfg.HTTPClient)
	p, err := oidc.NewProvider(hctx, st.URL)
	if err != nil {
		return nil, fmt.Errorf("discovery for %s: %w", st.URL, err)
	}
	// The key set outlives this call, so it gets a context that is never
	// cancelled but still uses the host's HTTP client.
	st.v = p.VerifierContext(oidc.ClientContext(context.Background(), v.cfg.HTTPClient), st.config(v.cfg))
	return st.v, nil
}

// idClaims are the claims switchboard reads beyond what go-oidc checks.
type idClaims struct {
	Issuer   string   `json:"iss"`
	Name     string   `json:"name"`
	Email    string   `json:"email"`
	Nonce    string   `json:"nonce"`
	AMR      []string `json:"amr"`
	ACR      string   `json:"acr"`
	IssuedAt *int64   `json:"iat"`
}

func provErr(reason string, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrProvenance, reason, err)
	}
	return fmt.Errorf("%w: %s", ErrProvenance, reason)
}

// verify checks raw completely — issuer allow-list, algorithm, signature,
// audience, expiry, iat freshness and the nonce binding — and returns what
// it proved. It does not check replay; that needs the store.
func (v *verifier) verify(ctx context.Context, raw string, nonce string, maxLen int) (Provenance, error) {
	if err := ctx.Err(); err != nil {
		return Provenance{}, err
	}
	if raw == "" {
		return Provenance{}, provErr("missing ID token", nil)
	}
	if len(raw) > maxLen {
		return Provenance{}, provErr("ID token too large", nil)
	}
	// Pick the issuer by the token's unverified iss, before any network call.
	var all []jose.SignatureAlgorithm
	for _, st := range v.issuers {
		all = append(all, st.algs...)
	}
	jws, err := jose.ParseSigned(raw, all)
	if err != nil {
		return Provenance{}, provErr("malformed ID token or disallowed algorithm", err)
	}
	var unverified idClaims
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &unverified); err != nil {
		return Provenance{}, provErr("malformed ID token claims", err)
	}
	st, ok := v.issuers[unverified.Issuer]
	if !ok {
		return Provenance{}, provErr("issuer not allow-listed", nil)
	}
	if len(jws.Signatures) != 1 || !slices.Contains(st.algs, jose.SignatureAlgorithm(jws.Signatures[0].Header.Algorithm)) {
		return Provenance{}, provErr("algorithm not allowed for this issuer", nil)
	}
	iv, err := v.forIssuer(ctx, st)
	if err != nil {
		return Provenance{}, provErr("issuer unavailable", err)
	}
	tok, err := iv.Verify(ctx, raw)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return Provenance{}, cerr // the caller gave up; not the token's fault
		}
		return Provenance{}, provErr("ID token failed verification", err)
	}
	var c idClaims
	if err := tok.Claims(&c); err != nil {
		return Provenance{}, provErr("malformed ID token claims", err)
	}
	now := v.cfg.Clock.Now()
	if c.IssuedAt == nil {
		return Provenance{}, provErr("ID token has no iat", nil)
	}
	iat := time.Unix(*c.IssuedAt, 0)
	if iat.After(now.Add(v.cfg.ClockLeeway)) {
		return Provenance{}, provErr("ID token issued in the future", nil)
	}
	if now.Sub(iat) > v.cfg.MaxTokenAge {
		return Provenance{}, provErr("ID token too old", nil)
	}
	if c.Nonce == "" {
		return Provenance{}, provErr("ID token has no nonce", nil)
	}
	if subtle.ConstantTimeCompare([]byte(c.Nonce), []byte(nonce)) != 1 {
		return Provenance{}, provErr("ID token nonce is not bound to this request", nil)
	}
	h := sha256.Sum256([]byte(raw))
	return Provenance{
		Issuer: tok.Issuer, Subject: tok.Subject,
		Name: clip(c.Name, 256), Email: clip(c.Email, 256),
		AMR: c.AMR, ACR: clip(c.ACR, 256),
		IssuedAt: iat.UTC(), ExpiresAt: tok.Expiry.UTC(), VerifiedAt: now.UTC(),
		TokenHash: base64.RawURLEncoding.EncodeToString(h[:]),
	}, nil
}

// clip truncates s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// RequestNonce returns the nonce an ID token must carry to prove the human
// behind this friend request: base64url (unpadded) SHA-256 over a canonical
// encoding of from, to, the normalized scope and why. The requester's host
// starts its OIDC login with this nonce (for example with
// oauth2's AuthCodeURL(state, oidc.Nonce(nonce))), so the token it gets back
// can be used for this one request and no other.
func RequestNonce(from, to string, scope Scope, why string) string {
	canon, _ := json.Marshal(struct {
		V     int    `json:"v"`
		From  string `json:"from"`
		To    string `json:"to"`
		Scope Scope  `json:"scope"`
		Why   string `json:"why"`
	}{1, from, to, Normalize(scope), why})
	h := sha256.Sum256(canon)
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// checkReplay refuses a token seen before and remembers this one until it
// expires, in the same transaction that uses it.
func (t *txn) checkReplay(p Provenance) error {
	exp, err := t.lookup(tReplay, p.TokenHash)
	if err != nil {
		return err
	}
	if exp != "" {
		return provErr("ID token already used", nil)
	}
	return t.putRaw(tReplay, p.TokenHash, timeKey(p.ExpiresAt))
}
