package switchboard_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/internal/testissuer"
	"github.com/switchboardhq/switchboard/store/bolt"
)

// exampleWorld opens a bbolt store in a temp dir, starts a local OIDC
// issuer, and publishes alice's agent and bob's desk.
func exampleWorld() (sb *switchboard.Switchboard, iss *testissuer.Issuer, cleanup func()) {
	dir, err := os.MkdirTemp("", "switchboard-example")
	if err != nil {
		log.Fatal(err)
	}
	st, err := bolt.Open(filepath.Join(dir, "switchboard.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	iss, err = testissuer.New("my-client-id")
	if err != nil {
		log.Fatal(err)
	}
	sb, err = switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []switchboard.Persona{
		{ID: "alice-bot", Owner: iss.Human("alice"), Discoverable: true, Card: switchboard.PersonaCard(
			"Alice's assistant", "Books travel", "1.0", "https://hub.example/agents/alice-bot")},
		{ID: "bob-desk", Owner: iss.Human("bob"), Discoverable: true, Card: switchboard.PersonaCard(
			"Bob's desk", "Pays invoices", "1.0", "https://hub.example/agents/bob-desk")},
	} {
		if _, err := sb.Publish(ctx, p); err != nil {
			log.Fatal(err)
		}
	}
	return sb, iss, func() { iss.Close(); _ = st.Close(); _ = os.RemoveAll(dir) }
}

// request sends alice-bot's friend request to bob-desk.
func exampleRequest(sb *switchboard.Switchboard, iss *testissuer.Issuer) switchboard.Edge {
	scope := switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbGet}}}
	why := "I forward invoices from Alice's travel bookings"
	// The requester's host starts Alice's OIDC login with this nonce, so the
	// ID token it gets back proves Alice asked for exactly this request.
	nonce := switchboard.RequestNonce("alice-bot", "bob-desk", scope, why)
	idToken := iss.Token("alice", "Alice Liddell", "alice@example.com", nonce, time.Now())
	edge, err := sb.Request(context.Background(), switchboard.FriendRequest{
		From: "alice-bot", To: "bob-desk", Scope: scope, Why: why, IDToken: idToken,
	})
	if err != nil {
		log.Fatal(err)
	}
	return edge
}

func ExampleSwitchboard_Request() {
	sb, iss, cleanup := exampleWorld()
	defer cleanup()

	edge := exampleRequest(sb, iss)
	fmt.Println("edge:", edge.State)

	// The approval waits in Bob's own approvals queue.
	todos, _ := sb.Approvals(context.Background(), iss.Human("bob"))
	ap := todos[0].Approval
	fmt.Printf("who: %s <%s> via %q\n", ap.Human.Name, ap.Human.Email, ap.From.Card.Name)
	fmt.Println("why:", ap.Why)
	fmt.Println("scope:", ap.ScopeText)
	// Output:
	// edge: pending
	// who: Alice Liddell <alice@example.com> via "Alice's assistant"
	// why: I forward invoices from Alice's travel bookings
	// scope: [queue "invoices": create todos, read the todos it created]
}

func ExampleSwitchboard_Approve() {
	sb, iss, cleanup := exampleWorld()
	defer cleanup()
	edge := exampleRequest(sb, iss)

	// Bob approves, narrowing the scope to create_for only. Anything wider
	// than the request would be ErrScopeExceedsRequest.
	narrowed := switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	grant, credential, err := sb.Approve(context.Background(), iss.Human("bob"), edge.ID, narrowed)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted:", grant.Scope.Describe())
	fmt.Println("holder:", grant.Holder, "target:", grant.Target)
	fmt.Println("credential prints as:", credential) // redacted; string(credential) is the secret
	// Output:
	// granted: [queue "invoices": create todos]
	// holder: alice-bot target: bob-desk
	// credential prints as: sbg_[redacted]
}

func ExampleSwitchboard_CreateFor() {
	sb, iss, cleanup := exampleWorld()
	defer cleanup()
	ctx := context.Background()
	edge := exampleRequest(sb, iss)
	_, credential, err := sb.Approve(ctx, iss.Human("bob"), edge.ID, nil)
	if err != nil {
		log.Fatal(err)
	}

	// Alice's agent hands Bob's desk work. The dedup key makes retries safe.
	todo, created, err := sb.CreateFor(ctx, credential, "invoices", switchboard.NewTodo{
		Kind: "invoice.pay", Title: "Hotel, 3 nights", Payload: []byte(`{"amount":420}`), DedupKey: "inv-2026-118",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(todo.Title, todo.State, created, "from", todo.Origin.Agent)
	again, created, _ := sb.CreateFor(ctx, credential, "invoices", switchboard.NewTodo{Kind: "invoice.pay", DedupKey: "inv-2026-118"})
	fmt.Println("retry returns the same todo:", again.ID == todo.ID, created)

	// A queue outside the grant looks exactly like one that does not exist.
	_, _, err = sb.CreateFor(ctx, credential, "payroll", switchboard.NewTodo{Kind: "x"})
	fmt.Println(err)
	// Output:
	// Hotel, 3 nights queued true from alice-bot
	// retry returns the same todo: true false
	// switchboard: create_for: not found: queue
}

func ExampleSwitchboard_Claim() {
	sb, iss, cleanup := exampleWorld()
	defer cleanup()
	ctx := context.Background()
	edge := exampleRequest(sb, iss)
	_, aliceCred, _ := sb.Approve(ctx, iss.Human("bob"), edge.ID, nil)
	_, _, _ = sb.CreateFor(ctx, aliceCred, "invoices", switchboard.NewTodo{Kind: "invoice.pay", Title: "Hotel"})

	// Bob vends his own desk agent the right to drain the queue.
	_, worker, err := sb.Vend(ctx, iss.Human("bob"), switchboard.VendRequest{
		Agent: "bob-desk",
		Scope: switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbComplete}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	todo, lease, err := sb.Claim(ctx, worker, "invoices", &switchboard.ClaimOptions{Lease: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed:", todo.Title, "attempt", lease.Attempt)
	if err := sb.Complete(ctx, worker, lease, []byte("paid")); err != nil {
		log.Fatal(err)
	}
	_, _, err = sb.Claim(ctx, worker, "invoices", nil)
	fmt.Println(err)
	// Output:
	// claimed: Hotel attempt 1
	// switchboard: claim: queue empty
}
