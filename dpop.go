// Proof of possession (DPoP, RFC 9449): grants bound to a key the agent
// holds, usable only with a fresh proof signed by that key. The one reading
// of a proof and of a public key every entry point goes through.

package switchboard

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/switchboardhq/switchboard/store"
)

var (
	// ErrDPoPRequired: the grant (or, for Collect, the friend request) is
	// bound to a key, and the call came without a proof of it. It wraps
	// ErrUnauthenticated. Hosts answer 401 with a DPoP challenge.
	ErrDPoPRequired = fmt.Errorf("%w: a DPoP proof is required", ErrUnauthenticated)
	// ErrInvalidDPoPProof: a DPoP proof was refused — malformed, signed
	// by another key than the grant's, for another method or URL, too old,
	// from the future, replayed, or naming another credential. The message
	// says which. It wraps ErrUnauthenticated. Hosts answer 401 with
	// WWW-Authenticate: DPoP error="invalid_dpop_proof".
	ErrInvalidDPoPProof = fmt.Errorf("%w: invalid DPoP proof", ErrUnauthenticated)
	// ErrUseDPoPNonce: the host requires a server nonce in proofs
	// (DPoPConfig.RequireNonce) and the proof has none, or a stale one.
	// Hosts answer 401 with WWW-Authenticate: DPoP error="use_dpop_nonce"
	// and a fresh nonce (Switchboard.DPoPNonce) in the DPoP-Nonce header.
	ErrUseDPoPNonce = fmt.Errorf("%w: use the DPoP nonce", ErrUnauthenticated)
)

// DPoPAlgorithms are the proof signature algorithms switchboard verifies,
// space-separated as a WWW-Authenticate challenge's algs parameter wants
// them: ES256, and Ed25519 signatures under either name — "EdDSA" (RFC
// 8037) or the fully-specified "Ed25519" (RFC 9864) that newer clients,
// such as the npm dpop package, send.
const DPoPAlgorithms = "ES256 EdDSA Ed25519"

const (
	// maxProof bounds a DPoP proof; maxJWK a public key.
	maxProof = 4096
	maxJWK   = 1024
	// maxJTI bounds a proof's jti.
	maxJTI = 256
)

// DPoPConfig tunes proof checking (Config.DPoP). The zero value is the
// defaults.
type DPoPConfig struct {
	// MaxAge is how long after its iat a proof is accepted. Default 1
	// minute. A proof is remembered (against replay) this long.
	MaxAge time.Duration
	// Leeway is how far in the future a proof's iat may be (the agent's
	// clock running ahead). Default 5 seconds.
	Leeway time.Duration
	// RequireNonce makes every proof carry a nonce the host handed out
	// (RFC 9449 §8): a proof without one, or with a stale one, is
	// ErrUseDPoPNonce, and the host answers with DPoPNonce. It bounds how
	// far ahead an agent can pre-compute proofs, whatever its clock says.
	RequireNonce bool
	// NonceKey keys the nonces (HMAC-SHA-256, at least 32 bytes). Every
	// process serving one store must share it; empty draws a random key,
	// for a single process.
	NonceKey []byte
	// NonceLifetime is how long a nonce is handed out; one stays valid for
	// up to twice this. Default 5 minutes.
	NonceLifetime time.Duration
}

func (c *DPoPConfig) withDefaults() (DPoPConfig, error) {
	var d DPoPConfig
	if c != nil {
		d = *c
	}
	orDuration(&d.MaxAge, time.Minute)
	orDuration(&d.Leeway, 5*time.Second)
	orDuration(&d.NonceLifetime, 5*time.Minute)
	if d.MaxAge < 0 || d.Leeway < 0 || d.NonceLifetime < 0 {
		return d, invalid("negative duration in Config.DPoP")
	}
	switch {
	case len(d.NonceKey) == 0:
		d.NonceKey = make([]byte, 32)
		if _, err := rand.Read(d.NonceKey); err != nil {
			return d, err
		}
	case len(d.NonceKey) < 32:
		return d, invalid("Config.DPoP.NonceKey is %d bytes, want at least 32", len(d.NonceKey))
	}
	return d, nil
}

// Auth is what a call presents to act under a grant: a Credential alone,
// for a grant bound to no key, or a Proven — the credential with a checked
// DPoP proof (Prove) — for a grant bound to one. The verbs that act under
// a grant take an Auth, so bearer calls pass their Credential as before.
type Auth interface {
	presentation() (Credential, string)
}

// presentation is a bare credential: no key proven.
func (c Credential) presentation() (Credential, string) { return c, "" }

// Proven is a credential whose DPoP proof Prove checked and spent: it
// stands for the one request that proof came with. Pass it to the calls
// that request makes; only Prove makes one. It does not expire — a host
// that kept one and used it for later requests would make the grant a
// bearer grant again — so make one from each request's own proof and drop
// it with the request. The exception is work that runs inside the host's
// own process under a grant bound to a key the host holds (Work draining
// a persona that RequireProof covers): there the credential never
// travels, and one Proven made when the loop starts serves it.
type Proven struct {
	cred Credential
	jkt  string
}

func (p Proven) presentation() (Credential, string) { return p.cred, p.jkt }

// Credential returns the credential presented.
func (p Proven) Credential() Credential { return p.cred }

// KeyThumbprint returns the RFC 7638 thumbprint of the key the proof was
// signed with.
func (p Proven) KeyThumbprint() string { return p.jkt }

// String returns a redacted form.
func (p Proven) String() string { return "DPoP " + p.cred.String() }

// GoString returns a redacted form.
func (p Proven) GoString() string { return "switchboard.Proven(" + p.cred.GoString() + ")" }

// Proof is a DPoP proof as a request carries it, and what it must prove.
type Proof struct {
	// JWT is the DPoP header's value: a JWS in compact form, typ
	// "dpop+jwt", signed (ES256 or EdDSA) by the key in its jwk header.
	JWT string
	// Method is the request's HTTP method, which the proof's htm must
	// name. A host that is not HTTP names the operation its own way (say
	// "CALL") and tells its agents.
	Method string
	// URL is the request's URL, which the proof's htu must name (compared
	// without query and fragment, after RFC 3986 §6.2.2 and §6.2.3
	// normalization: scheme and host case-insensitively, default ports
	// dropped, escapes of unreserved characters decoded, dot segments
	// removed). A host that is not HTTP names the operation (say
	// "urn:example:create_for").
	URL string
}

// String returns a redacted form: an unspent proof is usable until it is
// MaxAge old, so it is not printed.
func (p Proof) String() string {
	return fmt.Sprintf("DPoP proof [redacted] for %s %s", p.Method, p.URL)
}

// GoString returns a redacted form.
func (p Proof) GoString() string {
	return fmt.Sprintf("switchboard.Proof{JWT: [redacted], Method: %q, URL: %q}", p.Method, p.URL)
}

// KeyThumbprint returns the RFC 7638 JWK thumbprint (SHA-256, base64url)
// of a public key given as a JWK — what a bound grant stores and an
// agent's proofs must match. The key must be an EC P-256 or an Ed25519
// public key, with no private part.
func KeyThumbprint(jwk json.RawMessage) (string, error) {
	jkt, err := keyThumbprint(jwk)
	return jkt, wrapErr("key thumbprint", err)
}

func keyThumbprint(jwk json.RawMessage) (string, error) {
	_, jkt, err := parsePublicJWK(jwk)
	if err != nil {
		return "", invalid("key: %v", err)
	}
	return jkt, nil
}

// privateMembers are the JWK members that carry private key material.
var privateMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"}

// parsePublicJWK reads a public key from its JWK, strictly: one JSON
// object, no duplicate members, no private part, EC P-256 or OKP Ed25519.
func parsePublicJWK(raw []byte) (jose.JSONWebKey, string, error) {
	var k jose.JSONWebKey
	if len(raw) == 0 {
		return k, "", errors.New("empty")
	}
	if len(raw) > maxJWK {
		return k, "", fmt.Errorf("%d bytes, limit %d", len(raw), maxJWK)
	}
	obj, err := strictObject(raw, append(jwkNames, privateMembers...)...)
	if err != nil {
		return k, "", err
	}
	return publicKeyOf(obj, raw)
}

// publicKeyOf checks a decoded JWK object and returns the key and its
// thumbprint.
func publicKeyOf(obj map[string]any, raw []byte) (jose.JSONWebKey, string, error) {
	var k jose.JSONWebKey
	for _, m := range privateMembers {
		if _, ok := obj[m]; ok {
			return k, "", fmt.Errorf("a private key (member %q) is refused: send the public key only", m)
		}
	}
	if err := k.UnmarshalJSON(raw); err != nil {
		return k, "", err
	}
	switch pk := k.Key.(type) {
	case *ecdsa.PublicKey:
		if pk.Curve != elliptic.P256() {
			return k, "", errors.New("an EC key must be on P-256")
		}
	case ed25519.PublicKey:
	default:
		return k, "", fmt.Errorf("key type %T is not supported: use EC P-256 or Ed25519", k.Key)
	}
	if !k.IsPublic() {
		return k, "", errors.New("not a public key")
	}
	tp, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return k, "", err
	}
	return k, base64.RawURLEncoding.EncodeToString(tp), nil
}

// proofErr is an ErrInvalidDPoPProof saying why.
func proofErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidDPoPProof}, args...)...)
}

// proofHeaderNames are the JOSE header members a proof reader acts on.
var proofHeaderNames = []string{"alg", "typ", "jwk", "kid", "crit", "jku", "x5c", "x5u", "b64", "cty"}

// proofClaimNames are the proof claims read.
var proofClaimNames = []string{"jti", "htm", "htu", "iat", "ath", "nonce"}

// checked is what a verified proof says.
type checked struct {
	jkt, jti string
	iat      time.Time
}

// checkProof verifies p as a DPoP proof for a request carrying token (the
// credential, or at Collect the pickup secret) at now: the compact form
// only, typ dpop+jwt, ES256 or EdDSA by the public key in its jwk header,
// htm and htu naming p's method and URL, an iat within [now−MaxAge,
// now+Leeway], a jti, ath the hash of token, and with RequireNonce a
// current nonce. It reads nothing from the store: replay is checked where
// the proof is spent.
func (s *Switchboard) checkProof(p Proof, token string, now time.Time) (checked, error) {
	var c checked
	raw := p.JWT
	if raw == "" {
		return c, ErrDPoPRequired
	}
	if len(raw) > maxProof {
		return c, proofErr("it is %d bytes, limit %d", len(raw), maxProof)
	}
	segs := strings.Split(raw, ".")
	if len(segs) != 3 {
		return c, proofErr("not a compact JWS (three dot-separated segments)")
	}
	var dec [3][]byte
	for i, seg := range segs {
		b, err := canonicalSegment(seg)
		if err != nil {
			return c, proofErr("segment %d: %v", i+1, err)
		}
		dec[i] = b
	}
	hdr, err := s.proofHeader(segs[0], dec[0])
	if err != nil {
		return c, err
	}
	// The signature, over the first two segments as sent. The key and its
	// thumbprint are go-jose's reading of the header's JWK; the signature
	// check is the standard library's, the same one go-jose makes.
	input := []byte(raw[:len(segs[0])+1+len(segs[1])])
	ok := false
	switch k := hdr.key.(type) {
	case *ecdsa.PublicKey:
		if sig := dec[2]; len(sig) == 64 {
			h := sha256.Sum256(input)
			ok = ecdsa.Verify(k, h[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
		}
	case ed25519.PublicKey:
		ok = ed25519.Verify(k, input, dec[2])
	}
	if !ok {
		return c, proofErr("the signature does not verify with the key in its header")
	}
	payload := dec[1]
	claims, err := strictObject(payload, proofClaimNames...)
	if err != nil {
		return c, proofErr("claims: %v", err)
	}
	str := func(name string) (string, error) {
		v, ok := claims[name]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", proofErr("claim %s is not a string", name)
		}
		return s, nil
	}
	var htm, htu, ath, nonce string
	for _, f := range []struct {
		name string
		to   *string
	}{{"jti", &c.jti}, {"htm", &htm}, {"htu", &htu}, {"ath", &ath}, {"nonce", &nonce}} {
		if *f.to, err = str(f.name); err != nil {
			return c, err
		}
	}
	switch {
	case c.jti == "":
		return c, proofErr("claim jti is missing")
	case len(c.jti) > maxJTI:
		return c, proofErr("claim jti is %d bytes, limit %d", len(c.jti), maxJTI)
	case htm == "":
		return c, proofErr("claim htm is missing")
	case htm != p.Method:
		return c, proofErr("it is for method %q, this request is %q", clip(htm, 16), p.Method)
	}
	want, err := normalURL(p.URL)
	if err != nil {
		return c, fmt.Errorf("%w: the request's URL: %v", ErrInvalidArgument, err)
	}
	if got, err := normalURL(htu); err != nil || got != want {
		return c, proofErr("it is for another URL (htu) than this request's")
	}
	n, ok := claims["iat"].(json.Number)
	if !ok {
		return c, proofErr("claim iat is missing or not a number")
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || f < 0 || f > 1e12 {
		return c, proofErr("claim iat is not a time")
	}
	c.iat = time.Unix(int64(f), 0).UTC()
	switch {
	case c.iat.Before(now.Add(-s.dpop.MaxAge)):
		return c, proofErr("it is too old (issued %s ago, limit %s)", now.Sub(c.iat).Truncate(time.Second), s.dpop.MaxAge)
	case c.iat.After(now.Add(s.dpop.Leeway)):
		return c, proofErr("it is issued in the future (%s ahead)", c.iat.Sub(now).Truncate(time.Second))
	}
	if ath == "" {
		return c, proofErr("claim ath (the hash of the credential) is missing")
	}
	h := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare([]byte(ath), []byte(base64.RawURLEncoding.EncodeToString(h[:]))) != 1 {
		return c, proofErr("claim ath is the hash of another credential")
	}
	if s.dpop.RequireNonce && !s.nonceValid(nonce, now) {
		return c, ErrUseDPoPNonce
	}
	c.jkt = hdr.jkt
	return c, nil
}

// proofHdr is a proof's checked header: its algorithm, public key and
// the key's thumbprint.
type proofHdr struct {
	key any // *ecdsa.PublicKey (P-256) or ed25519.PublicKey
	jkt string
}

// proofHeaderCache remembers checked headers by their exact segment: an
// agent sends the same header (its alg, typ and key) with every proof, so
// each is read and checked once. Bounded: it starts over when full.
type proofHeaderCache struct {
	mu sync.Mutex
	m  map[string]proofHdr
}

const maxCachedProofHeaders = 4096

// proofHeader checks a proof's header — typ dpop+jwt, ES256 or
// EdDSA/Ed25519 matching the key, the public key in jwk with no private
// part, no crit — reading the segment seg (decoded: b) once.
func (s *Switchboard) proofHeader(seg string, b []byte) (proofHdr, error) {
	pc := &s.proofHeaders
	pc.mu.Lock()
	h, ok := pc.m[seg]
	pc.mu.Unlock()
	if ok {
		return h, nil
	}
	hdr, err := strictObject(b, proofHeaderNames...)
	if err != nil {
		return h, proofErr("header: %v", err)
	}
	if typ, _ := hdr["typ"].(string); typ != "dpop+jwt" {
		return h, proofErr(`header typ is %q, want "dpop+jwt"`, typ)
	}
	alg, _ := hdr["alg"].(string)
	switch {
	case alg == "ES256" || alg == "EdDSA" || alg == "Ed25519":
	case strings.EqualFold(alg, "none"):
		return h, proofErr("an unsigned proof (alg none) is refused")
	case strings.HasPrefix(alg, "HS"):
		return h, proofErr("a symmetric algorithm (%s) is refused", alg)
	default:
		return h, proofErr("algorithm %q is not supported (%s)", alg, DPoPAlgorithms)
	}
	if _, ok := hdr["crit"]; ok {
		return h, proofErr("crit header parameters are not supported")
	}
	jwkObj, ok := hdr["jwk"].(map[string]any)
	if !ok {
		return h, proofErr("header jwk (the public key) is missing or not an object")
	}
	jwkRaw, err := json.Marshal(jwkObj)
	if err != nil {
		return h, proofErr("header jwk: %v", err)
	}
	key, jkt, err := publicKeyOf(jwkObj, jwkRaw)
	if err != nil {
		return h, proofErr("header jwk: %v", err)
	}
	if _, isEd := key.Key.(ed25519.PublicKey); isEd != (alg != "ES256") {
		return h, proofErr("algorithm %s does not match the key type of the jwk", alg)
	}
	h = proofHdr{key: key.Key, jkt: jkt}
	pc.mu.Lock()
	if pc.m == nil || len(pc.m) >= maxCachedProofHeaders {
		pc.m = make(map[string]proofHdr)
	}
	pc.m[seg] = h
	pc.mu.Unlock()
	return h, nil
}

// normalURL is u as RFC 9449 §4.3 compares htu — after the syntax-based
// normalization of RFC 3986 §6.2.2 and the scheme-based one of §6.2.3 —
// without query and fragment: scheme and host in lower case, a default
// port dropped, an empty path as "/", percent-encodings in upper case and
// those of unreserved characters ("%7E", "%41") decoded, and dot segments
// removed ("/a/./b/../mcp" is "/a/mcp"). Any other percent-encoding stays
// as it is ("%2F" is not "/"), and the path's case is kept. A non-HTTP
// operation name (a URN) is compared as is but for its scheme's case.
func normalURL(u string) (string, error) {
	if u == "" {
		return "", errors.New("empty")
	}
	p, err := url.Parse(u)
	if err != nil {
		return "", errors.New("not a URL")
	}
	p.RawQuery, p.ForceQuery, p.Fragment, p.RawFragment = "", false, "", ""
	p.Scheme = strings.ToLower(p.Scheme)
	if p.Opaque != "" || p.Host == "" {
		return p.String(), nil
	}
	host, port := strings.ToLower(p.Hostname()), p.Port()
	if (p.Scheme == "https" && port == "443") || (p.Scheme == "http" && port == "80") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	path := removeDotSegments(normalEscapes(p.EscapedPath()))
	if path == "" {
		path = "/"
	}
	var b strings.Builder
	b.WriteString(p.Scheme)
	b.WriteString("://")
	if p.User != nil {
		b.WriteString(p.User.String())
		b.WriteByte('@')
	}
	b.WriteString(host)
	b.WriteString(path)
	return b.String(), nil
}

// normalEscapes is the percent-encoding normalization of RFC 3986 §6.2.2.1
// and §6.2.2.2 on an escaped path (whose escapes url.Parse has checked):
// the escape of an unreserved character (ALPHA, DIGIT, "-", ".", "_", "~")
// becomes the character, and every other escape is upper-cased.
func normalEscapes(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+2 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		hex := strings.ToUpper(s[i+1 : i+3])
		v, err := strconv.ParseUint(hex, 16, 8)
		if err != nil {
			b.WriteByte(s[i])
			continue
		}
		if c := byte(v); c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + hex)
		}
		i += 2
	}
	return b.String()
}

// removeDotSegments is RFC 3986 §5.2.4 on an absolute path: "." segments
// go, and ".." takes the segment before it (never climbing above "/").
func removeDotSegments(path string) string {
	if !strings.Contains(path, ".") {
		return path
	}
	var out []string
	segs := strings.Split(path, "/")[1:] // path starts with "/" (or is empty)
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
			if last {
				out = append(out, "") // "/a/." is "/a/"
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "") // "/a/b/.." is "/a/"
			}
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/")
}

// DPoPNonce returns the server nonce (RFC 9449 §8) to hand agents in the
// DPoP-Nonce header, when DPoPConfig.RequireNonce is set: valid for
// proofs until up to twice DPoPConfig.NonceLifetime from now. Every
// process sharing DPoPConfig.NonceKey accepts it.
func (s *Switchboard) DPoPNonce() string {
	return s.nonceAt(s.now().UnixNano() / int64(s.dpop.NonceLifetime))
}

func (s *Switchboard) nonceAt(window int64) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(window))
	m := hmac.New(sha256.New, s.dpop.NonceKey)
	m.Write(b)
	return base64.RawURLEncoding.EncodeToString(m.Sum(b)[:8+16])
}

// nonceValid reports whether nonce is this window's or the last one's.
func (s *Switchboard) nonceValid(nonce string, now time.Time) bool {
	w := now.UnixNano() / int64(s.dpop.NonceLifetime)
	for _, at := range []int64{w, w - 1} {
		if hmac.Equal([]byte(nonce), []byte(s.nonceAt(at))) {
			return true
		}
	}
	return false
}

// spendProof remembers a verified proof until it would be too old anyway,
// refusing one seen before: a proof is good for one request. Proofs are
// remembered by key and jti, so two agents' jtis never collide.
func (t *txn) spendProof(s *Switchboard, c checked) error {
	h := sha256.Sum256([]byte(c.jkt + "\x00" + c.jti))
	key := "dpop:" + base64.RawURLEncoding.EncodeToString(h[:])
	seen, err := t.lookup(tReplay, key)
	if err != nil {
		return err
	}
	if seen != "" {
		return proofErr("it was used before (replayed)")
	}
	// Kept a minute past the last moment it could be accepted, so a
	// process whose clock runs ahead does not purge it early.
	until := timeKey(c.iat.Add(s.dpop.MaxAge + s.dpop.Leeway + time.Minute))
	if err := t.putRaw(tReplayExp, until+key, ""); err != nil {
		return err
	}
	return t.putRaw(tReplay, key, until)
}

// Prove checks a DPoP proof presented with c and returns the Proven to
// pass to the calls the request makes. The proof must verify (see Proof)
// with ath the hash of c; if c's grant is bound to a key, the proof must
// be signed by that key. It is spent here, in its own transaction — even
// under an application's transaction (store/postgres's WithTx), whose
// rollback does not bring it back — so it is good for one request however
// the calls and the transaction then end. A refused proof is
// ErrInvalidDPoPProof (or ErrUseDPoPNonce) saying why, and nothing is
// recorded. A grant bound to no key accepts a valid proof too.
func (s *Switchboard) Prove(ctx context.Context, c Credential, p Proof) (Proven, error) {
	fail := func(err error) (Proven, error) { return Proven{}, fmt.Errorf("switchboard: prove: %w", err) }
	chk, err := s.checkProof(p, string(c), s.now())
	if err != nil {
		return fail(err)
	}
	proven := Proven{cred: c, jkt: chk.jkt}
	err = s.update(store.OwnTx(ctx), func(t *txn) error {
		if _, err := t.authenticate(proven); err != nil {
			return err
		}
		return t.spendProof(s, chk)
	})
	if err != nil {
		return fail(err)
	}
	return proven, nil
}
