package switchboard_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/memory"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Run reports the reap errors it cannot return to Config.Logger, and keeps
// going; the record names no secret.
func TestRunLogsReapErrors(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := &faultyStore{Store: b.open(t), tables: map[string]bool{}}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, st)
			_, friend := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			w := h.worker(h.bob, "bob-desk", "inbox")
			_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
			require.NoError(t, err)
			_, _, err = h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Minute})
			require.NoError(t, err)
			h.clock.Advance(2 * time.Minute) // a lease for Reap to expire

			var logs syncBuffer
			s, err := sb.New(st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()},
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			st.mu.Lock()
			st.failAt = 1
			st.mu.Unlock()
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(rctx) }()
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "reap failed") }, 30*time.Second, time.Millisecond)
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
			out := logs.String()
			assert.Contains(t, out, "level=WARN")
			assert.Contains(t, out, "injected failure")
			assert.NotContains(t, out, string(friend)[4:])
			assert.NotContains(t, out, string(w)[4:])
		})
	}
}

// An error that leaves the package names it once: internal helpers add no
// "switchboard:" of their own under the verb's.
func TestErrorsNameThePackageOnce(t *testing.T) {
	st := &faultyStore{Store: memory.New(), tables: map[string]bool{}}
	h := newHarness(t, st)
	friend, w, _ := queueSetup(t, h)
	st.mu.Lock()
	st.failAt = 1
	st.mu.Unlock()
	_, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
	require.ErrorIs(t, err, errInjected)
	assert.Equal(t, 1, strings.Count(err.Error(), "switchboard:"), err.Error())
	_, _, err = h.sb.Claim(ctx, w, "nope", nil)
	require.Error(t, err)
	assert.Equal(t, 1, strings.Count(err.Error(), "switchboard:"), err.Error())
	_, err = h.sb.VerifyAudit(ctx)
	require.NoError(t, err)
}
