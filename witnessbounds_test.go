package switchboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/witness"
)

// hungWitness is a witness that accepts every request and never answers
// (until the caller gives up).
func hungWitness(t *testing.T) string {
	t.Helper()
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the caller leaving
		select {
		case <-r.Context().Done():
		case <-gone:
		}
	}))
	t.Cleanup(func() { close(gone); srv.Close() })
	return srv.URL
}

// WitnessConfig.Timeout: "a witness that never answers costs one Timeout
// per checkpoint and holds nothing else up"; Checkpoint: one that "cannot
// be reached" makes the error wrap ErrWitness and "the checkpoint returned
// is signed and stored all the same". Two witnesses that accept the
// connection and never answer: Reap still re-queues an expired lease,
// signs and stores the checkpoint, and reports ErrWitness; two Checkpoint
// callers at once (the History page) each get their answer; a Client with
// no WitnessConfig.Timeout is bounded by its own.
func TestAWitnessThatNeverAnswers(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, wkey1, err := witness.NewKey("witness.example/w1")
		require.NoError(t, err)
		_, wkey2, err := witness.NewKey("witness.example/w2")
		require.NoError(t, err)
		const timeout = 300 * time.Millisecond
		withLogKey(t, h, func(c *sb.Config) {
			c.Witnesses = []sb.WitnessConfig{
				{Witness: &witness.Client{URL: hungWitness(t)}, Key: wkey1, Timeout: timeout},
				{Witness: &witness.Client{URL: hungWitness(t), Timeout: timeout}, Key: wkey2}, // WitnessConfig.Timeout 0: 10 s, the Client's is shorter
			}
		})
		friend, w, _ := queueSetup(t, h)
		_, _, err = h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, _, err = h.sb.Claim(ctx, w, "inbox", &sb.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)
		h.clock.Advance(2 * time.Minute)

		type reaped struct {
			st   sb.ReapStats
			err  error
			took time.Duration
		}
		done := make(chan reaped, 1)
		go func() {
			start := time.Now()
			st, err := h.sb.Reap(ctx)
			done <- reaped{st, err, time.Since(start)}
		}()
		var r reaped
		select {
		case r = <-done:
		case <-time.After(time.Minute):
			t.Fatal("Reap is held by witnesses that never answer")
		}
		require.NoError(t, r.err)
		assert.Equal(t, 1, r.st.LeasesExpired, "the rest of Reap went on")
		require.ErrorIs(t, r.st.LogProblem, sb.ErrWitness)
		assert.NotErrorIs(t, r.st.LogProblem, sb.ErrAuditBroken)
		require.NotNil(t, storedNote(t, h), "the checkpoint stands")
		t.Logf("Reap with two witnesses that never answer (timeout %v each, asked at once): %v", timeout, r.took)

		_, _, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList)})
		require.NoError(t, err)
		errs := make(chan error, 2)
		for range 2 {
			go func() { _, err := h.sb.Checkpoint(ctx); errs <- err }()
		}
		for range 2 {
			select {
			case err := <-errs:
				require.ErrorIs(t, err, sb.ErrWitness)
			case <-time.After(time.Minute):
				t.Fatal("a Checkpoint caller is held by another's request to a witness that never answers")
			}
		}
	})
}
