package switchboard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
)

var creatorTrace = switchboard.Trace{
	Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	State:  "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
}

// The creator's trace context travels with the todo to whoever reads or
// works it: Get, Claim, List and a Work handler all see it.
func TestTraceTravelsWithTheTodo(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", switchboard.VerbCreateFor, switchboard.VerbGet))
		worker := h.worker(h.bob, "bob-desk", "inbox")
		td, _, err := h.sb.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k", Trace: creatorTrace})
		require.NoError(t, err)
		require.Equal(t, creatorTrace, td.Trace)
		got, err := h.sb.Get(ctx, cred, td.ID)
		require.NoError(t, err)
		require.Equal(t, creatorTrace, got.Trace)
		untraced, _, err := h.sb.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k"})
		require.NoError(t, err)
		listed, err := h.sb.List(ctx, worker, "inbox", nil)
		require.NoError(t, err)
		require.Equal(t, creatorTrace, listed[0].Trace)
		require.True(t, listed[1].Trace.IsZero())

		seen := map[string]switchboard.Trace{}
		err = h.sb.Work(ctx, worker, "inbox", func(_ context.Context, td switchboard.Todo) ([]byte, error) {
			seen[td.ID] = td.Trace
			return nil, nil
		}, &switchboard.WorkOptions{UntilEmpty: true})
		require.NoError(t, err)
		require.Equal(t, map[string]switchboard.Trace{td.ID: creatorTrace, untraced.ID: {}}, seen)
		// Completed, it still carries it.
		got, err = h.sb.Get(ctx, cred, td.ID)
		require.NoError(t, err)
		require.Equal(t, switchboard.TodoDone, got.State)
		require.Equal(t, creatorTrace, got.Trace)
	})
}

// A trace context is checked like every other input: a malformed one is
// refused and nothing is created.
func TestTraceIsValidated(t *testing.T) {
	h := newHarness(t, memoryStore(t))
	_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", switchboard.VerbCreateFor, switchboard.VerbList))
	good := creatorTrace.Parent
	for name, tr := range map[string]switchboard.Trace{
		"short":             {Parent: good[:54]},
		"upper case":        {Parent: strings.ToUpper(good)},
		"version ff":        {Parent: "ff" + good[2:]},
		"version 01":        {Parent: "01" + good[2:]},
		"zero trace id":     {Parent: "00-" + strings.Repeat("0", 32) + good[35:]},
		"zero parent id":    {Parent: good[:36] + strings.Repeat("0", 16) + good[52:]},
		"wrong separator":   {Parent: strings.Replace(good, "-", "_", 1)},
		"state only":        {State: "rojo=1"},
		"state too long":    {Parent: good, State: strings.Repeat("a", 513)},
		"state with a tab":  {Parent: good, State: "rojo=1\tx"},
		"state with a byte": {Parent: good, State: "rojo=\xff"},
	} {
		_, _, err := h.sb.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k", Trace: tr})
		require.ErrorIs(t, err, switchboard.ErrInvalidArgument, name)
	}
	all, err := h.sb.List(ctx, cred, "inbox", nil)
	require.NoError(t, err)
	require.Empty(t, all)
}
