package switchboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

type reviewIn struct {
	Invoice string `json:"invoice"`
	Amount  int    `json:"amount"`
}

type reviewOut struct {
	Approved bool   `json:"approved"`
	Note     string `json:"note"`
}

type shipIn struct {
	Parcel string `json:"parcel"`
}

// One Work loop serves two kinds, each with its own payload and result
// types; a todo of a kind nobody registered fails its attempts and is
// dead-lettered, never completed; a payload its kind's type does not take
// fails without calling the handler.
func TestWorkByKind(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		friend, w, _ := queueSetup(t, h)
		create := func(kind string, payload any, maxAttempts int) sb.Todo {
			t.Helper()
			b, err := json.Marshal(payload)
			require.NoError(t, err)
			td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: kind, Payload: b, MaxAttempts: maxAttempts})
			require.NoError(t, err)
			return td
		}
		review := create("invoice.review", reviewIn{Invoice: "INV-7", Amount: 120}, 0)
		ship := create("parcel.ship", shipIn{Parcel: "P-1"}, 0)
		unknownOnce := create("parcel.return", shipIn{Parcel: "P-2"}, 1)
		unknownTwice := create("parcel.return", shipIn{Parcel: "P-3"}, 2)
		badPayload := create("invoice.review", map[string]any{"invoice": "INV-8", "amount": 1, "extra": true}, 1)

		var kinds sb.Kinds
		var reviewed, shipped atomic.Int32
		sb.HandleKind(&kinds, "invoice.review", func(_ context.Context, td sb.Todo, in reviewIn) (reviewOut, error) {
			reviewed.Add(1)
			assert.Equal(t, "invoice.review", td.Kind)
			return reviewOut{Approved: in.Amount < 1000, Note: "checked " + in.Invoice}, nil
		})
		sb.HandleKind(&kinds, "parcel.ship", func(_ context.Context, _ sb.Todo, in shipIn) (string, error) {
			shipped.Add(1)
			return "shipped " + in.Parcel, nil
		})
		assert.Equal(t, []string{"invoice.review", "parcel.ship"}, kinds.Kinds())

		require.NoError(t, h.sb.Work(ctx, w, "inbox", kinds.Handler(), &sb.WorkOptions{Concurrency: 2, UntilEmpty: true}))
		assert.EqualValues(t, 1, reviewed.Load(), "the bad payload never reached the handler")
		assert.EqualValues(t, 1, shipped.Load())

		got, err := h.sb.Get(ctx, w, review.ID)
		require.NoError(t, err)
		require.Equal(t, sb.TodoDone, got.State)
		out, err := sb.ResultOf[reviewOut](got)
		require.NoError(t, err)
		assert.Equal(t, reviewOut{Approved: true, Note: "checked INV-7"}, out)

		got, err = h.sb.Get(ctx, w, ship.ID)
		require.NoError(t, err)
		require.Equal(t, sb.TodoDone, got.State)
		s, err := sb.ResultOf[string](got)
		require.NoError(t, err)
		assert.Equal(t, "shipped P-1", s)

		got, err = h.sb.Get(ctx, w, unknownOnce.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoDead, got.State, "its one attempt failed")
		assert.Contains(t, got.Error, `kind "parcel.return"`)
		assert.Contains(t, got.Error, sb.ErrUnknownKind.Error())
		assert.Empty(t, got.Result)

		got, err = h.sb.Get(ctx, w, unknownTwice.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoQueued, got.State, "retried after its backoff: a newer process may know the kind")
		assert.Contains(t, got.Error, sb.ErrUnknownKind.Error())
		h.clock.Advance(time.Hour)
		require.NoError(t, h.sb.Work(ctx, w, "inbox", kinds.Handler(), &sb.WorkOptions{UntilEmpty: true}))
		got, err = h.sb.Get(ctx, w, unknownTwice.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoDead, got.State, "dead-lettered after its last attempt")
		assert.Equal(t, 2, got.Attempts)

		got, err = h.sb.Get(ctx, w, badPayload.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoDead, got.State)
		assert.Contains(t, got.Error, sb.ErrInvalidArgument.Error())
		assert.Contains(t, got.Error, "extra")
	})
}

// The Handler a Kinds makes, called directly: errors wrap the sentinels a
// caller matches; a handler's own error and a result that does not encode
// come back as errors, with no result.
func TestKindsHandler(t *testing.T) {
	var kinds sb.Kinds
	_, err := kinds.Handler()(ctx, sb.Todo{ID: "todo_1", Kind: "any"})
	require.ErrorIs(t, err, sb.ErrUnknownKind, "an empty Kinds handles nothing")

	boom := errors.New("boom")
	sb.HandleKind(&kinds, "fails", func(context.Context, sb.Todo, struct{}) (int, error) { return 0, boom })
	sb.HandleKind(&kinds, "unencodable", func(context.Context, sb.Todo, struct{}) (func(), error) { return func() {}, nil })
	sb.HandleKind(&kinds, "raw", func(_ context.Context, _ sb.Todo, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	hd := kinds.Handler()

	res, err := hd(ctx, sb.Todo{ID: "todo_2", Kind: "fails", Payload: []byte(`{}`)})
	require.ErrorIs(t, err, boom)
	assert.Nil(t, res)
	res, err = hd(ctx, sb.Todo{ID: "todo_3", Kind: "unencodable", Payload: []byte(`{}`)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "todo_3")
	assert.Nil(t, res)
	res, err = hd(ctx, sb.Todo{ID: "todo_4", Kind: "raw", Payload: []byte(`{"a":[1,2]}`)})
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":[1,2]}`, string(res))
	_, err = hd(ctx, sb.Todo{ID: "todo_5", Kind: "FAILS", Payload: []byte(`{}`)})
	require.ErrorIs(t, err, sb.ErrUnknownKind, "kinds match exactly")
	assert.Equal(t, fmt.Sprintf(`switchboard: todo todo_5: kind "FAILS": %v`, sb.ErrUnknownKind), err.Error())

	assert.PanicsWithValue(t, `switchboard: HandleKind: kind "fails" registered twice`, func() {
		sb.HandleKind(&kinds, "fails", func(context.Context, sb.Todo, struct{}) (int, error) { return 0, nil })
	})
	assert.Panics(t, func() {
		sb.HandleKind(&kinds, "", func(context.Context, sb.Todo, struct{}) (int, error) { return 0, nil })
	})
	assert.Panics(t, func() { sb.HandleKind[struct{}, int](&kinds, "nil", nil) })
}
