package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// Webhooks on PostgreSQL, delivered by two Switchboards on two stores (as
// two processes would): each completion arrives, verified, and each
// delivery is sent by one of them — the delivery claims take row locks.
func TestWebhooksFromTwoProcesses(t *testing.T) {
	dsn := testDSN(t)
	table := freshTable(t, dsn)
	var mu sync.Mutex
	got := map[string]int{} // todo id → deliveries of its completion
	var secret string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if _, err := switchboard.VerifyWebhook(secret, r.Header, body, time.Now(), 0); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var b struct {
			Data struct{ Todo switchboard.Todo }
		}
		_ = json.Unmarshal(body, &b)
		got[b.Data.Todo.ID]++
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	hooks := &switchboard.WebhookConfig{Key: bytes.Repeat([]byte{9}, 32), Origins: []string{rcv.URL}, AllowPrivate: true, AllowHTTP: true}
	is, err := switchboardtest.NewIssuer("pg-hooks")
	require.NoError(t, err)
	defer is.Close()
	var sbs []*switchboard.Switchboard
	for range 2 {
		st := open(t, dsn, postgres.Options{Table: table})
		t.Cleanup(func() { st.Close() })
		s, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{is.Config()}, Webhooks: hooks, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		sbs = append(sbs, s)
	}
	ctx := context.Background()
	owner := is.Human("owner")
	_, err = sbs[0].Publish(ctx, switchboard.Persona{ID: "desk", Owner: owner, Card: switchboard.PersonaCard(switchboard.CardFields{Name: "Desk", Description: "d", Version: "1", URL: "https://x.example/agents/desk"})})
	require.NoError(t, err)
	verbs := []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbClaim, switchboard.VerbComplete, switchboard.VerbWebhook}
	_, cred, err := sbs[0].Vend(ctx, owner, switchboard.VendRequest{Agent: "desk", Scope: switchboard.Scope{{Queue: "inbox", Verbs: verbs}}})
	require.NoError(t, err)
	_, sec, err := sbs[0].RegisterWebhook(ctx, cred, rcv.URL+"/h")
	require.NoError(t, err)
	mu.Lock()
	secret = sec
	mu.Unlock()
	var want []string
	for i := range 40 {
		s := sbs[i%2]
		_, _, err := s.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k"})
		require.NoError(t, err)
		td, l, err := s.Claim(ctx, cred, "inbox", nil)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, cred, l, []byte(`{}`)))
		want = append(want, td.ID)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range want {
			if got[id] == 0 {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range want {
		require.Equal(t, 1, got[id], "todo %s delivered %d times (no lease ran out here)", id, got[id])
	}
}
