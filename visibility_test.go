package switchboard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// idVerbs calls every id-addressed verb on todo id with credential c and
// returns each verb's error.
func idVerbs(h *harness, c sb.Credential, id string) map[string]error {
	l := sb.Lease{TodoID: id, Token: "lease-guess", Attempt: 1}
	_, getErr := h.sb.Get(ctx, c, id)
	_, hbErr := h.sb.Heartbeat(ctx, c, l, time.Minute)
	return map[string]error{
		"get":       getErr,
		"cancel":    h.sb.Cancel(ctx, c, id, "r"),
		"redrive":   h.sb.Redrive(ctx, c, id),
		"complete":  h.sb.Complete(ctx, c, l, nil),
		"fail":      h.sb.Fail(ctx, c, l, "r"),
		"release":   h.sb.Release(ctx, c, l),
		"heartbeat": hbErr,
	}
}

// Not yours means not found, for every verb: a todo a credential may not
// address answers exactly as an id that does not exist — same error, same
// words — whether it belongs to another friend, sits in a queue outside the
// grant, belongs to another persona, or is the caller's own but the verb is
// not granted. A List cursor obeys the same rule.
func TestNotYoursIsNotFoundForEveryVerb(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		drain := scope("inbox", sb.VerbCreateFor, sb.VerbGet, sb.VerbList, sb.VerbClaim,
			sb.VerbHeartbeat, sb.VerbComplete, sb.VerbFail, sb.VerbRelease)
		_, alice := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", drain)
		_, carol := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", inboxCreate)
		owner := h.worker(h.bob, "bob-desk", "inbox", "private")
		ownerOfOther := h.worker(h.carol, "carol-bot", "inbox")

		carolsTodo, _, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, ownTodo, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("private", sb.VerbCreateFor)})
		require.NoError(t, err)
		private, _, err := h.sb.CreateFor(ctx, ownTodo, "private", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		mine, _, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k", Title: "carol's own"})
		require.NoError(t, err)

		unknown := func(c sb.Credential) map[string]error { return idVerbs(h, c, "todo_doesnotexist") }
		cases := []struct {
			name string
			cred sb.Credential
			id   string
		}{
			{"another friend's todo", alice, carolsTodo.ID},
			{"a queue outside the grant", alice, private.ID},
			{"another persona's queue", ownerOfOther, carolsTodo.ID},
			{"own todo, verbs not granted", carol, mine.ID},
		}
		for _, tc := range cases {
			want := unknown(tc.cred)
			before := lastSeq(t, h)
			got := idVerbs(h, tc.cred, tc.id)
			for verb, err := range got {
				if tc.name == "own todo, verbs not granted" && verb == "get" {
					continue // carol holds no get; the unknown id says the same below
				}
				require.ErrorIs(t, err, sb.ErrNotFound, "%s: %s", tc.name, verb)
				sameWords(t, want[verb], "todo_doesnotexist", err, tc.id, tc.name+": "+verb+" must read as an unknown id")
			}
			assert.Equal(t, before, lastSeq(t, h), "%s: nothing changed", tc.name)
			_, err := h.sb.List(ctx, tc.cred, "inbox", &sb.ListOptions{After: tc.id})
			_, werr := h.sb.List(ctx, tc.cred, "inbox", &sb.ListOptions{After: "todo_doesnotexist"})
			if werr != nil {
				require.Error(t, err, tc.name)
				sameWords(t, werr, "todo_doesnotexist", err, tc.id, tc.name+": list cursor")
			}
		}

		// A friend that claims a todo sees it from then on, and its stale
		// lease is ErrLeaseLost, not not-found.
		td, l, err := h.sb.Claim(ctx, alice, "inbox", &sb.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, carolsTodo.ID, td.ID)
		got, err := h.sb.Get(ctx, alice, td.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoLeased, got.State)
		h.clock.Advance(2 * time.Minute)
		require.ErrorIs(t, h.sb.Complete(ctx, alice, l, nil), sb.ErrLeaseLost)
		require.NoError(t, h.sb.Cancel(ctx, owner, mine.ID, "not needed"))
		_, l2, err := h.sb.Claim(ctx, owner, "inbox", nil)
		require.NoError(t, err)
		require.Equal(t, td.ID, l2.TodoID)
		require.ErrorIs(t, h.sb.Complete(ctx, alice, sb.Lease{TodoID: l2.TodoID, Token: l.Token}, nil), sb.ErrLeaseLost, "the todo is visible to alice, the live lease is not hers")
		require.NoError(t, h.sb.Complete(ctx, owner, l2, nil))
	})
}

// List through a friend grant reads what that grant created and what it
// claimed — in creation order, paged, filtered by state — and nothing of
// other grants' work in the queue, however much of it there is. A todo it
// claimed stops being listed once every attempt of its own is out of the
// todo's kept history, and once the todo is purged.
func TestListThroughFriendGrant(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		drain := scope("inbox", sb.VerbCreateFor, sb.VerbList, sb.VerbClaim, sb.VerbComplete)
		_, alice := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", drain)
		_, carol := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbList))
		owner := h.worker(h.bob, "bob-desk", "inbox")
		_, ownerCreates, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: inboxCreate})
		require.NoError(t, err)
		create := func(c sb.Credential, title string) sb.Todo {
			td, _, err := h.sb.CreateFor(ctx, c, "inbox", sb.NewTodo{Kind: "k", Title: title, MaxAttempts: 100})
			require.NoError(t, err)
			return td
		}
		titles := func(c sb.Credential, o *sb.ListOptions) []string {
			all, err := h.sb.List(ctx, c, "inbox", o)
			require.NoError(t, err)
			var out []string
			for _, td := range all {
				out = append(out, td.Title)
			}
			return out
		}
		create(carol, "c1")
		for i := range 30 {
			create(ownerCreates, fmt.Sprintf("o%d", i)) // others' work alice never sees
		}
		claimed, _, err := h.sb.Claim(ctx, alice, "inbox", nil)
		require.NoError(t, err)
		require.Equal(t, "c1", claimed.Title)
		create(alice, "a1")
		create(carol, "c2")
		create(alice, "a2")

		require.Equal(t, []string{"c1", "a1", "a2"}, titles(alice, nil))
		require.Equal(t, []string{"c1", "c2"}, titles(carol, nil))
		var paged []string
		for after := ""; ; {
			page, err := h.sb.List(ctx, alice, "inbox", &sb.ListOptions{Limit: 1, After: after})
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			paged, after = append(paged, page[0].Title), page[0].ID
		}
		require.Equal(t, []string{"c1", "a1", "a2"}, paged)
		require.Equal(t, []string{"c1"}, titles(alice, &sb.ListOptions{State: sb.TodoLeased}))
		require.Equal(t, []string{"a1", "a2"}, titles(alice, &sb.ListOptions{State: sb.TodoQueued}))

		// The owner's worker claims and fails c1 until alice's attempt is
		// out of the kept history: alice no longer sees it.
		all, err := h.sb.List(ctx, owner, "inbox", &sb.ListOptions{Limit: 1000})
		require.NoError(t, err)
		require.Len(t, all, 34)
		h.clock.Advance(time.Hour) // alice's lease has expired
		for i := 0; i < 60; i++ {
			for {
				td, l, err := h.sb.Claim(ctx, owner, "inbox", nil)
				require.NoError(t, err)
				if td.ID == claimed.ID {
					require.NoError(t, h.sb.Fail(ctx, owner, l, "again"))
					break
				}
				require.NoError(t, h.sb.Release(ctx, owner, l))
			}
			h.clock.Advance(time.Hour) // past the retry backoff
		}
		require.Equal(t, []string{"a1", "a2"}, titles(alice, nil))

		// Claimed, completed and purged, a todo leaves alice's list
		// without an error.
		x, l, err := h.sb.Claim(ctx, alice, "inbox", nil)
		require.NoError(t, err)
		require.NoError(t, h.sb.Complete(ctx, alice, l, nil))
		require.Contains(t, titles(alice, nil), x.Title)
		h.clock.Advance(8 * 24 * time.Hour)
		_, err = h.sb.Reap(ctx)
		require.NoError(t, err)
		require.NotContains(t, titles(alice, nil), x.Title)
		require.Contains(t, titles(alice, nil), "a2")
	})
}
