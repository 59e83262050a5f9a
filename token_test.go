package switchboard_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// respellings returns spellings of one compact JWS that a lenient reader
// takes for the same token: whitespace around and inside, padding, the
// standard base64 alphabet, non-canonical trailing bits in each segment, and
// the JSON serializations.
func respellings(tok string) map[string]string {
	segs := strings.Split(tok, ".")
	out := map[string]string{
		"leading space":      " " + tok,
		"trailing newline":   tok + "\n",
		"trailing CRLF":      tok + "\r\n",
		"tab inside":         segs[0] + ".\t" + segs[1] + "." + segs[2],
		"newline in payload": segs[0] + "." + segs[1][:10] + "\n" + segs[1][10:] + "." + segs[2],
		"CR in signature":    segs[0] + "." + segs[1] + "." + segs[2][:5] + "\r" + segs[2][5:],
	}
	for i := range segs {
		s := append([]string(nil), segs...)
		if pad := (4 - len(s[i])%4) % 4; pad > 0 {
			s[i] += strings.Repeat("=", pad)
			out[fmt.Sprintf("padded segment %d", i+1)] = strings.Join(s, ".")
		}
		s = append([]string(nil), segs...)
		if v, ok := trailingBits(s[i]); ok {
			s[i] = v
			out[fmt.Sprintf("non-canonical trailing bits in segment %d", i+1)] = strings.Join(s, ".")
		}
		s = append([]string(nil), segs...)
		if std := strings.NewReplacer("-", "+", "_", "/").Replace(s[i]); std != s[i] {
			s[i] = std
			out[fmt.Sprintf("standard alphabet in segment %d", i+1)] = strings.Join(s, ".")
		}
	}
	flat, _ := json.Marshal(map[string]string{"protected": segs[0], "payload": segs[1], "signature": segs[2]})
	out["JSON flattened"] = string(flat)
	general, _ := json.Marshal(map[string]any{"payload": segs[1], "signatures": []map[string]string{{"protected": segs[0], "signature": segs[2]}}})
	out["JSON general"] = string(general)
	return out
}

// trailingBits re-spells a base64url segment whose last character carries
// unused bits with those bits set: it decodes to the same bytes under a
// lenient decoder.
func trailingBits(seg string) (string, bool) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	unused := map[int]int{2: 4, 3: 2}[len(seg)%4]
	if unused == 0 {
		return "", false
	}
	last := strings.IndexByte(alphabet, seg[len(seg)-1])
	v := last | (1<<unused - 1)
	if v == last {
		return "", false
	}
	return seg[:len(seg)-1] + string(alphabet[v]), true
}

// Every spelling of a token but its canonical compact form is refused, and
// a token once spent stays spent however it is spelled: under BindFreshOnly
// one token buys exactly one request.
func TestATokenIsItsContentNotItsSpelling(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.withConfig(t, nil, func(c *sb.Config) { c.Binding = sb.BindFreshOnly })
		tok := h.iss.Sign(h.iss.Claims("alice", "", h.clock.Now()))
		variants := respellings(tok)
		require.Greater(t, len(variants), 12)
		req := func(token, to string) error {
			_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: to, Scope: inboxCreate, Why: "hi", IDToken: token})
			return err
		}
		for name, v := range variants {
			err := req(v, "bob-desk")
			require.ErrorIs(t, err, sb.ErrProvenance, name)
			_, err = h.sb.VerifyHuman(ctx, v, "n")
			require.ErrorIs(t, err, sb.ErrProvenance, name)
		}
		require.NoError(t, req(tok, "bob-desk"), "the canonical spelling")
		for name, v := range variants {
			require.ErrorIs(t, req(v, "carol-bot"), sb.ErrProvenance, name)
		}
		require.ErrorIs(t, req(tok, "carol-bot"), sb.ErrProvenance, "replayed")
		assert.Equal(t, 1, pendingFor(t, h, h.bob, h.carol), "one token, one request")
	})
}

// pendingFor counts the approval todos waiting for each of humans.
func pendingFor(t *testing.T, h *harness, humans ...sb.Human) int {
	t.Helper()
	n := 0
	for _, hu := range humans {
		aps, err := h.sb.Approvals(ctx, hu)
		require.NoError(t, err)
		n += len(aps)
	}
	return n
}

// ECDSA admits two valid signatures for one signed content, (r, s) and
// (r, n−s): the second is a different string that verifies. Replay is keyed
// on the content, so it is the same token.
func TestAMalleatedSignatureIsTheSameToken(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		ec := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "ec1", Algorithm: "ES256", Use: "sig"}}}
		h.withConfig(t, func(is *sb.Issuer) { is.Keys = &ec }, nil)
		r := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "ec"}
		tok := switchboardtest.SignWith(key, "ec1", jose.ES256, h.iss.Claims("alice", nonce(r.From, r.To, r.Scope, r.Why), h.clock.Now()).JSON())
		segs := strings.Split(tok, ".")
		sig, err := base64.RawURLEncoding.DecodeString(segs[2])
		require.NoError(t, err)
		s := new(big.Int).SetBytes(sig[32:])
		s.Sub(elliptic.P256().Params().N, s)
		malleated := append(sig[:32:32], s.FillBytes(make([]byte, 32))...)
		other := segs[0] + "." + segs[1] + "." + base64.RawURLEncoding.EncodeToString(malleated)
		require.NotEqual(t, tok, other)

		r.IDToken = other
		e, created, err := h.sb.Request(ctx, r)
		require.NoError(t, err, "the malleated signature verifies")
		require.True(t, created)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
		r.IDToken = tok
		_, _, err = h.sb.Request(ctx, r)
		require.ErrorIs(t, err, sb.ErrProvenance)
		assert.Contains(t, err.Error(), "already used")
	})
}

// Claims that differ from a read claim only by case, or appear twice, are
// refused: go-oidc and switchboard read them with encoding/json, which
// matches case-insensitively and keeps the last duplicate.
func TestTokenClaimsDecodeOneWay(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		r := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "claims"}
		valid := h.iss.Claims("alice", nonce(r.From, r.To, r.Scope, r.Why), h.clock.Now()).JSON()
		priv, kid := h.iss.Key()
		for name, payload := range map[string]string{
			"case twin of sub":   strings.TrimSuffix(valid, "}") + `,"SUB":"bob"}`,
			"case twin of nonce": strings.TrimSuffix(valid, "}") + `,"Nonce":"x"}`,
			"duplicate sub":      strings.TrimSuffix(valid, "}") + `,"sub":"bob"}`,
			"trailing data":      valid + `{}`,
			"not an object":      `["alice"]`,
		} {
			r.IDToken = switchboardtest.SignWith(priv, kid, jose.RS256, payload)
			_, _, err := h.sb.Request(ctx, r)
			require.ErrorIs(t, err, sb.ErrProvenance, name)
		}
		r.IDToken = switchboardtest.SignWith(priv, kid, jose.RS256, valid)
		_, _, err := h.sb.Request(ctx, r)
		require.NoError(t, err, "the control")
	})
}

// Re-sending the identical pending request with its token is an idempotent
// retry; a new token on the retry is spent; any other reuse is refused.
func TestRequestSaysWhatItDid(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		r := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "retry me"}
		r.IDToken = h.iss.RequestToken("alice", r, h.clock.Now())
		e, created, err := h.sb.Request(ctx, r)
		require.NoError(t, err)
		require.True(t, created)
		before := lastSeq(t, h)
		again, created, err := h.sb.Request(ctx, r)
		require.NoError(t, err, "a retry")
		assert.False(t, created)
		assert.Equal(t, e.ID, again.ID)
		assert.Equal(t, before, lastSeq(t, h), "a retry stores nothing")
		aps, err := h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		assert.Len(t, aps, 1)

		h.clock.Advance(time.Second)
		fresh := r
		fresh.IDToken = h.iss.RequestToken("alice", r, h.clock.Now())
		again, created, err = h.sb.Request(ctx, fresh)
		require.NoError(t, err, "a retry with a new token")
		assert.False(t, created)
		assert.Equal(t, e.ID, again.ID)

		// The tokens are spent: once the edge is gone, neither proves it again.
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
		for _, tok := range []string{r.IDToken, fresh.IDToken} {
			r.IDToken = tok
			_, _, err = h.sb.Request(ctx, r)
			require.ErrorIs(t, err, sb.ErrProvenance)
		}

		// A different request while one is pending is a conflict, not a retry.
		r2 := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "first"}
		r2.IDToken = h.iss.RequestToken("alice", r2, h.clock.Now())
		_, created, err = h.sb.Request(ctx, r2)
		require.NoError(t, err)
		require.True(t, created)
		r3 := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "second"}
		r3.IDToken = h.iss.RequestToken("alice", r3, h.clock.Now())
		_, _, err = h.sb.Request(ctx, r3)
		require.ErrorIs(t, err, sb.ErrConflict)
	})
}

// The issuer's own documents decode one way too: a discovery document or
// JWKS with a case twin of a field its readers act on is refused, so the
// tokens it would vouch for are refused.
func TestIssuerDocumentsDecodeOneWay(t *testing.T) {
	h := newHarness(t, memory.New())
	priv, kid := h.iss.Key()
	pub, err := json.Marshal(h.iss.PublicKeys())
	require.NoError(t, err)
	jwks := map[string]string{
		"good":              string(pub),
		"case twin of keys": strings.TrimSuffix(string(pub), "}") + `,"KEYS":[]}`,
		"duplicate keys":    strings.TrimSuffix(string(pub), "}") + `,"keys":[]}`,
		"case twin of kid":  strings.Replace(string(pub), `"kid":`, `"KID":"other","kid":`, 1),
	}
	for name, body := range jwks {
		for _, disco := range []string{`{"issuer":%q,"jwks_uri":%q}`, `{"issuer":%q,"jwks_uri":%q,"JWKS_URI":"https://elsewhere.example/jwks"}`} {
			mux := http.NewServeMux()
			srv := httptest.NewServer(mux)
			mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintf(w, disco, srv.URL, srv.URL+"/jwks")
			})
			mux.HandleFunc("/jwks", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) })
			s, err := sb.New(memory.New(), &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{{URL: srv.URL, ClientID: "switchboard-test"}}})
			require.NoError(t, err)
			c := h.iss.Claims("alice", "n", h.clock.Now())
			c.Issuer = srv.URL
			_, err = s.VerifyHuman(ctx, switchboardtest.SignWith(priv, kid, jose.RS256, c.JSON()), "n")
			if name == "good" && !strings.Contains(disco, "JWKS_URI") {
				require.NoError(t, err, "the control")
			} else {
				require.ErrorIs(t, err, sb.ErrProvenance, "%s / %s", name, disco)
			}
			srv.Close()
		}
	}
}

// Replay is keyed on the claims that identify the authentication, not on
// the payload's spelling: the same claims with their members in another
// order, a number written another way, an audience as an array, and a
// claim added, signed again, are the same token.
func TestAReSignedTokenIsTheSameToken(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		r := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "re-signed"}
		c := h.iss.Claims("alice", nonce(r.From, r.To, r.Scope, r.Why), h.clock.Now())
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(c.JSON()), &m))
		r.IDToken = h.iss.Sign(c)
		e, _, err := h.sb.Request(ctx, r)
		require.NoError(t, err)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))

		// Reorder by hand: exp, nonce, sub, then the rest; iat as 1.0e9-style; aud as an array; one more claim.
		iat := int64(m["iat"].(float64))
		other := fmt.Sprintf(`{"exp":%d,"nonce":%q,"sub":%q,"aud":[%q],"iss":%q,"iat":%de0,"extra":"x"}`,
			int64(m["exp"].(float64)), m["nonce"], m["sub"], m["aud"], m["iss"], iat)
		priv, kid := h.iss.Key()
		r.IDToken = switchboardtest.SignWith(priv, kid, jose.RS256, other)
		_, _, err = h.sb.Request(ctx, r)
		require.ErrorIs(t, err, sb.ErrProvenance)
		assert.Contains(t, err.Error(), "already used")
	})
}
