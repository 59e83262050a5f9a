package switchboard_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// Confirmation 5: a request without valid OIDC-signed provenance of the
// agent's owner is rejected and leaves nothing behind.
func TestForgedProvenanceIsRejected(t *testing.T) {
	const from, to, why = "alice-bot", "bob-desk", "send you invoices"
	eachBackend(t, func(t *testing.T, h *harness) {
		now := h.clock.Now()
		want := nonce(from, to, inboxCreate, why)
		valid := func() switchboardtest.Claims {
			c := h.iss.Claims("alice", want, now)
			c.Name = "Alice"
			return c
		}
		with := func(edit func(*switchboardtest.Claims)) string {
			c := valid()
			edit(&c)
			return h.iss.Sign(c)
		}
		// raw signs valid()'s claims edited as JSON, with the issuer's key.
		raw := func(edit func(map[string]any)) string {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(valid().JSON()), &m))
			edit(m)
			b, err := json.Marshal(m)
			require.NoError(t, err)
			key, kid := h.iss.Key()
			return switchboardtest.SignWith(key, kid, jose.RS256, string(b))
		}
		rogue, err := switchboardtest.NewIssuer("switchboard-test") // a real issuer nobody allow-listed
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
			{"signed by a key not in the JWKS", func() string {
				_, kid := h.iss.Key()
				return switchboardtest.SignWith(otherKey, kid, jose.RS256, valid().JSON())
			}()},
			{"tampered payload", tamper(h.iss.Sign(valid()), func(c *switchboardtest.Claims) { c.Subject = "bob" }, valid())},
			{"issuer not allow-listed", func() string { c := valid(); c.Issuer = rogue.URL(); return rogue.Sign(c) }()},
			{"rogue issuer claiming our iss", rogue.Sign(valid())},
			{"wrong audience", with(func(c *switchboardtest.Claims) { c.Audience = "someone-else" })},
			{"expired", with(func(c *switchboardtest.Claims) {
				c.IssuedAt = now.Add(-2 * time.Minute)
				c.Expiry = now.Add(-time.Minute)
			})},
			{"no expiry", with(func(c *switchboardtest.Claims) { c.Expiry = time.Time{} })},
			{"audience array without us", raw(func(m map[string]any) { m["aud"] = []any{"someone-else"} })},
			{"audience of the wrong type", raw(func(m map[string]any) { m["aud"] = 5 })},
			{"no sub", raw(func(m map[string]any) { delete(m, "sub") })},
			{"sub not a string", raw(func(m map[string]any) { m["sub"] = 7 })},
			{"exp as a string", raw(func(m map[string]any) { m["exp"] = fmt.Sprint(m["exp"]) })},
			{"not valid before an hour from now", raw(func(m map[string]any) { m["nbf"] = now.Add(time.Hour).Unix() })},
			{"name not a string", raw(func(m map[string]any) { m["name"] = 5 })},
			{"amr not an array", raw(func(m map[string]any) { m["amr"] = "pwd" })},
			{"iat too old", with(func(c *switchboardtest.Claims) { c.IssuedAt = now.Add(-11 * time.Minute) })},
			{"iat in the future", with(func(c *switchboardtest.Claims) { c.IssuedAt = now.Add(5 * time.Minute) })},
			{"no iat", with(func(c *switchboardtest.Claims) { c.IssuedAt = time.Time{} })},
			{"no nonce", with(func(c *switchboardtest.Claims) { c.Nonce = "" })},
			{"nonce for another scope", with(func(c *switchboardtest.Claims) {
				c.Nonce = nonce(from, to, scope("inbox", sb.VerbClaim), why)
			})},
			{"nonce for another target", with(func(c *switchboardtest.Claims) { c.Nonce = nonce(from, "carol-bot", inboxCreate, why) })},
			{"nonce for another why", with(func(c *switchboardtest.Claims) { c.Nonce = nonce(from, to, inboxCreate, why+"!") })},
			{"nonce for another pickup", with(func(c *switchboardtest.Claims) {
				_, other := sb.NewPickup()
				c.Nonce = sb.RequestNonce(sb.FriendRequest{From: from, To: to, Scope: inboxCreate, Why: why, Pickup: other})
			})},
			{"oversized", strings.Repeat("a", 17<<10)},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := lastSeq(t, h)
				_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: to, Scope: inboxCreate, Why: why, IDToken: tc.token})
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

		assert.Zero(t, rogue.Requests(), "an issuer not on the list is refused before any network call")

		// An audience array that names us among others is accepted.
		multi := raw(func(m map[string]any) { m["aud"] = []any{"someone-else", h.iss.ClientID} })
		me, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: to, Scope: inboxCreate, Why: why, IDToken: multi})
		require.NoError(t, err)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, me.ID))

		// A valid token of a human who does not own the requesting agent is
		// a different error: the token is fine, the human is not allowed.
		before := lastSeq(t, h)
		_, _, err = h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: to, Scope: inboxCreate, Why: why,
			IDToken: with(func(c *switchboardtest.Claims) { c.Subject = "bob" })})
		require.ErrorIs(t, err, sb.ErrForbidden)
		assert.NotErrorIs(t, err, sb.ErrProvenance, "hosts answer 403 here, 401 for a bad token")
		assert.Equal(t, before, lastSeq(t, h))

		// The control: the valid token is accepted, exactly once.
		tok := h.iss.Sign(valid())
		e, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: to, Scope: inboxCreate, Why: why, IDToken: tok})
		require.NoError(t, err)
		assert.Equal(t, "Alice", e.Provenance.Name)
		assert.NotEmpty(t, e.Provenance.TokenHash)
		assert.NotContains(t, e.Provenance.TokenHash, tok)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
		_, _, err = h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: to, Scope: inboxCreate, Why: why, IDToken: tok})
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
			_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "why", IDToken: tok})
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
		second, err := switchboardtest.NewIssuer("switchboard-test")
		require.NoError(t, err)
		defer second.Close()
		static, err := switchboardtest.NewIssuer("static-client")
		require.NoError(t, err)
		static.Close() // offline: its keys are configured, its server is gone
		keys := static.PublicKeys()
		s2, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{
			h.iss.Config(), second.Config(), {URL: static.URL(), ClientID: "static-client", Keys: keys},
		}})
		require.NoError(t, err)
		for _, is := range []*switchboardtest.Issuer{second, static} {
			owner := is.Human("dana")
			id := "dana-bot-" + strings.TrimPrefix(is.ClientID, "switchboard-")
			_, err = s2.Publish(ctx, sb.Persona{ID: id, Owner: owner, Card: card(id)})
			require.NoError(t, err)
			tok := is.Token(switchboardtest.Login{Subject: "dana", Name: "Dana", Nonce: nonce(id, "bob-desk", inboxCreate, "hi"), At: h.clock.Now()})
			e, _, err := s2.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: id, To: "bob-desk", Scope: inboxCreate, Why: "hi", IDToken: tok})
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
		_, _, err := s.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "a", To: "b", Scope: inboxCreate, Why: "w", IDToken: tok})
		require.Error(t, err)
	})
}

func lastSeq(t testing.TB, h *harness) uint64 {
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
func hmacWithPublicKey(t *testing.T, is *switchboardtest.Issuer, claims string) string {
	priv, kid := is.Key()
	der, err := x509.MarshalPKIXPublicKey(priv.Public())
	require.NoError(t, err)
	return switchboardtest.SignWith(der, kid, jose.HS256, claims)
}

// tamper swaps a signed token's payload for edited claims, keeping the
// original signature.
func tamper(tok string, edit func(*switchboardtest.Claims), c switchboardtest.Claims) string {
	parts := strings.Split(tok, ".")
	edit(&c)
	parts[1] = b64(c.JSON())
	return strings.Join(parts, ".")
}

// withConfig replaces h.sb with a Switchboard on the same store and clock
// whose issuer entry for h.iss is edited by edit and whose config by cfg.
func (h *harness) withConfig(t *testing.T, edit func(*sb.Issuer), cfg func(*sb.Config)) *sb.Switchboard {
	t.Helper()
	is := h.iss.Config()
	if edit != nil {
		edit(&is)
	}
	c := &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{is}, Quotas: testQuotas}
	if cfg != nil {
		cfg(c)
	}
	s, err := sb.New(h.st, c)
	require.NoError(t, err)
	h.sb = s
	return s
}

// refused asserts a friend request failed with ErrProvenance and stored
// nothing: no event, no approval todo for bob.
func refused(t *testing.T, h *harness, before uint64, err error, reason string) {
	t.Helper()
	require.ErrorIs(t, err, sb.ErrProvenance)
	if reason != "" {
		assert.Contains(t, err.Error(), reason)
	}
	assert.Equal(t, before, lastSeq(t, h), "a rejected request wrote events")
	aps, err := h.sb.Approvals(ctx, h.bob)
	require.NoError(t, err)
	assert.Empty(t, aps, "a rejected request left an approval todo")
}

// An issuer's assurance policy: amr must contain one of RequireAMR, acr must
// be one of RequireACR; what was verified is recorded and shown.
func TestAssurancePolicy(t *testing.T) {
	const from, to, why = "alice-bot", "bob-desk", "phishing-resistant, please"
	eachBackend(t, func(t *testing.T, h *harness) {
		h.withConfig(t, func(is *sb.Issuer) {
			is.RequireAMR = []string{"hwk", "pop"}
			is.RequireACR = []string{"urn:example:loa:3"}
		}, nil)
		sign := func(amr []string, acr string) string {
			c := h.iss.Claims("alice", nonce(from, to, inboxCreate, why), h.clock.Now())
			c.AMR, c.ACR = amr, acr
			return h.iss.Sign(c)
		}
		for _, tc := range []struct {
			name, token, reason string
		}{
			{"no amr", sign(nil, "urn:example:loa:3"), "amr policy not met"},
			{"password only", sign([]string{"pwd"}, "urn:example:loa:3"), "amr policy not met"},
			{"otp and password", sign([]string{"pwd", "otp"}, "urn:example:loa:3"), "amr policy not met"},
			{"no acr", sign([]string{"hwk"}, ""), "acr policy not met"},
			{"lower acr", sign([]string{"hwk"}, "urn:example:loa:1"), "acr policy not met"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := lastSeq(t, h)
				_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: to, Scope: inboxCreate, Why: why, IDToken: tc.token})
				refused(t, h, before, err, tc.reason)
			})
		}
		e, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: to, Scope: inboxCreate, Why: why,
			IDToken: sign([]string{"pwd", "hwk"}, "urn:example:loa:3")})
		require.NoError(t, err)
		assert.Equal(t, []string{"pwd", "hwk"}, e.Provenance.AMR)
		assert.Equal(t, "urn:example:loa:3", e.Provenance.ACR)
		aps, err := h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		require.Len(t, aps, 1)
		assert.Equal(t, []string{"pwd", "hwk"}, aps[0].Approval.Human.AMR)
		assert.Contains(t, aps[0].Approval.Text(), "signed in with amr pwd, hwk acr urn:example:loa:3")
	})
}

// After the issuer rotates its key, a token signed with the new key
// verifies once the key set may be refetched; a flood of tokens naming
// unknown keys costs the issuer at most one fetch per interval.
func TestKeyRotationAndRefetchLimit(t *testing.T) {
	const from, to, why = "alice-bot", "bob-desk", "rotation"
	eachBackend(t, func(t *testing.T, h *harness) {
		h.withConfig(t, nil, func(c *sb.Config) { c.KeyRefetchInterval = time.Minute })
		// The first token fetches the key set.
		e, err := h.request(h.alice, from, to, inboxCreate, why)
		require.NoError(t, err)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
		require.Equal(t, 1, h.iss.JWKSFetches())

		_, err = h.iss.Rotate()
		require.NoError(t, err)
		// Within the interval the set is not refetched: the new key is not
		// known yet.
		before := lastSeq(t, h)
		_, err = h.request(h.alice, from, to, inboxCreate, why)
		refused(t, h, before, err, "no key of the issuer verifies")

		// A flood of tokens naming made-up keys.
		rogue, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
		h.clock.Advance(time.Minute)
		fetches := h.iss.JWKSFetches()
		for i := range 50 {
			c := h.iss.Claims("alice", nonce(from, to, inboxCreate, why), h.clock.Now())
			tok := switchboardtest.SignWith(rogue, fmt.Sprintf("junk-%d", i), jose.RS256, c.JSON())
			_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: to, Scope: inboxCreate, Why: why, IDToken: tok})
			require.ErrorIs(t, err, sb.ErrProvenance)
		}
		assert.LessOrEqual(t, h.iss.JWKSFetches()-fetches, 1, "50 junk tokens in one interval fetch the JWKS at most once")

		// That one fetch also brought the rotated key: the real token now verifies.
		e, err = h.request(h.alice, from, to, inboxCreate, why)
		require.NoError(t, err)
		assert.Equal(t, h.alice, e.Requester)

		// Next interval: the issuer rotates again and the new key is picked
		// up by the first token that names it.
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
		_, err = h.iss.Rotate()
		require.NoError(t, err)
		h.clock.Advance(time.Minute)
		_, err = h.request(h.alice, from, to, inboxCreate, why+" again")
		require.NoError(t, err)
	})
}

// Two Switchboard values sharing one bbolt file (two processes' worth of
// state in one store) refuse a token the other already used, and so does a
// Switchboard over the reopened file.
func TestReplayRefusedAcrossSwitchboardsAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "switchboard.db")
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	h := newHarness(t, st)
	other, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}})
	require.NoError(t, err)

	tok := h.token(h.alice, "alice-bot", "bob-desk", inboxCreate, "once")
	req := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "once", IDToken: tok}
	e, _, err := h.sb.Request(ctx, req)
	require.NoError(t, err)
	require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
	before := lastSeq(t, h)
	_, _, err = other.Request(ctx, req)
	refused(t, h, before, err, "already used")

	require.NoError(t, st.Close())
	st, err = bolt.Open(path, nil)
	require.NoError(t, err)
	defer st.Close()
	h.st = st
	h.withConfig(t, nil, nil)
	_, _, err = h.sb.Request(ctx, req)
	refused(t, h, before, err, "already used")
}

// BindFreshOnly accepts a token without the request's nonce, but still
// only once and only while fresh.
func TestFreshOnlyBinding(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.withConfig(t, nil, func(c *sb.Config) { c.Binding = sb.BindFreshOnly })
		c := h.iss.Claims("alice", "", h.clock.Now()) // an IdP that sets no nonce
		tok := h.iss.Sign(c)
		req := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "no nonce here", IDToken: tok}
		e, _, err := h.sb.Request(ctx, req)
		require.NoError(t, err)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
		before := lastSeq(t, h)
		_, _, err = h.sb.Request(ctx, req)
		refused(t, h, before, err, "already used")

		c.Nonce = "some other login's nonce"
		e, _, err = h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "other nonce", IDToken: h.iss.Sign(c)})
		require.NoError(t, err, "fresh-only ignores the nonce")
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))

		c = h.iss.Claims("carol", "", h.clock.Now())
		old := h.iss.Sign(c)
		h.clock.Advance(11 * time.Minute)
		before = lastSeq(t, h)
		_, _, err = h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "carol-bot", To: "bob-desk", Scope: inboxCreate, Why: "stale", IDToken: old})
		refused(t, h, before, err, "too old")
	})
	_, err := sb.New(memoryStore(t), &sb.Config{Binding: sb.Binding(7)})
	require.ErrorIs(t, err, sb.ErrInvalidArgument)
}

// VerifyHuman turns a login ID token into a Human for the human-facing
// calls, with the same checks, storing and consuming nothing. It needs the
// login's nonce, and a token that proved a friend request is never a login.
func TestVerifyHuman(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		login := h.iss.Token(switchboardtest.Login{Subject: "bob", Name: "Bob", Email: "bob@example.com", Nonce: "login-nonce-123", At: h.clock.Now()})
		before := lastSeq(t, h)
		p, err := h.sb.VerifyHuman(ctx, login, "login-nonce-123")
		require.NoError(t, err)
		assert.Equal(t, h.bob, p.Human())
		assert.Equal(t, "Bob", p.Name)
		_, err = h.sb.VerifyHuman(ctx, login, "login-nonce-123")
		require.NoError(t, err, "the token is not consumed")
		assert.Equal(t, before, lastSeq(t, h), "VerifyHuman stores nothing")

		_, err = h.sb.VerifyHuman(ctx, login, "")
		require.ErrorIs(t, err, sb.ErrInvalidArgument, "a login nonce is required")
		assert.Contains(t, err.Error(), "sign in")
		_, err = h.sb.VerifyHuman(ctx, login, "another-login")
		require.ErrorIs(t, err, sb.ErrProvenance)
		assert.Contains(t, err.Error(), "sign-in")
		_, err = h.sb.VerifyHuman(ctx, h.iss.Token(switchboardtest.Login{Subject: "bob", Name: "Bob", At: h.clock.Now()}), "login-nonce-123")
		require.ErrorIs(t, err, sb.ErrProvenance, "a token without a nonce is no login")
		rogue, err := switchboardtest.NewIssuer("switchboard-test")
		require.NoError(t, err)
		defer rogue.Close()
		_, err = h.sb.VerifyHuman(ctx, rogue.Token(switchboardtest.Login{Subject: "bob", Name: "Bob", Nonce: "n", At: h.clock.Now()}), "n")
		require.ErrorIs(t, err, sb.ErrProvenance)
		h.clock.Advance(2 * time.Hour)
		_, err = h.sb.VerifyHuman(ctx, login, "login-nonce-123")
		require.ErrorIs(t, err, sb.ErrProvenance, "expired")

		// The verified human drives the human-facing calls.
		e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "hi")
		require.NoError(t, err)
		p, err = h.sb.VerifyHuman(ctx, h.iss.Token(switchboardtest.Login{Subject: "bob", Name: "Bob", Nonce: "n2", At: h.clock.Now()}), "n2")
		require.NoError(t, err)
		_, err = h.sb.Approve(ctx, p.Human(), e.ID, nil)
		require.NoError(t, err)
	})
}

// Whoever relays a friend request holds its token; it must not sign them in
// as the requester — not with the request's nonce, and not under
// BindFreshOnly, where a friend-request token may carry any nonce.
func TestAFriendRequestTokenIsNeverALogin(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		tok := h.token(h.alice, "alice-bot", "bob-desk", inboxCreate, "hi")
		_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "hi", IDToken: tok})
		require.NoError(t, err)
		_, err = h.sb.VerifyHuman(ctx, tok, "")
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		_, err = h.sb.VerifyHuman(ctx, tok, "a-host-login-nonce")
		require.ErrorIs(t, err, sb.ErrProvenance)
		_, err = h.sb.VerifyHuman(ctx, tok, nonce("alice-bot", "bob-desk", inboxCreate, "hi"))
		require.ErrorIs(t, err, sb.ErrProvenance, "spent on a friend request")
		assert.Contains(t, err.Error(), "already spent")

		h.withConfig(t, nil, func(c *sb.Config) { c.Binding = sb.BindFreshOnly })
		c := h.iss.Claims("alice", "login-7", h.clock.Now())
		fresh := h.iss.Sign(c)
		_, _, err = h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "carol-bot", Scope: inboxCreate, Why: "hi", IDToken: fresh})
		require.NoError(t, err)
		_, err = h.sb.VerifyHuman(ctx, fresh, "login-7")
		require.ErrorIs(t, err, sb.ErrProvenance, "spent on a friend request, though its nonce matches")
	})
}

// The request nonce is a protocol: testdata/request-nonce.json holds
// requests with their canonical text and nonce, for implementations in any
// language; this one must agree with them.
func TestRequestNonceVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/request-nonce.json")
	require.NoError(t, err)
	var doc struct {
		Vectors []struct {
			Name      string           `json:"name"`
			Request   sb.FriendRequest `json:"request"`
			Canonical string           `json:"canonical"`
			Nonce     string           `json:"nonce"`
		} `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.GreaterOrEqual(t, len(doc.Vectors), 5)
	for _, v := range doc.Vectors {
		assert.Equal(t, v.Canonical, string(sb.RequestNonceInput(v.Request)), v.Name)
		assert.Equal(t, v.Nonce, sb.RequestNonce(v.Request), v.Name)
		h := sha256.Sum256([]byte(v.Canonical))
		assert.Equal(t, v.Nonce, base64.RawURLEncoding.EncodeToString(h[:]), "%s: the nonce is the hash of the canonical text", v.Name)
	}
}
