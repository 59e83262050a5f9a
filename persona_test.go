package switchboard_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
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
