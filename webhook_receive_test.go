package switchboard_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
)

// A Go receiver written as the README shows (ReceiveWebhook, three lines)
// gets the completion of a todo its agent created: the type, when it
// happened, and the todo exactly as the agent sees it through its grant,
// with its result — and answers 401 to what fails the check, which is then
// retried.
func TestReceiveWebhook(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		var secret atomic.Value
		secret.Store("")
		var tamper atomic.Bool
		got := make(chan switchboard.WebhookDelivery, 10)
		refused := make(chan error, 10)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tamper.Load() {
				r.Header.Set("webhook-id", "msg_forged")
			}
			d, err := switchboard.ReceiveWebhook(r, secret.Load().(string), h.clock.Now())
			if err != nil {
				refused <- err
				http.Error(w, "bad delivery", http.StatusUnauthorized)
				return
			}
			got <- d
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		_, cred, worker := hookHarness(t, h, &switchboard.WebhookConfig{Key: webhookKey, Origins: []string{srv.URL}, AllowPrivate: true, AllowHTTP: true}, true)
		_, s, err := h.sb.RegisterWebhook(ctx, cred, srv.URL+"/hooks")
		require.NoError(t, err)
		secret.Store(s)

		// The first attempt is refused (its id forged), the retry accepted.
		tamper.Store(true)
		td, _, err := h.sb.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "invoice", Title: "March", Payload: []byte(`{"cents":12900}`)})
		require.NoError(t, err)
		finishOne(t, h, worker, `{"paid":true}`)
		doneAt := h.clock.Now()
		select {
		case err := <-refused:
			require.ErrorIs(t, err, switchboard.ErrWebhookSignature)
			require.True(t, strings.HasPrefix(err.Error(), "switchboard: receive webhook: "), err.Error())
		case <-time.After(20 * time.Second):
			t.Fatal("no delivery arrived")
		}
		tamper.Store(false)
		var d switchboard.WebhookDelivery
		deadline := time.After(20 * time.Second)
	wait:
		for {
			select {
			case d = <-got:
				break wait
			case <-deadline:
				t.Fatal("the retry never arrived")
			case <-time.After(20 * time.Millisecond):
				h.clock.Advance(10 * time.Second) // bring the retry due
			}
		}
		require.Equal(t, switchboard.WebhookTodoCompleted, d.Type)
		require.NotEmpty(t, d.ID)
		require.True(t, d.Timestamp.Equal(doneAt), "when it happened (%s), not when it was sent (%s)", d.Timestamp, doneAt)
		require.Equal(t, td.ID, d.Todo.ID)
		require.Equal(t, switchboard.TodoDone, d.Todo.State)
		require.Equal(t, "invoice", d.Todo.Kind)
		require.Equal(t, "March", d.Todo.Title)
		require.JSONEq(t, `{"cents":12900}`, string(d.Todo.Payload))
		require.Equal(t, td.Origin, d.Todo.Origin, "the agent's own origin")
		res, err := switchboard.ResultOf[struct {
			Paid bool `json:"paid"`
		}](d.Todo)
		require.NoError(t, err)
		require.True(t, res.Paid)
	})
}

// ParseWebhook and ReceiveWebhook refuse what is not a signed delivery,
// and never decode a body that fails the check.
func TestParseWebhookRefuses(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	now := time.Unix(1_800_000_000, 0)
	signed := func(body string) (http.Header, []byte) {
		sig, err := switchboard.SignWebhook(secret, "msg_1", now, []byte(body))
		require.NoError(t, err)
		h := http.Header{}
		h.Set("webhook-id", "msg_1")
		h.Set("webhook-timestamp", "1800000000")
		h.Set("webhook-signature", sig)
		return h, []byte(body)
	}
	good := `{"type":"todo.completed","timestamp":"2027-01-15T08:00:00Z","data":{"todo":{"id":"todo_1","state":"done","result":{"ok":true}}},"future":1}`
	hd, body := signed(good)
	d, err := switchboard.ParseWebhook(secret, hd, body, now, 0)
	require.NoError(t, err)
	require.Equal(t, "msg_1", d.ID)
	require.Equal(t, "todo_1", d.Todo.ID)
	require.Equal(t, switchboard.TodoDone, d.Todo.State)
	require.JSONEq(t, `{"ok":true}`, string(d.Todo.Result))

	_, err = switchboard.ParseWebhook(secret, hd, append(body, ' '), now, 0)
	require.ErrorIs(t, err, switchboard.ErrWebhookSignature, "a changed body")
	_, err = switchboard.ParseWebhook(secret, hd, body, now.Add(time.Hour), 0)
	require.ErrorIs(t, err, switchboard.ErrWebhookSignature, "an old delivery")
	for _, b := range []string{`{"x":1}`, `{"type":"todo.completed","data":{}}`, `not json`} {
		hd, body := signed(b)
		_, err = switchboard.ParseWebhook(secret, hd, body, now, 0)
		require.ErrorIs(t, err, switchboard.ErrInvalidArgument, "%s: signed, but no delivery", b)
		require.NotErrorIs(t, err, switchboard.ErrWebhookSignature)
	}

	big := bytes.Repeat([]byte{' '}, 8<<20+1)
	r := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(big))
	r.Header = hd
	_, err = switchboard.ReceiveWebhook(r, secret, now)
	require.ErrorIs(t, err, switchboard.ErrInvalidArgument, "a body over 8 MiB is not read to its end")
}
