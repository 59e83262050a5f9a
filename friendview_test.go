package switchboard_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

// friendView is the model of what a friend grant may see of a todo, written
// apart from the library's own code: the host's view of it, less what would
// name another party. A todo the grant did not create has no Origin, no
// DedupKey, no tracestate and no Approval; every attempt by another grant
// has no Agent and no Grant. Everything else is the host's.
func friendView(host sb.Todo, grant string) sb.Todo {
	v := host
	if host.Origin.Grant != grant {
		v.Origin, v.DedupKey, v.Approval = sb.Origin{}, "", nil
		v.Trace = sb.Trace{Parent: host.Trace.Parent}
	}
	if host.History != nil {
		v.History = make([]sb.Attempt, len(host.History))
		for i, a := range host.History {
			if a.Grant != grant {
				a.Agent, a.Grant = "", ""
			}
			v.History[i] = a
		}
	}
	return v
}

// friendWatch checks every todo a friend grant receives against the
// model, field by field, and its JSON for any trace of the parties the
// friend must not learn of.
type friendWatch struct {
	t         *testing.T
	h         *harness
	forbidden map[string][]string // grant id → strings its todos must not hold
	mu        sync.Mutex
	seen      map[string]int // entry point → todos checked
}

// check compares td, as grant received it through entry, with the model
// of the host's view of it now.
func (w *friendWatch) check(entry, grant string, td sb.Todo) {
	w.t.Helper()
	host, err := w.h.sb.InspectTodo(context.Background(), td.ID)
	require.NoError(w.t, err)
	want, err := json.Marshal(friendView(host, grant))
	require.NoError(w.t, err)
	got, err := json.Marshal(td)
	require.NoError(w.t, err)
	require.JSONEq(w.t, string(want), string(got), "%s: the todo as the friend grant received it, against the model", entry)
	for _, s := range w.forbidden[grant] {
		require.NotContains(w.t, string(got), s, "%s: a friend's todo names another party", entry)
	}
	w.count(entry)
}

// checkPast is check for a todo as it was when an event was sent (a
// webhook delivery): the host's view has moved on since, so the model is
// checked on what does not change and on each attempt's shape.
func (w *friendWatch) checkPast(entry, grant string, td sb.Todo) {
	w.t.Helper()
	host, err := w.h.sb.InspectTodo(context.Background(), td.ID)
	require.NoError(w.t, err)
	want := friendView(host, grant)
	require.Equal(w.t, [5]any{want.Origin, want.DedupKey, want.Trace, want.Kind, string(want.Payload)},
		[5]any{td.Origin, td.DedupKey, td.Trace, td.Kind, string(td.Payload)}, "%s: the todo as the friend grant received it, against the model", entry)
	require.LessOrEqual(w.t, len(td.History), len(host.History))
	for i, a := range td.History {
		require.Equal(w.t, want.History[i].N, a.N)
		require.Equal(w.t, [2]string{want.History[i].Agent, want.History[i].Grant}, [2]string{a.Agent, a.Grant}, "%s: attempt %d", entry, a.N)
	}
	got, err := json.Marshal(td)
	require.NoError(w.t, err)
	for _, s := range w.forbidden[grant] {
		require.NotContains(w.t, string(got), s, "%s: a friend's todo names another party", entry)
	}
	w.count(entry)
}

func (w *friendWatch) count(entry string) {
	w.mu.Lock()
	w.seen[entry]++
	w.mu.Unlock()
}

// Non-transitivity through the drain verbs: carol's agent holds claim,
// complete and the rest on bob's inbox, where alice's and dave's agents
// (other friends) and bob's own worker also put and take work. Every todo
// carol's grant receives — through CreateFor, Get, List, Claim, ClaimN,
// CompleteAndClaim, Work and GrantTodos — is the host's view less every
// field that names alice, dave, their grants and edges, bob's worker or
// another creator's dedup key and tracestate; and alice, whose todos
// carol works, learns nothing of carol from her own todos (Get, List, her
// webhook's deliveries). The host (InspectTodo) and bob's own worker still
// see everything.
func TestFriendLearnsNothingOfOtherParties(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		rcv := newReceiver(t, 0)
		old := h.sb
		hooked, err := sb.New(h.st, &sb.Config{Clock: h.clock, Issuers: []sb.Issuer{h.iss.Config()}, Quotas: testQuotas,
			Webhooks: &sb.WebhookConfig{Key: webhookKey, Origins: []string{rcv.srv.URL}, AllowPrivate: true, AllowHTTP: true}})
		require.NoError(t, err)
		require.NoError(t, old.Close())
		h.sb = hooked
		t.Cleanup(func() { hooked.Close() })
		worker := h.worker(h.bob, "bob-desk", "inbox")
		// Alice's agent creates, reads its own todos and hears how they end.
		aliceGrant, alice := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbWebhook, sb.VerbGet, sb.VerbList))
		h.publish(h.iss.Human("dave"), "dave-bot", true)
		dave := h.iss.Human("dave")
		daveGrant, daveCred := h.friend(dave, h.bob, "dave-bot", "bob-desk", scope("inbox", sb.VerbCreateFor))
		drain := scope("inbox", sb.VerbCreateFor, sb.VerbGet, sb.VerbList, sb.VerbClaim, sb.VerbHeartbeat,
			sb.VerbComplete, sb.VerbFail, sb.VerbRelease)
		carolGrant, carol := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", drain)
		_, _, err = h.sb.RegisterWebhook(ctx, alice, rcv.srv.URL+"/alice")
		require.NoError(t, err)
		startRun(t, h)

		workerGrant, err := h.sb.Authenticate(ctx, worker)
		require.NoError(t, err)
		humanJSON := func(x sb.Human) string { b, _ := json.Marshal(x); return string(b) }
		w := &friendWatch{t: t, h: h, seen: map[string]int{}, forbidden: map[string][]string{
			carolGrant.ID: {"alice-bot", "dave-bot", aliceGrant.ID, aliceGrant.EdgeID, daveGrant.ID, daveGrant.EdgeID, workerGrant.ID,
				humanJSON(h.alice), humanJSON(dave), "dk-alice", "dk-dave", "alicevendor", "davevendor"},
			aliceGrant.ID: {"carol-bot", carolGrant.ID, carolGrant.EdgeID, workerGrant.ID, humanJSON(h.carol), "dk-carol"},
		}}
		trace := func(vendor string) sb.Trace {
			return sb.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: vendor + "=secret"}
		}
		create := func(c sb.Credential, who string, i int) sb.Todo {
			td, created, err := h.sb.CreateFor(ctx, c, "inbox", sb.NewTodo{Kind: "job", Title: "a job", Payload: []byte(`{"n":1}`),
				DedupKey: "dk-" + who + "-" + itoa(int64(i)), Trace: trace(who + "vendor")})
			require.NoError(t, err)
			require.True(t, created)
			return td
		}
		var aliceTodos []sb.Todo
		for i := range 6 {
			aliceTodos = append(aliceTodos, create(alice, "alice", i))
		}
		for i := range 4 {
			create(daveCred, "dave", i)
		}
		// Bob's worker takes alice's first todo and fails it: it comes
		// back with an attempt of bob's worker in its history.
		_, l, err := h.sb.Claim(ctx, worker, "inbox", nil)
		require.NoError(t, err)
		require.NoError(t, h.sb.Fail(ctx, worker, l, "try later"))
		h.clock.Advance(31 * time.Second) // past the first retry's backoff

		// Carol's own todos, and CreateFor's answer to a repeated key.
		own := create(carol, "carol", 0)
		w.check("CreateFor", carolGrant.ID, own)
		again, created, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "job", DedupKey: "dk-carol-0"})
		require.NoError(t, err)
		require.False(t, created)
		w.check("CreateFor (dedup)", carolGrant.ID, again)

		// Claim, then ClaimN, then CompleteAndClaim.
		td, l, err := h.sb.Claim(ctx, carol, "inbox", nil)
		require.NoError(t, err)
		w.check("Claim", carolGrant.ID, td)
		got, err := h.sb.ClaimN(ctx, carol, "inbox", 3, nil)
		require.NoError(t, err)
		require.Len(t, got, 3)
		for _, c := range got {
			w.check("ClaimN", carolGrant.ID, c.Todo)
		}
		next, err := h.sb.CompleteAndClaim(ctx, carol, l, []byte(`"done"`), 2, nil)
		require.NoError(t, err)
		require.NotEmpty(t, next)
		for _, c := range next {
			w.check("CompleteAndClaim", carolGrant.ID, c.Todo)
		}
		for _, c := range append(got, next...) {
			require.NoError(t, h.sb.Complete(ctx, carol, c.Lease, []byte(`"done"`)))
		}

		// Work drains the rest (bob's worker's failed todo among them).
		require.NoError(t, h.sb.Work(ctx, carol, "inbox", func(_ context.Context, td sb.Todo) ([]byte, error) {
			w.check("Work", carolGrant.ID, td)
			return []byte(`"worked"`), nil
		}, &sb.WorkOptions{UntilEmpty: true, Concurrency: 2}))

		// Everything carol touched, read back.
		list, err := h.sb.List(ctx, carol, "inbox", &sb.ListOptions{Limit: 1000})
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(list), 8, "carol lists what she created and claimed")
		for _, td := range list {
			w.check("List", carolGrant.ID, td)
			one, err := h.sb.Get(ctx, carol, td.ID)
			require.NoError(t, err)
			w.check("Get", carolGrant.ID, one)
		}
		mine, err := h.sb.GrantTodos(ctx, h.carol, carolGrant.ID, nil)
		require.NoError(t, err)
		require.NotEmpty(t, mine)
		for _, td := range mine {
			w.check("GrantTodos (the friend's human)", carolGrant.ID, td)
		}

		// Alice, whose todos carol completed, sees no trace of carol.
		for _, td := range aliceTodos {
			one, err := h.sb.Get(ctx, alice, td.ID)
			require.NoError(t, err)
			require.Equal(t, sb.TodoDone, one.State)
			w.check("Get (the creator)", aliceGrant.ID, one)
		}
		for range aliceTodos {
			rcv.wait(t, h)
		}
		for _, r := range rcv.all() {
			var body struct {
				Data struct {
					Todo sb.Todo `json:"todo"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(r.body, &body))
			w.checkPast("webhook delivery (the creator)", aliceGrant.ID, body.Data.Todo)
		}
		for _, entry := range []string{"CreateFor", "Claim", "ClaimN", "CompleteAndClaim", "Work", "List", "Get", "GrantTodos (the friend's human)", "webhook delivery (the creator)"} {
			require.Positive(t, w.seen[entry], "no todo came through %s: the test checked nothing there", entry)
		}

		// The owner's own worker and the host see everything.
		for _, td := range aliceTodos {
			host, err := h.sb.InspectTodo(ctx, td.ID)
			require.NoError(t, err)
			require.Equal(t, aliceGrant.ID, host.Origin.Grant)
			require.NotEmpty(t, host.DedupKey)
			bobs, err := h.sb.Get(ctx, worker, td.ID)
			require.NoError(t, err)
			require.Equal(t, host, bobs)
			last := host.History[len(host.History)-1]
			require.Equal(t, [2]string{"carol-bot", carolGrant.ID}, [2]string{last.Agent, last.Grant}, "the host sees who worked it")
		}
	})
}
