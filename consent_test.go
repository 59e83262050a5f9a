package switchboard_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// requestAs sends alice-bot's friend request to bob-desk with an ID token
// whose name and email are set as given, and returns the approval bob sees.
func requestAs(t *testing.T, h *harness, from, subject, name, email, why string) sb.Approval {
	t.Helper()
	c := h.iss.Claims(subject, nonce(from, "bob-desk", inboxCreate, why), h.clock.Now())
	c.Name, c.Email = name, email
	e, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: from, To: "bob-desk", Scope: inboxCreate, Why: why, IDToken: h.iss.Sign(c)})
	require.NoError(t, err)
	aps, err := h.sb.Approvals(ctx, h.bob)
	require.NoError(t, err)
	for _, td := range aps {
		if td.Approval.EdgeID == e.ID {
			return *td.Approval
		}
	}
	t.Fatalf("approval for %s not listed", e.ID)
	return sb.Approval{}
}

func codes(fs []sb.Flag) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Code)+":"+f.Field)
	}
	return out
}

// An approval flags the requester's names that mix writing systems, and
// those that read like a name the approver knows — their own account,
// their agent being asked, a connection's person or agent — but belong to
// someone else (Unicode TS #39 skeletons). A host adds the names it knows
// (the approver's verified name) with Lookalikes. Names in one script, or
// in the script mixes a language uses (Japanese), and the requester's own
// names, are not flagged.
func TestApprovalFlagsLookalikes(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		// Carol is a connection of bob's: her agent sends him work.
		carolToken := h.iss.Claims("carol", nonce("carol-bot", "bob-desk", inboxCreate, "work"), h.clock.Now())
		carolToken.Name, carolToken.Email = "Carol Example", "carol@example.com"
		e, _, err := h.sb.Request(ctx, sb.FriendRequest{Pickup: testPickup, From: "carol-bot", To: "bob-desk", Scope: inboxCreate, Why: "work", IDToken: h.iss.Sign(carolToken)})
		require.NoError(t, err)
		_, err = h.sb.Approve(ctx, h.bob, e.ID, nil)
		require.NoError(t, err)

		mallory := h.iss.Human("mallory")
		h.publish(mallory, "m-1", true)
		h.publish(mallory, "m-2", true)
		h.publish(mallory, "m-3", true)
		_, err = h.sb.Publish(ctx, sb.Persona{ID: "m-4", Owner: mallory, Discoverable: true, Card: card("bоb-desk")}) // Cyrillic о
		require.NoError(t, err)

		// "bоb": Cyrillic о between Latin letters, like bob's own account.
		a := requestAs(t, h, "m-1", "mallory", "bоb", "mallory@example.com", "one")
		assert.ElementsMatch(t, []string{"mixed_script:name", "lookalike:name"}, codes(a.Flags))
		for _, f := range a.Flags {
			assert.Contains(t, f.Text, "bоb")
		}
		assert.Contains(t, a.Flags[len(a.Flags)-1].Text+a.Flags[0].Text, `your own account name "bob"`)

		// A connection's name and email, imitated.
		a = requestAs(t, h, "m-2", "mallory", "Carоl Example", "caro1@example.com", "two")
		assert.ElementsMatch(t, []string{"mixed_script:name", "lookalike:name", "lookalike:email"}, codes(a.Flags))
		// The approver's agent's name, imitated by the requesting agent's.
		a = requestAs(t, h, "m-4", "mallory", "Mallory", "mallory@example.com", "four")
		assert.ElementsMatch(t, []string{"mixed_script:agent", "lookalike:agent"}, codes(a.Flags))

		// What a host knows: bob's verified name from his sign-in.
		a = requestAs(t, h, "m-3", "mallory", "Bob ExampIe", "mallory@example.com", "three")
		assert.Empty(t, a.Flags, "no name the library knows is imitated")
		more := a.Lookalikes(h.bob, "your own name", "Bob Example", "bob@example.com")
		assert.Equal(t, []string{"lookalike:name"}, codes(more), "ExampIe (capital I for l) reads like Example")
		assert.Empty(t, a.Lookalikes(sb.Human{Issuer: a.Human.Issuer, Subject: a.Human.Subject}, "your own name", "Bob ExampIe"),
			"the requester's own names are not flagged")

		// Clean names: one script, or a language's own mix.
		for i, name := range []string{"Alice Example", "山田 太郎 Taro", "Zoë O'Brien", "نرگس\u200cمحمدی", "Дмитрий Иванов"} {
			sub := []string{"alice", "taro", "zoe", "narges", "dmitry"}[i]
			h.publish(h.iss.Human(sub), sub+"-bot", true)
			a := requestAs(t, h, sub+"-bot", sub, name, sub+"@example.com", "clean")
			assert.Empty(t, a.Flags, "%s", name)
		}
	})
}

// The approver chooses the grant's lifetime: a grant approved for a day
// works until then and fails like a revoked one after; an end in the past
// is refused and changes nothing.
func TestApproveWithLifetime(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "for a day")
		require.NoError(t, err)
		_, err = h.sb.ApproveWith(ctx, h.bob, e.ID, sb.ApproveOptions{ExpiresAt: h.clock.Now().Add(-time.Minute)})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		still, err := h.sb.Edge(ctx, h.bob, e.ID)
		require.NoError(t, err)
		require.Equal(t, sb.EdgePending, still.State, "a refused approval changed nothing")

		end := h.clock.Now().Add(24 * time.Hour)
		g, err := h.sb.ApproveWith(ctx, h.bob, e.ID, sb.ApproveOptions{ExpiresAt: end})
		require.NoError(t, err)
		require.True(t, g.ExpiresAt.Equal(end))
		_, cred, err := h.sb.Collect(ctx, e.ID, testSecret)
		require.NoError(t, err)
		_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		cs, err := h.sb.Connections(ctx, h.bob)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.True(t, cs[0].Grant.ExpiresAt.Equal(end))
		require.Equal(t, [2]string{"alice-bot", "bob-desk"}, [2]string{cs[0].HolderName, cs[0].TargetName}, "the agents by their cards' names")

		h.clock.Advance(24*time.Hour + time.Second)
		_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated, "the grant lapsed at the end its approver chose")
		_, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		cs, err = h.sb.Connections(ctx, h.bob)
		require.NoError(t, err)
		for _, c := range cs {
			require.NotEqual(t, g.ID, c.Grant.ID, "a lapsed grant is no connection")
		}
	})
}

// Each verb is weighed: the drain verbs are high risk and say they reach
// every todo of the queue, whoever sent it; create_for and reading one's
// own are low.
func TestVerbRisk(t *testing.T) {
	for _, v := range sb.GrantableVerbs() {
		switch v {
		case sb.VerbClaim, sb.VerbHeartbeat, sb.VerbComplete, sb.VerbFail, sb.VerbRelease:
			assert.Equal(t, sb.RiskHigh, v.Risk(), v)
			assert.Contains(t, v.DescribeIn("inbox"), "whoever sent", v)
			assert.Contains(t, v.DescribeIn("inbox"), `"inbox"`, v)
		default:
			assert.Equal(t, sb.RiskLow, v.Risk(), v)
			assert.NotContains(t, v.Describe(), "every", v)
		}
	}
	assert.Equal(t, `see and work on every todo in "inbox", whoever sent it`, sb.VerbClaim.DescribeIn("inbox"))
	assert.Equal(t, []string{`queue "inbox": see and work on every todo in the queue, whoever sent it; create todos`},
		sb.Scope{{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor, sb.VerbClaim}}}.Describe())
	assert.True(t, strings.HasPrefix(sb.RiskHigh.String(), "high"))
}

// Approval.Flags warns of "names that read like one the approver knows":
// read as the Decide page shows them, where a second space, a leading or
// trailing one, a no-break or ideographic space or a Hangul filler in
// place of a space cannot be told from "Alice's bot". Each such name, as
// the requester's attested name and as its agent's card name, is flagged
// like the exact name is.
func TestLookalikesWithSpaces(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		// bob's connection: alice, whose agent is named "Alice's bot".
		_, err := h.sb.Publish(ctx, sb.Persona{ID: "alice-bot", Owner: h.alice, Discoverable: true, Card: card("Alice's bot")})
		require.NoError(t, err)
		h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		variants := []string{
			"Alice's bot", // the exact name
			"Alice's  bot", " Alice's bot", "Alice's bot ", "Alice's bot\u00a0", "Alice's\u00a0bot",
			"Alice's\u3000bot", "Alice's\u3164bot", "Alice's\uffa0bot", "Alice's\u2800bot",
			"Alice's bot\U0001D159", "Alice's\U00016FE4bot",
		}
		for i, name := range variants {
			// Each from a requester of its own (the request quotas are per
			// requesting human).
			sub := fmt.Sprintf("mallory-%d", i)
			id := "m-" + sub
			_, err := h.sb.Publish(ctx, sb.Persona{ID: id, Owner: h.iss.Human(sub), Discoverable: true, Card: card(name)})
			require.NoError(t, err)
			a := requestAs(t, h, id, sub, name, sub+"@example.com", "work")
			assert.Contains(t, codes(a.Flags), "lookalike:agent", "the agent's name %q reads as bob's connection's agent's", name)
			more := a.Lookalikes(h.bob, "your friend", "Alice's bot")
			assert.Contains(t, codes(more), "lookalike:name", "the requester's name %q reads as a name bob knows", name)
		}
	})
}
