package switchboard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

func ExampleSwitchboard_Request() {
	ctx := context.Background()
	// A local OIDC issuer stands in for the humans' identity provider.
	iss, err := switchboardtest.NewIssuer("my-client-id")
	if err != nil {
		log.Fatal(err)
	}
	defer iss.Close()
	sb, err := switchboard.New(memory.New(), &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
	if err != nil {
		log.Fatal(err)
	}
	alice, bob := iss.Human("alice"), iss.Human("bob")
	for _, p := range []switchboard.Persona{
		{ID: "alice-bot", Owner: alice, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Alice's assistant", Description: "Books travel", Version: "1.0",
			URL: "https://hub.example/agents/alice-bot",
		})},
		{ID: "bob-desk", Owner: bob, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Bob's desk", Description: "Pays invoices", Version: "1.0",
			URL: "https://hub.example/agents/bob-desk",
		})},
	} {
		if _, err := sb.Publish(ctx, p); err != nil {
			log.Fatal(err)
		}
	}

	// Alice's agent keeps the pickup secret (it collects its credential
	// with it after approval); the request carries only its verifier.
	_, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{
		From: "alice-bot", To: "bob-desk", Why: "I forward invoices from Alice's travel bookings",
		Scope:  switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbGet}}},
		Pickup: pickup,
	}
	// The requester's host starts Alice's OIDC login with RequestNonce(req),
	// so the ID token it gets back proves Alice asked for exactly this
	// request.
	nonce := switchboard.RequestNonce(req)
	req.IDToken = iss.Token(switchboardtest.Login{Subject: "alice", Name: "Alice Liddell", Email: "alice@example.com", Nonce: nonce, At: time.Now()})
	edge, _, err := sb.Request(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("edge:", edge.State)

	// The approval waits in Bob's own approvals queue.
	todos, err := sb.Approvals(ctx, bob)
	if err != nil {
		log.Fatal(err)
	}
	ap := todos[0].Approval
	fmt.Printf("who: %s <%s> via %q\n", ap.Human.Name, ap.Human.Email, ap.From.Card.Name)
	fmt.Println("why:", ap.Why)
	fmt.Println("scope:", ap.ScopeText)
	// Output:
	// edge: pending
	// who: Alice Liddell <alice@example.com> via "Alice's assistant"
	// why: I forward invoices from Alice's travel bookings
	// scope: [queue "invoices": create todos; read the todos it created or claimed]
}

func ExampleSwitchboard_Approve() {
	ctx := context.Background()
	iss, err := switchboardtest.NewIssuer("my-client-id")
	if err != nil {
		log.Fatal(err)
	}
	defer iss.Close()
	sb, err := switchboard.New(memory.New(), &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
	if err != nil {
		log.Fatal(err)
	}
	alice, bob := iss.Human("alice"), iss.Human("bob")
	for _, p := range []switchboard.Persona{
		{ID: "alice-bot", Owner: alice, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Alice's assistant", Description: "Books travel", Version: "1.0",
			URL: "https://hub.example/agents/alice-bot",
		})},
		{ID: "bob-desk", Owner: bob, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Bob's desk", Description: "Pays invoices", Version: "1.0",
			URL: "https://hub.example/agents/bob-desk",
		})},
	} {
		if _, err := sb.Publish(ctx, p); err != nil {
			log.Fatal(err)
		}
	}
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{
		From: "alice-bot", To: "bob-desk", Why: "I forward invoices",
		Scope:  switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbGet}}},
		Pickup: pickup,
	}
	req.IDToken = iss.RequestToken("alice", req, time.Now())
	edge, _, err := sb.Request(ctx, req)
	if err != nil {
		log.Fatal(err)
	}

	// Bob approves, narrowing the scope to create_for only. Anything wider
	// than the request would be ErrScopeExceedsRequest.
	narrowed := switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	grant, err := sb.Approve(ctx, bob, edge.ID, narrowed)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted:", grant.Scope.Describe())
	fmt.Println("holder:", grant.Holder, "target:", grant.Target)

	// Alice's agent — on its own host — collects the credential, once.
	_, credential, err := sb.Collect(ctx, edge.ID, secret)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("credential prints as:", credential) // redacted; string(credential) is the secret
	_, _, err = sb.Collect(ctx, edge.ID, secret)
	fmt.Println("again:", errors.Is(err, switchboard.ErrNotFound))
	// Output:
	// granted: [queue "invoices": create todos]
	// holder: alice-bot target: bob-desk
	// credential prints as: sbg_[redacted]
	// again: true
}

func ExampleSwitchboard_CreateFor() {
	ctx := context.Background()
	iss, err := switchboardtest.NewIssuer("my-client-id")
	if err != nil {
		log.Fatal(err)
	}
	defer iss.Close()
	sb, err := switchboard.New(memory.New(), &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
	if err != nil {
		log.Fatal(err)
	}
	alice, bob := iss.Human("alice"), iss.Human("bob")
	for _, p := range []switchboard.Persona{
		{ID: "alice-bot", Owner: alice, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Alice's assistant", Description: "Books travel", Version: "1.0",
			URL: "https://hub.example/agents/alice-bot",
		})},
		{ID: "bob-desk", Owner: bob, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Bob's desk", Description: "Pays invoices", Version: "1.0",
			URL: "https://hub.example/agents/bob-desk",
		})},
	} {
		if _, err := sb.Publish(ctx, p); err != nil {
			log.Fatal(err)
		}
	}
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{
		From: "alice-bot", To: "bob-desk", Why: "I forward invoices",
		Scope:  switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}},
		Pickup: pickup,
	}
	req.IDToken = iss.RequestToken("alice", req, time.Now())
	edge, _, err := sb.Request(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Approve(ctx, bob, edge.ID, nil); err != nil {
		log.Fatal(err)
	}
	_, credential, err := sb.Collect(ctx, edge.ID, secret)
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
	again, created, err := sb.CreateFor(ctx, credential, "invoices", switchboard.NewTodo{Kind: "invoice.pay", DedupKey: "inv-2026-118"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("retry returns the same todo:", again.ID == todo.ID, created)

	// A queue outside the grant looks exactly like one that does not exist.
	_, _, err = sb.CreateFor(ctx, credential, "payroll", switchboard.NewTodo{Kind: "x"})
	fmt.Println(err)
	// Output:
	// Hotel, 3 nights queued true from alice-bot
	// retry returns the same todo: true false
	// switchboard: create_for: not found: queue "payroll"
}

func ExampleSwitchboard_Claim() {
	ctx := context.Background()
	// Draining one's own queue needs no identity provider: the host
	// authenticated Bob, and Bob vends his own agent a credential.
	sb, err := switchboard.New(memory.New(), nil)
	if err != nil {
		log.Fatal(err)
	}
	bob := switchboard.Human{Issuer: "https://accounts.example.com", Subject: "bob"}
	if _, err := sb.Publish(ctx, switchboard.Persona{ID: "bob-desk", Owner: bob, Card: switchboard.PersonaCard(switchboard.CardFields{
		Name: "Bob's desk", Description: "Pays invoices", Version: "1.0",
		URL: "https://hub.example/agents/bob-desk",
	})}); err != nil {
		log.Fatal(err)
	}
	_, worker, err := sb.Vend(ctx, bob, switchboard.VendRequest{
		Agent: "bob-desk",
		Scope: switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{
			switchboard.VerbCreateFor, switchboard.VerbClaim, switchboard.VerbComplete}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, _, err := sb.CreateFor(ctx, worker, "invoices", switchboard.NewTodo{Kind: "invoice.pay", Title: "Hotel"}); err != nil {
		log.Fatal(err)
	}

	todo, lease, err := sb.Claim(ctx, worker, "invoices", &switchboard.ClaimOptions{Lease: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed:", todo.Title, "attempt", lease.Attempt)
	// The lease fences the work: only its holder can complete it.
	if err := sb.Complete(ctx, worker, lease, []byte("paid")); err != nil {
		log.Fatal(err)
	}
	_, _, err = sb.Claim(ctx, worker, "invoices", nil)
	fmt.Println(err)
	// Output:
	// claimed: Hotel attempt 1
	// switchboard: claim: queue empty
}

// A human keeps a signed checkpoint and a proof of their approval; later,
// with the log's public key alone, they check that the approval is in the
// log and that the log has only grown since.
func ExampleVerifyInclusion() {
	ctx := context.Background()
	iss, err := switchboardtest.NewIssuer("my-client-id")
	if err != nil {
		log.Fatal(err)
	}
	defer iss.Close()
	// The host's log key: the private half in its configuration, the
	// public half published.
	skey, vkey, err := switchboard.NewLogKey("audit.example.com/switchboard")
	if err != nil {
		log.Fatal(err)
	}
	sb, err := switchboard.New(memory.New(), &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}, LogKey: skey})
	if err != nil {
		log.Fatal(err)
	}
	bob := iss.Human("bob")
	if _, err := sb.Publish(ctx, switchboard.Persona{ID: "bob-desk", Owner: bob, Discoverable: true,
		Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Bob's desk", Description: "Pays invoices", Version: "1.0",
			URL: "https://hub.example/agents/bob-desk",
		})}); err != nil {
		log.Fatal(err)
	}
	grant, _, err := sb.Vend(ctx, bob, switchboard.VendRequest{Agent: "bob-desk",
		Scope: switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbClaim}}}})
	if err != nil {
		log.Fatal(err)
	}

	// Bob keeps a checkpoint and the proof of the event that minted it.
	evs, err := sb.Events(ctx, 0, 100)
	if err != nil {
		log.Fatal(err)
	}
	minted := evs[len(evs)-1]
	cp, err := sb.Checkpoint(ctx)
	if err != nil {
		log.Fatal(err)
	}
	proof, err := sb.ProveEvent(ctx, minted.Seq, cp.Size)
	if err != nil {
		log.Fatal(err)
	}
	kept := cp.Note // bytes Bob stores wherever he likes

	// Later, and elsewhere: the note's signature and the proof.
	old, err := switchboard.OpenCheckpoint(kept, vkey)
	if err != nil {
		log.Fatal(err)
	}
	ev, err := switchboard.VerifyInclusion(old, proof)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("in the log:", ev.Type, ev.Grant == grant.ID)

	// The log grows; today's checkpoint extends the kept one.
	if err := sb.Revoke(ctx, bob, grant.ID); err != nil {
		log.Fatal(err)
	}
	today, err := sb.Checkpoint(ctx)
	if err != nil {
		log.Fatal(err)
	}
	p, err := sb.ProveConsistency(ctx, old.Size, today.Size)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("only appended since:", switchboard.VerifyConsistency(old, today, p) == nil)
	// Output:
	// in the log: grant.minted true
	// only appended since: true
}

// Payloads as Go types: NewTodoOf encodes one, PayloadOf decodes it in the
// worker, strictly.
func ExamplePayloadOf() {
	type invoice struct {
		Number string `json:"number"`
		Cents  int    `json:"cents"`
	}
	nt, err := switchboard.NewTodoOf("invoice.pay", invoice{Number: "INV-7", Cents: 12900})
	if err != nil {
		log.Fatal(err)
	}
	nt.DedupKey = "INV-7"
	// … CreateFor(ctx, credential, "invoices", nt); later, in a handler:
	td := switchboard.Todo{ID: "todo_example", Kind: nt.Kind, Payload: nt.Payload}
	inv, err := switchboard.PayloadOf[invoice](td)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(inv.Number, inv.Cents)
	_, err = switchboard.PayloadOf[invoice](switchboard.Todo{ID: "todo_bad", Payload: []byte(`{"number":"1","NUMBER":"2"}`)})
	fmt.Println(errors.Is(err, switchboard.ErrInvalidArgument))
	// Output:
	// INV-7 12900
	// true
}

// The README's five-minute tour, whole: every line of its code block is a
// line of this function (TestReadmeCodeIsCompiled checks).
func Example_tour() {
	ctx := context.Background()
	iss, _ := switchboardtest.NewIssuer("my-client-id") // stands in for your identity provider
	defer iss.Close()
	alice, bob := iss.Human("alice"), iss.Human("bob")
	st := memory.New() // or bolt.Open("switchboard.db", nil)
	sb, _ := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
	defer sb.Close()
	go sb.Run(ctx) // housekeeping: expired leases, requests and grants; webhook delivery

	// 1. Discover: each human publishes an agent with an A2A Agent Card.
	sb.Publish(ctx, switchboard.Persona{ID: "alice-bot", Owner: alice, Discoverable: true,
		Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Alice's bot", Description: "Books travel", Version: "1.0",
			URL: "https://hub.example/agents/alice-bot/",
		})})
	sb.Publish(ctx, switchboard.Persona{ID: "bob-desk", Owner: bob, Discoverable: true,
		Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Bob's desk", Description: "Pays invoices", Version: "1.0",
			URL: "https://hub.example/agents/bob-desk/",
		})})

	// 2. Request: alice-bot asks for a scope, proven by Alice's ID token,
	// whose nonce binds it to this request. It keeps the pickup secret.
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Why: "I forward invoices", Pickup: pickup,
		Scope: switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbGet}}}}
	req.IDToken = iss.RequestToken("alice", req, time.Now()) // Alice's login, bound to this request by its nonce
	edge, _, _ := sb.Request(ctx, req)

	// 3. The approval waits in Bob's own approvals queue: who, why, what.
	approvals, _ := sb.Approvals(ctx, bob)
	fmt.Println(strings.Join(approvals[0].Approval.ScopeText, "\n"))

	// 4. Approval is the vend — here narrowed to create_for.
	grant, _ := sb.Approve(ctx, bob, edge.ID, switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}})

	// 5. alice-bot collects its credential, once, with its secret.
	_, credential, _ := sb.Collect(ctx, edge.ID, secret)

	// 6. Work flows as durable, deduplicated todos.
	todo, _, _ := sb.CreateFor(ctx, credential, "invoices", switchboard.NewTodo{Kind: "invoice.pay", DedupKey: "inv-118", Payload: []byte(`{"cents":12900}`)})

	// 7. Bob vends his own worker a credential; it drains the queue with a
	// typed handler per kind.
	_, worker, _ := sb.Vend(ctx, bob, switchboard.VendRequest{Agent: "bob-desk",
		Scope: switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbHeartbeat, switchboard.VerbComplete, switchboard.VerbFail, switchboard.VerbGet}}}})
	type payment struct {
		Cents int `json:"cents"`
	}
	var kinds switchboard.Kinds
	switchboard.HandleKind(&kinds, "invoice.pay", func(ctx context.Context, t switchboard.Todo, in payment) (string, error) {
		return fmt.Sprintf("paid %d cents", in.Cents), nil
	})
	sb.Work(ctx, worker, "invoices", kinds.Handler(), &switchboard.WorkOptions{UntilEmpty: true})
	done, _ := sb.Get(ctx, worker, todo.ID)
	fmt.Println(done.State, string(done.Result))

	// 8. Either human revokes at once; the next call fails.
	sb.Revoke(ctx, bob, grant.ID)
	_, _, err := sb.CreateFor(ctx, credential, "invoices", switchboard.NewTodo{Kind: "invoice.pay"})
	fmt.Println(todo.Kind, errors.Is(err, switchboard.ErrUnauthenticated))
	// Output:
	// queue "invoices": create todos; read the todos it created or claimed
	// done "paid 12900 cents"
	// invoice.pay true
}

// A Go receiver of switchboard's webhooks checks each delivery's Standard
// Webhooks headers against the raw body before trusting it, and
// deduplicates on the id it returns.
func ExampleVerifyWebhook() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // what RegisterWebhook returned
	seen := map[string]bool{}
	receive := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		id, err := switchboard.VerifyWebhook(secret, r.Header, body, time.Now(), 0)
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if !seen[id] { // at least once: handle each id once
			seen[id] = true
			fmt.Printf("%s: %s\n", id, body)
		}
		w.WriteHeader(http.StatusNoContent)
	}

	// A delivery as switchboard sends it, twice.
	body := []byte(`{"type":"todo.completed","timestamp":"2026-12-05T08:00:00Z","data":{"todo":{"id":"todo_1"}}}`)
	sent := time.Now()
	sig, _ := switchboard.SignWebhook(secret, "msg_1", sent, body)
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
		req.Header.Set("webhook-id", "msg_1")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(sent.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		rec := httptest.NewRecorder()
		receive(rec, req)
		fmt.Println(rec.Code)
	}
	// Output:
	// msg_1: {"type":"todo.completed","timestamp":"2026-12-05T08:00:00Z","data":{"todo":{"id":"todo_1"}}}
	// 204
	// 204
}

// A Go agent receives the outcomes of the todos it handed over with
// ReceiveWebhook: the check and the decoding in one call, then the todo as
// the agent sees it, deduplicated on the delivery's ID.
func ExampleReceiveWebhook() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // what RegisterWebhook returned
	seen := map[string]bool{}
	receive := func(w http.ResponseWriter, r *http.Request) {
		d, err := switchboard.ReceiveWebhook(r, secret, time.Now())
		if err != nil {
			http.Error(w, "bad delivery", http.StatusUnauthorized)
			return
		}
		if !seen[d.ID] { // at least once: handle each delivery once
			seen[d.ID] = true
			fmt.Println(d.Type, d.Todo.ID, string(d.Todo.Result))
		}
		w.WriteHeader(http.StatusNoContent)
	}

	// A delivery as switchboard sends it, twice, then a forged one.
	body := []byte(`{"type":"todo.completed","timestamp":"2026-12-05T08:00:00Z","data":{"todo":{"id":"todo_1","state":"done","result":{"paid":true}}}}`)
	sent := time.Now()
	sig, _ := switchboard.SignWebhook(secret, "msg_1", sent, body)
	for _, s := range []string{sig, sig, "v1,forged"} {
		req := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
		req.Header.Set("webhook-id", "msg_1")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(sent.Unix(), 10))
		req.Header.Set("webhook-signature", s)
		rec := httptest.NewRecorder()
		receive(rec, req)
		fmt.Println(rec.Code)
	}
	// Output:
	// todo.completed todo_1 {"paid":true}
	// 204
	// 204
	// 401
}

// A worker registers one handler per kind of todo, each with its own
// payload and result types, and serves them all with the one Handler Work
// takes (here called directly on todos, as Work would): a todo of a kind
// with no handler fails its attempt.
func ExampleHandleKind() {
	type payment struct {
		Number string `json:"number"`
		Cents  int    `json:"cents"`
	}
	type check struct {
		Number string `json:"number"`
	}
	var kinds switchboard.Kinds
	switchboard.HandleKind(&kinds, "invoice.pay", func(ctx context.Context, t switchboard.Todo, p payment) (string, error) {
		return fmt.Sprintf("paid %s: %d cents", p.Number, p.Cents), nil
	})
	switchboard.HandleKind(&kinds, "invoice.check", func(ctx context.Context, t switchboard.Todo, c check) (bool, error) {
		return c.Number != "", nil
	})
	handle := kinds.Handler() // sb.Work(ctx, worker, "invoices", kinds.Handler(), nil)

	for _, t := range []switchboard.Todo{
		{ID: "todo_1", Kind: "invoice.pay", Payload: []byte(`{"number":"INV-7","cents":12900}`)},
		{ID: "todo_2", Kind: "invoice.check", Payload: []byte(`{"number":"INV-8"}`)},
		{ID: "todo_3", Kind: "invoice.check", Payload: []byte(`{"number":"INV-9","amount":1}`)},
		{ID: "todo_4", Kind: "invoice.shred", Payload: []byte(`{}`)},
	} {
		result, err := handle(context.Background(), t)
		fmt.Printf("%s %s: %s %v\n", t.ID, t.Kind, result, err)
	}
	// Output:
	// todo_1 invoice.pay: "paid INV-7: 12900 cents" <nil>
	// todo_2 invoice.check: true <nil>
	// todo_3 invoice.check:  switchboard: payload: todo todo_3: invalid argument: JSON: json: unknown field "amount"
	// todo_4 invoice.shred:  switchboard: todo todo_4: kind "invoice.shred": no handler for the todo's kind
}

// A host serving a grant bound to the agent's key: each request carries the
// credential and a DPoP proof of that request, which Prove checks and
// spends before the call acts with the Proven.
func ExampleSwitchboard_Prove() {
	ctx := context.Background()
	iss, _ := switchboardtest.NewIssuer("my-client-id")
	defer iss.Close()
	sb, _ := switchboard.New(memory.New(), &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
	defer sb.Close()
	alice, bob := iss.Human("alice"), iss.Human("bob")
	sb.Publish(ctx, switchboard.Persona{ID: "alice-bot", Owner: alice, Card: switchboard.PersonaCard(switchboard.CardFields{
		Name: "Alice's bot", Description: "a", Version: "1.0",
		URL: "https://hub.example/agents/alice-bot/",
	})})
	sb.Publish(ctx, switchboard.Persona{ID: "bob-desk", Owner: bob, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
		Name: "Bob's desk", Description: "b", Version: "1.0",
		URL: "https://hub.example/agents/bob-desk/",
	})})

	// alice-bot's key pair: it sends the public half with its request.
	key, _ := switchboardtest.NewProofKey("ES256")
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Why: "invoices", Pickup: pickup, Key: key.JWK(),
		Scope: switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}}
	req.IDToken = iss.RequestToken("alice", req, time.Now())
	edge, _, _ := sb.Request(ctx, req)
	sb.Approve(ctx, bob, edge.ID, nil)
	const collectURL = "https://hub.example/edges/collect"
	_, cred, _ := sb.CollectWithProof(ctx, edge.ID, secret, key.Proof("POST", collectURL, secret, time.Now()))

	// The host's route for agents.
	const publicURL = "https://hub.example/todos"
	handle := func(w http.ResponseWriter, r *http.Request) {
		cred := switchboard.Credential(strings.TrimPrefix(r.Header.Get("Authorization"), "DPoP "))
		p, err := sb.Prove(ctx, cred, switchboard.Proof{JWT: r.Header.Get("DPoP"), Method: r.Method, URL: publicURL})
		if err != nil {
			w.Header().Set("WWW-Authenticate", `DPoP error="invalid_dpop_proof", algs="`+switchboard.DPoPAlgorithms+`"`)
			http.Error(w, switchboard.StatusOf(err).Code, http.StatusUnauthorized)
			return
		}
		todo, _, err := sb.CreateFor(ctx, p, "invoices", switchboard.NewTodo{Kind: "invoice.pay"})
		if err != nil {
			http.Error(w, switchboard.StatusOf(err).Code, switchboard.StatusOf(err).HTTP)
			return
		}
		fmt.Fprint(w, todo.Kind)
	}

	send := func(proof string) {
		r := httptest.NewRequest(http.MethodPost, publicURL, nil)
		r.Header.Set("Authorization", "DPoP "+string(cred))
		r.Header.Set("DPoP", proof)
		rec := httptest.NewRecorder()
		handle(rec, r)
		fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	proof := key.Proof("POST", publicURL, string(cred), time.Now()).JWT
	send(proof)
	send(proof) // replayed
	send("")    // the credential alone, as a leak would be used
	// Output:
	// 200 invoice.pay
	// 401 invalid_dpop_proof
	// 401 dpop_required
}
