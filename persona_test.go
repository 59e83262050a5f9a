package switchboard_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
)

// A persona's card advertises discovery only.
func TestPersonaCardAdvertisesDiscoveryOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		c := card("x")
		c.SupportedInterfaces[0].ProtocolBinding = "JSONRPC"
		_, err := h.sb.Publish(ctx, sb.Persona{ID: "x", Owner: h.alice, Card: c})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		assert.Contains(t, err.Error(), sb.BindingSwitchboard)
		c = card("x")
		yes := true
		c.Capabilities.PushNotifications = &yes
		_, err = h.sb.Publish(ctx, sb.Persona{ID: "x", Owner: h.alice, Card: c})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		no := false
		c.Capabilities.PushNotifications = &no
		_, err = h.sb.Publish(ctx, sb.Persona{ID: "x", Owner: h.alice, Card: c, Discoverable: true})
		require.NoError(t, err)
		l, err := h.sb.Lookup(ctx, "x")
		require.NoError(t, err)
		require.NotNil(t, l.Card.Capabilities.PushNotifications, "explicit false survives the store")
		assert.False(t, *l.Card.Capabilities.PushNotifications)
	})
}

// TestDamagedPersonaRecord: a persona record damaged in the store — its
// binary head cut short, a bad flag, a card that does not parse or names
// another agent than the head — is an error for every reader that needs
// the part damaged (Lookup, Search and Publish read the card; a request's
// checks read only the head, where the fields deciding access are stored
// once), never a panic, and the other personas still read.
func TestDamagedPersonaRecord(t *testing.T) {
	st := memory.New()
	h := newHarness(t, st)
	h.publish(h.bob, "bob-desk", true)
	h.publish(h.alice, "alice-bot", true)
	good := storedRecord(t, st, "personas", "bob-desk")
	require.Equal(t, byte(0x01), good[0], "personas are written with the binary head")
	for name, data := range map[string][]byte{
		"format byte only":    {0x01},
		"head cut short":      good[:5],
		"bad discoverable":    badFlag(good),
		"card JSON cut":       good[:len(good)-3],
		"card renamed":        renamed(good),
		"not JSON, no head":   []byte("{"),
		"length past the end": {0x01, 0xff, 0x7f},
	} {
		headIntact := name == "card JSON cut" || name == "card renamed"
		t.Run(name, func(t *testing.T) {
			require.NoError(t, st.Update(ctx, func(tx store.Tx) error { return tx.Put("personas", []byte("bob-desk"), data) }))
			_, err := h.sb.Lookup(ctx, "bob-desk")
			require.Error(t, err)
			_, err = h.sb.Search(ctx, sb.Query{})
			require.Error(t, err)
			if !headIntact {
				_, err = h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "hi")
				require.Error(t, err)
			}
			_, err = h.sb.Publish(ctx, sb.Persona{ID: "bob-desk", Owner: h.bob, Card: card("bob-desk"), Discoverable: true})
			require.Error(t, err, "a damaged record is not silently replaced")
			l, err := h.sb.Lookup(ctx, "alice-bot")
			require.NoError(t, err, "another persona still reads")
			require.Equal(t, "alice-bot", l.ID)
		})
	}
}

// badFlag is a persona record whose discoverable byte is 7.
func badFlag(rec []byte) []byte {
	b := bytes.Clone(rec)
	i := 1
	for range 3 { // id, owner issuer, owner subject
		n, w := binary.Uvarint(b[i:])
		i += w + int(n)
	}
	b[i] = 7
	return b
}

// renamed is a persona record whose card names another agent than its head.
func renamed(rec []byte) []byte {
	return bytes.Replace(bytes.Clone(rec), []byte(`"name":"bob-desk"`), []byte(`"name":"bob-dusk"`), 1)
}

// storedRecord is a record as the store holds it.
func storedRecord(t testing.TB, st store.Store, table, key string) []byte {
	t.Helper()
	var b []byte
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		var err error
		b, err = tx.Get(table, []byte(key))
		return err
	}))
	return b
}
