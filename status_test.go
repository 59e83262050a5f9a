package switchboard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/store"
)

// StatusOf maps the errors the API really returns — each produced here by a
// call — to the status and code a host answers with.
func TestStatusOfRealErrors(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		w := h.worker(h.bob, "bob-desk", "inbox")
		_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, l, err := h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)
		h.clock.Advance(2 * time.Minute)

		call := func(f func() error) error { return f() }
		cases := []struct {
			name string
			err  error
			http int
			code string
		}{
			{"bad input", call(func() error { _, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{}); return err }), 400, "invalid_argument"},
			{"bad token", call(func() error {
				_, _, err := h.sb.Request(ctx, sb.FriendRequest{From: "carol-bot", To: "bob-desk", Scope: inboxCreate, Why: "w", Pickup: testPickup, IDToken: "a.b.c"})
				return err
			}), 401, "provenance_rejected"},
			{"bad credential", call(func() error { _, err := h.sb.List(ctx, sb.Credential("sbg_nope"), "inbox", nil); return err }), 401, "unauthenticated"},
			{"verb not granted", call(func() error { _, _, err := h.sb.Claim(ctx, friend, "inbox", nil); return err }), 403, "forbidden"},
			{"not yours", call(func() error { _, err := h.sb.Get(ctx, friend, "todo_nope"); return err }), 404, "not_found"},
			{"stale lease", call(func() error { return h.sb.Complete(ctx, w, l, nil) }), 409, "lease_lost"},
			{"pending conflict", call(func() error {
				_, err := h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, "one")
				require.NoError(t, err)
				_, err = h.request(h.carol, "carol-bot", "bob-desk", inboxCreate, "two")
				return err
			}), 409, "conflict"},
			{"scope exceeds", call(func() error {
				e, err := h.request(h.alice, "alice-bot", "carol-bot", inboxCreate, "x")
				require.NoError(t, err)
				_, err = h.sb.Approve(ctx, h.carol, e.ID, scope("inbox", sb.VerbCreateFor, sb.VerbGet))
				return err
			}), 400, "scope_exceeds_request"},
		}
		for _, tc := range cases {
			require.Error(t, tc.err, tc.name)
			st := sb.StatusOf(fmt.Errorf("host: %w", tc.err))
			assert.Equal(t, tc.http, st.HTTP, "%s: %v", tc.name, tc.err)
			assert.Equal(t, tc.code, st.Code, tc.name)
		}
	})
	retry := &sb.RetryError{Err: sb.ErrRateLimited, Limit: "requests per human", RetryAt: time.Unix(2e9, 0)}
	st := sb.StatusOf(fmt.Errorf("x: %w", retry))
	assert.Equal(t, sb.Status{HTTP: 429, Code: "rate_limited", RetryAt: time.Unix(2e9, 0)}, st)
	assert.Equal(t, 503, sb.StatusOf(sb.ErrClosed).HTTP)
	assert.Equal(t, 504, sb.StatusOf(context.DeadlineExceeded).HTTP)
	assert.Equal(t, 410, sb.StatusOf(sb.ErrFellBehind).HTTP)
	assert.Equal(t, 204, sb.StatusOf(sb.ErrQueueEmpty).HTTP)
	assert.Equal(t, 500, sb.StatusOf(errors.New("disk on fire")).HTTP)
	assert.Equal(t, sb.Status{HTTP: 200, Code: "ok"}, sb.StatusOf(nil))
}

// Every exported sentinel of the module maps to a status: those a caller's
// input causes to a 4xx, never to 500 "internal".
func TestStatusOfEverySentinel(t *testing.T) {
	input := map[string]error{
		"ErrNotFound": sb.ErrNotFound, "ErrUnauthenticated": sb.ErrUnauthenticated, "ErrForbidden": sb.ErrForbidden,
		"ErrInvalidTransition": sb.ErrInvalidTransition, "ErrScopeExceedsRequest": sb.ErrScopeExceedsRequest,
		"ErrLeaseLost": sb.ErrLeaseLost, "ErrProvenance": sb.ErrProvenance, "ErrInvalidArgument": sb.ErrInvalidArgument,
		"ErrConflict": sb.ErrConflict, "ErrCardSignature": sb.ErrCardSignature, "ErrQuotaExceeded": sb.ErrQuotaExceeded,
		"ErrRateLimited": sb.ErrRateLimited, "ErrFellBehind": sb.ErrFellBehind, "ErrProof": sb.ErrProof,
		"ErrEventPurged": sb.ErrEventPurged, "ErrWebhookSignature": sb.ErrWebhookSignature, "agentcard.ErrInvalid": agentcard.ErrInvalid, "agentcard.ErrSignature": agentcard.ErrSignature,
	}
	for name, err := range input {
		st := sb.StatusOf(fmt.Errorf("wrapped: %w", err))
		assert.True(t, st.HTTP >= 400 && st.HTTP < 500, "%s → %d %s", name, st.HTTP, st.Code)
	}
	other := map[string]struct {
		err  error
		http int
	}{
		"ErrQueueEmpty": {sb.ErrQueueEmpty, 204}, "ErrClosed": {sb.ErrClosed, 503}, "store.ErrNotFound": {store.ErrNotFound, 500},
		"ErrNoLogKey": {sb.ErrNoLogKey, 501}, "ErrNoWebhooks": {sb.ErrNoWebhooks, 501}, "ErrUnknownKind": {sb.ErrUnknownKind, 501}, "ErrUnknownLogKey": {sb.ErrUnknownLogKey, 500}, "ErrAuditBroken": {sb.ErrAuditBroken, 500}, "ErrNewerSchema": {sb.ErrNewerSchema, 500},
		"ErrDamaged": {sb.ErrDamaged, 500}, "store.ErrReadOnly": {store.ErrReadOnly, 500}, "store.ErrEmptyKey": {store.ErrEmptyKey, 500},
	}
	for name, c := range other {
		assert.Equal(t, c.http, sb.StatusOf(c.err).HTTP, name)
	}
	// A malformed card, as agentcard.Parse reports it.
	_, err := agentcard.Parse([]byte(`{"name": 1}`))
	require.Error(t, err)
	assert.Equal(t, 400, sb.StatusOf(err).HTTP)
}
