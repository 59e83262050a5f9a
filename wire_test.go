package switchboard_test

import (
	"encoding/json"
	"strings"
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
		{sb.NewTodo{Kind: "k", Title: "t", Payload: []byte(`{"n":1}`), Priority: 2, DedupKey: "d", NotBefore: time.Unix(1e9, 0).UTC(), MaxAttempts: 3},
			[]string{"kind", "title", "payload", "priority", "dedup_key", "not_before", "max_attempts"}, func() any { return &sb.NewTodo{} }},
		{sb.NewTodo{Kind: "k", Payload: []byte{0xff, 0}}, []string{"kind", "payload_base64"}, func() any { return &sb.NewTodo{} }},
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

// What a host sends and receives reads as JSON: JSON payloads and results as
// JSON, durations as strings; stored records are unaffected (the todo read
// back from the store is the todo written).
func TestTodosAndGrantsReadAsJSON(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		w := h.worker(h.bob, "bob-desk", "inbox")
		td, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", Payload: []byte(`{"amount":420}`)})
		require.NoError(t, err)
		_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
		require.NoError(t, err)
		require.NoError(t, h.sb.Complete(ctx, w, l, []byte("not json \xff")))
		got, err := h.sb.Get(ctx, w, td.ID)
		require.NoError(t, err)
		assert.Equal(t, []byte(`{"amount":420}`), got.Payload)
		assert.Equal(t, []byte("not json \xff"), got.Result)
		b, err := json.Marshal(got)
		require.NoError(t, err)
		assert.Contains(t, string(b), `"payload":{"amount":420}`)
		assert.Contains(t, string(b), `"result_base64":"`)
		var back sb.Todo
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, got.Payload, back.Payload)
		assert.Equal(t, got.Result, back.Result)
		assert.Equal(t, got.History, back.History)
		assert.Equal(t, got.ID, back.ID)

		g, _, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList), DefaultLease: 90 * time.Second})
		require.NoError(t, err)
		gb, err := json.Marshal(g)
		require.NoError(t, err)
		assert.Contains(t, string(gb), `"default_lease":"1m30s"`)
		var gback sb.Grant
		require.NoError(t, json.Unmarshal(gb, &gback))
		assert.Equal(t, 90*time.Second, gback.DefaultLease)
		var o sb.ClaimOptions
		require.NoError(t, json.Unmarshal([]byte(`{"lease":"2m","wait":true}`), &o))
		assert.Equal(t, sb.ClaimOptions{Lease: 2 * time.Minute, Wait: true}, o)
		require.Error(t, json.Unmarshal([]byte(`{"lease":"soon"}`), &o))
		var n sb.NewTodo
		require.Error(t, json.Unmarshal([]byte(`{"kind":"k","payload":{},"payload_base64":"AA=="}`), &n), "one payload")
	})
}

// DecodeJSON reads an outside document one way only: anything another
// reader could see differently is refused, naming the key.
func TestDecodeJSONOneReading(t *testing.T) {
	var n sb.NewTodo
	require.NoError(t, sb.DecodeJSON([]byte(`{"kind":"k","payload":{"a":[1,2]},"priority":0,"max_attempts":3}`), &n))
	assert.Equal(t, sb.NewTodo{Kind: "k", Payload: []byte(`{"a":[1,2]}`), MaxAttempts: 3}, n)

	var fr sb.FriendRequest
	require.NoError(t, sb.DecodeJSON([]byte(`{"from":"a","to":"b","scope":[{"queue":"inbox","verbs":["create_for"]}],"why":"w","pickup":"p","id_token":"t"}`), &fr))
	assert.Equal(t, "inbox", fr.Scope[0].Queue)

	refused := map[string]string{
		"twice":              `{"kind":"a","kind":"b"}`,
		"twice up to case":   `{"kind":"a","Kind":"b"}`,
		"not exact spelling": `{"KIND":"a"}`,
		"unknown field":      `{"kind":"a","dedupe_key":"x"}`,
		"nested twins":       `{"kind":"a","payload":{"x":1,"X":2}}`,
		"trailing":           `{"kind":"a"} {}`,
		"invalid utf-8":      "{\"kind\":\"\xff\"}",
		"both payloads":      `{"kind":"a","payload":{},"payload_base64":"AA=="}`,
		"deep":               `{"kind":"a","payload":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
	}
	for name, doc := range refused {
		var v sb.NewTodo
		err := sb.DecodeJSON([]byte(doc), &v)
		assert.ErrorIs(t, err, sb.ErrInvalidArgument, name)
	}
	var fr2 sb.FriendRequest
	err := sb.DecodeJSON([]byte(`{"from":"a","To":"b"}`), &fr2)
	require.ErrorIs(t, err, sb.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `"To"`)
	err = sb.DecodeJSON([]byte(`{"from":"a","scope":[{"queue":"q","Verbs":["list"]}]}`), &fr2)
	require.ErrorIs(t, err, sb.ErrInvalidArgument, "nested exact spelling")
	err = sb.DecodeJSON([]byte(`{"from":"a","id_token":"secret-token-value","extra":"secret-token-value"}`), &fr2)
	require.ErrorIs(t, err, sb.ErrInvalidArgument)
	assert.NotContains(t, err.Error(), "secret-token-value")
}
