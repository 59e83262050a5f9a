package switchboardtest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/switchboardhq/switchboard"
)

// ProofKey is an agent's DPoP key pair (RFC 9449), for tests and for the
// examples: it signs proofs the way an agent's DPoP client does.
type ProofKey struct {
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
	pub  jose.JSONWebKey
}

// NewProofKey makes a key pair for alg: "ES256" (P-256) or "EdDSA"
// (Ed25519).
func NewProofKey(alg string) (*ProofKey, error) {
	var priv crypto.Signer
	switch alg {
	case "ES256":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		priv = k
	case "EdDSA":
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		priv = k
	default:
		return nil, fmt.Errorf("switchboardtest: proof algorithm %q: want ES256 or EdDSA", alg)
	}
	return &ProofKey{alg: jose.SignatureAlgorithm(alg), priv: priv, pub: jose.JSONWebKey{Key: priv.Public()}}, nil
}

// JWK returns the public key as a JWK, for FriendRequest.Key or
// VendRequest.Key.
func (k *ProofKey) JWK() json.RawMessage {
	b, err := k.pub.MarshalJSON()
	if err != nil {
		panic(fmt.Sprintf("switchboardtest: jwk: %v", err))
	}
	return b
}

// PrivateJWK returns the key pair as a JWK with its private part, to hand
// the same key to another DPoP client (the interop tests do).
func (k *ProofKey) PrivateJWK() json.RawMessage {
	b, err := (&jose.JSONWebKey{Key: k.priv}).MarshalJSON()
	if err != nil {
		panic(fmt.Sprintf("switchboardtest: jwk: %v", err))
	}
	return b
}

// Thumbprint returns the key's RFC 7638 thumbprint, as a bound grant
// stores it.
func (k *ProofKey) Thumbprint() string {
	tp, err := k.pub.Thumbprint(crypto.SHA256)
	if err != nil {
		panic(fmt.Sprintf("switchboardtest: thumbprint: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(tp)
}

// ProofClaims are a proof's claims. Proof fills them in for the usual
// case; tests change them to forge proofs.
type ProofClaims struct {
	JTI      string
	Method   string // htm
	URL      string // htu
	IssuedAt time.Time
	// Token is the credential (or, at Collect, the pickup secret) whose
	// hash is ath; empty leaves ath out.
	Token string
	Nonce string // the server nonce, if any
}

// Proof signs a proof for a request with method and URL carrying token
// (the credential, or at Collect the pickup secret), issued at iat, with a
// random jti and no nonce.
func (k *ProofKey) Proof(method, url, token string, iat time.Time) switchboard.Proof {
	return switchboard.Proof{JWT: k.Sign(ProofClaims{JTI: rand.Text(), Method: method, URL: url, IssuedAt: iat, Token: token}), Method: method, URL: url}
}

// Sign signs c as a dpop+jwt with the public key in its jwk header.
func (k *ProofKey) Sign(c ProofClaims) string {
	m := map[string]any{"jti": c.JTI, "htm": c.Method, "htu": c.URL, "iat": c.IssuedAt.Unix()}
	if c.Token != "" {
		h := sha256.Sum256([]byte(c.Token))
		m["ath"] = base64.RawURLEncoding.EncodeToString(h[:])
	}
	if c.Nonce != "" {
		m["nonce"] = c.Nonce
	}
	payload, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return signCompact(jose.SigningKey{Algorithm: k.alg, Key: k.priv}, (&jose.SignerOptions{EmbedJWK: true}).WithType("dpop+jwt"), payload)
}

// CollectURL is the operation name the kit's proofs name at Collect; the
// kit's hosts are not HTTP.
const CollectURL = "urn:switchboardtest:collect"

// BoundFriend is Friend for a request bound to key: approved as asked by
// to's owner and collected with a proof of key (carrying the server's
// nonce, which a Switchboard that requires none ignores). Calls under the returned
// credential need a proof of key too (Prove).
func (k *Kit) BoundFriend(from, to string, scope switchboard.Scope, key *ProofKey) (switchboard.Grant, switchboard.Credential) {
	k.t.Helper()
	owner := k.owner(from)
	secret, verifier := switchboard.NewPickup()
	r := switchboard.FriendRequest{From: from, To: to, Scope: scope, Why: "switchboardtest bound friend request", Pickup: verifier, Key: key.JWK()}
	r.IDToken = k.Issuer.RequestToken(owner.Subject, r, k.now())
	ctx := context.Background()
	e, _, err := k.SB.Request(ctx, r)
	if err != nil {
		k.t.Fatalf("switchboardtest: request %s → %s: %v", from, to, err)
	}
	if _, err := k.SB.Approve(ctx, k.owner(to), e.ID, nil); err != nil {
		k.t.Fatalf("switchboardtest: approve %s: %v", e.ID, err)
	}
	proof := switchboard.Proof{Method: "POST", URL: CollectURL, JWT: key.Sign(ProofClaims{
		JTI: rand.Text(), Method: "POST", URL: CollectURL, IssuedAt: k.now(), Token: secret, Nonce: k.SB.DPoPNonce(),
	})}
	g, cred, err := k.SB.CollectWithProof(ctx, e.ID, secret, proof)
	if err != nil {
		k.t.Fatalf("switchboardtest: collect %s: %v", e.ID, err)
	}
	return g, cred
}
