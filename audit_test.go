package switchboard_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
)

// auditFlow writes a mix of events and returns them.
func auditFlow(t *testing.T, h *harness) []sb.Event {
	t.Helper()
	g, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
	w := h.worker(h.bob, "bob-desk", "inbox")
	for i := 0; i < 3; i++ {
		_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
	}
	_, l, err := h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, h.sb.Complete(ctx, w, l, nil))
	require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))
	evs, err := h.sb.Events(ctx, 0, 1000)
	require.NoError(t, err)
	return evs
}

func rawEvent(t *testing.T, h *harness, seq uint64, fn func(tx store.Tx, k []byte) error) {
	t.Helper()
	k := binary.BigEndian.AppendUint64(nil, seq)
	require.NoError(t, h.st.Update(ctx, func(tx store.Tx) error { return fn(tx, k) }))
}

// The audit log is numbered without gaps, in its own sequence, and chained:
// VerifyAudit finds an event edited, deleted or cut off through the raw
// store, and names it.
func TestTheAuditLogIsAChain(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		evs := auditFlow(t, h)
		require.Greater(t, len(evs), 10)
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.Seq, "gapless")
			if i > 0 {
				assert.NotEmpty(t, e.Prev)
			}
		}
		rep, err := h.sb.VerifyAudit(ctx)
		require.NoError(t, err)
		assert.Equal(t, sb.AuditReport{First: 1, Last: uint64(len(evs)), Events: uint64(len(evs))}, rep)

		broken := func(seq uint64, reason string) {
			t.Helper()
			_, err := h.sb.VerifyAudit(ctx)
			require.ErrorIs(t, err, sb.ErrAuditBroken)
			var ae *sb.AuditError
			require.True(t, errors.As(err, &ae))
			assert.Equal(t, seq, ae.Seq, ae.Reason)
			assert.Contains(t, ae.Reason, reason)
		}
		// tamper changes event seq through the raw store and returns what
		// puts it back.
		tamper := func(seq uint64, change func(tx store.Tx, k, v []byte) error) (restore func()) {
			var orig []byte
			rawEvent(t, h, seq, func(tx store.Tx, k []byte) error {
				v, err := tx.Get("events", k)
				if err != nil {
					return err
				}
				orig = append([]byte(nil), v...)
				return change(tx, k, v)
			})
			return func() {
				rawEvent(t, h, seq, func(tx store.Tx, k []byte) error { return tx.Put("events", k, orig) })
			}
		}
		edit := func(seq uint64) func() {
			return tamper(seq, func(tx store.Tx, k, v []byte) error {
				return tx.Put("events", k, []byte(strings.Replace(string(v), `"actor":"`, `"actor":"x`, 1)))
			})
		}
		del := func(seq uint64) func() {
			return tamper(seq, func(tx store.Tx, k, _ []byte) error { return tx.Delete("events", k) })
		}
		last := uint64(len(evs))

		restore := edit(5)
		broken(5, "does not hash")
		restore()
		restore = del(5)
		broken(5, "missing")
		restore()
		restore = edit(last)
		broken(last, "head")
		restore()
		restore = del(last)
		broken(last, "head names")
		restore()
		_, err = h.sb.VerifyAudit(ctx)
		require.NoError(t, err, "restored")

		// New events go on linking after a verified log.
		_, _, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList)})
		require.NoError(t, err)
		rep, err = h.sb.VerifyAudit(ctx)
		require.NoError(t, err)
		assert.Equal(t, last+1, rep.Last)
	})
}
