// A human's connections: the live grants they gave and the ones their
// agents hold, for the screen where a human sees and revokes them.

package switchboard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// tGrantByHuman indexes the active grants by the humans they concern:
// 'g' grantor key \x00 grant id → "" (grants the human gave) and
// 'h' holder's human key \x00 grant id → "" (grants the human's agents
// hold). Entries go when the grant is revoked or expires.
const tGrantByHuman = "grant_human"

// Direction says which side of a grant a human is on.
type Direction string

const (
	// Granted: the human approved (or vended) the grant; its holder may
	// hand work to the human's persona.
	Granted Direction = "granted"
	// Received: one of the human's agents holds the grant, to hand work
	// to another human's persona.
	Received Direction = "received"
)

// Connection is one active grant as a human sees it.
type Connection struct {
	Direction Direction `json:"direction"`      // which side the human is on
	Grant     Grant     `json:"grant"`          // the grant
	Edge      *Edge     `json:"edge,omitempty"` // the friend edge it came from; nil for a Vend
	// LastUsed is when the newest todo still kept that the grant created
	// (or a webhook delivery made for it) was created; zero if none is
	// kept.
	LastUsed time.Time `json:"last_used,omitzero"`
	// HolderName and TargetName are the names the holder's and the
	// target's Agent Cards give them, for personas published here (empty
	// otherwise): what a person recognises an agent by.
	HolderName string `json:"holder_name,omitempty"`
	TargetName string `json:"target_name,omitempty"`
}

// grantHolderHuman is the human behind a grant's holder: the requester of
// a friend grant's edge, the grantor of a Vend.
func grantHolderHuman(g Grant, e *edgeRec) Human {
	if e != nil {
		return e.Requester
	}
	return g.Grantor
}

// indexGrant adds an active grant to tGrantByHuman.
func (t *txn) indexGrant(g Grant, holder Human) error {
	if err := t.putRaw(tGrantByHuman, "g"+g.Grantor.key()+sep+g.ID, ""); err != nil {
		return err
	}
	return t.putRaw(tGrantByHuman, "h"+holder.key()+sep+g.ID, "")
}

// unindexGrant removes a grant from tGrantByHuman.
func (t *txn) unindexGrant(g Grant, holder Human) error {
	if err := t.del(tGrantByHuman, "g"+g.Grantor.key()+sep+g.ID); err != nil {
		return err
	}
	return t.del(tGrantByHuman, "h"+holder.key()+sep+g.ID)
}

// Connections returns the active grants that concern human, newest first:
// those the human granted (Direction Granted: approved friend requests and
// Vends) and those the human's agents hold (Received). A grant between two
// of the human's own personas, or a Vend, appears in both directions.
// Revoke takes a Connection's Grant.ID from either side.
func (s *Switchboard) Connections(ctx context.Context, human Human) ([]Connection, error) {
	if err := human.validate(); err != nil {
		return nil, fmt.Errorf("switchboard: connections: %w", err)
	}
	var out []Connection
	err := s.view(ctx, func(t *txn) error {
		for _, side := range []struct {
			kind string
			dir  Direction
		}{{"g", Granted}, {"h", Received}} {
			var ids []string
			if err := t.scanPrefix(tGrantByHuman, side.kind+human.key()+sep, func(k, _ string) (bool, error) {
				ids = append(ids, k[strings.LastIndexByte(k, 0)+1:])
				return true, nil
			}); err != nil {
				return err
			}
			for _, id := range ids {
				g, e, err := t.grantWithEdge(id)
				if err != nil {
					return err
				}
				if !g.live(t.now) {
					continue // revoked (which removes the entries) or expired at this instant
				}
				c := Connection{Direction: side.dir, Grant: g.Grant}
				if e != nil {
					edge := e.Edge
					c.Edge = &edge
				}
				if c.LastUsed, err = t.lastCreated(id); err != nil {
					return err
				}
				for _, p := range []struct {
					id   string
					name *string
				}{{g.Holder, &c.HolderName}, {g.Target, &c.TargetName}} {
					if h, err := t.personaHead(p.id); err == nil {
						*p.name = h.Card.Name
					} else if !isNotFound(err) {
						return err
					}
				}
				out = append(out, c)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: connections: %w", err)
	}
	slices.SortStableFunc(out, func(a, b Connection) int { return b.Grant.CreatedAt.Compare(a.Grant.CreatedAt) })
	return out, nil
}

// lastCreated finds the newest todo a grant created among those kept — by
// binary search over the sequence numbers of its index, about 64 seeks
// whatever its size — and returns when it was created.
func (t *txn) lastCreated(grantID string) (time.Time, error) {
	prefix := idxKey(idxGrant, grantID, "")
	end := prefixEnd(prefix)
	// first returns the id of the grant's first todo at or after seq.
	first := func(seq uint64) (string, error) {
		var id string
		err := t.tx.Scan(tIdx, []byte(prefix+be64(seq)), end, func(_, v []byte) bool {
			id = string(v)
			return false
		})
		return id, err
	}
	id, err := first(0)
	if err != nil || id == "" {
		return time.Time{}, err
	}
	lo, hi := uint64(0), uint64(1)<<63 // the newest is at or after lo, before hi
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		next, err := first(mid)
		if err != nil {
			return time.Time{}, err
		}
		if next != "" {
			lo, id = mid, next
		} else {
			hi = mid
		}
	}
	r, err := t.todo(id)
	if isNotFound(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return r.CreatedAt, nil
}

// GrantTodos lists, in creation order, the todos that a grant created and
// that are still kept, for a human on either side of it: its grantor, or
// the human behind its holder (revoked grants included, so a human can see
// what a revoked connection left). ListOptions filter as for List; the
// todos a queue's owner would call outstanding are the TodoQueued and
// TodoLeased ones. A grant that concerns neither is ErrNotFound.
func (s *Switchboard) GrantTodos(ctx context.Context, human Human, grantID string, opts *ListOptions) ([]Todo, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("switchboard: grant todos: %w", err)
	}
	if err := human.validate(); err != nil {
		return nil, fmt.Errorf("switchboard: grant todos: %w", err)
	}
	var out []Todo
	err = s.view(ctx, func(t *txn) error {
		g, e, err := t.grantWithEdge(grantID)
		if isNotFound(err) {
			return notFound("grant")
		}
		if err != nil {
			return err
		}
		if g.Grantor != human && grantHolderHuman(g.Grant, e) != human {
			return notFound("grant")
		}
		var from uint64
		if o.After != "" {
			r, err := t.todo(o.After)
			if err != nil || r.Origin.Grant != grantID {
				return notFound("todo")
			}
			from = r.Seq + 1
		}
		return t.scanBySeq(from, func(id string) (bool, error) {
			r, err := t.todo(id)
			if err != nil {
				return false, err
			}
			if r.QueueKey != webhookQueue && (o.State == "" || r.State == o.State) {
				if human == g.Grantor {
					out = append(out, r.Todo) // the queue's owner sees all
				} else {
					out = append(out, seenBy(g, r)) // the friend's human, as its agent sees it
				}
			}
			return len(out) < o.Limit, nil
		}, idxKey(idxGrant, grantID, ""))
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: grant todos: %w", err)
	}
	return out, nil
}

// backfillGrantIndex builds tGrantByHuman for the active grants of a store
// written before layout 5.
func backfillGrantIndex(t *txn) error {
	var ids []string
	if err := t.tx.Scan(tGrants, nil, nil, func(k, _ []byte) bool {
		ids = append(ids, string(k))
		return true
	}); err != nil {
		return err
	}
	for _, id := range ids {
		g, e, err := t.grantWithEdge(id)
		if err != nil {
			return err
		}
		if g.State == GrantActive {
			if err := t.indexGrant(g.Grant, grantHolderHuman(g.Grant, e)); err != nil {
				return err
			}
		}
	}
	return nil
}
