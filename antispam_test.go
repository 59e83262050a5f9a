package switchboard_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// quotas replaces h.sb with one using q (zero fields: the defaults).
func (h *harness) quotas(t *testing.T, q sb.Quotas) *sb.Switchboard {
	return h.withConfig(t, nil, func(c *sb.Config) { c.Quotas = q })
}

// targets publishes n discoverable personas prefix-0 … prefix-(n-1) owned by
// owner.
func (h *harness) targets(owner sb.Human, prefix string, n int) []string {
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		h.publish(owner, id, true)
		ids = append(ids, id)
	}
	return ids
}

// agent publishes an agent persona for a new human subject and returns both.
func (h *harness) agent(subject string) (sb.Human, string) {
	hu := h.iss.Human(subject)
	h.publish(hu, subject+"-bot", true)
	return hu, subject + "-bot"
}

// retryErr asserts err is a *RetryError wrapping want and returns it.
func retryErr(t *testing.T, err error, want error) *sb.RetryError {
	t.Helper()
	require.ErrorIs(t, err, want)
	var re *sb.RetryError
	require.True(t, errors.As(err, &re), "a quota refusal is a *RetryError: %v", err)
	return re
}

func pendingCount(t *testing.T, h *harness, human sb.Human) int {
	t.Helper()
	aps, err := h.sb.Approvals(ctx, human)
	require.NoError(t, err)
	return len(aps)
}

// The per-requester token bucket: a burst, then one request per refill
// period; a refused request does not count.
func TestRequesterRateLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.quotas(t, sb.Quotas{RequesterBurst: 3, RequesterRefill: 10 * time.Minute})
		ts := h.targets(h.bob, "bob-t", 6)
		for i := range 3 {
			_, err := h.request(h.alice, "alice-bot", ts[i], inboxCreate, "hi")
			require.NoError(t, err, i)
		}
		_, err := h.request(h.alice, "alice-bot", ts[3], inboxCreate, "hi")
		re := retryErr(t, err, sb.ErrRateLimited)
		assert.Equal(t, h.clock.Now().Add(10*time.Minute), re.RetryAt)
		assert.Contains(t, err.Error(), "requests per requesting human")

		// Other requesters are not affected.
		_, err = h.request(h.carol, "carol-bot", ts[3], inboxCreate, "hi")
		require.NoError(t, err)

		h.clock.Advance(9 * time.Minute)
		_, err = h.request(h.alice, "alice-bot", ts[3], inboxCreate, "hi")
		retryErr(t, err, sb.ErrRateLimited)
		h.clock.Advance(time.Minute)
		_, err = h.request(h.alice, "alice-bot", ts[3], inboxCreate, "hi")
		require.NoError(t, err, "one token refilled; the refused tries consumed none")
		_, err = h.request(h.alice, "alice-bot", ts[4], inboxCreate, "hi")
		retryErr(t, err, sb.ErrRateLimited)
	})
}

// The per-target (inbound) token bucket.
func TestTargetRateLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.quotas(t, sb.Quotas{TargetBurst: 2, TargetRefill: time.Hour})
		for _, s := range []string{"u1", "u2"} {
			hu, bot := h.agent(s)
			_, err := h.request(hu, bot, "bob-desk", inboxCreate, "hi")
			require.NoError(t, err)
		}
		hu, bot := h.agent("u3")
		_, err := h.request(hu, bot, "bob-desk", inboxCreate, "hi")
		re := retryErr(t, err, sb.ErrRateLimited)
		assert.Equal(t, h.clock.Now().Add(time.Hour), re.RetryAt)
		assert.Contains(t, err.Error(), "per target human")
		_, err = h.request(hu, bot, "carol-bot", inboxCreate, "hi")
		require.NoError(t, err, "another human's inbound bucket is separate")
		h.clock.Advance(time.Hour)
		_, err = h.request(hu, bot, "bob-desk", inboxCreate, "hi")
		require.NoError(t, err)
	})
}

// Live (pending + approved) edges per requesting human; recovered when an
// edge ends or a pending one expires.
func TestLiveEdgeQuota(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.quotas(t, sb.Quotas{LiveEdgesPerRequester: 3, RequesterBurst: -1, TargetBurst: -1})
		ts := h.targets(h.bob, "bob-t", 5)
		var edges []sb.Edge
		for i := range 3 {
			e, err := h.request(h.alice, "alice-bot", ts[i], inboxCreate, "hi")
			require.NoError(t, err)
			edges = append(edges, e)
			h.clock.Advance(time.Second)
		}
		g, err := h.sb.Approve(ctx, h.bob, edges[0].ID, nil)
		require.NoError(t, err)
		_, err = h.request(h.alice, "alice-bot", ts[3], inboxCreate, "hi")
		re := retryErr(t, err, sb.ErrQuotaExceeded)
		assert.Equal(t, edges[1].ExpiresAt, re.RetryAt, "the earliest pending request's expiry")

		// Withdrawing one frees a place.
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, edges[2].ID))
		_, err = h.request(h.alice, "alice-bot", ts[3], inboxCreate, "hi")
		require.NoError(t, err)
		_, err = h.request(h.alice, "alice-bot", ts[4], inboxCreate, "hi")
		retryErr(t, err, sb.ErrQuotaExceeded)

		// Pending requests expiring free places, without any reaper; the
		// approved friendship still counts.
		h.clock.Advance(7*24*time.Hour + time.Minute)
		_, err = h.request(h.alice, "alice-bot", ts[4], inboxCreate, "hi")
		require.NoError(t, err)
		_, err = h.request(h.alice, "alice-bot", ts[1], inboxCreate, "again")
		require.NoError(t, err)
		_, err = h.request(h.alice, "alice-bot", ts[2], inboxCreate, "again")
		retryErr(t, err, sb.ErrQuotaExceeded)

		// Revoking the friendship frees its place.
		require.NoError(t, h.sb.Revoke(ctx, h.alice, g.ID))
		_, err = h.request(h.alice, "alice-bot", ts[2], inboxCreate, "again")
		require.NoError(t, err)
	})
}

// Pending requests waiting for one human are capped; expiry removes them
// from the approvals queue and frees places.
func TestPendingPerTargetCapAndExpiry(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.quotas(t, sb.Quotas{PendingPerTarget: 2, RequesterBurst: -1, TargetBurst: -1})
		var edges []sb.Edge
		for _, s := range []string{"u1", "u2"} {
			hu, bot := h.agent(s)
			e, err := h.request(hu, bot, "bob-desk", inboxCreate, "hi")
			require.NoError(t, err)
			edges = append(edges, e)
		}
		hu, bot := h.agent("u3")
		_, err := h.request(hu, bot, "bob-desk", inboxCreate, "hi")
		re := retryErr(t, err, sb.ErrQuotaExceeded)
		assert.Equal(t, edges[0].ExpiresAt, re.RetryAt)
		assert.Equal(t, 2, pendingCount(t, h, h.bob))

		require.NoError(t, h.sb.Deny(ctx, h.bob, edges[0].ID))
		_, err = h.request(hu, bot, "bob-desk", inboxCreate, "hi")
		require.NoError(t, err)
		assert.Equal(t, 2, pendingCount(t, h, h.bob))

		// Expiry: gone from the approvals queue at once, expired by Reap.
		h.clock.Advance(7*24*time.Hour + time.Second)
		assert.Equal(t, 0, pendingCount(t, h, h.bob), "lapsed requests are not shown")
		lapsed, err := h.sb.Edge(ctx, h.bob, edges[1].ID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeExpired, lapsed.State, "a lapsed request reads as expired before Reap")
		st, err := h.sb.Reap(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, st.EdgesExpired)
		e, err := h.sb.Edge(ctx, h.bob, edges[1].ID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeExpired, e.State)
		hu4, bot4 := h.agent("u4")
		_, err = h.request(hu4, bot4, "bob-desk", inboxCreate, "hi")
		require.NoError(t, err)
	})
}

// After a deny or a withdraw the same requesting human may not ask the same
// persona again until the cooldown ends.
func TestCooldown(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.quotas(t, sb.Quotas{})
		h.publish(h.bob, "bob-other", true)
		for _, end := range []string{"deny", "withdraw"} {
			t.Run(end, func(t *testing.T) {
				e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, end)
				require.NoError(t, err)
				if end == "deny" {
					require.NoError(t, h.sb.Deny(ctx, h.bob, e.ID))
				} else {
					require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
				}
				ended := h.clock.Now()
				h.clock.Advance(time.Hour)
				_, err = h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, end+" again")
				re := retryErr(t, err, sb.ErrRateLimited)
				assert.Equal(t, ended.Add(7*24*time.Hour), re.RetryAt)
				assert.Contains(t, err.Error(), "cooldown")

				// Other requesters, and other personas, are not affected.
				e2, err := h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, end)
				require.NoError(t, err)
				require.NoError(t, h.sb.Deny(ctx, h.bob, e2.ID))
				e3, err := h.request(h.alice, "alice-bot", "bob-other", inboxCreate, end)
				require.NoError(t, err)
				require.NoError(t, h.sb.Withdraw(ctx, h.alice, e3.ID))

				h.clock.Advance(7*24*time.Hour - time.Hour)
				e, err = h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, end+" after")
				require.NoError(t, err, "the cooldown has ended")
				require.NoError(t, h.sb.Withdraw(ctx, h.alice, e.ID))
				h.clock.Advance(7 * 24 * time.Hour) // leave no cooldown for the next subtest
			})
		}
	})
}

// A blocked requester's request fails exactly like one to an unknown
// target, stores nothing and consumes nothing; unblocking restores it.
func TestBlock(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.quotas(t, sb.Quotas{RequesterBurst: 1})
		pending, err := h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, "before the block")
		require.NoError(t, err)
		h.clock.Advance(time.Hour) // refill carol's one token

		require.NoError(t, h.sb.Block(ctx, h.bob, h.carol))
		require.NoError(t, h.sb.Block(ctx, h.bob, h.carol), "blocking twice is a no-op")
		blocked, err := h.sb.Blocked(ctx, h.bob)
		require.NoError(t, err)
		assert.Equal(t, []sb.Human{h.carol}, blocked)
		e, err := h.sb.Edge(ctx, h.carol, pending.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeDenied, e.State, "the blocked human's pending request is denied")
		assert.Equal(t, 0, pendingCount(t, h, h.bob))

		// Same error as an unknown target — wording included.
		h.publish(h.alice, "ghost", false) // exists, not discoverable
		tok := h.token(h.carol, "carol-bot", "bob-desk", inboxCreate, "let me in")
		before := lastSeq(t, h)
		_, _, errBlocked := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "carol-bot", To: "bob-desk", Scope: inboxCreate, Why: "let me in", IDToken: tok})
		_, errUnknown := h.request(h.carol, "carol-bot", "nobody-here", inboxCreate, "let me in")
		_, errHidden := h.request(h.carol, "carol-bot", "ghost", inboxCreate, "let me in")
		require.ErrorIs(t, errBlocked, sb.ErrNotFound)
		sameWords(t, errUnknown, "nobody-here", errBlocked, "bob-desk", "blocked reads as unknown")
		sameWords(t, errHidden, "ghost", errBlocked, "bob-desk", "blocked reads as hidden")
		assert.Equal(t, before, lastSeq(t, h), "nothing stored")

		// Other humans can still ask bob, and carol can still ask others.
		_, err = h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "hi")
		require.NoError(t, err)

		require.NoError(t, h.sb.Unblock(ctx, h.bob, h.carol))
		require.NoError(t, h.sb.Unblock(ctx, h.bob, h.carol), "unblocking twice is a no-op")
		blocked, err = h.sb.Blocked(ctx, h.bob)
		require.NoError(t, err)
		assert.Empty(t, blocked)
		h.clock.Advance(7 * 24 * time.Hour) // the deny's cooldown
		tok = h.token(h.carol, "carol-bot", "bob-desk", inboxCreate, "let me in")
		_, _, err = h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "carol-bot", To: "bob-desk", Scope: inboxCreate, Why: "let me in", IDToken: tok})
		require.NoError(t, err)

		require.ErrorIs(t, h.sb.Block(ctx, h.bob, h.bob), sb.ErrInvalidArgument)
		require.ErrorIs(t, h.sb.Block(ctx, h.bob, sb.Human{}), sb.ErrInvalidArgument)
	})
}

// A request that fails — bad provenance, unknown target, bad input — leaves
// every counter as it was.
func TestFailedRequestConsumesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.quotas(t, sb.Quotas{RequesterBurst: 1, TargetBurst: 1, LiveEdgesPerRequester: 1})
		bad := []func() error{
			func() error {
				_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "hi", IDToken: "garbage"})
				return err
			},
			func() error { _, err := h.request(h.alice, "alice-bot", "nobody", inboxCreate, "hi"); return err },
			func() error { _, err := h.request(h.alice, "alice-bot", "bob-private", inboxCreate, "hi"); return err },
			func() error { _, err := h.request(h.carol, "alice-bot", "bob-desk", inboxCreate, "hi"); return err },
			func() error {
				_, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "bad\x07why")
				return err
			},
		}
		for i, f := range bad {
			require.Error(t, f(), i)
		}
		_, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "hi")
		require.NoError(t, err, "no failed request consumed a token or a place")
		_, err = h.request(h.alice, "alice-bot", "carol-bot", inboxCreate, "hi")
		require.ErrorIs(t, err, sb.ErrQuotaExceeded)
	})
}

// Limits live in the store: two Switchboards on one store share them, and
// they survive closing and reopening the bbolt file.
func TestQuotasAreDurableAndShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "switchboard.db")
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	h := newHarness(t, st)
	q := sb.Quotas{RequesterBurst: 2, RequesterRefill: time.Hour}
	one := h.quotas(t, q)
	two, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: q})
	require.NoError(t, err)
	ts := h.targets(h.bob, "bob-t", 3)
	for i, s := range []*sb.Switchboard{one, two} {
		_, _, err := s.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: ts[i], Scope: inboxCreate, Why: "hi",
			IDToken: h.token(h.alice, "alice-bot", ts[i], inboxCreate, "hi")})
		require.NoError(t, err)
	}
	req := sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: ts[2], Scope: inboxCreate, Why: "hi", IDToken: h.token(h.alice, "alice-bot", ts[2], inboxCreate, "hi")}
	_, _, err = one.Request(ctx, req)
	retryErr(t, err, sb.ErrRateLimited)

	require.NoError(t, st.Close())
	st, err = bolt.Open(path, nil)
	require.NoError(t, err)
	defer st.Close()
	h.st = st
	three := h.quotas(t, q)
	_, _, err = three.Request(ctx, req)
	retryErr(t, err, sb.ErrRateLimited)
	h.clock.Advance(time.Hour)
	_, _, err = three.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: ts[2], Scope: inboxCreate, Why: "hi",
		IDToken: h.token(h.alice, "alice-bot", ts[2], inboxCreate, "hi")})
	require.NoError(t, err)
}

// The approval is legible and cannot be made to look like something else:
// a why with control or bidi characters, or too long, is refused, and so
// is a card name; what the identity provider attests is checked in
// TestIdentityClaimsAreRefused.
func TestLegibleApproval(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		for _, why := range []string{"line one\nScope: everything", "evil\u202egnp.exe", "tab\tbed", strings.Repeat("w", 1025), "   "} {
			before := lastSeq(t, h)
			_, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, why)
			require.ErrorIs(t, err, sb.ErrInvalidArgument, "%q", why)
			assert.Equal(t, before, lastSeq(t, h))
		}
		_, err := h.sb.Publish(ctx, sb.Persona{ID: "x", Owner: h.alice, Card: card("Bank\u202eof\nTrust")})
		require.ErrorIs(t, err, sb.ErrInvalidArgument, "card names are refused too")

		c := h.iss.Claims("alice", nonce("alice-bot", "bob-desk", inboxCreate, "invoices"), h.clock.Now())
		c.Name, c.Email = "Alice Example", "alice@example.com"
		e, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "invoices", IDToken: h.iss.Sign(c)})
		require.NoError(t, err)
		aps, err := h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		require.Len(t, aps, 1)
		ap := aps[0].Approval
		assert.Equal(t, "alice@example.com", ap.Human.Email)
		assert.Equal(t, "Alice Example", ap.Human.Name)
		assert.Equal(t, "alice-bot", ap.From.ID)
		assert.Equal(t, "invoices", ap.Why)
		assert.Equal(t, e.ExpiresAt, ap.ExpiresAt)
		text := ap.Text()
		assert.Equal(t, 7, strings.Count(text, "\n"), "the text has its fixed lines only:\n%s", text)
		assert.Contains(t, text, "Scope:\n  - queue \"inbox\": create todos\nDecide by:")
	})
}

// What the identity provider attests about a human — iss, sub, name,
// email, acr, amr — is shown to people as it was attested, so a claim
// holding a control character or a character that reorders or hides text
// (a right-to-left override, an ESC, a zero-width space) is refused at
// the one reading of an ID token, with an error naming the claim: through
// Request (nothing written, no quota spent) and through VerifyHuman. A
// name that needs a zero-width non-joiner between letters (Persian) is
// accepted; one with a joiner hidden between Latin letters is not.
func TestIdentityClaimsAreRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		n := nonce("alice-bot", "bob-desk", inboxCreate, "invoices")
		for _, tc := range []struct {
			claim string
			edit  func(*switchboardtest.Claims)
		}{
			{"sub", func(c *switchboardtest.Claims) { c.Subject = "ali\u202ece" }},
			{"sub", func(c *switchboardtest.Claims) { c.Subject = "alice\x1b[31m" }},
			{"sub", func(c *switchboardtest.Claims) { c.Subject = "al\u200bice" }},
			{"name", func(c *switchboardtest.Claims) { c.Name = "Alice\u202e\nWhy:   urgent" }},
			{"name", func(c *switchboardtest.Claims) { c.Name = "Bo\u200db" }},
			{"name", func(c *switchboardtest.Claims) { c.Name = "Alice\x1b[31m" }},
			{"name", func(c *switchboardtest.Claims) { c.Name = "\u2067Alice\u2069" }},
			{"email", func(c *switchboardtest.Claims) { c.Email = "alice@example.com\r\nScope: all" }},
			{"email", func(c *switchboardtest.Claims) { c.Email = "moc.elpmaxe@\u202eecila" }},
			{"acr", func(c *switchboardtest.Claims) { c.ACR = "phr\u202e" }},
		} {
			c := h.iss.Claims("alice", n, h.clock.Now())
			tc.edit(&c)
			before := lastSeq(t, h)
			_, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "invoices", IDToken: h.iss.Sign(c)})
			require.ErrorIs(t, err, sb.ErrProvenance, "%s %+v", tc.claim, c)
			require.Contains(t, err.Error(), `claim "`+tc.claim+`"`)
			assert.Equal(t, before, lastSeq(t, h), "a refused request wrote nothing")

			c.Nonce = "login-nonce"
			_, err = h.sb.VerifyHuman(ctx, h.iss.Sign(c), "login-nonce")
			require.ErrorIs(t, err, sb.ErrProvenance)
			require.Contains(t, err.Error(), `claim "`+tc.claim+`"`)
		}
		// Nothing was spent: the same requester asks properly.
		c := h.iss.Claims("alice", n, h.clock.Now())
		c.Name = "نرگس\u200cمحمدی" // Persian: the ZWNJ belongs to the name
		e, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "invoices", IDToken: h.iss.Sign(c)})
		require.NoError(t, err)
		assert.Equal(t, c.Name, e.Provenance.Name)
	})
}

// The flood: 1,000 requests from one requester over many targets leave at
// most the configured number pending, and every refusal is a typed error.
func TestRequestFlood(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		h.quotas(t, sb.Quotas{}) // the defaults
		var owners []sb.Human
		for i := range 50 {
			owners = append(owners, h.iss.Human(fmt.Sprintf("target-%d", i)))
		}
		var ts []string
		for i := range 1000 {
			id := fmt.Sprintf("t-%d", i)
			h.publish(owners[i%len(owners)], id, true)
			ts = append(ts, id)
		}
		ok, limited, exceeded := 0, 0, 0
		for i := range 1000 {
			_, err := h.request(h.alice, "alice-bot", ts[i], inboxCreate, "let me in")
			switch {
			case err == nil:
				ok++
			case errors.Is(err, sb.ErrRateLimited):
				retryErr(t, err, sb.ErrRateLimited)
				limited++
			case errors.Is(err, sb.ErrQuotaExceeded):
				retryErr(t, err, sb.ErrQuotaExceeded)
				exceeded++
			default:
				t.Fatalf("request %d: untyped refusal %v", i, err)
			}
			h.clock.Advance(time.Minute)
		}
		t.Logf("accepted %d, rate limited %d, over quota %d", ok, limited, exceeded)
		assert.Equal(t, sb.DefaultQuotas().LiveEdgesPerRequester, ok, "at most the live-edge quota is pending")
		pending := 0
		for _, o := range owners {
			pending += pendingCount(t, h, o)
		}
		assert.Equal(t, ok, pending)
		assert.Equal(t, 1000, ok+limited+exceeded)
		assert.Positive(t, limited)
		assert.Positive(t, exceeded)
	})
}
