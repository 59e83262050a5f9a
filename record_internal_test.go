package switchboard

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/agentcard"
)

// fullTodo is a todo record with every field set, so that a field a stored
// form forgets shows up as a difference.
func fullTodo() todoRec {
	at := func(m int) time.Time { return time.Date(2026, 12, 7, 6, m, 0, 123456789, time.UTC) }
	return todoRec{
		Todo: Todo{ID: "todo_1", Queue: "inbox", Kind: "k", Title: "t", Payload: []byte(`{"p":1}`), Priority: -3,
			DedupKey: "d", State: TodoLeased, Attempts: 2, MaxAttempts: 5, AvailableAt: at(1), LeaseExpiresAt: at(2),
			Origin: Origin{Agent: "alice-bot", Grant: "grant_1", Edge: "edge_1", Human: Human{Issuer: "https://id.example", Subject: "alice"}},
			Result: []byte(`{"r":2}`), Error: "e",
			Approval: &Approval{EdgeID: "edge_1", From: Listing{ID: "alice-bot", Card: PersonaCard(CardFields{Name: "alice-bot", Description: "an agent", Version: "1.0.0", URL: "https://hub.example/agents/alice-bot", Skills: []agentcard.Skill{{ID: "todo", Name: "Todos", Description: "takes todos", Tags: []string{"todo"}}}})}, To: "bob-desk", Why: "w", Human: Attested{Issuer: "https://id.example", Subject: "alice"},
				Scope: Scope{{Queue: "inbox", Verbs: []Verb{VerbCreateFor}}}, ScopeText: []string{"inbox: create"}, ExpiresAt: at(3)},
			Trace: Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"},
			History: []Attempt{{N: 1, Agent: "bob-desk", Grant: "grant_2", ClaimedAt: at(4), EndedAt: at(5), Outcome: AttemptFailed, Reason: "r"},
				{N: 2, Agent: "bob-desk", Grant: "grant_2", ClaimedAt: at(6)}},
			CreatedAt: at(7), UpdatedAt: at(8), EndedAt: at(9)},
		QueueKey: "bob-desk\x00inbox", Seq: 42, LeaseToken: "lease_1",
	}
}

// Every field of a todo record survives the stored form V3, and the form
// V2; a field left zero in fullTodo would hide a forgotten one, so the
// test first checks that none is.
func TestTodoRecordForms(t *testing.T) {
	r := fullTodo()
	var zero func(reflect.Value, string)
	zero = func(v reflect.Value, path string) {
		if v.Kind() == reflect.Struct && v.Type() != reflect.TypeOf(time.Time{}) {
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.Name == "Flags" || f.Type.PkgPath() != "" && f.Type.PkgPath() != "github.com/switchboardhq/switchboard" {
					continue // not stored (Flags), or another package's (the card: its own JSON)
				}
				zero(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
			return
		}
		require.False(t, v.IsZero(), "%s is zero in fullTodo", path)
	}
	zero(reflect.ValueOf(r), "todoRec")

	v3, err := r.appendStoredV3(nil)
	require.NoError(t, err)
	plain := r
	plain.Approval = nil // (an approval's size is guessed at)
	b, err := plain.appendStoredV3(nil)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), plain.storedSize(), "storedSize is large enough")
	var got todoRec
	require.NoError(t, got.loadStored(v3))
	require.Equal(t, r, got, "V3")

	v2, err := r.appendStored(nil)
	require.NoError(t, err)
	got = todoRec{}
	require.NoError(t, got.loadStored(v2))
	require.Equal(t, r, got, "V2")
}
