package switchboardtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/switchboardhq/switchboard"
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
