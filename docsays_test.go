package switchboard_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// GrantableVerbs' doc: "every verb but the queue owner's cancel and
// redrive" — and Grantable agrees with it for every verb.
func TestGrantableVerbsAreWhatTheDocSays(t *testing.T) {
	all := []sb.Verb{sb.VerbCreateFor, sb.VerbList, sb.VerbGet, sb.VerbClaim, sb.VerbHeartbeat, sb.VerbComplete,
		sb.VerbFail, sb.VerbRelease, sb.VerbCancel, sb.VerbRedrive, sb.VerbWebhook}
	var want []sb.Verb
	for _, v := range all {
		if v != sb.VerbCancel && v != sb.VerbRedrive {
			want = append(want, v)
		}
		assert.Equal(t, v != sb.VerbCancel && v != sb.VerbRedrive, v.Grantable(), v)
	}
	assert.ElementsMatch(t, want, sb.GrantableVerbs())
}

// Errors an embedder met, each as the docs say: an empty Vend agent is an
// input left empty (ErrInvalidArgument), not a persona not found; a verb
// that does not exist says so and lists the verbs, apart from a verb that
// exists but is the queue owner's; Approve(nil) grants as requested while
// an empty narrowed scope is ErrInvalidArgument (Approve's doc); the
// approval's text says when the request lapses, not that anything expires.
func TestErrorsSayWhatWentWrong(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, _, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Scope: inboxCreate})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		require.NotErrorIs(t, err, sb.ErrNotFound)
		assert.Contains(t, err.Error(), "VendRequest.Agent is empty")

		for _, v := range []sb.Verb{"frobnicate", "CREATE_FOR"} {
			_, err := h.request(h.alice, "alice-bot", "bob-desk", scope("inbox", v), "verbs")
			require.ErrorIs(t, err, sb.ErrInvalidArgument, v)
			assert.Contains(t, err.Error(), "is not a verb: the verbs are create_for, list, get", v)
			_, _, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", v)})
			require.ErrorIs(t, err, sb.ErrInvalidArgument, v)
			assert.Contains(t, err.Error(), "is not a verb", v)
		}
		_, err = h.request(h.alice, "alice-bot", "bob-desk", scope("inbox", sb.VerbCancel), "verbs")
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		assert.Contains(t, err.Error(), `verb "cancel" is the queue owner's: a friend grant may hold only create_for, list, get`)

		e, err := h.request(h.alice, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbGet), "approve")
		require.NoError(t, err)
		aps, err := h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		require.Len(t, aps, 1)
		text := aps[0].Approval.Text()
		assert.Contains(t, text, "Decide by: ")
		assert.NotContains(t, text, "Expires:")
		_, err = h.sb.Approve(ctx, h.bob, e.ID, sb.Scope{})
		require.ErrorIs(t, err, sb.ErrInvalidArgument, "an empty narrowed scope grants nothing")
		g, err := h.sb.Approve(ctx, h.bob, e.ID, nil)
		require.NoError(t, err)
		assert.Equal(t, scope("inbox", sb.VerbCreateFor, sb.VerbGet), g.Scope, "nil: as requested")
	})
}
