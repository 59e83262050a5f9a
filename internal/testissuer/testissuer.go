// Package testissuer runs a real local OIDC issuer — discovery document and
// JWKS served over HTTP by go-oidc's oidctest server — and mints ID tokens
// signed with its keys. The quickstart and the tests use it so that friend
// requests are verified exactly as in production, with no verifier stub.
package testissuer

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http/httptest"
	"time"

	"github.com/coreos/go-oidc/v3/oidc/oidctest"

	"github.com/switchboardhq/switchboard"
)

// Issuer is a running local identity provider.
type Issuer struct {
	Key      *rsa.PrivateKey
	KeyID    string
	ClientID string
	srv      *httptest.Server
	oidc     *oidctest.Server
}

// New starts an issuer on a loopback port with one RSA signing key. The
// caller must Close it.
func New(clientID string) (*Issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	is := &Issuer{Key: key, KeyID: "key-1", ClientID: clientID}
	is.oidc = &oidctest.Server{
		PublicKeys: []oidctest.PublicKey{{PublicKey: key.Public(), KeyID: is.KeyID, Algorithm: "RS256"}},
		Algorithms: []string{"RS256"},
	}
	is.srv = httptest.NewServer(is.oidc)
	is.oidc.SetIssuer(is.srv.URL)
	return is, nil
}

// URL is the issuer identifier (its iss).
func (is *Issuer) URL() string { return is.srv.URL }

// Close stops the server.
func (is *Issuer) Close() { is.srv.Close() }

// Config returns the switchboard.Issuer entry that trusts this issuer
// through discovery.
func (is *Issuer) Config() switchboard.Issuer {
	return switchboard.Issuer{URL: is.URL(), ClientID: is.ClientID}
}

// Claims are an ID token's claims. Zero times are left out of the token.
type Claims struct {
	Issuer   string    `json:"iss"`
	Subject  string    `json:"sub"`
	Audience string    `json:"aud"`
	Expiry   time.Time `json:"-"`
	IssuedAt time.Time `json:"-"`
	Nonce    string    `json:"nonce,omitempty"`
	Name     string    `json:"name,omitempty"`
	Email    string    `json:"email,omitempty"`
}

// Claims returns claims for subject issued now, valid for an hour, for this
// issuer's client ID, bound to nonce.
func (is *Issuer) Claims(subject, nonce string, now time.Time) Claims {
	return Claims{
		Issuer: is.URL(), Subject: subject, Audience: is.ClientID,
		IssuedAt: now, Expiry: now.Add(time.Hour), Nonce: nonce,
	}
}

// Sign signs c with the issuer's key.
func (is *Issuer) Sign(c Claims) string {
	return oidctest.SignIDToken(is.Key, is.KeyID, "RS256", c.JSON())
}

// Token is Sign(Claims(subject, nonce, now)) with a name and email set.
func (is *Issuer) Token(subject, name, email, nonce string, now time.Time) string {
	c := is.Claims(subject, nonce, now)
	c.Name, c.Email = name, email
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
	for k, v := range map[string]string{"nonce": c.Nonce, "name": c.Name, "email": c.Email} {
		if v != "" {
			m[k] = v
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// Human is the switchboard.Human this issuer attests for subject.
func (is *Issuer) Human(subject string) switchboard.Human {
	return switchboard.Human{Issuer: is.URL(), Subject: subject}
}
