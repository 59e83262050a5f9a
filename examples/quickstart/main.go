// Command quickstart walks switchboard's whole flow on the embedded bbolt
// store: two humans publish agents, one agent sends a friend request proven
// by a real (local) OIDC issuer, the other human approves it with a narrower
// scope, work flows as a todo and is done, and a revocation cuts the grant
// off at once.
//
//	go run ./examples/quickstart              # a fresh store, removed at the end
//	go run ./examples/quickstart -dir state   # kept in state/: run it again
//
// With -dir, the program keeps what a real one keeps across runs, in that
// directory: the store (switchboard.db), the audit log's signing key
// (log.key) and the last checkpoint it signed (checkpoint), and the
// identity provider's identity — its URL and its signing key (issuer.key),
// which here stand in for your real provider's, the same on every run —
// so that a second run meets the same humans and agents and extends the
// same log, checked against the checkpoint the first run kept.
package main

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

func main() {
	dir := flag.String("dir", "", "keep the store, the keys and the last checkpoint in this directory, and run again on them")
	flag.Parse()
	if err := run(context.Background(), *dir); err != nil {
		log.Fatal(err)
	}
}

func step(n int, title string) { fmt.Printf("\n== %d. %s\n", n, title) }

func run(ctx context.Context, dir string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "switchboard-quickstart")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(dir, "switchboard.db")
	st, err := bolt.Open(path, nil)
	if err != nil {
		return err
	}
	defer st.Close()

	// A local identity provider stands in for Google, Okta or Entra: it
	// signs real ID tokens. Its identity is kept as your real provider's
	// is: the same URL and key on every run (a human is their issuer and
	// subject, so a new URL would be new humans). The deployment pins its
	// keys (Issuer.Keys); leave Keys nil to fetch them by OIDC discovery.
	iss, err := identityProvider(filepath.Join(dir, "issuer.key"))
	if err != nil {
		return err
	}
	// The audit log's signing key: a real host keeps it in its secrets
	// (here a file) and publishes the public half. With a new key, the
	// checkpoints signed by the old one could no longer be checked.
	logKey, err := keptLogKey(filepath.Join(dir, "log.key"))
	if err != nil {
		return err
	}
	// The last checkpoint signed is kept outside the store, and every
	// new signature must extend it: whoever can write the store cannot
	// rewrite what was signed.
	keptFile := switchboard.CheckpointFile(filepath.Join(dir, "checkpoint"))
	sb, err := switchboard.New(st, &switchboard.Config{
		Issuers:     []switchboard.Issuer{{URL: iss.URL(), ClientID: iss.ClientID, Keys: iss.PublicKeys()}},
		LogKey:      logKey,
		Checkpoints: keptFile,
	})
	if err != nil {
		return err
	}
	defer sb.Close()
	logPub := sb.LogVerifierKey()
	fmt.Println("state kept in:", dir)
	fmt.Println("trusted OIDC issuer:", iss.URL())
	earlier, err := keptFile.Load(ctx) // nil on a first run
	if err != nil {
		return err
	}
	alice, bob := iss.Human("alice"), iss.Human("bob")
	fmt.Println("store:", path)
	fmt.Println("trusted OIDC issuer:", iss.URL())

	step(1, "Alice and Bob publish agents (A2A Agent Cards) in the local directory")
	for _, p := range []switchboard.Persona{
		{ID: "alice-travel", Owner: alice, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Alice's travel agent", Description: "Books trips for Alice", Version: "1.0",
			URL:    "https://hub.example/agents/alice-travel",
			Skills: []agentcard.Skill{{ID: "book", Name: "Book travel", Description: "Flights and hotels", Tags: []string{"travel"}}},
		})},
		{ID: "bob-accounts", Owner: bob, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Bob's accounts desk", Description: "Pays approved invoices", Version: "2.1",
			URL:    "https://hub.example/agents/bob-accounts",
			Skills: []agentcard.Skill{{ID: "pay", Name: "Pay invoices", Description: "Pays invoices", Tags: []string{"finance"}}},
		})},
	} {
		if _, err := sb.Publish(ctx, p); err != nil {
			return err
		}
		fmt.Printf("published %-13s %q\n", p.ID, p.Card.Name)
	}
	listing, err := sb.Lookup(ctx, "bob-accounts")
	if err != nil {
		return err
	}
	fmt.Printf("alice-travel discovers bob-accounts: %q — %s\n", listing.Card.Name, listing.Card.Description)

	step(2, "alice-travel sends a friend request, proven by Alice's ID token")
	requested := switchboard.Scope{
		{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbGet}},
		{Queue: "refunds", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}},
	}
	why := "I book Alice's trips and need to send you the invoices to pay."
	// alice-travel keeps the pickup secret; the request carries its hash.
	pickupSecret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-travel", To: "bob-accounts", Scope: requested, Why: why, Pickup: pickup}
	// Alice's login is started with the request's nonce, so her ID token
	// proves this request and no other.
	req.IDToken = iss.Token(switchboardtest.Login{Subject: "alice", Name: "Alice Liddell", Email: "alice@example.com", Nonce: switchboard.RequestNonce(req), At: time.Now()})
	edge, _, err := sb.Request(ctx, req)
	if err != nil {
		return err
	}
	fmt.Printf("edge %s is %s: it grants nothing yet\n", edge.ID, edge.State)

	step(3, "The approval lands as a todo in Bob's own approvals queue")
	approvals, err := sb.Approvals(ctx, bob)
	if err != nil {
		return err
	}
	fmt.Print(indent(approvals[0].Approval.Text()))

	step(4, "Bob approves, narrowing the scope: invoices only, create only")
	narrowed := switchboard.Scope{{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	grant, err := sb.Approve(ctx, bob, edge.ID, narrowed)
	if err != nil {
		return err
	}
	fmt.Printf("grant %s minted for %s: %s\n", grant.ID, grant.Holder, strings.Join(grant.Scope.Describe(), "; "))

	step(5, "alice-travel collects its credential with its pickup secret, once")
	_, credential, err := sb.Collect(ctx, edge.ID, pickupSecret)
	if err != nil {
		return err
	}
	// Its String method redacts it, so logging it by accident leaks nothing.
	fmt.Printf("credential for alice-travel (created now, stored only as a hash): %v\n", credential)
	_, _, err = sb.Collect(ctx, edge.ID, pickupSecret)
	fmt.Printf("a second collection is refused: %v\n", err)

	step(6, "alice-travel hands bob-accounts work — as a durable todo")
	todo, created, err := sb.CreateFor(ctx, credential, "invoices", switchboard.NewTodo{
		Kind: "invoice.pay", Title: "Hotel Sacher, 3 nights", Payload: []byte(`{"amount_eur":780}`), DedupKey: "inv-2026-0412",
	})
	if err != nil {
		return err
	}
	fmt.Printf("todo %s %s (created=%v)\n", todo.ID, todo.State, created)
	again, created, err := sb.CreateFor(ctx, credential, "invoices", switchboard.NewTodo{Kind: "invoice.pay", DedupKey: "inv-2026-0412"})
	if err != nil {
		return err
	}
	fmt.Printf("a retry with the same dedup key returns %s (created=%v)\n", again.ID, created)
	_, _, err = sb.CreateFor(ctx, credential, "refunds", switchboard.NewTodo{Kind: "refund"})
	fmt.Printf("refunds was narrowed away: %v\n", err)

	step(7, "Bob's own agent claims and completes the work")
	_, worker, err := sb.Vend(ctx, bob, switchboard.VendRequest{Agent: "bob-accounts", Scope: switchboard.Scope{
		{Queue: "invoices", Verbs: []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbComplete, switchboard.VerbGet}}}})
	if err != nil {
		return err
	}
	claimed, lease, err := sb.Claim(ctx, worker, "invoices", &switchboard.ClaimOptions{Lease: 2 * time.Minute})
	if err != nil {
		return err
	}
	fmt.Printf("claimed %q (attempt %d), from agent %s acting for %s\n",
		claimed.Title, lease.Attempt, claimed.Origin.Agent, claimed.Origin.Human.Subject)
	if err := sb.Complete(ctx, worker, lease, []byte("paid, ref 55-1902")); err != nil {
		return err
	}
	done, err := sb.Get(ctx, worker, claimed.ID)
	if err != nil {
		return err
	}
	fmt.Printf("todo %s is %s: %s\n", done.ID, done.State, done.Result)

	step(8, "Bob revokes the grant; the very next call fails")
	if err := sb.Revoke(ctx, bob, grant.ID); err != nil {
		return err
	}
	_, _, err = sb.CreateFor(ctx, credential, "invoices", switchboard.NewTodo{Kind: "invoice.pay"})
	fmt.Printf("CreateFor after revoke: %v (unauthenticated: %v)\n", err, errors.Is(err, switchboard.ErrUnauthenticated))

	step(9, "The audit log")
	events, err := sb.Events(ctx, 0, 100)
	if err != nil {
		return err
	}
	fmt.Println("  (a friend request is an approval todo in Bob's approvals queue: created with the request, completed by the approval)")
	for _, e := range events {
		what := ""
		switch {
		case !strings.HasPrefix(string(e.Type), "todo."):
		case strings.HasSuffix(e.Queue, "/"+switchboard.ApprovalsQueue):
			what = "the approval todo, in Bob's approvals queue"
		case e.Queue != "":
			what = "in " + e.Queue
		}
		fmt.Printf("  %3d %-20s %-20s %s\n", e.Seq, e.Type, shortActor(e.Actor, iss.URL()), what)
	}
	// A signed checkpoint of the log, and a proof that Bob's approval is
	// in it, checked with the public key alone (see docs/audit-log.md).
	// Checkpoint first checks the log against the checkpoint kept from an
	// earlier run: signed by this key, and extended, not rewritten.
	cp, err := sb.Checkpoint(ctx)
	if err != nil {
		return err
	}
	fmt.Print(indent(string(cp.Note)))
	if len(earlier) > 0 {
		last, err := switchboard.OpenCheckpoint(earlier, logPub)
		if err != nil {
			return err
		}
		fmt.Printf("it extends the checkpoint an earlier run kept (%d events)\n", last.Size)
	}
	approval, err := sb.EdgeEvent(ctx, bob, edge.ID, switchboard.EventEdgeApproved)
	if err != nil {
		return err
	}
	proof, err := sb.ProveEvent(ctx, approval.Seq, cp.Size)
	if err != nil {
		return err
	}
	kept, err := switchboard.OpenCheckpoint(cp.Note, logPub)
	if err != nil {
		return err
	}
	ev, err := switchboard.VerifyInclusion(kept, proof)
	if err != nil {
		return err
	}
	fmt.Printf("event %d (%s) is in the signed log of %d events\n", ev.Seq, ev.Type, kept.Size)
	rep, err := sb.VerifyAudit(ctx, kept)
	if err != nil {
		return err
	}
	fmt.Printf("VerifyAudit: %d events, root %s\n", rep.Events, rep.Root)
	return nil
}

// identityProvider is the stand-in identity provider, at a fixed URL,
// signing with the key kept in path (made on the first run).
func identityProvider(path string) (*switchboardtest.Issuer, error) {
	var key *rsa.PrivateKey
	if b, err := os.ReadFile(path); err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil || blk.Type != "RSA PRIVATE KEY" {
			return nil, fmt.Errorf("%s is not an RSA private key", path)
		}
		if key, err = x509.ParsePKCS1PrivateKey(blk.Bytes); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	iss, err := switchboardtest.NewIssuerAt("https://id.quickstart.example", "switchboard-quickstart", key)
	if err != nil || key != nil {
		return iss, err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(iss.SigningKey())})
	return iss, os.WriteFile(path, b, 0o600)
}

// keptLogKey reads the audit log's signing key from path, or makes one
// and keeps it there (0600).
func keptLogKey(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	key, _, err := switchboard.NewLogKey("quickstart.example/audit")
	if err != nil {
		return "", err
	}
	return key, os.WriteFile(path, []byte(key+"\n"), 0o600)
}

func indent(s string) string {
	return "  | " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  | ") + "\n"
}

func shortActor(a, issuer string) string { return strings.Replace(a, issuer+"#", "", 1) }
