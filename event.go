// The audit log: events written in the same transaction as the change they
// record.

package switchboard

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// EventType names a state change recorded in the audit log.
type EventType string

// The audit log's event types.
const (
	EventPersonaPublished EventType = "persona.published"
	EventEdgeRequested    EventType = "edge.requested"
	EventEdgeApproved     EventType = "edge.approved"
	EventEdgeDenied       EventType = "edge.denied"
	EventEdgeWithdrawn    EventType = "edge.withdrawn"
	EventEdgeExpired      EventType = "edge.expired"
	EventEdgeReplaced     EventType = "edge.replaced"
	EventEdgeRevoked      EventType = "edge.revoked"
	EventHumanBlocked     EventType = "human.blocked"   // Actor blocked the human in Detail
	EventHumanUnblocked   EventType = "human.unblocked" // Actor unblocked the human in Detail
	EventGrantMinted      EventType = "grant.minted"
	EventGrantCollected   EventType = "grant.collected" // the requesting agent collected its credential
	EventGrantRevoked     EventType = "grant.revoked"
	EventTodoCreated      EventType = "todo.created"
	EventTodoClaimed      EventType = "todo.claimed"
	EventTodoCompleted    EventType = "todo.completed"
	EventTodoCancelled    EventType = "todo.cancelled"
	EventTodoFailed       EventType = "todo.failed"
	EventTodoReleased     EventType = "todo.released"
	EventTodoRedriven     EventType = "todo.redriven"
	EventTodoLeaseExpired EventType = "todo.lease_expired"
	EventTodoDead         EventType = "todo.dead"
)

// Event is one append-only audit record, written in the same transaction as
// the change it records. It names who acted and which records changed; it
// never holds a credential or token.
type Event struct {
	Seq     uint64    `json:"seq"`               // position in the audit log, from 1
	At      time.Time `json:"at"`                // commit time, on Config.Clock
	Type    EventType `json:"type"`              // what happened
	Actor   string    `json:"actor"`             // "human:<issuer>#<subject>", "agent:<persona id>" or "system"
	Persona string    `json:"persona,omitempty"` // the persona concerned, if any
	Edge    string    `json:"edge,omitempty"`    // the friend edge concerned, if any
	Grant   string    `json:"grant,omitempty"`   // the grant concerned, if any
	Todo    string    `json:"todo,omitempty"`    // the todo concerned, if any
	Detail  string    `json:"detail,omitempty"`  // a short reason or the other party
}

func humanActor(h Human) string   { return "human:" + h.Issuer + "#" + h.Subject }
func agentActor(id string) string { return "agent:" + id }

const systemActor = "system"

// emit appends e to the audit log inside the current transaction.
func (t *txn) emit(e Event) error {
	seq, err := t.nextSeq()
	if err != nil {
		return err
	}
	e.Seq, e.At = seq, t.now
	return t.put(tEvents, be64(seq), e)
}

// Events returns up to limit audit events with Seq greater than after, in
// order. It is an operator's view of the whole store: hosts must not expose
// it to agents. A limit of zero or less means 100.
func (s *Switchboard) Events(ctx context.Context, after uint64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []Event
	err := s.view(ctx, func(t *txn) error {
		start := binary.BigEndian.AppendUint64(nil, after+1)
		var derr error
		err := t.tx.Scan(tEvents, start, nil, func(k, v []byte) bool {
			var e Event
			if derr = json.Unmarshal(v, &e); derr != nil {
				return false
			}
			out = append(out, e)
			return len(out) < limit
		})
		if err != nil {
			return err
		}
		return derr
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: events: %w", err)
	}
	return out, nil
}
