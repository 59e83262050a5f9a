package switchboard_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// The request types a host receives over a wire have stable snake_case JSON
// names, and decode back to what was sent.
func TestRequestTypesCrossAWire(t *testing.T) {
	cases := []struct {
		v    any
		keys []string
		into func() any
	}{
		{sb.FriendRequest{From: "a", To: "b", Scope: inboxCreate, Why: "w", Pickup: "p", IDToken: "t"},
			[]string{"from", "to", "scope", "why", "pickup", "id_token"}, func() any { return &sb.FriendRequest{} }},
		{sb.NewTodo{Kind: "k", Title: "t", Payload: []byte("x"), Priority: 2, DedupKey: "d", NotBefore: time.Unix(1e9, 0).UTC(), MaxAttempts: 3},
			[]string{"kind", "title", "payload", "priority", "dedup_key", "not_before", "max_attempts"}, func() any { return &sb.NewTodo{} }},
		{sb.VendRequest{Agent: "a", Target: "b", Scope: inboxCreate, ExpiresAt: time.Unix(2e9, 0).UTC(), DefaultLease: time.Minute},
			[]string{"agent", "target", "scope", "expires_at", "default_lease"}, func() any { return &sb.VendRequest{} }},
		{sb.ClaimOptions{Lease: time.Minute, Wait: true}, []string{"lease", "wait"}, func() any { return &sb.ClaimOptions{} }},
		{sb.ListOptions{State: sb.TodoQueued, After: "x", Limit: 5}, []string{"state", "after", "limit"}, func() any { return &sb.ListOptions{} }},
	}
	for _, tc := range cases {
		b, err := json.Marshal(tc.v)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		assert.ElementsMatch(t, tc.keys, keys, "%T", tc.v)
		back := tc.into()
		require.NoError(t, json.Unmarshal(b, back))
		assert.Equal(t, tc.v, deref(back), "%T", tc.v)
	}
}

func deref(v any) any {
	switch p := v.(type) {
	case *sb.FriendRequest:
		return *p
	case *sb.NewTodo:
		return *p
	case *sb.VendRequest:
		return *p
	case *sb.ClaimOptions:
		return *p
	case *sb.ListOptions:
		return *p
	}
	return nil
}
