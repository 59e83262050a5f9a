package switchboard_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// No importer can change a rule: the defaults are handed out as copies, so
// editing what GrantableVerbs, DefaultAlgorithms, DefaultQuotas or
// DefaultLimits return changes nothing the library checks.
func TestRulesCannotBeChangedByImporters(t *testing.T) {
	v := sb.GrantableVerbs()
	v[0] = sb.VerbCancel
	_ = append(v, sb.VerbRedrive)
	assert.Equal(t, sb.VerbCreateFor, sb.GrantableVerbs()[0])
	assert.NotContains(t, sb.GrantableVerbs(), sb.VerbCancel)
	assert.False(t, sb.VerbCancel.Grantable())

	a := sb.DefaultAlgorithms()
	a[0] = "HS256"
	assert.Equal(t, "RS256", sb.DefaultAlgorithms()[0])
	q := sb.DefaultQuotas()
	q.LiveEdgesPerRequester = 1
	assert.Equal(t, 16, sb.DefaultQuotas().LiveEdgesPerRequester)

	eachBackend(t, func(t *testing.T, h *harness) {
		h.publish(h.alice, "alice-bot", true)
		h.publish(h.bob, "bob-desk", true)
		scope := sb.Scope{{Queue: "invoices", Verbs: append(sb.GrantableVerbs(), sb.VerbCancel)}}
		_, err := h.request(h.alice, "alice-bot", "bob-desk", scope, "please")
		require.ErrorIs(t, err, sb.ErrInvalidArgument, "cancel is never grantable to a friend")
	})
}

// TestReturnedGrantIsACopy: a caller that edits the Grant Authenticate
// returned (its scope's verbs, in place) changes nothing the library
// enforces — decoded grants are cached, and the cache must not be shared.
func TestReturnedGrantIsACopy(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		for range 2 { // the second call is served from the cache
			g, err := h.sb.Authenticate(ctx, cred)
			require.NoError(t, err)
			g.Scope[0].Verbs[0] = sb.VerbClaim
			g.Scope[0].Queue = "other"
		}
		_, _, err := h.sb.Claim(ctx, cred, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrForbidden)
		_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
	})
}
