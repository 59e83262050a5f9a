package switchboard_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
)

var inboxCreate = scope("inbox", sb.VerbCreateFor)

// Confirmation 1: a friend request creates a pending edge that grants no
// access until approved.
func TestPendingEdgeGrantsNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "send you invoices")
		require.NoError(t, err)
		assert.Equal(t, sb.EdgePending, e.State)
		assert.Empty(t, e.GrantID)
		assert.Equal(t, h.alice, e.Requester)

		// The approval landed as a todo in bob's approvals queue, legible.
		aps, err := h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		require.Len(t, aps, 1)
		ap := aps[0].Approval
		require.NotNil(t, ap)
		assert.Equal(t, e.ID, ap.EdgeID)
		assert.Equal(t, "alice-bot", ap.From.ID)
		assert.Equal(t, "alice-bot", ap.From.Card.Name)
		assert.Equal(t, "alice Example", ap.Human.Name)
		assert.Equal(t, "alice@example.com", ap.Human.Email)
		assert.Equal(t, h.iss.URL(), ap.Human.Issuer)
		assert.Equal(t, "send you invoices", ap.Why)
		assert.Equal(t, []string{`queue "inbox": create todos`}, ap.ScopeText)
		assert.Contains(t, ap.Text(), "verified by "+h.iss.URL())
		assert.Equal(t, sb.KindFriendRequest, aps[0].Kind)

		// No grant exists: the only credentials alice holds are her own, and
		// none of them reaches bob's queues.
		own := h.worker(h.alice, "alice-bot", "inbox")
		_, _, err = h.sb.CreateFor(ctx, own, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrForbidden) // her own worker lacks create_for
		_, _, err = h.sb.Vend(ctx, h.alice, sb.VendRequest{Agent: "alice-bot", Target: "bob-desk", Scope: inboxCreate})
		require.ErrorIs(t, err, sb.ErrNotFound)
		guess := sb.Credential("sbg_" + strings.Repeat("A", 43))
		_, _, err = h.sb.CreateFor(ctx, guess, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated)
		evs, err := h.sb.Events(ctx, 0, 1000)
		require.NoError(t, err)
		for _, ev := range evs {
			assert.False(t, ev.Type == sb.EventGrantMinted && ev.Edge != "", "grant minted before approval: %+v", ev)
		}

		// Approval mints the grant; only then does CreateFor work.
		g, err := h.sb.Approve(ctx, h.bob, e.ID, nil)
		require.NoError(t, err)
		assert.Equal(t, e.ID, g.EdgeID)
		_, cred, err := h.sb.Collect(ctx, e.ID, testSecret)
		require.NoError(t, err)
		td, created, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "invoice", Title: "pay"})
		require.NoError(t, err)
		assert.True(t, created)
		assert.Equal(t, sb.TodoQueued, td.State)

		// The approval todo is resolved and gone from the queue.
		aps, err = h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		assert.Empty(t, aps)
		got, err := h.sb.Edge(ctx, h.bob, e.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeApproved, got.State)
		assert.Equal(t, g.ID, got.GrantID)
	})
}

// Confirmation 2: the grant's scope is requested ∩ narrowing, never wider
// than either.
func TestApprovalScopeIsIntersection(t *testing.T) {
	requested := sb.Scope{
		{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor, sb.VerbGet}},
		{Queue: "reports", Verbs: []sb.Verb{sb.VerbCreateFor}},
	}
	cases := []struct {
		name     string
		narrowed sb.Scope
		want     sb.Scope
		err      error
	}{
		{"nil grants as requested", nil, requested, nil},
		{"same as requested", requested, requested, nil},
		{"drop a queue", scope("inbox", sb.VerbCreateFor, sb.VerbGet), scope("inbox", sb.VerbCreateFor, sb.VerbGet), nil},
		{"drop a verb", sb.Scope{{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor}}, {Queue: "reports", Verbs: []sb.Verb{sb.VerbCreateFor}}},
			sb.Scope{{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor}}, {Queue: "reports", Verbs: []sb.Verb{sb.VerbCreateFor}}}, nil},
		{"widen with a verb", scope("inbox", sb.VerbCreateFor, sb.VerbClaim), nil, sb.ErrScopeExceedsRequest},
		{"widen with a queue", scope("private", sb.VerbCreateFor), nil, sb.ErrScopeExceedsRequest},
		{"narrow one, widen another", sb.Scope{{Queue: "inbox", Verbs: []sb.Verb{sb.VerbGet}}, {Queue: "reports", Verbs: []sb.Verb{sb.VerbCreateFor, sb.VerbList}}}, nil, sb.ErrScopeExceedsRequest},
		{"empty narrowing", sb.Scope{}, nil, sb.ErrInvalidArgument},
		{"reserved queue", scope(sb.ApprovalsQueue, sb.VerbGet), nil, sb.ErrInvalidArgument},
	}
	eachBackend(t, func(t *testing.T, h *harness) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e, err := h.request(h.alice, "alice-bot", "bob-desk", requested, "case "+tc.name)
				require.NoError(t, err)
				defer func() { _ = h.sb.Withdraw(ctx, h.alice, e.ID) }()
				g, err := h.sb.Approve(ctx, h.bob, e.ID, tc.narrowed)
				if tc.err != nil {
					require.ErrorIs(t, err, tc.err)
					_, _, cerr := h.sb.Collect(ctx, e.ID, testSecret)
					require.ErrorIs(t, cerr, sb.ErrNotFound, "nothing to collect")
					// Nothing changed: still pending, still awaiting bob.
					got, err := h.sb.Edge(ctx, h.bob, e.ID)
					require.NoError(t, err)
					assert.Equal(t, sb.EdgePending, got.State)
					assert.Empty(t, got.GrantID)
					aps, err := h.sb.Approvals(ctx, h.bob)
					require.NoError(t, err)
					require.Len(t, aps, 1)
					return
				}
				require.NoError(t, err)
				_, cred, err := h.sb.Collect(ctx, e.ID, testSecret)
				require.NoError(t, err)
				assert.True(t, sb.Equal(tc.want, g.Scope), "granted %v, want %v", g.Scope, tc.want)
				assert.True(t, sb.Subset(g.Scope, requested))
				if tc.narrowed != nil {
					assert.True(t, sb.Subset(g.Scope, tc.narrowed))
				}
				// The grant acts exactly on its scope.
				for _, q := range []string{"inbox", "reports", "private"} {
					_, _, err := h.sb.CreateFor(ctx, cred, q, sb.NewTodo{Kind: "k"})
					switch {
					case g.Scope.Allows(q, sb.VerbCreateFor):
						assert.NoError(t, err, q)
					default:
						assert.ErrorIs(t, err, sb.ErrNotFound, q)
					}
				}
				require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))
			})
		}
	})
}

// Confirmation 3: A→B does not grant B→A, and revoking one leaves the other.
func TestGrantsArePerDirection(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		ab, abCred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		// bob holds no credential over alice; his own agent's grants reach
		// only his queues, and he cannot vend himself into alice's.
		_, _, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Target: "alice-bot", Scope: inboxCreate})
		require.ErrorIs(t, err, sb.ErrNotFound)
		// bob may ask, separately.
		ba, baCred := h.friend(h.bob, h.alice, "bob-desk", "alice-bot", inboxCreate)
		assert.NotEqual(t, ab.ID, ba.ID)
		assert.Equal(t, "bob-desk", ab.Target)
		assert.Equal(t, "alice-bot", ba.Target)

		// A todo through A→B lands in bob's inbox, not alice's.
		td, _, err := h.sb.CreateFor(ctx, abCred, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		bobWorker := h.worker(h.bob, "bob-desk", "inbox")
		aliceWorker := h.worker(h.alice, "alice-bot", "inbox")
		_, err = h.sb.Get(ctx, bobWorker, td.ID)
		require.NoError(t, err)
		_, err = h.sb.Get(ctx, aliceWorker, td.ID)
		require.ErrorIs(t, err, sb.ErrNotFound)

		// Revoking A→B (by the requester's side) leaves B→A working.
		require.NoError(t, h.sb.Revoke(ctx, h.alice, ab.ID))
		_, _, err = h.sb.CreateFor(ctx, abCred, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated)
		_, _, err = h.sb.CreateFor(ctx, baCred, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		e, err := h.sb.Edge(ctx, h.bob, ab.EdgeID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeRevoked, e.State)
		e, err = h.sb.Edge(ctx, h.alice, ba.EdgeID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeApproved, e.State)
	})
}

// Confirmation 4: cross-agent work arrives as a todo via CreateFor, traced to
// agent, grant, edge and human; there is no A2A task intake.
func TestWorkArrivesOnlyAsTodos(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		g, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		td, created, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "invoice.review", Title: "Review", Payload: []byte(`{"n":1}`), DedupKey: "inv-1"})
		require.NoError(t, err)
		require.True(t, created)
		again, created, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "invoice.review", Title: "Review", DedupKey: "inv-1"})
		require.NoError(t, err)
		assert.False(t, created)
		assert.Equal(t, td.ID, again.ID)

		worker := h.worker(h.bob, "bob-desk", "inbox")
		got, lease, err := h.sb.Claim(ctx, worker, "inbox", nil)
		require.NoError(t, err)
		assert.Equal(t, td.ID, got.ID)
		assert.Equal(t, []byte(`{"n":1}`), got.Payload)
		assert.Equal(t, sb.Origin{Agent: "alice-bot", Grant: g.ID, Edge: g.EdgeID, Human: h.alice}, got.Origin)
		require.NoError(t, h.sb.Complete(ctx, worker, lease, []byte("paid")))
		done, err := h.sb.Get(ctx, worker, td.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoDone, done.State)
		assert.Equal(t, []byte("paid"), done.Result)
		_, _, err = h.sb.Claim(ctx, worker, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty)
	})

	// No exported method accepts an A2A task or message: the library offers
	// no way to take work except CreateFor.
	typ := reflect.TypeOf(&sb.Switchboard{})
	for i := 0; i < typ.NumMethod(); i++ {
		m := typ.Method(i)
		for _, word := range []string{"Task", "Message", "SendMessage", "A2A"} {
			assert.NotContains(t, m.Name, word, "method %s", m.Name)
		}
		for j := 1; j < m.Type.NumIn(); j++ {
			in := m.Type.In(j)
			for in.Kind() == reflect.Pointer || in.Kind() == reflect.Slice {
				in = in.Elem()
			}
			for _, word := range []string{"Task", "Message"} {
				assert.NotContains(t, in.Name(), word, "method %s takes %s", m.Name, in)
			}
		}
	}
}

// Confirmation 6: friending B exposes none of B's other personas, friends or
// queues.
func TestFriendingIsNonTransitive(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, aliceCred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbGet))
		carolGrant, carolCred := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbGet))

		// Other queues of bob-desk, and queues that do not exist at all, fail
		// identically.
		// bob's own agent keeps work in a private queue of the same persona.
		_, own, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("private", sb.VerbCreateFor, sb.VerbGet)})
		require.NoError(t, err)
		secret, _, err := h.sb.CreateFor(ctx, own, "private", sb.NewTodo{Kind: "k", Title: "secret"})
		require.NoError(t, err)
		_, err = h.sb.Get(ctx, aliceCred, secret.ID)
		require.ErrorIs(t, err, sb.ErrNotFound)
		var msgs []string
		for _, q := range []string{"private", "no-such-queue", sb.ApprovalsQueue} {
			_, _, err := h.sb.CreateFor(ctx, aliceCred, q, sb.NewTodo{Kind: "k"})
			require.ErrorIs(t, err, sb.ErrNotFound, q)
			msgs = append(msgs, err.Error())
		}
		assert.Equal(t, strings.ReplaceAll(msgs[0], `"private"`, `"no-such-queue"`), msgs[1], "exists-but-not-yours must read like does-not-exist")

		// Carol's todo in the same queue is invisible to alice.
		ct, _, err := h.sb.CreateFor(ctx, carolCred, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		_, err = h.sb.Get(ctx, aliceCred, ct.ID)
		require.ErrorIs(t, err, sb.ErrNotFound)
		_, errMissing := h.sb.Get(ctx, aliceCred, "todo_000000000000000000000000")
		require.ErrorIs(t, errMissing, sb.ErrNotFound)
		sameWords(t, errMissing, "todo_000000000000000000000000", err, ct.ID, "another friend's todo reads as an unknown one")

		// Bob's undiscoverable persona looks exactly like an unknown one, to
		// lookup and to a friend request.
		_, err1 := h.sb.Lookup(ctx, "bob-private")
		_, err2 := h.sb.Lookup(ctx, "nobody")
		require.ErrorIs(t, err1, sb.ErrNotFound)
		sameWords(t, err2, "nobody", err1, "bob-private", "lookup")
		_, err1 = h.request(h.alice, "alice-bot", "bob-private", inboxCreate, "hi")
		_, err2 = h.request(h.alice, "alice-bot", "nobody", inboxCreate, "hi")
		require.ErrorIs(t, err1, sb.ErrNotFound)
		sameWords(t, err2, "nobody", err1, "bob-private", "request")

		// Bob's edge with carol is invisible to alice; a lookup shows a card
		// and nothing else.
		_, err = h.sb.Edge(ctx, h.alice, carolGrant.EdgeID)
		require.ErrorIs(t, err, sb.ErrNotFound)
		l, err := h.sb.Lookup(ctx, "bob-desk")
		require.NoError(t, err)
		lt := reflect.TypeOf(l)
		var fields []string
		for i := 0; i < lt.NumField(); i++ {
			fields = append(fields, lt.Field(i).Name)
		}
		assert.Equal(t, []string{"ID", "Card"}, fields)
		// Alice's grant tells her nothing beyond itself.
		g, err := h.sb.Authenticate(ctx, aliceCred)
		require.NoError(t, err)
		assert.Equal(t, "bob-desk", g.Target)
		assert.True(t, sb.Equal(scope("inbox", sb.VerbCreateFor, sb.VerbGet), g.Scope))
	})
}

// Confirmation 7: revocation is instant, kills the credential, cancels queued
// work from the grant, and leaves claimed work to finish.
func TestRevocationIsInstant(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		g, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		worker := h.worker(h.bob, "bob-desk", "inbox")
		first, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", Title: "first"})
		require.NoError(t, err)
		second, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", Title: "second"})
		require.NoError(t, err)
		claimed, lease, err := h.sb.Claim(ctx, worker, "inbox", nil)
		require.NoError(t, err)
		require.Equal(t, first.ID, claimed.ID)

		// Carol cannot revoke a grant she is not party to.
		require.ErrorIs(t, h.sb.Revoke(ctx, h.carol, g.ID), sb.ErrNotFound)

		require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID))
		_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated)
		_, err = h.sb.Authenticate(ctx, cred)
		require.ErrorIs(t, err, sb.ErrUnauthenticated)
		require.NoError(t, h.sb.Revoke(ctx, h.bob, g.ID), "revoking twice is a no-op")

		queued, err := h.sb.Get(ctx, worker, second.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.TodoCancelled, queued.State)
		require.NoError(t, h.sb.Complete(ctx, worker, lease, nil), "claimed work finishes normally")
		_, _, err = h.sb.Claim(ctx, worker, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrQueueEmpty)
	})
}

// A new request while approved is a scope change: its approval replaces the
// old grant atomically.
func TestScopeChangeReplacesGrant(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		old, oldCred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		wider := sb.Scope{{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor}}, {Queue: "reports", Verbs: []sb.Verb{sb.VerbCreateFor}}}
		e, err := h.request(h.alice, "alice-bot", "bob-desk", wider, "also reports")
		require.NoError(t, err)
		// Until approved, the old grant keeps working.
		_, _, err = h.sb.CreateFor(ctx, oldCred, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		// A different request while this one is pending is a conflict.
		_, err = h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "changed my mind")
		require.ErrorIs(t, err, sb.ErrConflict)
		// The identical request returns the pending edge.
		same, err := h.request(h.alice, "alice-bot", "bob-desk", wider, "also reports")
		require.NoError(t, err)
		assert.Equal(t, e.ID, same.ID)

		_, err = h.sb.Approve(ctx, h.bob, e.ID, nil)
		require.NoError(t, err)
		_, newCred, err := h.sb.Collect(ctx, e.ID, testSecret)
		require.NoError(t, err)
		_, _, err = h.sb.CreateFor(ctx, oldCred, "inbox", sb.NewTodo{Kind: "k"})
		require.ErrorIs(t, err, sb.ErrUnauthenticated)
		_, _, err = h.sb.CreateFor(ctx, newCred, "reports", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
		oe, err := h.sb.Edge(ctx, h.alice, old.EdgeID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeReplaced, oe.State)
	})
}

func TestDenyAndWithdraw(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "please")
		require.NoError(t, err)
		// Only the target's human denies; only the requester withdraws.
		require.ErrorIs(t, h.sb.Deny(ctx, h.alice, e.ID), sb.ErrNotFound)
		require.ErrorIs(t, h.sb.Withdraw(ctx, h.bob, e.ID), sb.ErrNotFound)
		_, err = h.sb.Approve(ctx, h.alice, e.ID, nil)
		require.ErrorIs(t, err, sb.ErrNotFound, "the requester cannot approve their own request")
		require.NoError(t, h.sb.Deny(ctx, h.bob, e.ID))
		_, err = h.sb.Approve(ctx, h.bob, e.ID, nil)
		require.ErrorIs(t, err, sb.ErrInvalidTransition)
		require.ErrorIs(t, h.sb.Withdraw(ctx, h.alice, e.ID), sb.ErrInvalidTransition)
		aps, err := h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		assert.Empty(t, aps)

		e2, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "please, again")
		require.NoError(t, err)
		require.NoError(t, h.sb.Withdraw(ctx, h.alice, e2.ID))
		got, err := h.sb.Edge(ctx, h.bob, e2.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeWithdrawn, got.State)
		_, err = h.sb.Approve(ctx, h.bob, e2.ID, nil)
		require.ErrorIs(t, err, sb.ErrInvalidTransition)
	})
}

func TestPendingRequestExpires(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		e, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "please")
		require.NoError(t, err)
		h.clock.Advance(7*24*60*60*1e9 + 1)
		_, err = h.sb.Approve(ctx, h.bob, e.ID, nil)
		require.ErrorIs(t, err, sb.ErrInvalidTransition)
		// A fresh request replaces the lapsed one.
		e2, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "please")
		require.NoError(t, err)
		assert.NotEqual(t, e.ID, e2.ID)
		old, err := h.sb.Edge(ctx, h.alice, e.ID)
		require.NoError(t, err)
		assert.Equal(t, sb.EdgeExpired, old.State)
		_, err = h.sb.Approve(ctx, h.bob, e2.ID, nil)
		require.NoError(t, err)
	})
}

// Agents never perform human acts: a credential on the approvals queue can
// list approvals but not resolve them, and approval todos cannot be claimed.
func TestApprovalsQueueIsHumanOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, err := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "please")
		require.NoError(t, err)
		_, _, err = h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope(sb.ApprovalsQueue, sb.VerbClaim)})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)
		_, cred, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope(sb.ApprovalsQueue, sb.VerbList, sb.VerbGet)})
		require.NoError(t, err)
		aps, err := h.sb.Approvals(ctx, h.bob)
		require.NoError(t, err)
		require.Len(t, aps, 1)
		got, err := h.sb.Get(ctx, cred, aps[0].ID)
		require.NoError(t, err)
		assert.NotNil(t, got.Approval)
		_, _, err = h.sb.Claim(ctx, cred, sb.ApprovalsQueue, nil)
		require.True(t, errors.Is(err, sb.ErrForbidden), "claim on approvals: %v", err)
	})
}

// Authentication reads grants from a cache shared by every call; what a
// caller is handed is its own. Changing the scope Authenticate returned
// widens nothing: the next calls still see the grant as approved.
func TestAGrantHandedOutIsTheCallersOwn(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
		for range 2 {
			g, err := h.sb.Authenticate(ctx, cred)
			require.NoError(t, err)
			require.Equal(t, inboxCreate, g.Scope)
			g.Scope[0].Verbs[0] = sb.VerbClaim
			g.Scope[0].Queue = "other"
		}
		_, _, err := h.sb.Claim(ctx, cred, "inbox", nil)
		require.ErrorIs(t, err, sb.ErrForbidden)
		_, _, err = h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k"})
		require.NoError(t, err)
	})
}
