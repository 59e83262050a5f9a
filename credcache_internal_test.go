package switchboard

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/memory"
)

// A credential that authenticated before is looked up again through the
// grant it named then (hotCache.creds), but the grant's record still
// decides: rewritten to hold another credential's hash — a store changed
// under the process — it no longer takes this credential, and a grant
// restored to hold it takes it again.
func TestAGrantsRecordDecidesForARememberedCredential(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Store{
		"memory": func(*testing.T) store.Store { return memory.New() },
		"bolt": func(t *testing.T) store.Store {
			st, err := bolt.Open(filepath.Join(t.TempDir(), "sb.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := open(t)
			sb, err := New(st, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			defer st.Close()
			bob := Human{Issuer: "https://accounts.example.com", Subject: "bob"}
			if _, err := sb.Publish(ctx, Persona{ID: "bob-desk", Owner: bob, Card: PersonaCard(CardFields{
				Name: "Bob's desk", Description: "Pays invoices", Version: "1.0", URL: "https://hub.example/agents/bob-desk",
			})}); err != nil {
				t.Fatal(err)
			}
			g, cred, err := sb.Vend(ctx, bob, VendRequest{Agent: "bob-desk",
				Scope: Scope{{Queue: "inbox", Verbs: []Verb{VerbCreateFor}}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sb.Authenticate(ctx, cred); err != nil {
				t.Fatal(err)
			}
			if sb.hot.credGrant(credHashOf(cred)) != g.ID {
				t.Fatal("the credential's grant is not remembered after it authenticated")
			}
			setHash := func(h []byte) []byte {
				var old []byte
				if err := sb.update(ctx, func(t *txn) error {
					var r grantRec
					if err := t.get(tGrants, g.ID, &r, "grant"); err != nil {
						return err
					}
					old, r.CredHash = r.CredHash, h
					return t.put(tGrants, g.ID, r)
				}); err != nil {
					t.Fatal(err)
				}
				return old
			}
			_, other := newCredential()
			mine := setHash(other)
			for _, call := range []func() error{
				func() error { _, err := sb.Authenticate(ctx, cred); return err },
				func() error { _, _, err := sb.CreateFor(ctx, cred, "inbox", NewTodo{Kind: "k"}); return err },
			} {
				if err := call(); !errors.Is(err, ErrUnauthenticated) {
					t.Fatalf("a grant holding another credential's hash took this one: %v", err)
				}
			}
			setHash(mine)
			if _, _, err := sb.CreateFor(ctx, cred, "inbox", NewTodo{Kind: "k"}); err != nil {
				t.Fatalf("the grant holds the credential again: %v", err)
			}
		})
	}
}

// credHashOf is the key a credential is remembered under.
func credHashOf(c Credential) string {
	h := c.hash()
	return string(h[:])
}
