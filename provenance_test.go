package switchboard_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc/oidctest"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/internal/testissuer"
)

// Confirmation 5: a request without valid OIDC-signed provenance of the
// agent's owner is rejected and leaves nothing behind.
func TestForgedProvenanceIsRejected(t *testing.T) {
	const from, to, why = "alice-bot", "bob-desk", "send you invoices"
	eachBackend(t, func(t *testing.T, h *harness) {
		now := h.clock.Now()
		nonce := sb.RequestNonce(from, to, inboxCreate, why)
		valid := func() testissuer.Claims {
			c := h.iss.Claims("alice", nonce, now)
			c.Name = "Alice"
			return c
		}
		with := func(edit func(*testissuer.Claims)) string {
			c := valid()
			edit(&c)
			return h.iss.Sign(c)
		}
		rogue, err := testissuer.New("switchboard-test") // a real issuer nobody allow-listed
		require.NoError(t, err)
		defer rogue.Close()
		otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)

		cases := []struct {
			name  string
			token string
		}{
			{"missing", ""},
			{"malformed", "not-a-jwt"},
			{"three garbage segments", "a.b.c"},
			{"unsigned (alg none)", unsigned(valid().JSON())},
			{"HS256 keyed with the issuer's public key", hmacWithPublicKey(t, h.iss, valid().JSON())},
			{"signed by a key not in the JWKS", oidctest.SignIDToken(otherKey, h.iss.KeyID, "RS256", valid().JSON())},
			{"tampered payload", tamper(h.iss.Sign(valid()), func(c *testissuer.Claims) { c.Subject = "bob" }, valid())},
			{"issuer not allow-listed", func() string { c := valid(); c.Issuer = rogue.URL(); return rogue.Sign(c) }()},
			{"rogue issuer claiming our iss", rogue.Sign(valid())},
			{"wrong audience", with(func(c *testissuer.Claims) { c.Audience = "someone-else" })},
			{"expired", with(func(c *testissuer.Claims) { c.IssuedAt = now.Add(-2 * time.Minute); c.Expiry = now.Add(-time.Minute) })},
			{"no expiry", with(func(c *testissuer.Claims) { c.Expiry = time.Time{} })},
			{"iat too old", with(func(c *testissuer.Claims) { c.IssuedAt = now.Add(-11 * time.Minute) })},
			{"iat in the future", with(func(c *testissuer.Claims) { c.IssuedAt = now.Add(5 * time.Minute) })},
			{"no iat", with(func(c *testissuer.Claims) { c.IssuedAt = time.Time{} })},
			{"no nonce", with(func(c *testissuer.Claims) { c.Nonce = "" })},
			{"nonce for another scope", with(func(c *testissuer.Claims) { c.Nonce = sb.RequestNonce(from, to, scope("inbox", sb.VerbClaim), why) })},
			{"nonce for another target", with(func(c *testissuer.Claims) { c.Nonce = sb.RequestNonce(from, "carol-bot", inboxCreate, why) })},
			{"nonce for another why", with(func(c *testissuer.Claims) { c.Nonce = sb.RequestNonce(from, to, inboxCreate, why+"!") })},
			{"subject is not the agent's owner", with(func(c *testissuer.Claims) { c.Subject = "bob" })},
			{"oversized", strings.Repeat("a", 17<<10)},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := lastSeq(t, h)
				_, err := h.sb.Request(ctx, sb.FriendRequest{From: from, To: to, Scope: inboxCreate, Why: why, IDToken: tc.token})
				require.ErrorIs(t, err, sb.ErrProvenance)
				if tc.token != "" && len(tc.token) > 20 {
					assert.NotContains(t, err.Error(), tc.token[:20], "the error must not echo the token")
				}
				assert.Equal(t, before, lastSeq(t, h), "a rejected request wrote events")
				aps, err := h.sb.Approvals(ctx, h.bob)
				require.NoError(t, err)
				assert.Empty(t, aps, "a rejected request left an approval todo")
			})
		}

		// The control: the valid token is accepted, exactly once.
		tok := h.iss.Sign(valid())
		e, err := h.sb.Request(ctx, sb.FriendRequest{From: from, To: to, Scope: inboxCreate, Why: why, IDToken: tok})
		require.NoError(t, err)
		assert.Equal(t, "Alice", e.Provenance.Name)
		assert.NotEmpty(t, e.Provenance.TokenHash)
		assert.NotContains(t, e.Provenance.TokenHash, tok)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
		_, err = h.sb.Request(ctx, sb.FriendRequest{From: from, To: to, Scope: inboxCreate, Why: why, IDToken: tok})
		require.ErrorIs(t, err, sb.ErrProvenance, "a replayed token")
	})
}

// The raw ID token is never stored: scan every table for it.
func TestIDTokenIsNeverStored(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &faultyStore{Store: b.open(t), tables: map[string]bool{}}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			tok := h.token(h.alice, "alice-bot", "bob-desk", inboxCreate, "why")
			_, err := h.sb.Request(ctx, sb.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "why", IDToken: tok})
			require.NoError(t, err)
			sig := tok[strings.LastIndex(tok, ".")+1:]
			for table, kv := range dump(t, st, st.tableList()) {
				for k, v := range kv {
					assert.NotContains(t, k+v, sig, "table %s holds the token", table)
				}
			}
		})
	}
}

// A token from a second allow-listed issuer is accepted, and so is a
// statically configured key set (no discovery).
func TestSecondIssuerAndStaticKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		second, err := testissuer.New("switchboard-test")
		require.NoError(t, err)
		defer second.Close()
		static, err := testissuer.New("static-client")
		require.NoError(t, err)
		static.Close() // offline: its keys are configured, its server is gone
		keys := &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: static.Key.Public(), KeyID: static.KeyID, Algorithm: "RS256"}}}
		s2, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{
			h.iss.Config(), second.Config(), {URL: static.URL(), ClientID: "static-client", Keys: keys},
		}})
		require.NoError(t, err)
		for _, is := range []*testissuer.Issuer{second, static} {
			owner := is.Human("dana")
			id := "dana-bot-" + strings.TrimPrefix(is.ClientID, "switchboard-")
			_, err = s2.Publish(ctx, sb.Persona{ID: id, Owner: owner, Card: card(id)})
			require.NoError(t, err)
			tok := is.Token("dana", "Dana", "", sb.RequestNonce(id, "bob-desk", inboxCreate, "hi"), h.clock.Now())
			e, err := s2.Request(ctx, sb.FriendRequest{From: id, To: "bob-desk", Scope: inboxCreate, Why: "hi", IDToken: tok})
			require.NoError(t, err, is.ClientID)
			assert.Equal(t, is.URL(), e.Provenance.Issuer)
		}
	})
}

func TestConfigRefusesWeakAlgorithms(t *testing.T) {
	for _, alg := range []string{"none", "HS256"} {
		_, err := sb.New(memoryStore(t), &sb.Config{Issuers: []sb.Issuer{{URL: "https://id.example", ClientID: "c", Algorithms: []string{alg}}}})
		require.ErrorIs(t, err, sb.ErrInvalidArgument, alg)
	}
}

func FuzzRequestToken(f *testing.F) {
	f.Add("")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.")
	st := memoryStore(f)
	s, err := sb.New(st, &sb.Config{Issuers: []sb.Issuer{{URL: "https://id.example", ClientID: "c",
		Keys: &jose.JSONWebKeySet{}}}})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, tok string) {
		_, err := s.Request(ctx, sb.FriendRequest{From: "a", To: "b", Scope: inboxCreate, Why: "w", IDToken: tok})
		require.Error(t, err)
	})
}

func lastSeq(t *testing.T, h *harness) uint64 {
	t.Helper()
	var seq uint64
	for {
		evs, err := h.sb.Events(ctx, seq, 1000)
		require.NoError(t, err)
		if len(evs) == 0 {
			return seq
		}
		seq = evs[len(evs)-1].Seq
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func unsigned(claims string) string {
	return b64(`{"alg":"none","kid":"key-1"}`) + "." + b64(claims) + "."
}

// hmacWithPublicKey is the algorithm-confusion attack: HS256 keyed with the
// bytes of the issuer's public key.
func hmacWithPublicKey(t *testing.T, is *testissuer.Issuer, claims string) string {
	der, err := x509.MarshalPKIXPublicKey(is.Key.Public())
	require.NoError(t, err)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: der},
		(&jose.SignerOptions{}).WithHeader("kid", is.KeyID))
	require.NoError(t, err)
	obj, err := signer.Sign([]byte(claims))
	require.NoError(t, err)
	out, err := obj.CompactSerialize()
	require.NoError(t, err)
	return out
}

// tamper swaps a signed token's payload for edited claims, keeping the
// original signature.
func tamper(tok string, edit func(*testissuer.Claims), c testissuer.Claims) string {
	parts := strings.Split(tok, ".")
	edit(&c)
	parts[1] = b64(c.JSON())
	return strings.Join(parts, ".")
}
