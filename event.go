// The audit log: events written in the same transaction as the change they
// record, numbered without gaps and chained by hash, and VerifyAudit, which
// walks the chain.

package switchboard

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchboardhq/switchboard/store"
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
	Queue   string    `json:"queue,omitempty"`   // the todo's queue: a QueueAddress or ApprovalsAddress
	Detail  string    `json:"detail,omitempty"`  // a short reason or the other party
	// Prev is the base64url SHA-256 of the previous event's stored record
	// (empty for the first): the link VerifyAudit checks.
	Prev string `json:"prev,omitempty"`
}

func humanActor(h Human) string   { return "human:" + h.Issuer + "#" + h.Subject }
func agentActor(id string) string { return "agent:" + id }

const systemActor = "system"

// auditHeadKey is the tMeta key of the chain's head: the last event's seq
// (8 bytes) and the SHA-256 of its stored record (32 bytes).
const auditHeadKey = "audit_head"

// auditHead returns the seq and record hash of the last event, read once
// per transaction.
func (t *txn) auditHead() (uint64, []byte, error) {
	if t.headRead {
		return t.head, t.headHash, nil
	}
	b, err := t.tx.Get(tMeta, []byte(auditHeadKey))
	switch {
	case err == nil && len(b) == 8+sha256.Size:
		t.head, t.headHash = binary.BigEndian.Uint64(b), b[8:]
	case err == nil:
		return 0, nil, fmt.Errorf("switchboard: audit head is %d bytes, want %d", len(b), 8+sha256.Size)
	case errors.Is(err, store.ErrNotFound):
		t.head, t.headHash = 0, nil
	default:
		return 0, nil, err
	}
	t.headRead = true
	return t.head, t.headHash, nil
}

// nextSeq is the seq the next event of this transaction will get. It is
// also the store-wide creation order of todos: a todo takes the seq of the
// todo.created event that records it, so creating one needs no counter of
// its own.
func (t *txn) nextSeq() (uint64, error) {
	seq, _, err := t.auditHead()
	return seq + 1, err
}

// emit appends e to the audit log inside the current transaction: the next
// seq of the log's own counter (no gaps), linked to the previous event by
// its hash.
func (t *txn) emit(e Event) error {
	seq, prev, err := t.auditHead()
	if err != nil {
		return err
	}
	e.Seq, e.At = seq+1, t.now
	if prev != nil {
		e.Prev = base64.RawURLEncoding.EncodeToString(prev)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("switchboard: encode event: %w", err)
	}
	if err := t.tx.Put(tEvents, []byte(be64(e.Seq)), b); err != nil {
		return err
	}
	t.emitted++
	h := sha256.Sum256(b)
	if err := t.tx.Put(tMeta, []byte(auditHeadKey), append(binary.BigEndian.AppendUint64(nil, e.Seq), h[:]...)); err != nil {
		return err
	}
	t.head, t.headHash = e.Seq, h[:]
	return nil
}

// ErrAuditBroken is wrapped by the *AuditError VerifyAudit returns.
var ErrAuditBroken = errors.New("audit log broken")

// AuditError is the first broken link VerifyAudit found.
type AuditError struct {
	Seq    uint64 // the event that was changed, is missing, or is out of place
	Reason string // what does not hold
}

func (e *AuditError) Error() string {
	return fmt.Sprintf("switchboard: %v at event %d: %s", ErrAuditBroken, e.Seq, e.Reason)
}

// Unwrap returns ErrAuditBroken.
func (e *AuditError) Unwrap() error { return ErrAuditBroken }

// AuditReport is what VerifyAudit checked.
type AuditReport struct {
	First, Last uint64 // the first and last seq present; zero for an empty log
	Events      uint64 // how many events were checked
}

// VerifyAudit walks the audit log from its first event — event 1, or the
// one after the last event Reap purged, whose hash it must name — to the
// head and checks every link: each event's key and Seq agree, seqs follow without
// gaps, each event's Prev is the hash of the stored record before it, and
// the head recorded with the last write names the last event and its hash —
// so an edited, deleted, inserted or truncated event is found. It returns
// what it checked, or an *AuditError (wrapping ErrAuditBroken) naming the
// first broken link. It reads the whole log in one read transaction.
func (s *Switchboard) VerifyAudit(ctx context.Context) (AuditReport, error) {
	var rep AuditReport
	err := s.view(ctx, func(t *txn) error {
		rep = AuditReport{}
		headSeq, headHash, err := t.auditHead()
		if err != nil {
			return err
		}
		// The chain starts at event 1, or after the last purged event,
		// whose hash the first kept one must name.
		baseSeq, baseHash, err := t.auditBase()
		if err != nil {
			return err
		}
		var (
			prevSeq  = baseSeq
			prevHash = baseHash
			broken   *AuditError
			derr     error
		)
		err = t.tx.Scan(tEvents, nil, nil, func(k, v []byte) bool {
			var e Event
			if derr = json.Unmarshal(v, &e); derr != nil {
				broken, derr = &AuditError{Seq: prevSeq + 1, Reason: "record does not decode"}, nil
				return false
			}
			switch {
			case len(k) != 8 || binary.BigEndian.Uint64(k) != e.Seq:
				broken = &AuditError{Seq: e.Seq, Reason: "stored under another seq"}
			case e.Seq != prevSeq+1:
				broken = &AuditError{Seq: prevSeq + 1, Reason: fmt.Sprintf("missing: event %d follows event %d", e.Seq, prevSeq)}
			case e.Prev != base64.RawURLEncoding.EncodeToString(prevHash):
				broken = &AuditError{Seq: prevSeq, Reason: fmt.Sprintf("its record does not hash to what event %d recorded", e.Seq)}
			}
			if broken != nil {
				return false
			}
			if rep.Events == 0 {
				rep.First = e.Seq
			}
			h := sha256.Sum256(v)
			prevSeq, prevHash = e.Seq, h[:]
			rep.Events++
			rep.Last = e.Seq
			return true
		})
		if err != nil {
			return err
		}
		if derr != nil {
			return derr
		}
		if broken != nil {
			return broken
		}
		switch {
		case headSeq != rep.Last:
			return &AuditError{Seq: max(headSeq, rep.Last), Reason: fmt.Sprintf("the head names event %d, the log ends at %d", headSeq, rep.Last)}
		case rep.Events > 0 && string(headHash) != string(prevHash):
			return &AuditError{Seq: rep.Last, Reason: "its record does not hash to what the head recorded"}
		}
		return nil
	})
	if err != nil {
		var ae *AuditError
		if errors.As(err, &ae) {
			return rep, ae
		}
		return rep, fmt.Errorf("switchboard: verify audit: %w", err)
	}
	return rep, nil
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
