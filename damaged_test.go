package switchboard_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
)

// "A damaged record is an error, on every store": a todo record whose
// stored bytes changed underneath — any one bit, anywhere in it — is
// ErrDamaged, naming the table and the key, from every verb that reads it;
// no worker is handed a todo read from it. Put back, it reads as before.
func TestADamagedTodoIsAnError(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		worker := h.worker(h.bob, "bob-desk", "inbox")
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Title: "pay", Payload: []byte(`{"amount":100}`)})
		require.NoError(t, err)
		var orig []byte
		require.NoError(t, h.st.View(ctx, func(tx store.Tx) error {
			v, err := tx.Get("todos", []byte(td.ID))
			orig = bytes.Clone(v)
			return err
		}))
		put := func(v []byte) {
			require.NoError(t, h.st.Update(ctx, func(tx store.Tx) error { return tx.Put("todos", []byte(td.ID), v) }))
		}
		for i := range len(orig) * 8 {
			v := bytes.Clone(orig)
			v[i/8] ^= 1 << (i % 8)
			put(v)
			_, err := h.sb.Get(ctx, worker, td.ID)
			require.ErrorIs(t, err, sb.ErrDamaged, "bit %d", i)
			require.Contains(t, err.Error(), "todos")
			require.Contains(t, err.Error(), td.ID)
			_, err = h.sb.InspectTodo(ctx, td.ID)
			require.ErrorIs(t, err, sb.ErrDamaged, "bit %d", i)
			if i%61 == 0 { // the claim path, at a sample of bits: set aside, never handed out
				got, _, err := h.sb.Claim(ctx, worker, "inbox", nil)
				require.ErrorIs(t, err, sb.ErrQueueEmpty, "bit %d: handed out %+v", i, got)
				_, err = h.sb.List(ctx, worker, "inbox", nil)
				require.ErrorIs(t, err, sb.ErrDamaged, "bit %d", i)
			}
		}
		put(orig)
		got, l, err := h.sb.Claim(ctx, worker, "inbox", nil)
		require.NoError(t, err)
		require.Equal(t, `{"amount":100}`, string(got.Payload))
		require.NoError(t, h.sb.Complete(ctx, worker, l, nil))
	})
}
