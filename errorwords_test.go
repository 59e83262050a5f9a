package switchboard_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
)

// Errors an embedder met on the first day name what the caller asked for
// (docs/reference.md: "A not-found names what the caller asked for"), and
// a conflict names what to resolve it with.
func TestErrorsNameWhatWasAsked(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		inbox := scope("inbox", switchboard.VerbClaim)
		// Vend: a persona that does not exist and one that is not yours
		// read the same, each naming the id the caller gave.
		_, _, errMissing := h.sb.Vend(ctx, h.bob, switchboard.VendRequest{Agent: "ghost-bot", Scope: inbox})
		require.ErrorIs(t, errMissing, switchboard.ErrNotFound)
		assert.Contains(t, errMissing.Error(), `persona "ghost-bot"`)
		_, _, errTheirs := h.sb.Vend(ctx, h.bob, switchboard.VendRequest{Agent: "alice-bot", Scope: inbox})
		require.ErrorIs(t, errTheirs, switchboard.ErrNotFound)
		sameWords(t, errMissing, "ghost-bot", errTheirs, "alice-bot", "not yours reads as not there")
		_, _, errTarget := h.sb.Vend(ctx, h.bob, switchboard.VendRequest{Agent: "bob-desk", Target: "alice-bot", Scope: inbox})
		require.ErrorIs(t, errTarget, switchboard.ErrNotFound)
		assert.Contains(t, errTarget.Error(), `persona "alice-bot"`)

		// ProveEvent past the log names the event and the log's size.
		h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		_, err := h.sb.ProveEvent(ctx, 999, 0)
		require.ErrorIs(t, err, switchboard.ErrNotFound)
		assert.Regexp(t, `event 999 is not in a log of \d+ events`, err.Error())

		// A different request while one is pending names the pending
		// edge: the id Withdraw needs.
		pending, err := h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, "one")
		require.NoError(t, err)
		_, err = h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, "another")
		require.ErrorIs(t, err, switchboard.ErrConflict)
		assert.Contains(t, err.Error(), pending.ID)
		require.NoError(t, h.sb.Withdraw(ctx, h.carol, pending.ID))
		_, err = h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, "another")
		require.NoError(t, err, "withdrawn with the id the error gave")
	})
}
