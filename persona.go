// Personas: the Persona record, persona cards and Publish.

package switchboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/store"
)

// BindingSwitchboard is the protocol binding of the interfaces on a card a
// persona publishes: the URL is where to find the persona (its card, its
// directory entry), not an endpoint that accepts A2A tasks. Work reaches a
// persona only as todos under a human-approved grant.
const BindingSwitchboard = "urn:switchboard:discovery:v1"

// CardFields are what PersonaCard writes into a persona's card, by name.
type CardFields struct {
	// Name is what humans see: on a friend request's approval, in
	// directory listings. Required.
	Name string
	// Description says what the agent does, in a sentence. Required.
	Description string
	// Version is the agent's own version, such as "1.0.0". Required.
	Version string
	// URL is where the host serves this persona's card (its directory
	// entry), not an endpoint that accepts work. Required.
	URL string
	// Skills are what the agent can be asked to do; directories match
	// their tags.
	Skills []agentcard.Skill
}

// PersonaCard returns a valid Agent Card for a persona: f's name,
// description, version and skills, one BindingSwitchboard interface at
// f.URL, JSON in and out. Set more fields on the result as needed; Publish
// validates the whole card.
//
//	card := switchboard.PersonaCard(switchboard.CardFields{
//		Name: "Bob's desk", Description: "Pays approved invoices", Version: "1.0.0",
//		URL:  "https://hub.example/agents/bob-desk",
//	})
func PersonaCard(f CardFields) agentcard.Card {
	return agentcard.Card{
		Name: f.Name, Description: f.Description, Version: f.Version,
		SupportedInterfaces: []agentcard.Interface{{URL: f.URL, ProtocolBinding: BindingSwitchboard, ProtocolVersion: "1.0"}},
		DefaultInputModes:   []string{"application/json"},
		DefaultOutputModes:  []string{"application/json"},
		Skills:              f.Skills,
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// checkPersonaCard adds the rule for cards personas publish: nothing in them
// may invite direct A2A task delivery.
func checkPersonaCard(c agentcard.Card) error {
	if err := c.Validate(); err != nil {
		return cardErr(err)
	}
	for i, in := range c.SupportedInterfaces {
		if in.ProtocolBinding != BindingSwitchboard {
			return invalid("supportedInterfaces[%d]: a persona's card advertises discovery only; use protocolBinding %q, not %q", i, BindingSwitchboard, in.ProtocolBinding)
		}
	}
	if isTrue(c.Capabilities.Streaming) || isTrue(c.Capabilities.PushNotifications) {
		return invalid("a persona's card cannot offer streaming or push notifications: work arrives as todos")
	}
	return nil
}

// Persona is an agent identity owned by one human and announced with an
// Agent Card. Its queues are addressed by name under its id.
type Persona struct {
	ID           string         `json:"id"`           // the persona's id: its queues are addressed under it
	Owner        Human          `json:"owner"`        // the human who owns the persona and approves its friend requests
	Card         agentcard.Card `json:"card"`         // the A2A Agent Card it announces itself with
	Discoverable bool           `json:"discoverable"` // whether others can look it up and friend-request it
	// RequireProof makes every grant into this persona bound to a key
	// (DPoP): a friend request or Vend without a key is refused. Publish
	// refuses to turn it on while a live bearer grant into the persona
	// remains (revoke those first), so it always holds for every grant.
	RequireProof bool      `json:"require_proof,omitempty"`
	CreatedAt    time.Time `json:"created_at,omitzero"` // when it was first published
	UpdatedAt    time.Time `json:"updated_at,omitzero"` // when it was last published
}

// Publish stores a persona in the local directory, or updates the card and
// discoverability of one the same human already owns. The host must have
// authenticated p.Owner. A persona id owned by another human is ErrConflict.
// A card that is not valid, or that invites direct A2A task delivery (an
// interface whose binding is not BindingSwitchboard, streaming or push
// notifications), is ErrInvalidArgument.
// Only discoverable personas can be looked up or friend-requested by others.
func (s *Switchboard) Publish(ctx context.Context, p Persona) (Persona, error) {
	if err := p.Owner.validate(); err != nil {
		return Persona{}, fmt.Errorf("switchboard: publish: %w", err)
	}
	if err := s.checkName("persona id", p.ID); err != nil {
		return Persona{}, fmt.Errorf("switchboard: publish: %w", err)
	}
	if err := checkPersonaCard(p.Card); err != nil {
		return Persona{}, fmt.Errorf("switchboard: publish: %w", err)
	}
	if b, _ := json.Marshal(p.Card); len(b) > s.limits.MaxCard {
		return Persona{}, fmt.Errorf("switchboard: publish: %w", invalid("agent card is %d bytes, limit %d", len(b), s.limits.MaxCard))
	}
	err := s.update(ctx, func(t *txn) error {
		old, err := t.persona(p.ID)
		switch {
		case err == nil:
			if old.Owner != p.Owner {
				return fmt.Errorf("%w: persona id %q is taken", ErrConflict, p.ID)
			}
			p.CreatedAt = old.CreatedAt
		case isNotFound(err):
			p.CreatedAt = t.now
		default:
			return err
		}
		if p.RequireProof && (old == nil || !old.RequireProof) {
			if err := t.checkNoBearerGrants(p); err != nil {
				return err
			}
		}
		p.UpdatedAt = t.now
		if err := t.put(tPersonas, p.ID, personaRec{p}); err != nil {
			return err
		}
		return t.emit(Event{Type: EventPersonaPublished, Actor: humanActor(p.Owner), Persona: p.ID})
	})
	if err != nil {
		return Persona{}, fmt.Errorf("switchboard: publish: %w", err)
	}
	return p, nil
}

// personaHead is what most checks need of a persona — who owns it, whether
// it is discoverable, its card's name — read from the same record without
// decoding the rest of the card, and kept in the hot cache.
type personaHead struct {
	ID           string `json:"id"`
	Owner        Human  `json:"owner"`
	Discoverable bool   `json:"discoverable"`
	RequireProof bool   `json:"require_proof,omitempty"`
	Card         struct {
		Name string `json:"name"`
	} `json:"card"`
}

func (h personaHead) clone() personaHead { return h }

// personaHead reads persona id's head. The binary head decodes in a few
// string copies, less than the hot cache's lookup costs (it hashes the
// whole record, card included); an older JSON record goes through the
// cache.
func (t *txn) personaHead(id string) (*personaHead, error) {
	b, err := t.tx.Get(tPersonas, []byte(id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("persona")
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", tPersonas, err)
	}
	if len(b) > 0 && b[0] == personaFormatV1 {
		h, _, err := decodePersonaHead(b[1:])
		if err != nil {
			return nil, fmt.Errorf("decode %s %q: %w", tPersonas, id, err)
		}
		return &h, nil
	}
	return getHot[personaHead](t, tPersonas, id, "persona")
}

func (t *txn) persona(id string) (*Persona, error) {
	var r personaRec
	if err := t.get(tPersonas, id, &r, "persona"); err != nil {
		return nil, err
	}
	return &r.Persona, nil
}

// checkNoBearerGrants refuses to require proofs of persona p while a live
// grant into it is bound to no key. Grants into p are granted by its owner
// (approvals and Vends), so the owner's grant index finds them.
func (t *txn) checkNoBearerGrants(p Persona) error {
	n := 0
	err := t.scanPrefix(tGrantByHuman, "g"+p.Owner.key()+sep, func(k, _ string) (bool, error) {
		g, err := getHot[grantRec](t, tGrants, k[strings.LastIndexByte(k, 0)+1:], "grant")
		if err != nil && !isNotFound(err) {
			return false, err
		}
		if err == nil && g.Target == p.ID && g.live(t.now) && g.KeyThumbprint == "" {
			n++
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: %d live grant(s) into %s are bound to no key; revoke them before requiring proofs", ErrConflict, n, p.ID)
	}
	return nil
}
