package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// A bit flipped in a todo's stored value on PostgreSQL: reading it by id
// is ErrDamaged naming the table and key; the row-locked claim sets it
// aside and hands out the todo behind it; Reap and Work go on.
func TestADamagedTodoOnPostgreSQL(t *testing.T) {
	dsn := testDSN(t)
	ctx := context.Background()
	st := open(t, dsn, postgres.Options{Table: freshTable(t, dsn)})
	t.Cleanup(func() { _ = st.Close() })
	k := switchboardtest.NewKitOn(t, st, nil)
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	_, cred := k.Friend("alice-bot", "bob-desk", switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}})
	w := k.Worker("bob-desk", "inbox")
	bad, _, err := k.SB.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k", Priority: 9, Payload: []byte(`{"amount":100}`)})
	if err != nil {
		t.Fatal(err)
	}
	good, _, err := k.SB.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	// flip flips one bit in the payload of bad's stored record; flipping
	// it again restores the record, as a backup would.
	flip := func() {
		t.Helper()
		if err := st.Update(ctx, func(tx store.Tx) error {
			v, err := tx.Get("todos", []byte(bad.ID))
			if err != nil {
				return err
			}
			v = bytes.Clone(v)
			v[len(v)-2] ^= 0x04
			return tx.Put("todos", []byte(bad.ID), v)
		}); err != nil {
			t.Fatal(err)
		}
	}
	flip()
	_, err = k.SB.Get(ctx, w, bad.ID)
	if !errors.Is(err, switchboard.ErrDamaged) || !bytes.Contains([]byte(err.Error()), []byte(bad.ID)) {
		t.Fatalf("Get of the damaged todo: %v", err)
	}
	got, l, err := k.SB.Claim(ctx, w, "inbox", nil)
	if err != nil || got.ID != good.ID {
		t.Fatalf("claim: %v %v, want the undamaged %s", got.ID, err, good.ID)
	}
	if err := k.SB.Complete(ctx, w, l, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.SB.Claim(ctx, w, "inbox", nil); !errors.Is(err, switchboard.ErrQueueEmpty) {
		t.Fatalf("the damaged todo handed out: %v", err)
	}
	if _, err := k.SB.Reap(ctx); err != nil {
		t.Fatalf("Reap: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := k.SB.Work(wctx, w, "inbox", func(context.Context, switchboard.Todo) ([]byte, error) {
		t.Error("Work handed out the damaged todo")
		return nil, nil
	}, &switchboard.WorkOptions{UntilEmpty: true}); err != nil {
		t.Fatalf("Work: %v", err)
	}
	// Set aside once (its ready entry moved out of the index, on the
	// row-locked claim path): restored from the "backup", Reap puts it
	// back and it is handed out.
	flip()
	if _, err := k.SB.Reap(ctx); err != nil {
		t.Fatalf("Reap: %v", err)
	}
	got, _, err = k.SB.Claim(ctx, w, "inbox", nil)
	if err != nil || got.ID != bad.ID {
		t.Fatalf("claim after the restore: %v %v, want %s", got.ID, err, bad.ID)
	}
}
