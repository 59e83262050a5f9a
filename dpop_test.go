package switchboard_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

const (
	apiURL     = "https://hub.example/mcp"
	collectURL = "https://hub.example/edges/collect"
)

// boundFriend sends alice-bot → bob-desk a friend request bound to key,
// has bob approve it and returns the edge and the pickup secret.
func boundRequest(t *testing.T, h *harness, key *switchboardtest.ProofKey, sc sb.Scope) sb.Edge {
	t.Helper()
	r := sb.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: sc, Why: "bound", Pickup: testPickup, Key: key.JWK()}
	r.IDToken = h.iss.RequestToken("alice", r, h.clock.Now())
	e, _, err := h.sb.Request(ctx, r)
	require.NoError(t, err)
	require.Equal(t, key.Thumbprint(), e.KeyThumbprint)
	_, err = h.sb.Approve(ctx, h.bob, e.ID, nil)
	require.NoError(t, err)
	return e
}

// boundCredential is a friend credential bound to a new ES256 key: asked
// for, approved, and collected with a proof made now.
func boundCredential(t *testing.T, h *harness) (*switchboardtest.ProofKey, sb.Credential, time.Time) {
	t.Helper()
	key, err := switchboardtest.NewProofKey("ES256")
	require.NoError(t, err)
	e := boundRequest(t, h, key, inboxCreate)
	now := h.clock.Now()
	_, cred, err := h.sb.CollectWithProof(ctx, e.ID, testSecret, key.Proof("POST", collectURL, testSecret, now))
	require.NoError(t, err)
	return key, cred, now
}

// dpopSpent counts the proofs remembered against replay.
func dpopSpent(t *testing.T, h *harness) int {
	t.Helper()
	n := 0
	require.NoError(t, h.st.View(ctx, func(tx store.Tx) error {
		return tx.Scan("oidc_replay", []byte("dpop:"), []byte("dpop;"), func(_, _ []byte) bool { n++; return true })
	}))
	return n
}

// A grant bound to a key: collected only with a proof by the key (over the
// pickup secret), and used only with a proof by it (over the credential).
// A leaked credential alone, or with a proof by another key, is refused.
func TestBoundGrant(t *testing.T) {
	for _, alg := range []string{"ES256", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, h *harness) {
				key, err := switchboardtest.NewProofKey(alg)
				require.NoError(t, err)
				other, err := switchboardtest.NewProofKey(alg)
				require.NoError(t, err)
				e := boundRequest(t, h, key, inboxCreate)
				now := h.clock.Now()

				_, _, err = h.sb.Collect(ctx, e.ID, testSecret)
				require.ErrorIs(t, err, sb.ErrDPoPRequired, "a bound request is not collected by its secret alone")
				_, _, err = h.sb.CollectWithProof(ctx, e.ID, testSecret, other.Proof("POST", collectURL, testSecret, now))
				require.ErrorIs(t, err, sb.ErrNotFound, "another key: refused like every refusal of Collect")
				_, _, err = h.sb.CollectWithProof(ctx, e.ID, testSecret, key.Proof("POST", collectURL, "pk_other", now))
				require.ErrorContains(t, err, "hash of another credential", "ath must hash the pickup secret")
				g, cred, err := h.sb.CollectWithProof(ctx, e.ID, testSecret, key.Proof("POST", collectURL, testSecret, now))
				require.NoError(t, err)
				require.Equal(t, key.Thumbprint(), g.KeyThumbprint)

				before := lastSeq(t, h)
				_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
				require.ErrorIs(t, err, sb.ErrDPoPRequired, "a leaked credential without a proof")
				require.ErrorIs(t, err, sb.ErrUnauthenticated)
				assert.Equal(t, 401, sb.StatusOf(err).HTTP)
				assert.Equal(t, "dpop_required", sb.StatusOf(err).Code)
				_, err = h.sb.Authenticate(ctx, cred)
				require.ErrorIs(t, err, sb.ErrDPoPRequired)
				_, err = h.sb.Prove(ctx, cred, other.Proof("POST", apiURL, string(cred), now))
				require.ErrorIs(t, err, sb.ErrInvalidDPoPProof, "a proof by another key")
				assert.Equal(t, "invalid_dpop_proof", sb.StatusOf(err).Code)
				assert.Equal(t, before, lastSeq(t, h), "nothing recorded")

				proof := key.Proof("POST", apiURL, string(cred), now)
				assert.NotContains(t, proof.String()+proof.GoString()+fmt.Sprint(proof), proof.JWT, "an unspent proof is not printed")
				p, err := h.sb.Prove(ctx, cred, proof)
				require.NoError(t, err)
				assert.Equal(t, key.Thumbprint(), p.KeyThumbprint())
				assert.NotContains(t, p.String()+p.GoString(), string(cred), "a Proven prints no credential")
				td, created, err := h.sb.CreateFor(ctx, p, "inbox", sb.NewTodo{Kind: "k"})
				require.NoError(t, err)
				require.True(t, created)
				got, err := h.sb.Authenticate(ctx, p)
				require.NoError(t, err)
				require.Equal(t, g.ID, got.ID)
				require.Equal(t, g.ID, td.Origin.Grant)
			})
		})
	}
}

// htu is compared as RFC 9449 §4.3 asks, after RFC 3986 §6.2.2 and §6.2.3
// normalization, on both sides: a proof naming the request's URL spelled
// another equivalent way is accepted; one naming a URL that only looks
// alike — an escaped "/", another case of the path, a trailing slash, a
// dot segment that leaves another path — is refused, and not spent.
func TestProofURLNormalization(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		key, cred, now := boundCredential(t, h)
		for _, tc := range []struct {
			htu, request string
			same         bool
		}{
			{"https://hub.example/%6Dcp", apiURL, true},                      // an unreserved letter escaped
			{"https://hub.example/m%63p", apiURL, true},                      // …in the middle
			{apiURL, "https://hub.example/%6d%63%70", true},                  // the request's URL escaped, lower-case hex
			{"https://hub.example/a/%7Eb", "https://hub.example/a/~b", true}, // "~" is unreserved
			{"https://hub.example/a%2fb", "https://hub.example/a%2Fb", true}, // the hex's case
			{"https://hub.example/./mcp", apiURL, true},                      // a "." segment
			{"https://hub.example/x/y/../../mcp", apiURL, true},              // ".." segments
			{"https://hub.example/%2E%2E/mcp", apiURL, true},                 // escaped dots, then removed
			{"https://hub.example/../mcp", apiURL, true},                     // ".." never climbs above "/"
			{"HTTPS://Hub.EXAMPLE:443/mcp#frag", apiURL, true},               // scheme, host, default port, fragment
			{"https://hub.example/a%2Fb", "https://hub.example/a/b", false},  // an escaped "/" is not "/"
			{"https://hub.example/a%40b", "https://hub.example/a@b", false},  // nor an escaped "@" an "@"
			{"https://hub.example/MCP", apiURL, false},                       // the path's case counts
			{"https://hub.example/mcp/", apiURL, false},                      // so does a trailing slash
			{"https://hub.example/mcp/..", apiURL, false},                    // "/mcp/.." is "/"
			{"https://hub.example/mcp/.", apiURL, false},                     // "/mcp/." is "/mcp/"
			{"https://hub.example/mc%2570", apiURL, false},                   // "%25" is "%", kept escaped
			{"http://hub.example/mcp", apiURL, false},                        // another scheme
			{"https://hub.example:8443/mcp", apiURL, false},                  // another port
		} {
			before, spent := lastSeq(t, h), dpopSpent(t, h)
			proof := key.Proof("POST", tc.htu, string(cred), now)
			proof.URL = tc.request
			_, err := h.sb.Prove(ctx, cred, proof)
			if tc.same {
				require.NoError(t, err, "htu %s for a request to %s", tc.htu, tc.request)
				assert.Equal(t, spent+1, dpopSpent(t, h))
				continue
			}
			require.ErrorIs(t, err, sb.ErrInvalidDPoPProof, "htu %s for a request to %s", tc.htu, tc.request)
			require.ErrorContains(t, err, "another URL (htu)")
			assert.Equal(t, before, lastSeq(t, h))
			assert.Equal(t, spent, dpopSpent(t, h), "a refused proof is not spent")
		}
	})
}

// Each way a proof can be wrong is refused with its own words, and a
// refused proof is not spent: nothing is recorded.
func TestProofRefusals(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		key, cred, now := boundCredential(t, h)
		tok := string(cred)
		ok := switchboardtest.ProofClaims{JTI: "j-1", Method: "POST", URL: apiURL, IssuedAt: now, Token: tok}
		with := func(f func(*switchboardtest.ProofClaims)) string {
			c := ok
			f(&c)
			return key.Sign(c)
		}
		good := key.Sign(ok)
		segs := strings.Split(good, ".")
		b64 := base64.RawURLEncoding.EncodeToString
		jwk := key.JWK()
		hdr := func(h string) string { return b64([]byte(h)) + "." + segs[1] + "." + segs[2] }
		ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		privJWK, err := (&jose.JSONWebKey{Key: ecPriv}).MarshalJSON()
		require.NoError(t, err)
		signedWithHeader := func(extra map[string]any) string {
			signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: ecPriv}, &jose.SignerOptions{ExtraHeaders: func() map[jose.HeaderKey]any {
				m := map[jose.HeaderKey]any{"typ": "dpop+jwt"}
				for k, v := range extra {
					m[jose.HeaderKey(k)] = v
				}
				return m
			}()})
			require.NoError(t, err)
			payload, _ := base64.RawURLEncoding.DecodeString(segs[1])
			jws, err := signer.Sign(payload)
			require.NoError(t, err)
			out, err := jws.CompactSerialize()
			require.NoError(t, err)
			return out
		}
		hs := func() string {
			signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("0123456789abcdef0123456789abcdef")},
				(&jose.SignerOptions{}).WithType("dpop+jwt").WithHeader("jwk", json.RawMessage(jwk)))
			require.NoError(t, err)
			payload, _ := base64.RawURLEncoding.DecodeString(segs[1])
			jws, err := signer.Sign(payload)
			require.NoError(t, err)
			out, _ := jws.CompactSerialize()
			return out
		}()
		for _, tc := range []struct {
			name, jwt, method, url, why string
		}{
			{"none at all", "", "POST", apiURL, "DPoP proof is required"},
			{"another URL", good, "POST", "https://hub.example/other", "another URL"},
			{"another host", good, "POST", "https://evil.example/mcp", "another URL"},
			{"another method", good, "GET", apiURL, `for method "POST"`},
			{"too old", with(func(c *switchboardtest.ProofClaims) { c.IssuedAt = now.Add(-2 * time.Minute) }), "POST", apiURL, "too old"},
			{"from the future", with(func(c *switchboardtest.ProofClaims) { c.IssuedAt = now.Add(time.Minute) }), "POST", apiURL, "in the future"},
			{"wrong ath", with(func(c *switchboardtest.ProofClaims) { c.Token = "sbg_someone_else" }), "POST", apiURL, "hash of another credential"},
			{"no ath", with(func(c *switchboardtest.ProofClaims) { c.Token = "" }), "POST", apiURL, "ath"},
			{"no jti", with(func(c *switchboardtest.ProofClaims) { c.JTI = "" }), "POST", apiURL, "jti is missing"},
			{"alg none", hdr(`{"alg":"none","typ":"dpop+jwt","jwk":` + string(jwk) + `}`), "POST", apiURL, "alg none"},
			{"symmetric", hs, "POST", apiURL, "symmetric algorithm (HS256)"},
			{"private key in the header", signedWithHeader(map[string]any{"jwk": json.RawMessage(privJWK)}), "POST", apiURL, "private key"},
			{"no key in the header", signedWithHeader(nil), "POST", apiURL, "jwk"},
			{"another typ", hdr(`{"alg":"ES256","typ":"JWT","jwk":` + string(jwk) + `}`), "POST", apiURL, `typ is "JWT"`},
			{"a header member twice", hdr(`{"alg":"ES256","alg":"ES256","typ":"dpop+jwt","jwk":` + string(jwk) + `}`), "POST", apiURL, "header"},
			{"the signature of another header", hdr(`{"typ":"dpop+jwt","alg":"ES256","jwk":` + string(jwk) + `}`), "POST", apiURL, "does not verify"},
			{"a tampered payload", segs[0] + "." + b64([]byte(`{"jti":"j-1","htm":"POST","htu":"`+apiURL+`","iat":`+jsonNum(now)+`}`)) + "." + segs[2], "POST", apiURL, "does not verify"},
			{"JSON serialization", `{"payload":"` + segs[1] + `"}`, "POST", apiURL, "compact"},
			{"padded", good + "=", "POST", apiURL, "segment 3"},
			{"whitespace", " " + good, "POST", apiURL, "segment 1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before, spent := lastSeq(t, h), dpopSpent(t, h)
				_, err := h.sb.Prove(ctx, cred, sb.Proof{JWT: tc.jwt, Method: tc.method, URL: tc.url})
				require.ErrorIs(t, err, sb.ErrUnauthenticated)
				if tc.jwt != "" {
					require.ErrorIs(t, err, sb.ErrInvalidDPoPProof)
				}
				require.ErrorContains(t, err, tc.why)
				require.NotContains(t, err.Error(), tok, "no credential in an error")
				assert.Equal(t, before, lastSeq(t, h))
				assert.Equal(t, spent, dpopSpent(t, h), "a refused proof is not spent")
			})
		}

		// The good proof, at a URL spelled differently but the same, and
		// with a query: accepted once, then refused as replayed.
		spent := dpopSpent(t, h) // the collection's proof
		_, err = h.sb.Prove(ctx, cred, sb.Proof{JWT: good, Method: "POST", URL: "HTTPS://Hub.Example:443/mcp?session=1"})
		require.NoError(t, err)
		require.Equal(t, spent+1, dpopSpent(t, h))
		_, err = h.sb.Prove(ctx, cred, sb.Proof{JWT: good, Method: "POST", URL: apiURL})
		require.ErrorIs(t, err, sb.ErrInvalidDPoPProof)
		require.ErrorContains(t, err, "replayed")

		// Remembered proofs are forgotten once too old to be accepted.
		h.clock.Advance(3 * time.Minute)
		_, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		require.Zero(t, dpopSpent(t, h))
		_, err = h.sb.Prove(ctx, cred, sb.Proof{JWT: good, Method: "POST", URL: apiURL})
		require.ErrorContains(t, err, "too old", "and then they are too old anyway")
	})
}

func jsonNum(t time.Time) string { b, _ := json.Marshal(t.Unix()); return string(b) }

// A proof spent through one Switchboard is refused through another on the
// same store: the replay cache is the store's.
func TestProofReplayAcrossProcesses(t *testing.T) {
	st := memory.New()
	h := newHarness(t, st)
	other, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}})
	require.NoError(t, err)
	defer other.Close()
	key, err := switchboardtest.NewProofKey("EdDSA")
	require.NoError(t, err)
	e := boundRequest(t, h, key, inboxCreate)
	_, cred, err := h.sb.CollectWithProof(ctx, e.ID, testSecret, key.Proof("POST", collectURL, testSecret, h.clock.Now()))
	require.NoError(t, err)
	p := key.Proof("POST", apiURL, string(cred), h.clock.Now())
	_, err = h.sb.Prove(ctx, cred, p)
	require.NoError(t, err)
	_, err = other.Prove(ctx, cred, p)
	require.ErrorContains(t, err, "replayed")
}

// With RequireNonce, a proof must carry a nonce the host handed out and
// that is still current; every process with the same NonceKey accepts it.
func TestProofNonce(t *testing.T) {
	st := memory.New()
	h := newHarness(t, st)
	dp := &sb.DPoPConfig{RequireNonce: true, NonceKey: []byte(strings.Repeat("k", 32)), NonceLifetime: time.Minute, MaxAge: 10 * time.Minute}
	s, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, DPoP: dp})
	require.NoError(t, err)
	defer s.Close()
	other, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, DPoP: dp})
	require.NoError(t, err)
	defer other.Close()
	key, err := switchboardtest.NewProofKey("ES256")
	require.NoError(t, err)
	e := boundRequest(t, h, key, inboxCreate)
	_, cred, err := h.sb.CollectWithProof(ctx, e.ID, testSecret, key.Proof("POST", collectURL, testSecret, h.clock.Now()))
	require.NoError(t, err)
	sign := func(nonce string) sb.Proof {
		return sb.Proof{JWT: key.Sign(switchboardtest.ProofClaims{JTI: rand.Text(), Method: "POST", URL: apiURL, IssuedAt: h.clock.Now(), Token: string(cred), Nonce: nonce}), Method: "POST", URL: apiURL}
	}
	_, err = s.Prove(ctx, cred, sign(""))
	require.ErrorIs(t, err, sb.ErrUseDPoPNonce)
	assert.Equal(t, "use_dpop_nonce", sb.StatusOf(err).Code)
	_, err = s.Prove(ctx, cred, sign("forged"))
	require.ErrorIs(t, err, sb.ErrUseDPoPNonce)
	nonce := s.DPoPNonce()
	_, err = other.Prove(ctx, cred, sign(nonce))
	require.NoError(t, err, "another process with the same key accepts it")
	h.clock.Advance(time.Minute)
	_, err = s.Prove(ctx, cred, sign(nonce))
	require.NoError(t, err, "still valid in the next window")
	h.clock.Advance(2 * time.Minute)
	_, err = s.Prove(ctx, cred, sign(nonce))
	require.ErrorIs(t, err, sb.ErrUseDPoPNonce, "stale")
	_, err = s.Prove(ctx, cred, sign(s.DPoPNonce()))
	require.NoError(t, err)
}

// A persona can require every grant into it to be bound to a key.
func TestRequireProofPersona(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		// A keyless request sent before proofs were required is not
		// approved after.
		carols, err := h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, "sent early")
		require.NoError(t, err)
		g, _ := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		desk := sb.Persona{ID: "bob-desk", Owner: h.bob, Card: card("bob-desk"), Discoverable: true, RequireProof: true}
		_, err = h.sb.Publish(ctx, desk)
		require.ErrorIs(t, err, sb.ErrConflict, "a live bearer grant into it")
		require.ErrorContains(t, err, "1 live grant(s)")
		require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))
		p, err := h.sb.Publish(ctx, desk)
		require.NoError(t, err)
		require.True(t, p.RequireProof)
		_, err = h.sb.Approve(ctx, h.bob, carols.ID, nil)
		require.ErrorIs(t, err, sb.ErrConflict)
		require.ErrorContains(t, err, "carries none")
		require.NoError(t, h.sb.Deny(ctx, h.bob, carols.ID))
		_, err = h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "again, no key")
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		require.ErrorContains(t, err, "only requests bound to a key")
		_, _, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbClaim)})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)

		key, err := switchboardtest.NewProofKey("EdDSA")
		require.NoError(t, err)
		boundRequest(t, h, key, inboxCreate)
		vg, _, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbClaim), Key: key.JWK()})
		require.NoError(t, err)
		require.Equal(t, key.Thumbprint(), vg.KeyThumbprint)
	})
}

// The key is covered by the request's nonce: a token for the request
// without it does not prove the request with it; and a bad key is refused.
func TestRequestKeyIsBound(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		key, err := switchboardtest.NewProofKey("ES256")
		require.NoError(t, err)
		r := sb.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "w", Pickup: testPickup}
		tok := h.iss.RequestToken("alice", r, h.clock.Now())
		r.IDToken, r.Key = tok, key.JWK()
		_, _, err = h.sb.Request(ctx, r)
		require.ErrorIs(t, err, sb.ErrProvenance, "a key swapped in")
		require.NotEqual(t, sb.RequestNonce(r), sb.RequestNonce(sb.FriendRequest{From: r.From, To: r.To, Scope: r.Scope, Why: r.Why, Pickup: r.Pickup}))

		ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		privJWK, err := (&jose.JSONWebKey{Key: ecPriv}).MarshalJSON()
		require.NoError(t, err)
		p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		require.NoError(t, err)
		p384JWK, err := (&jose.JSONWebKey{Key: p384.Public()}).MarshalJSON()
		require.NoError(t, err)
		for _, bad := range []struct{ key, why string }{
			{string(privJWK), "private key"},
			{string(p384JWK), "P-256"},
			{`{"kty":"oct","k":"c2VjcmV0"}`, "private key"},
			{`{"kty":"EC","kty":"EC"}`, "key"},
			{`"a string"`, "key"},
		} {
			r.Key = json.RawMessage(bad.key)
			r.IDToken = h.iss.RequestToken("alice", r, h.clock.Now())
			_, _, err = h.sb.Request(ctx, r)
			require.ErrorIs(t, err, sb.ErrInvalidArgument, bad.key)
			require.ErrorContains(t, err, bad.why)
		}
	})
}

// proofsFromJS has the npm dpop package sign a proof of each request with
// key, as a JavaScript agent would.
func proofsFromJS(t *testing.T, key *switchboardtest.ProofKey, reqs ...map[string]string) []string {
	t.Helper()
	if _, err := os.Stat("interop/js/node_modules/dpop"); err != nil {
		switchboardtest.Skip(t, "npm dpop is not installed: run npm ci --prefix interop/js (CI does)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		switchboardtest.Skip(t, "node is not installed")
	}
	in, err := json.Marshal(map[string]any{"jwk": key.PrivateJWK(), "requests": reqs})
	require.NoError(t, err)
	cmd := exec.Command(node, "interop/js/dpop-proofs.mjs")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	var res struct{ Proofs []string }
	require.NoError(t, json.Unmarshal(out, &res))
	require.Len(t, res.Proofs, len(reqs))
	return res.Proofs
}

// Proofs made by a third-party DPoP client — the npm dpop package, an RFC
// 9449 implementation for JavaScript runtimes — verify: collecting the
// credential and using it, ES256 and Ed25519 (which it names by RFC 9864's
// "Ed25519"); tampered ones, and one replayed, do not.
func TestProofsFromJavaScript(t *testing.T) {
	for _, alg := range []string{"ES256", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			h := newHarness(t, memory.New())
			// The real clock: the JavaScript client stamps proofs with it.
			s, err := sb.New(h.st, &sb.Config{Issuers: []sb.Issuer{h.iss.Config()}})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			key, err := switchboardtest.NewProofKey(alg)
			require.NoError(t, err)
			r := sb.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "js", Pickup: testPickup, Key: key.JWK()}
			r.IDToken = h.iss.RequestToken("alice", r, time.Now())
			e, _, err := s.Request(ctx, r)
			require.NoError(t, err)
			_, err = s.Approve(ctx, h.bob, e.ID, nil)
			require.NoError(t, err)

			collect := proofsFromJS(t, key, map[string]string{"htm": "POST", "htu": collectURL, "token": testSecret})
			_, cred, err := s.CollectWithProof(ctx, e.ID, testSecret, sb.Proof{JWT: collect[0], Method: "POST", URL: collectURL})
			require.NoError(t, err)

			proofs := proofsFromJS(t, key,
				map[string]string{"htm": "POST", "htu": apiURL, "token": string(cred)},
				map[string]string{"htm": "POST", "htu": apiURL, "token": string(cred)},
				map[string]string{"htm": "POST", "htu": apiURL, "token": string(cred)},
				map[string]string{"htm": "GET", "htu": apiURL, "token": string(cred)},
			)
			hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(proofs[0], ".")[0])
			t.Logf("npm dpop header: %s", hdr)
			p, err := s.Prove(ctx, cred, sb.Proof{JWT: proofs[0], Method: "POST", URL: apiURL})
			require.NoError(t, err)
			_, _, err = s.CreateFor(ctx, p, "inbox", sb.NewTodo{Kind: "from-js"})
			require.NoError(t, err)
			_, err = s.Prove(ctx, cred, sb.Proof{JWT: proofs[0], Method: "POST", URL: apiURL})
			require.ErrorContains(t, err, "replayed")

			// Tampered: a flipped signature byte, another payload under the
			// same signature, and a proof of another method.
			segs := strings.Split(proofs[1], ".")
			sig, _ := base64.RawURLEncoding.DecodeString(segs[2])
			sig[0] ^= 1
			_, err = s.Prove(ctx, cred, sb.Proof{JWT: segs[0] + "." + segs[1] + "." + base64.RawURLEncoding.EncodeToString(sig), Method: "POST", URL: apiURL})
			require.ErrorContains(t, err, "does not verify")
			other := strings.Split(proofs[2], ".")
			_, err = s.Prove(ctx, cred, sb.Proof{JWT: segs[0] + "." + other[1] + "." + segs[2], Method: "POST", URL: apiURL})
			require.ErrorContains(t, err, "does not verify")
			_, err = s.Prove(ctx, cred, sb.Proof{JWT: proofs[3], Method: "POST", URL: apiURL})
			require.ErrorContains(t, err, "for method")
			_, err = s.Prove(ctx, cred, sb.Proof{JWT: proofs[2], Method: "POST", URL: apiURL})
			require.NoError(t, err, "the untouched one")
		})
	}
}
