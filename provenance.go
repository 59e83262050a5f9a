// Provenance: humans, allow-listed issuers, ID-token verification, the request
// nonce and replay protection.

package switchboard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// Human is a person, identified by an OIDC issuer and the subject that
// issuer gives them. Human-facing calls (Publish, Approve, Deny, Withdraw,
// Revoke, Vend) take a Human the host has authenticated; friend requests
// prove the human with an ID token the library verifies itself.
type Human struct {
	Issuer  string `json:"iss"` // the OIDC issuer identifier (iss)
	Subject string `json:"sub"` // the subject that issuer gives the human (sub)
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

// key is the human's identity as an index key component: the issuer and
// the subject, each as url.QueryEscape writes it (stored keys depend on the
// exact bytes), joined by "#" — written in one allocation, as every agent
// call and friend request builds it several times.
func (h Human) key() string {
	b := make([]byte, 0, queryEscapedLen(h.Issuer)+1+queryEscapedLen(h.Subject))
	b = appendQueryEscape(b, h.Issuer)
	b = append(b, '#')
	b = appendQueryEscape(b, h.Subject)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
}

// queryUnreserved reports whether url.QueryEscape keeps c as it is.
func queryUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~'
}

// queryEscapedLen is len(url.QueryEscape(s)).
func queryEscapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if c := s[i]; !queryUnreserved(c) && c != ' ' {
			n += 2
		}
	}
	return n
}

// appendQueryEscape appends url.QueryEscape(s) to b.
func appendQueryEscape(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case queryUnreserved(c):
			b = append(b, c)
		case c == ' ':
			b = append(b, '+')
		default:
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return b
}

// Provenance is what was verified about the human behind a friend request.
// It never holds the token itself, only its hash.
type Provenance struct {
	Issuer     string    `json:"iss"`                  // the verified issuer (iss)
	Subject    string    `json:"sub"`                  // the verified subject (sub)
	Name       string    `json:"name,omitempty"`       // the name claim, sanitized
	Email      string    `json:"email,omitempty"`      // the email claim, sanitized
	AMR        []string  `json:"amr,omitempty"`        // how the human signed in (amr), sanitized
	ACR        string    `json:"acr,omitempty"`        // the assurance class (acr), sanitized
	IssuedAt   time.Time `json:"issued_at,omitzero"`   // the token's iat
	ExpiresAt  time.Time `json:"expires_at,omitzero"`  // the token's exp
	VerifiedAt time.Time `json:"verified_at,omitzero"` // when switchboard verified it
	TokenHash  string    `json:"token_hash"`           // the token's replay key: base64url SHA-256 of the JCS form of its iss, sub, aud (sorted), nonce, iat, exp and jti — one per authentication, however spelled, ordered or re-signed
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
	// Config.HTTPClient and refetched when a token names a key id the
	// cached set lacks (key rotation), at most once per
	// Config.KeyRefetchInterval.
	Keys *jose.JSONWebKeySet
	// RequireAMR, if set, is the assurance policy on how the human signed
	// in: the token's amr claim must contain at least one of these values
	// (for example "hwk" or "pop" to insist on a hardware key). The
	// verified amr is recorded in the edge's provenance and shown in the
	// approval.
	RequireAMR []string
	// RequireACR, if set, requires the token's acr claim to be one of these
	// values.
	RequireACR []string
}

// DefaultAlgorithms returns the signing algorithms an Issuer accepts when it
// names none: RS256, ES256 and EdDSA. Each call returns a new slice.
func DefaultAlgorithms() []string { return []string{"RS256", "ES256", "EdDSA"} }

// Binding says how an ID token must be tied to the friend request it
// proves.
type Binding int

const (
	// BindNonce, the default, requires the token's nonce claim to equal
	// RequestNonce for the request (compared in constant time): a token
	// minted for one request cannot carry another.
	BindNonce Binding = iota
	// BindFreshOnly accepts a token whatever its nonce, as long as it is
	// fresh (Config.MaxTokenAge) and has not been used before. It exists
	// for identity providers that cannot set a nonce, and it is weaker:
	// anyone who obtains a fresh, unused token of the human — a log line, a
	// compromised agent holding it — can spend it on a request of their
	// choosing, to any target, within the token's age limit.
	BindFreshOnly
)

// verifier holds one go-oidc verifier per allow-listed issuer.
type verifier struct {
	cfg     Config
	issuers map[string]*issuerState
	algs    []jose.SignatureAlgorithm // union over issuers, for parsing
}

type issuerState struct {
	Issuer
	algs []jose.SignatureAlgorithm

	mu      sync.Mutex
	keys    *keySet   // nil until discovery succeeded
	triedAt time.Time // last failed discovery; zero if none
}

func newVerifier(c Config) (*verifier, error) {
	if c.Binding != BindNonce && c.Binding != BindFreshOnly {
		return nil, invalid("unknown Config.Binding %d", c.Binding)
	}
	v := &verifier{cfg: c, issuers: map[string]*issuerState{}}
	for _, is := range c.Issuers {
		if is.URL == "" || is.ClientID == "" {
			return nil, invalid("issuer needs a URL and a client ID")
		}
		if _, dup := v.issuers[is.URL]; dup {
			return nil, invalid("issuer %q listed twice", is.URL)
		}
		if len(is.Algorithms) == 0 {
			is.Algorithms = DefaultAlgorithms()
		}
		st := &issuerState{Issuer: is}
		for _, a := range is.Algorithms {
			if a == "none" || strings.HasPrefix(a, "HS") {
				return nil, invalid("issuer %q: algorithm %q is never allowed", is.URL, a)
			}
			st.algs = append(st.algs, jose.SignatureAlgorithm(a))
			if !slices.Contains(v.algs, jose.SignatureAlgorithm(a)) {
				v.algs = append(v.algs, jose.SignatureAlgorithm(a))
			}
		}
		if is.Keys != nil {
			ks := &keySet{algs: st.algs}
			for _, k := range is.Keys.Keys {
				if !k.IsPublic() || !k.Valid() {
					return nil, invalid("issuer %q: static key %q is not a valid public key", is.URL, k.KeyID)
				}
				ks.keys = append(ks.keys, k)
			}
			st.keys = ks
		}
		v.issuers[is.URL] = st
	}
	return v, nil
}

// forIssuer returns the key set of an allow-listed issuer, running
// discovery (go-oidc's) on first use. Failed discovery is retried at most once
// per Config.KeyRefetchInterval, so junk tokens cannot hammer an issuer that
// is down.
func (v *verifier) forIssuer(ctx context.Context, st *issuerState) (*keySet, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.keys != nil {
		return st.keys, nil
	}
	now := v.cfg.Clock.Now()
	if !st.triedAt.IsZero() && now.Sub(st.triedAt) < v.cfg.KeyRefetchInterval {
		return nil, fmt.Errorf("discovery for %s failed recently; retrying after %s", st.URL, st.triedAt.Add(v.cfg.KeyRefetchInterval).Format(time.RFC3339))
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, v.cfg.HTTPClient), st.URL)
	var doc struct{ JWKS string }
	if err == nil {
		var raw json.RawMessage
		if err = p.Claims(&raw); err == nil {
			var obj map[string]any
			if obj, err = strictObject(raw, "issuer", "jwks_uri"); err == nil {
				doc.JWKS, _ = obj["jwks_uri"].(string)
			}
		}
	}
	if err == nil && doc.JWKS == "" {
		err = errors.New("no jwks_uri")
	}
	if err != nil {
		if ctx.Err() == nil {
			st.triedAt = now
		}
		return nil, fmt.Errorf("discovery for %s: %w", st.URL, err)
	}
	st.keys = &keySet{url: doc.JWKS, client: v.cfg.HTTPClient, clock: v.cfg.Clock, every: v.cfg.KeyRefetchInterval, algs: st.algs}
	return st.keys, nil
}

func provErr(reason string, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrProvenance, reason, err)
	}
	return fmt.Errorf("%w: %s", ErrProvenance, reason)
}

// VerifyHuman verifies an ID token presented to sign a human in — allow-listed
// issuer, algorithm, signature, audience, expiry, iat no older than
// Config.MaxTokenAge and not in the future, the issuer's amr/acr policy, and
// a nonce equal to nonce (compared in constant time) — and returns what it
// proved; Provenance.Human is the Human to pass to the human-facing calls
// (Approve, Deny, Withdraw, Revoke, Vend, Publish).
//
// nonce is required: it is the unguessable value the host's login started
// with and kept in the browser session, so a token minted for anything else —
// in particular one that proved a friend request, whose nonce is a
// RequestNonce — is never a login. A token already spent on a friend request
// is refused too, whatever its nonce. VerifyHuman does not consume the token.
//
// Errors: ErrInvalidArgument for an empty nonce; ErrProvenance, worded for a
// sign-in, for a token that fails any check.
func (s *Switchboard) VerifyHuman(ctx context.Context, idToken, nonce string) (Provenance, error) {
	fail := func(err error) (Provenance, error) { return Provenance{}, fmt.Errorf("switchboard: sign in: %w", err) }
	if nonce == "" {
		return fail(invalid("a login nonce is required: start the login with a fresh random nonce and pass it here"))
	}
	p, err := s.oidc.verify(ctx, idToken, tokenUse{nonce: nonce, bind: true, login: true}, s.limits.MaxToken)
	if err != nil {
		return fail(err)
	}
	err = s.view(ctx, func(t *txn) error {
		spent, err := t.lookup(tReplay, p.TokenHash)
		if err != nil {
			return err
		}
		if spent != "" {
			return provErr("ID token was already spent on a friend request; sign in again", nil)
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return p, nil
}

// tokenUse says what a token is being verified for.
type tokenUse struct {
	nonce string // the nonce the token must carry, if bind
	bind  bool   // the token's nonce must equal nonce
	login bool   // a sign-in (VerifyHuman), not a friend request: errors say so
}

// verify checks raw completely — its one canonical spelling
// (parseIDToken), issuer allow-list, algorithm, signature, audience, expiry,
// iat freshness, the issuer's assurance policy and, if use.bind, that its
// nonce equals use.nonce — and returns what it proved. It does not check
// replay; that needs the store.
func (v *verifier) verify(ctx context.Context, raw string, use tokenUse, maxLen int) (Provenance, error) {
	if err := ctx.Err(); err != nil {
		return Provenance{}, err
	}
	tokIn, err := parseIDToken(raw, maxLen, v.algs)
	if err != nil {
		return Provenance{}, provErr("malformed ID token or disallowed algorithm", err)
	}
	jws := tokIn.jws
	st, ok := v.issuers[tokIn.claimString("iss")]
	if !ok {
		return Provenance{}, provErr("issuer not allow-listed", nil)
	}
	if len(jws.Signatures) != 1 || !slices.Contains(st.algs, jose.SignatureAlgorithm(jws.Signatures[0].Header.Algorithm)) {
		return Provenance{}, provErr("algorithm not allowed for this issuer", nil)
	}
	keys, err := v.forIssuer(ctx, st)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return Provenance{}, cerr
		}
		return Provenance{}, provErr("issuer unavailable", err)
	}
	// The token was parsed and its payload decoded once, above; the
	// signature is checked on that parse, and every claim is read from
	// that decoding — the bytes the signature covers.
	if err := keys.verifyJWS(ctx, jws, tokIn.payload); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return Provenance{}, cerr // the caller gave up; not the token's fault
		}
		return Provenance{}, provErr("ID token failed verification", err)
	}
	c, err := tokIn.readClaims(st.ClientID)
	if err != nil {
		return Provenance{}, provErr("ID token failed verification", err)
	}
	now := v.cfg.Clock.Now()
	// Replay protection remembers a token until its exp; an exp past the
	// range a key can hold would be forgotten early, so it is refused.
	if checkTime("exp", c.exp) != nil || checkTime("iat", c.iat) != nil {
		return Provenance{}, provErr("ID token iat or exp outside [1970, 2200)", nil)
	}
	if now.After(c.exp) {
		return Provenance{}, provErr("ID token failed verification", fmt.Errorf("token is expired (exp %s)", c.exp.UTC().Format(time.RFC3339)))
	}
	if !c.nbf.IsZero() && c.nbf.After(now.Add(v.cfg.ClockLeeway)) {
		return Provenance{}, provErr("ID token failed verification", fmt.Errorf("token is not valid before %s", c.nbf.UTC().Format(time.RFC3339)))
	}
	if c.iat.After(now.Add(v.cfg.ClockLeeway)) {
		return Provenance{}, provErr("ID token issued in the future", nil)
	}
	if now.Sub(c.iat) > v.cfg.MaxTokenAge {
		return Provenance{}, provErr("ID token too old", nil)
	}
	if len(st.RequireAMR) > 0 && !slices.ContainsFunc(c.amr, func(m string) bool { return slices.Contains(st.RequireAMR, m) }) {
		return Provenance{}, provErr(fmt.Sprintf("amr policy not met: sign-in method %v, need one of %v", clipAll(c.amr), st.RequireAMR), nil)
	}
	if len(st.RequireACR) > 0 && !slices.Contains(st.RequireACR, c.acr) {
		return Provenance{}, provErr(fmt.Sprintf("acr policy not met: need one of %v", st.RequireACR), nil)
	}
	if use.bind {
		if c.nonce == "" {
			return Provenance{}, provErr("ID token has no nonce", nil)
		}
		if subtle.ConstantTimeCompare([]byte(c.nonce), []byte(use.nonce)) != 1 {
			if use.login {
				return Provenance{}, provErr("ID token nonce does not match this sign-in", nil)
			}
			return Provenance{}, provErr("ID token nonce is not bound to this request", nil)
		}
	}
	return Provenance{
		Issuer: c.iss, Subject: c.sub,
		Name: sanitize(c.name, 256), Email: sanitize(c.email, 256),
		AMR: clipAll(c.amr), ACR: sanitize(c.acr, 256),
		IssuedAt: c.iat.UTC(), ExpiresAt: c.exp.UTC(), VerifiedAt: now.UTC(),
		TokenHash: tokIn.hash,
	}, nil
}

// clipAll bounds an amr list: at most 16 values of at most 64 bytes.
func clipAll(vs []string) []string {
	if len(vs) > 16 {
		vs = vs[:16]
	}
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, sanitize(v, 64))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// RequestNonce returns the nonce an ID token must carry to prove the human
// behind this friend request. Covering Pickup means nobody who relays the
// request can swap in a verifier of their own and collect the credential.
// The requester's host starts its OIDC login with this nonce (for example
// with oauth2's AuthCodeURL(state, oidc.Nonce(nonce))), so the token it
// gets back can be used for this one request and no other.
//
// It is a protocol, not only a Go function (version 3):
//
//	nonce = base64url-nopad(SHA-256(JCS(
//	  {"v": 3, "from": From, "to": To, "why": Why, "pickup": Pickup,
//	   "scope": [{"queue": Queue, "verbs": [Verb, …]}, …]})))
//
// where JCS is RFC 8785: members sorted by name, no whitespace, strings
// escaped only where JSON requires it (so "<", ">", "&" and non-ASCII stay
// as they are). The scope is the request's, in its order, each entry with
// exactly its queue and its verbs (an empty list as []); the strings are
// those of the request as sent. A request with a Key adds the member
// "jkt": its RFC 7638 thumbprint (KeyThumbprint), so the key cannot be
// swapped in transit; without a Key there is no jkt member (a Key that
// is not a valid public JWK gets jkt "invalid": Request refuses it before
// the nonce counts; check a key with KeyThumbprint). IDToken is not read. For an object of only
// strings, arrays and the small integer 3, JSON.stringify of an object
// whose members were added in sorted order is its JCS form: a JavaScript
// agent computes the nonce in a few lines. testdata/request-nonce.json
// holds vectors, with the canonical text, that the tests check.
func RequestNonce(r FriendRequest) string {
	h := sha256.Sum256(RequestNonceInput(r))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// RequestNonceInput returns the canonical text RequestNonce hashes (see
// RequestNonce): for checking another implementation against this one.
func RequestNonceInput(r FriendRequest) []byte {
	// A request bound to a key adds its thumbprint (jkt); a request that
	// is not has no jkt member, so its text is what it always was.
	var jkt string
	if len(r.Key) > 0 {
		jkt, _ = keyThumbprint(r.Key) // a bad key fails the request before its nonce counts
		if jkt == "" {
			jkt = "invalid"
		}
	}
	// The JCS form written directly: members in sorted order (from, jkt,
	// pickup, scope, to, v, why; queue, verbs), strings as appendJCSString.
	from, to, why, pickup := validUTF8(r.From), validUTF8(r.To), validUTF8(r.Why), validUTF8(r.Pickup)
	n := 80 + len(from) + len(to) + len(why) + len(pickup) + len(jkt)
	for _, e := range r.Scope {
		n += 24 + len(e.Queue)
		for _, v := range e.Verbs {
			n += 3 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, `{"from":`...)
	b = appendJCSString(b, from)
	if jkt != "" {
		b = append(b, `,"jkt":`...)
		b = appendJCSString(b, jkt)
	}
	b = append(b, `,"pickup":`...)
	b = appendJCSString(b, pickup)
	b = append(b, `,"scope":[`...)
	for i, e := range r.Scope {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"queue":`...)
		b = appendJCSString(b, validUTF8(e.Queue))
		b = append(b, `,"verbs":[`...)
		for j, v := range e.Verbs {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendJCSString(b, validUTF8(string(v)))
		}
		b = append(b, "]}"...)
	}
	b = append(b, `],"to":`...)
	b = appendJCSString(b, to)
	b = append(b, `,"v":3,"why":`...)
	b = appendJCSString(b, why)
	return append(b, '}')
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
	if err := t.putRaw(tReplayExp, timeKey(p.ExpiresAt)+p.TokenHash, ""); err != nil {
		return err
	}
	return t.putRaw(tReplay, p.TokenHash, timeKey(p.ExpiresAt))
}

// forgetTokens drops up to limit remembered token hashes whose tokens have
// expired: an expired token fails verification anyway, so its hash no
// longer needs to be kept.
func (t *txn) forgetTokens(limit int) (int, error) {
	var keys []string
	err := t.tx.Scan(tReplayExp, nil, []byte(timeKey(t.now)), func(k, _ []byte) bool {
		keys = append(keys, string(k))
		return len(keys) < limit
	})
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := t.del(tReplayExp, k); err != nil {
			return 0, err
		}
		if err := t.del(tReplay, k[8:]); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}
