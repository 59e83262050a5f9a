package switchboard_test

// The webhook crash test: a child process completes todos whose creator
// has a webhook, and delivers them from Run, while the parent's receiver
// answers slowly; the parent SIGKILLs the child mid-traffic, several
// times, then runs the deliveries to the end itself. Every completion the
// child acknowledged must reach the receiver — each delivery was written in
// the transaction that completed its todo, and a delivery cut off mid-send
// is sent again once its lease runs out.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
)

const webhookCrashEnv = "SWITCHBOARD_WEBHOOK_CRASH_CHILD" // "path|credential|receiver URL"

// crashHooks is the webhook configuration parent and child share: the same
// key, so the child's deliveries verify with the secret the parent got.
func crashHooks(url string) *sb.WebhookConfig {
	return &sb.WebhookConfig{Key: webhookKey, Origins: []string{url}, AllowPrivate: true, AllowHTTP: true, Timeout: 2 * time.Second}
}

func TestWebhookCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes; skipped with -short")
	}
	var mu sync.Mutex
	delivered := map[string]bool{} // todo ids whose completion arrived, verified
	var secret string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // kills land mid-delivery
		mu.Lock()
		defer mu.Unlock()
		if _, err := sb.VerifyWebhook(secret, r.Header, body, time.Now(), 0); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var b struct {
			Type string
			Data struct{ Todo sb.Todo }
		}
		if json.Unmarshal(body, &b) == nil && b.Type == sb.WebhookTodoCompleted {
			delivered[b.Data.Todo.ID] = true
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()

	path := filepath.Join(t.TempDir(), "hooks.db")
	owner := sb.Human{Issuer: "https://id.example.com", Subject: "owner"}
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	s, err := sb.New(st, &sb.Config{Webhooks: crashHooks(rcv.URL)})
	require.NoError(t, err)
	_, err = s.Publish(ctx, sb.Persona{ID: "desk", Owner: owner, Card: sb.PersonaCard(sb.CardFields{Name: "Desk", Description: "d", Version: "1", URL: "https://x.example/agents/desk"})})
	require.NoError(t, err)
	verbs := []sb.Verb{sb.VerbCreateFor, sb.VerbClaim, sb.VerbComplete, sb.VerbWebhook}
	_, cred, err := s.Vend(ctx, owner, sb.VendRequest{Agent: "desk", Scope: sb.Scope{{Queue: "inbox", Verbs: verbs}}})
	require.NoError(t, err)
	_, sec, err := s.RegisterWebhook(ctx, cred, rcv.URL+"/hook")
	require.NoError(t, err)
	mu.Lock()
	secret = sec
	mu.Unlock()
	require.NoError(t, s.Close())
	require.NoError(t, st.Close())

	completed := map[string]bool{}
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWebhookCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), webhookCrashEnv+"="+path+"|"+string(cred)+"|"+rcv.URL)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(out)
		n, kill := 0, 50+rand.IntN(300)
		deadline := time.Now().Add(crashStartDeadline)
		for n < kill && time.Now().Before(deadline) && sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "complete "); ok {
				completed[id] = true
				n++
			}
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		for sc.Scan() { // what it acknowledged before it died
			if id, ok := strings.CutPrefix(sc.Text(), "complete "); ok {
				completed[id] = true
			}
		}
		_ = cmd.Wait()
		require.Positive(t, n, "round %d: the child acknowledged no completion", round)
	}

	// The parent delivers what is left.
	st, err = bolt.Open(path, nil)
	require.NoError(t, err)
	defer st.Close()
	s, err = sb.New(st, &sb.Config{Webhooks: crashHooks(rcv.URL), ReapInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = s.Run(rctx) }()
	defer func() { stop(); <-ran }()
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var m []string
		for id := range completed {
			if !delivered[id] {
				m = append(m, id)
			}
		}
		return m
	}
	// A delivery the kill cut off is sent again when its lease (2 × 2 s +
	// 5 s) runs out.
	require.Eventually(t, func() bool { return len(missing()) == 0 }, 2*time.Minute, 100*time.Millisecond,
		"acknowledged completions never delivered: %v", missing())
	t.Logf("%d acknowledged completions, all delivered", len(completed))
}

// TestWebhookCrashChild is the child of TestWebhookCrash.
func TestWebhookCrashChild(t *testing.T) {
	env := os.Getenv(webhookCrashEnv)
	if env == "" {
		t.Skip("runs only as the child process TestWebhookCrash starts")
	}
	f := strings.Split(env, "|")
	st, err := bolt.Open(f[0], &bolt.Options{CheckpointBytes: 8 << 10, LogSegmentSize: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sb.New(st, &sb.Config{Webhooks: crashHooks(f[2])})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Run(context.Background()) }()
	c := sb.Credential(f[1])
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 4 {
		wg.Go(func() {
			for {
				if _, _, err := s.CreateFor(ctx, c, "inbox", sb.NewTodo{Kind: "k"}); err != nil {
					continue
				}
				td, l, err := s.Claim(ctx, c, "inbox", nil)
				if err != nil {
					continue
				}
				if s.Complete(ctx, c, l, []byte(`{"ok":true}`)) == nil {
					mu.Lock()
					fmt.Fprintf(os.Stdout, "complete %s\n", td.ID)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}
