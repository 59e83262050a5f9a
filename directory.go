// Directories: the Directory interface, Query, Lookup and Search, and the
// local directory over the store.

package switchboard

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchboardhq/switchboard/agentcard"
)

// Listing is what the directory reveals about a discoverable persona: its id
// and its card, and nothing else — not its owner, its other personas, its
// friends or its queues.
type Listing struct {
	ID   string         `json:"id"`   // the persona id (or, for a remote directory, the origin)
	Card agentcard.Card `json:"card"` // its Agent Card
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
			return Listing{}, inner(err) // a store failure, not an answer
		}
	}
	return Listing{}, notFoundNamed("persona", id)
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
			return nil, fmt.Errorf("switchboard: search: %w", inner(err))
		}
		out = append(out, ls...)
		if len(out) >= q.Limit {
			break
		}
	}
	return out, nil
}

// discoverableHead is discoverable for the checks that need only a
// persona's head.
func (t *txn) discoverableHead(id string) (*personaHead, error) {
	p, err := t.personaHead(id)
	if err != nil {
		return nil, err
	}
	if !p.Discoverable {
		return nil, notFound("persona")
	}
	return p, nil
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

// Directory is a bounded place to find agents by their cards. A Switchboard
// consults only the directories in Config.Directories; a lookup returns one
// card and nothing else — never the owner's other personas, friends, edges
// or queues.
type Directory interface {
	// Lookup returns the listing for id, or an error wrapping ErrNotFound.
	Lookup(ctx context.Context, id string) (Listing, error)
	// Search returns at most q.Limit listings matching q.
	Search(ctx context.Context, q Query) ([]Listing, error)
}

// Query is a bounded directory search. At least one of Tag and Name is
// required; a listing matches if it has every criterion given.
type Query struct {
	Tag   string // a skill tag, matched exactly (case-insensitive)
	Name  string // a substring of the card's name (case-insensitive)
	Limit int    // at most this many results: default 20, at most 100
}

func (q *Query) normalize() error {
	if strings.TrimSpace(q.Tag) == "" && strings.TrimSpace(q.Name) == "" {
		return invalid("a directory search needs a tag or a name")
	}
	if len(q.Tag) > 128 || len(q.Name) > 128 {
		return invalid("search terms are limited to 128 bytes")
	}
	switch {
	case q.Limit < 0:
		return invalid("negative search limit")
	case q.Limit == 0:
		q.Limit = 20
	case q.Limit > 100:
		q.Limit = 100
	}
	return nil
}

func (q Query) match(c agentcard.Card) bool {
	if q.Name != "" && !strings.Contains(strings.ToLower(c.Name), strings.ToLower(q.Name)) {
		return false
	}
	if q.Tag == "" {
		return true
	}
	for _, sk := range c.Skills {
		for _, tag := range sk.Tags {
			if strings.EqualFold(tag, q.Tag) {
				return true
			}
		}
	}
	return false
}
