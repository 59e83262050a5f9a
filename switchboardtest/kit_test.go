package switchboardtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// The kit gives a test a friendship and a worker in a few lines, through the
// real flow: the todo the friend creates is the one the worker claims.
func TestKitFriendAndWorker(t *testing.T) {
	ctx := context.Background()
	k := switchboardtest.NewKit(t, nil)
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	inbox := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	g, cred := k.Friend("alice-bot", "bob-desk", inbox)
	if g.Holder != "alice-bot" || g.Target != "bob-desk" || !g.Scope.Allows("inbox", switchboard.VerbCreateFor) {
		t.Fatalf("grant %+v", g)
	}
	td, _, err := k.SB.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	w := k.Worker("bob-desk", "inbox")
	got, l, err := k.SB.Claim(ctx, w, "inbox", nil)
	if err != nil || got.ID != td.ID {
		t.Fatalf("claim: %v %v", got.ID, err)
	}
	if err := k.SB.Complete(ctx, w, l, nil); err != nil {
		t.Fatal(err)
	}
	if got.Origin.Human != k.Human("alice") {
		t.Fatalf("origin %+v", got.Origin)
	}
	// The friend holds create_for only.
	if _, _, err := k.SB.Claim(ctx, cred, "inbox", nil); !errors.Is(err, switchboard.ErrForbidden) {
		t.Fatalf("friend claim: %v", err)
	}
}

// The kit fits a test of two organisations: a second issuer trusted beside
// the kit's own, personas with full cards found by a skill's tag, one
// published straight through the Switchboard and named with Own, and a
// persona the kit cannot act for said so exactly.
func TestKitTwoOrganisations(t *testing.T) {
	ctx := context.Background()
	other, err := switchboardtest.NewIssuer("org-b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	clk := &switchboardtest.StepClock{} // the zero value is ready to use
	k := switchboardtest.NewKit(t, &switchboard.Config{Clock: clk, Issuers: []switchboard.Issuer{other.Config()}})
	k.UseIssuer(other)

	pay := agentcard.Skill{ID: "pay", Name: "Pay invoices", Description: "Pays approved invoices", Tags: []string{"finance"}}
	k.PublishPersona(switchboard.Persona{ID: "alice-bot", Owner: k.Human("alice"), Discoverable: true,
		Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Alice's bot", Description: "Books travel", Version: "1.0",
			URL: "https://a.example/agents/alice-bot",
		})})
	bobDesk := switchboard.Persona{ID: "bob-desk", Owner: other.Human("bob"), Discoverable: true,
		Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Bob's desk", Description: "Org B's accounts", Version: "2.0",
			URL:    "https://b.example/agents/bob-desk",
			Skills: []agentcard.Skill{pay},
		})}
	if _, err := k.SB.Publish(ctx, bobDesk); err != nil { // published as a host would, not through the kit
		t.Fatal(err)
	}
	k.Own("bob-desk", other.Human("bob"))

	found, err := k.SB.Search(ctx, switchboard.Query{Tag: "finance"})
	if err != nil || len(found) != 1 || found[0].Card.Name != "Bob's desk" {
		t.Fatalf("search by tag: %+v %v", found, err)
	}
	inbox := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	g, cred := k.Friend("alice-bot", "bob-desk", inbox)
	if g.Grantor != other.Human("bob") {
		t.Fatalf("grantor %+v, want org B's bob", g.Grantor)
	}
	td, _, err := k.SB.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	w := k.Worker("bob-desk", "inbox")
	if got, _, err := k.SB.Claim(ctx, w, "inbox", nil); err != nil || got.ID != td.ID {
		t.Fatalf("claim: %v %v", got.ID, err)
	}
	// And the other way: org B's agent asks org A's, its token from org B's issuer.
	k.PublishPersona(switchboard.Persona{ID: "bob-bot", Owner: other.Human("bob"),
		Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Bob's bot", Description: "Asks", Version: "1.0",
			URL: "https://b.example/agents/bob-bot",
		})})
	e, _ := k.Request("bob-bot", "alice-bot", inbox, "org B asks org A")
	if e.Requester != other.Human("bob") {
		t.Fatalf("requester %+v", e.Requester)
	}
	clk.Step(time.Minute)

	// A persona whose owner the kit was never told: the failure says what to do.
	rec := &recordTB{TB: t}
	kk := switchboardtest.NewKit(rec, nil)
	if _, err := kk.SB.Publish(ctx, switchboard.Persona{ID: "carol-bot", Owner: kk.Human("carol"),
		Card: switchboard.PersonaCard(switchboard.CardFields{
			Name: "Carol's bot", Description: "c", Version: "1.0",
			URL: "https://a.example/agents/carol-bot",
		})}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); kk.Worker("carol-bot", "inbox") }()
	<-done
	if !strings.Contains(rec.msg, "persona carol-bot") || !strings.Contains(rec.msg, "Kit.Own") {
		t.Fatalf("the kit's failure: %q", rec.msg)
	}
}

// recordTB records a Fatalf and ends the goroutine that called it.
type recordTB struct {
	testing.TB
	msg string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
