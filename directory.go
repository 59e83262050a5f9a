package switchboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// BindingSwitchboard is the protocol binding of the interfaces on a card a
// persona publishes: the URL is where to find the persona (its card, its
// directory entry), not an endpoint that accepts A2A tasks. Work reaches a
// persona only as todos under a human-approved grant.
const BindingSwitchboard = "urn:switchboard:discovery:v1"

// PersonaCard returns a valid Agent Card for a persona: one
// BindingSwitchboard interface at url (where the host serves the card),
// JSON in and out, and skills. Set more fields on the result as needed.
func PersonaCard(name, description, version, url string, skills ...AgentSkill) AgentCard {
	return AgentCard{
		Name: name, Description: description, Version: version,
		SupportedInterfaces: []AgentInterface{{URL: url, ProtocolBinding: BindingSwitchboard, ProtocolVersion: "1.0"}},
		DefaultInputModes:   []string{"application/json"},
		DefaultOutputModes:  []string{"application/json"},
		Skills:              skills,
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// checkPersonaCard adds the rule for cards personas publish: nothing in them
// may invite direct A2A task delivery.
func checkPersonaCard(c AgentCard) error {
	if err := c.Validate(); err != nil {
		return err
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
	ID           string    `json:"id"`
	Owner        Human     `json:"owner"`
	Card         AgentCard `json:"card"`
	Discoverable bool      `json:"discoverable"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Listing is what the directory reveals about a discoverable persona: its id
// and its card, and nothing else — not its owner, its other personas, its
// friends or its queues.
type Listing struct {
	ID   string    `json:"id"`
	Card AgentCard `json:"card"`
}

// Publish stores a persona in the local directory, or updates the card and
// discoverability of one the same human already owns. The host must have
// authenticated p.Owner. A persona id owned by another human is ErrConflict.
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
		p.UpdatedAt = t.now
		if err := t.put(tPersonas, p.ID, p); err != nil {
			return err
		}
		return t.emit(Event{Type: EventPersonaPublished, Actor: humanActor(p.Owner), Persona: p.ID})
	})
	if err != nil {
		return Persona{}, fmt.Errorf("switchboard: publish: %w", err)
	}
	return p, nil
}

// Lookup resolves id in the configured directories, in order, and returns
// the first listing found: one card, and nothing about its owner, friends or
// queues. An id no directory resolves is ErrNotFound — the same for an
// unknown and an undiscoverable persona.
func (s *Switchboard) Lookup(ctx context.Context, id string) (Listing, error) {
	l, err := s.resolve(ctx, id)
	if err != nil {
		return Listing{}, fmt.Errorf("switchboard: lookup: %w", err)
	}
	return l, nil
}

// resolve walks the directories. Any failure to resolve is the one plain
// not-found error, so nothing distinguishes why.
func (s *Switchboard) resolve(ctx context.Context, id string) (Listing, error) {
	for _, d := range s.dirs {
		l, err := d.Lookup(ctx, id)
		if err == nil {
			return l, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return Listing{}, cerr
		}
		if !isNotFound(err) {
			return Listing{}, err // a store failure, not an answer
		}
	}
	return Listing{}, notFound("persona")
}

// Search runs q against every configured directory and returns at most
// q.Limit listings (default 20, at most 100), in directory order.
func (s *Switchboard) Search(ctx context.Context, q Query) ([]Listing, error) {
	if err := q.normalize(); err != nil {
		return nil, fmt.Errorf("switchboard: search: %w", err)
	}
	var out []Listing
	for _, d := range s.dirs {
		ls, err := d.Search(ctx, Query{Tag: q.Tag, Name: q.Name, Limit: q.Limit - len(out)})
		if err != nil {
			return nil, fmt.Errorf("switchboard: search: %w", err)
		}
		out = append(out, ls...)
		if len(out) >= q.Limit {
			break
		}
	}
	return out, nil
}

func (t *txn) persona(id string) (*Persona, error) {
	var p Persona
	if err := t.get(tPersonas, id, &p, "persona"); err != nil {
		return nil, err
	}
	return &p, nil
}

// discoverable is the directory's one rule: a persona others may see.
func (t *txn) discoverable(id string) (*Persona, error) {
	p, err := t.persona(id)
	if err != nil {
		return nil, err
	}
	if !p.Discoverable {
		return nil, notFound("persona")
	}
	return p, nil
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// checkName validates an identifier: 1..MaxName bytes of letters, digits
// and . _ - : @, not starting with '_' (reserved).
func (s *Switchboard) checkName(what, v string) error {
	if v == "" {
		return invalid("empty %s", what)
	}
	if len(v) > s.limits.MaxName {
		return invalid("%s is %d bytes, limit %d", what, len(v), s.limits.MaxName)
	}
	if v[0] == '_' {
		return invalid("%s may not start with '_' (reserved)", what)
	}
	for _, r := range v {
		if !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(".-_:@", r))) {
			return invalid("%s contains %q; use letters, digits and . _ - : @", what, r)
		}
	}
	return nil
}

func (s *Switchboard) checkQueueName(q string) error { return s.checkName("queue name", q) }

// checkText refuses invalid UTF-8, control characters (newlines only where
// allowed) and text over max bytes.
func checkText(what, v string, max int, newlines bool) error {
	if len(v) > max {
		return invalid("%s is %d bytes, limit %d", what, len(v), max)
	}
	if !utf8.ValidString(v) {
		return invalid("%s is not valid UTF-8", what)
	}
	for _, r := range v {
		if r == '\n' && newlines {
			continue
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return invalid("%s contains control character %U", what, r)
		}
	}
	return nil
}
