// The test kit: a Switchboard on the in-memory store with a local issuer and
// helpers that give a test personas, friendships and worker credentials in a
// line each.

package switchboardtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
)

// Kit is a Switchboard (on the in-memory store unless made with NewKitOn)
// that trusts a local Issuer — and any other issuers its Config lists —
// with helpers that fail the test on error. Every
// helper goes through the public API exactly as a host would: friend
// requests carry real request-bound ID tokens and pickup verifiers, and
// credentials are collected by the requesting side.
type Kit struct {
	// SB is the Switchboard under test.
	SB *switchboard.Switchboard
	// Issuer is the local identity provider SB trusts.
	Issuer *Issuer
	// Store is SB's store (in memory, unless the kit came from NewKitOn).
	Store store.Store

	t     testing.TB
	clock switchboard.Clock

	mu      sync.Mutex
	owners  map[string]switchboard.Human // persona id → owner, for personas published here or named with Own
	issuers map[string]*Issuer           // issuer URL → the issuer that mints its humans' tokens
}

// NewKit starts an Issuer and a Switchboard on a new in-memory store, both
// closed when the test ends. cfg may be nil; the kit's issuer is added to
// its Issuers (a test of two organisations lists the other's issuer there
// and hands it to UseIssuer), everything else is used as given (a test
// clock, quotas…).
func NewKit(t testing.TB, cfg *switchboard.Config) *Kit {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	return NewKitOn(t, st, cfg)
}

// NewKitOn is NewKit on a store of the caller's — a bolt file, a
// PostgreSQL database — which the caller closes. The Switchboard opened on
// it is closed when the test ends.
func NewKitOn(t testing.TB, st store.Store, cfg *switchboard.Config) *Kit {
	t.Helper()
	iss, err := NewIssuer("switchboardtest")
	if err != nil {
		t.Fatalf("switchboardtest: issuer: %v", err)
	}
	t.Cleanup(iss.Close)
	var c switchboard.Config
	if cfg != nil {
		c = *cfg
	}
	c.Issuers = append(append([]switchboard.Issuer(nil), c.Issuers...), iss.Config())
	sb, err := switchboard.New(st, &c)
	if err != nil {
		t.Fatalf("switchboardtest: new: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return &Kit{SB: sb, Issuer: iss, Store: st, t: t, clock: c.Clock,
		owners: map[string]switchboard.Human{}, issuers: map[string]*Issuer{iss.URL(): iss}}
}

// UseIssuer lets the kit mint ID tokens with iss for the humans it
// attests (iss.Human), so Request and Friend work for personas they own —
// a second organisation's. The Switchboard must trust iss: list
// iss.Config() in the Config the kit was made with.
func (k *Kit) UseIssuer(iss *Issuer) {
	k.mu.Lock()
	k.issuers[iss.URL()] = iss
	k.mu.Unlock()
}

// Own tells the kit that persona id, published some other way than
// through the kit, is owner's, so Request, Friend and Worker can act for
// it.
func (k *Kit) Own(id string, owner switchboard.Human) {
	k.mu.Lock()
	k.owners[id] = owner
	k.mu.Unlock()
}

func (k *Kit) now() time.Time {
	if k.clock != nil {
		return k.clock.Now()
	}
	return time.Now()
}

// Human is the human the kit's issuer attests for subject.
func (k *Kit) Human(subject string) switchboard.Human { return k.Issuer.Human(subject) }

// Publish publishes a discoverable persona id owned by the human owner (a
// subject of the kit's issuer) with a minimal valid card.
func (k *Kit) Publish(owner, id string) switchboard.Persona {
	k.t.Helper()
	return k.PublishPersona(switchboard.Persona{
		ID: id, Owner: k.Human(owner), Discoverable: true,
		Card: switchboard.PersonaCard(switchboard.CardFields{Name: id, Description: "test persona " + id, Version: "1.0.0", URL: "https://switchboardtest.invalid/agents/" + id}),
	})
}

// PublishPersona publishes p as given — its own card (skills, tags,
// security schemes), its owner (a human of any issuer the Switchboard
// trusts), its options — and remembers its owner for Request, Friend and
// Worker.
func (k *Kit) PublishPersona(p switchboard.Persona) switchboard.Persona {
	k.t.Helper()
	p, err := k.SB.Publish(context.Background(), p)
	if err != nil {
		k.t.Fatalf("switchboardtest: publish %s: %v", p.ID, err)
	}
	k.Own(p.ID, p.Owner)
	return p
}

func (k *Kit) owner(id string) switchboard.Human {
	k.t.Helper()
	k.mu.Lock()
	h, ok := k.owners[id]
	k.mu.Unlock()
	if !ok {
		k.t.Fatalf("switchboardtest: persona %s: the kit does not know its owner (a Switchboard tells nobody whose a persona is): publish it with Kit.Publish or Kit.PublishPersona, or name its owner with Kit.Own", id)
	}
	return h
}

// issuerOf is the issuer that mints h's tokens.
func (k *Kit) issuerOf(h switchboard.Human) *Issuer {
	k.t.Helper()
	k.mu.Lock()
	iss, ok := k.issuers[h.Issuer]
	k.mu.Unlock()
	if !ok {
		k.t.Fatalf("switchboardtest: no issuer for %s of %s: hand the kit that issuer with Kit.UseIssuer", h.Subject, h.Issuer)
	}
	return iss
}

// Request sends a friend request from persona from to persona to, proven by
// a token of from's owner, and returns the pending edge and the pickup
// secret that collects its credential after approval.
func (k *Kit) Request(from, to string, scope switchboard.Scope, why string) (edge switchboard.Edge, pickupSecret string) {
	k.t.Helper()
	owner := k.owner(from)
	secret, verifier := switchboard.NewPickup()
	r := switchboard.FriendRequest{From: from, To: to, Scope: scope, Why: why, Pickup: verifier}
	r.IDToken = k.issuerOf(owner).RequestToken(owner.Subject, r, k.now())
	e, _, err := k.SB.Request(context.Background(), r)
	if err != nil {
		k.t.Fatalf("switchboardtest: request %s → %s: %v", from, to, err)
	}
	return e, secret
}

// Friend makes from a friend of to: a request for scope, approved as asked
// by to's owner, and the credential collected by from. It returns the grant
// and from's credential.
func (k *Kit) Friend(from, to string, scope switchboard.Scope) (switchboard.Grant, switchboard.Credential) {
	k.t.Helper()
	e, secret := k.Request(from, to, scope, "switchboardtest friend request")
	ctx := context.Background()
	if _, err := k.SB.Approve(ctx, k.owner(to), e.ID, nil); err != nil {
		k.t.Fatalf("switchboardtest: approve %s: %v", e.ID, err)
	}
	g, cred, err := k.SB.Collect(ctx, e.ID, secret)
	if err != nil {
		k.t.Fatalf("switchboardtest: collect %s: %v", e.ID, err)
	}
	return g, cred
}

// Worker vends persona's owner's own agent (persona itself) every verb on
// queues — create, list, get, the drain verbs, cancel and redrive — and
// returns its credential.
func (k *Kit) Worker(persona string, queues ...string) switchboard.Credential {
	k.t.Helper()
	var sc switchboard.Scope
	verbs := append(switchboard.GrantableVerbs(), switchboard.VerbCancel, switchboard.VerbRedrive)
	for _, q := range queues {
		sc = append(sc, switchboard.ScopeEntry{Queue: q, Verbs: verbs})
	}
	_, cred, err := k.SB.Vend(context.Background(), k.owner(persona), switchboard.VendRequest{Agent: persona, Scope: sc})
	if err != nil {
		k.t.Fatalf("switchboardtest: vend %s: %v", persona, err)
	}
	return cred
}
