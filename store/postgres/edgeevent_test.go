package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// On PostgreSQL an event enters the log after its commit, by the
// sequencer: EdgeEvent called right after Approve waits for it, and the
// proof checks; a transition logged before the index is found by reading
// the log, even with other events still waiting to be sequenced.
func TestEdgeEventWaitsForTheSequencer(t *testing.T) {
	dsn := testDSN(t)
	ctx := context.Background()
	st := open(t, dsn, postgres.Options{Table: freshTable(t, dsn)})
	t.Cleanup(func() { _ = st.Close() })
	key, pub, err := switchboard.NewLogKey("example.com/log")
	if err != nil {
		t.Fatal(err)
	}
	k := switchboardtest.NewKitOn(t, st, &switchboard.Config{LogKey: key})
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	scope := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	for i := range 5 {
		e, _ := k.Request("alice-bot", "bob-desk", scope, "round")
		if _, err := k.SB.Approve(ctx, k.Human("bob"), e.ID, nil); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ev, err := k.SB.EdgeEvent(wctx, k.Human("bob"), e.ID, switchboard.EventEdgeApproved)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if ev.Type != switchboard.EventEdgeApproved || ev.Edge != e.ID {
			t.Fatalf("round %d: %+v", i, ev)
		}
		cp, err := k.SB.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		proof, err := k.SB.ProveEvent(ctx, ev.Seq, cp.Size)
		if err != nil {
			t.Fatal(err)
		}
		opened, err := switchboard.OpenCheckpoint(cp.Note, pub)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := switchboard.VerifyInclusion(opened, proof); err != nil || got.Seq != ev.Seq {
			t.Fatalf("round %d: inclusion %+v %v", i, got, err)
		}
		if i == 4 {
			// As an earlier release left it: no index entry.
			if err := st.Update(ctx, func(tx store.Tx) error {
				return tx.Delete("edge_events", []byte(e.ID+"\x00"+string(switchboard.EventEdgeApproved)))
			}); err != nil {
				t.Fatal(err)
			}
			again, err := k.SB.EdgeEvent(ctx, k.Human("bob"), e.ID, switchboard.EventEdgeApproved)
			if err != nil || again != ev {
				t.Fatalf("legacy: %+v %v, want %+v", again, err, ev)
			}
		}
	}
}
