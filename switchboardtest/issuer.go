// The in-process OIDC issuer.

package switchboardtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/switchboardhq/switchboard"
)

// Issuer is a running local identity provider: a real OIDC issuer whose
// tokens switchboard verifies exactly as it verifies a production
// provider's. It is safe for concurrent use.
type Issuer struct {
	ClientID string // the audience of the tokens it mints

	srv     *httptest.Server // nil for an issuer its caller serves (NewIssuerAt)
	url     string
	handler http.Handler

	mu       sync.Mutex
	keys     []key // published in the JWKS; the last one signs
	fetches  int   // JWKS fetches
	requests int   // every request
	codes    map[string]grant
}

type key struct {
	priv *rsa.PrivateKey
	id   string
}

// NewIssuer starts an issuer on a loopback port with one RSA signing key,
// issuing tokens for clientID. The caller must Close it. Its URL — and so
// its humans, each an issuer URL and a subject — is new on every call: for
// a store that outlives the process (a bolt file run again), use
// NewIssuerAt with a fixed URL, as examples/quickstart -dir does.
func NewIssuer(clientID string) (*Issuer, error) {
	is, err := newIssuer(clientID, nil)
	if err != nil {
		return nil, err
	}
	is.srv = httptest.NewServer(is.handler)
	is.url = is.srv.URL
	return is, nil
}

// NewIssuerAt returns an issuer whose identifier is url, served by the
// caller: mount Handler so that url's path reaches it (with the path
// prefix stripped), or trust it without discovery through its key set
// (switchboard.Issuer{URL, ClientID, Keys: PublicKeys()}). A fixed url
// keeps the same humans the same across restarts. It signs with key, or,
// if nil, a new one (SigningKey returns it): keep the key too where
// tokens must verify across a restart (a dev host's browser sessions), or
// where discovery's key set is cached.
func NewIssuerAt(url, clientID string, key *rsa.PrivateKey) (*Issuer, error) {
	is, err := newIssuer(clientID, key)
	if err != nil {
		return nil, err
	}
	is.url = strings.TrimSuffix(url, "/")
	return is, nil
}

func newIssuer(clientID string, signing *rsa.PrivateKey) (*Issuer, error) {
	is := &Issuer{ClientID: clientID}
	if signing != nil {
		is.keys = append(is.keys, key{signing, "key-1"})
	} else if _, err := is.Rotate(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", is.discovery)
	mux.HandleFunc("GET /keys", is.jwks)
	mux.HandleFunc("GET /auth", is.authorize)
	mux.HandleFunc("POST /auth", is.authorize)
	mux.HandleFunc("POST /token", is.token)
	is.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.mu.Lock()
		is.requests++
		is.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
	return is, nil
}

// Handler serves the issuer's routes (discovery, JWKS, sign-in, token):
// for NewIssuerAt's caller to mount.
func (is *Issuer) Handler() http.Handler { return is.handler }

// SigningKey is the key the issuer signs tokens with now.
func (is *Issuer) SigningKey() *rsa.PrivateKey {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.keys[len(is.keys)-1].priv
}

func (is *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                is.URL(),
		"authorization_endpoint":                is.URL() + "/auth",
		"token_endpoint":                        is.URL() + "/token",
		"jwks_uri":                              is.URL() + "/keys",
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"none", "client_secret_basic", "client_secret_post"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
	})
}

func (is *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	is.mu.Lock()
	is.fetches++
	set := is.publicLocked()
	is.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

func (is *Issuer) publicLocked() jose.JSONWebKeySet {
	var set jose.JSONWebKeySet
	for _, k := range is.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.id, Algorithm: "RS256", Use: "sig"})
	}
	return set
}

// URL is the issuer identifier (its iss).
func (is *Issuer) URL() string { return is.url }

// Close stops the server NewIssuer started (an issuer its caller serves
// has none).
func (is *Issuer) Close() {
	if is.srv != nil {
		is.srv.Close()
	}
}

// Config returns the switchboard.Issuer entry that trusts this issuer
// through discovery.
func (is *Issuer) Config() switchboard.Issuer {
	return switchboard.Issuer{URL: is.URL(), ClientID: is.ClientID}
}

// Rotate adds a new signing key: the JWKS lists it next to the old ones and
// tokens are signed with it from now on. It returns the new key's id.
func (is *Issuer) Rotate() (string, error) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	id := fmt.Sprintf("key-%d", len(is.keys)+1)
	is.keys = append(is.keys, key{priv, id})
	return id, nil
}

// Key returns the current signing key and its key id.
func (is *Issuer) Key() (*rsa.PrivateKey, string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	k := is.keys[len(is.keys)-1]
	return k.priv, k.id
}

// PublicKeys returns the key set the JWKS serves, for configuring the issuer
// statically.
func (is *Issuer) PublicKeys() *jose.JSONWebKeySet {
	is.mu.Lock()
	defer is.mu.Unlock()
	set := is.publicLocked()
	return &set
}

// JWKSFetches reports how many times the JWKS has been fetched.
func (is *Issuer) JWKSFetches() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.fetches
}

// Requests reports how many HTTP requests the issuer has served.
func (is *Issuer) Requests() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.requests
}

// Claims are an ID token's claims. Zero values are left out of the token.
type Claims struct {
	Issuer   string    `json:"iss"`
	Subject  string    `json:"sub"`
	Audience string    `json:"aud"`
	Expiry   time.Time `json:"-"`
	IssuedAt time.Time `json:"-"`
	Nonce    string    `json:"nonce,omitempty"`
	Name     string    `json:"name,omitempty"`
	Email    string    `json:"email,omitempty"`
	AMR      []string  `json:"amr,omitempty"`
	ACR      string    `json:"acr,omitempty"`
	// ID is the token's jti, if set: two tokens minted in one second for
	// the same nonce then differ (replay protection keys on it).
	ID string `json:"jti,omitempty"`
}

// Claims returns claims for subject issued now, valid for an hour, for this
// issuer's client ID, bound to nonce.
func (is *Issuer) Claims(subject, nonce string, now time.Time) Claims {
	return Claims{
		Issuer: is.URL(), Subject: subject, Audience: is.ClientID,
		IssuedAt: now, Expiry: now.Add(time.Hour), Nonce: nonce,
	}
}

// Sign signs c with the issuer's current key.
func (is *Issuer) Sign(c Claims) string {
	priv, id := is.Key()
	return SignWith(priv, id, jose.RS256, c.JSON())
}

// SignWith signs payload as a compact JWS with the given key, key id and
// algorithm. Tests use it to forge tokens.
func SignWith(priv any, keyID string, alg jose.SignatureAlgorithm, payload string) string {
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if keyID != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), keyID)
	}
	return signCompact(jose.SigningKey{Algorithm: alg, Key: priv}, opts, []byte(payload))
}

// signCompact signs payload as a compact JWS; a test kit's key and
// options always sign, so a failure panics.
func signCompact(key jose.SigningKey, opts *jose.SignerOptions, payload []byte) string {
	signer, err := jose.NewSigner(key, opts)
	if err != nil {
		panic(fmt.Sprintf("switchboardtest: signer: %v", err))
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		panic(fmt.Sprintf("switchboardtest: sign: %v", err))
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		panic(fmt.Sprintf("switchboardtest: serialize: %v", err))
	}
	return out
}

// Login is a human signing in, as Issuer.Token mints it into an ID token.
// Only Subject is required.
type Login struct {
	Subject string    // the human's subject at this issuer
	Name    string    // the name claim; empty: left out
	Email   string    // the email claim; empty: left out
	Nonce   string    // the nonce the token is bound to: switchboard.RequestNonce of a friend request, or a login's
	At      time.Time // when it is issued; zero: now
}

// Token is an ID token for l: Sign(Claims(l.Subject, l.Nonce, l.At)) with
// l's name and email set.
func (is *Issuer) Token(l Login) string {
	at := l.At
	if at.IsZero() {
		at = time.Now()
	}
	c := is.Claims(l.Subject, l.Nonce, at)
	c.Name, c.Email = l.Name, l.Email
	return is.Sign(c)
}

// JSON encodes c as a JWT claims set.
func (c Claims) JSON() string {
	m := map[string]any{"iss": c.Issuer, "sub": c.Subject, "aud": c.Audience}
	if !c.Expiry.IsZero() {
		m["exp"] = c.Expiry.Unix()
	}
	if !c.IssuedAt.IsZero() {
		m["iat"] = c.IssuedAt.Unix()
	}
	for k, v := range map[string]string{"nonce": c.Nonce, "name": c.Name, "email": c.Email, "acr": c.ACR, "jti": c.ID} {
		if v != "" {
			m[k] = v
		}
	}
	if len(c.AMR) > 0 {
		m["amr"] = c.AMR
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// RequestToken returns an ID token of subject bound to the friend request r
// (its nonce is switchboard.RequestNonce of r), issued at now: what the
// requesting agent's host gets back from its human's login. Set it as
// r.IDToken before calling Request.
func (is *Issuer) RequestToken(subject string, r switchboard.FriendRequest, now time.Time) string {
	return is.Token(Login{Subject: subject, Nonce: switchboard.RequestNonce(r), At: now})
}

// Human is the switchboard.Human this issuer attests for subject.
func (is *Issuer) Human(subject string) switchboard.Human {
	return switchboard.Human{Issuer: is.URL(), Subject: subject}
}
