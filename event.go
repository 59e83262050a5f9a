// Audit events: what each state change records, how a transaction emits
// them, Events, and VerifyAudit, which rebuilds the log's tree and checks it.

package switchboard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
)

// EventType names a state change recorded in the audit log.
type EventType string

// The audit log's event types.
const (
	EventPersonaPublished  EventType = "persona.published"
	EventEdgeRequested     EventType = "edge.requested"
	EventEdgeApproved      EventType = "edge.approved"
	EventEdgeDenied        EventType = "edge.denied"
	EventEdgeWithdrawn     EventType = "edge.withdrawn"
	EventEdgeExpired       EventType = "edge.expired"
	EventEdgeReplaced      EventType = "edge.replaced"
	EventEdgeRevoked       EventType = "edge.revoked"
	EventHumanBlocked      EventType = "human.blocked"   // Actor blocked the human in Detail
	EventHumanUnblocked    EventType = "human.unblocked" // Actor unblocked the human in Detail
	EventGrantMinted       EventType = "grant.minted"
	EventGrantCollected    EventType = "grant.collected" // the requesting agent collected its credential
	EventGrantRevoked      EventType = "grant.revoked"
	EventWebhookRegistered EventType = "webhook.registered" // Detail: the webhook's id
	EventWebhookDeleted    EventType = "webhook.deleted"    // by its grant, or at the grant's revocation; Detail: the webhook's id
	EventTodoCreated       EventType = "todo.created"
	EventTodoClaimed       EventType = "todo.claimed"
	EventTodoCompleted     EventType = "todo.completed"
	EventTodoCancelled     EventType = "todo.cancelled"
	EventTodoFailed        EventType = "todo.failed"
	EventTodoReleased      EventType = "todo.released"
	EventTodoRedriven      EventType = "todo.redriven"
	EventTodoLeaseExpired  EventType = "todo.lease_expired"
	EventTodoDead          EventType = "todo.dead"
)

// Event is one append-only audit record, committed in the same
// transaction as the change it records and then sequenced into the audit
// log, a Merkle tree (see Checkpoint). It names who acted and which records
// changed; it never holds a credential or token. Its stored form, which is
// also its leaf in the tree, is EventLeaf.
type Event struct {
	Seq     uint64    `json:"seq"`               // position in the audit log, from 1, without gaps
	At      time.Time `json:"at"`                // commit time, on Config.Clock
	Type    EventType `json:"type"`              // what happened
	Actor   string    `json:"actor"`             // "human:<issuer>#<subject>", "agent:<persona id>" or "system"
	Persona string    `json:"persona,omitempty"` // the persona concerned, if any
	Edge    string    `json:"edge,omitempty"`    // the friend edge concerned, if any
	Grant   string    `json:"grant,omitempty"`   // the grant concerned, if any
	Todo    string    `json:"todo,omitempty"`    // the todo concerned, if any
	Queue   string    `json:"queue,omitempty"`   // the todo's queue: a QueueAddress or ApprovalsAddress
	Detail  string    `json:"detail,omitempty"`  // a short reason or the other party
}

func humanActor(h Human) string   { return "human:" + h.Issuer + "#" + h.Subject }
func agentActor(id string) string { return "agent:" + id }

const systemActor = "system"

// emit records e as part of the current transaction. Events reach the log
// when the transaction ends (flushEvents), in the order they were emitted,
// so each record's events follow the order of its changes.
func (t *txn) emit(e Event) error {
	e.At = t.now
	e.sanitize()
	t.events = append(t.events, e)
	return nil
}

// sanitize replaces invalid UTF-8 in e's strings, so its leaf is JSON that
// decodes to it.
func (e *Event) sanitize() {
	for _, f := range []*string{&e.Actor, &e.Persona, &e.Edge, &e.Grant, &e.Todo, &e.Queue, &e.Detail} {
		*f = validUTF8(*f)
	}
	e.Type = EventType(validUTF8(string(e.Type)))
}

// ErrAuditBroken is wrapped by every *AuditError: from VerifyAudit,
// Checkpoint and CheckLog (the log no longer holds what was signed, kept
// or seen), New (an older store's hash chain that does not verify while
// upgrading), Reap's LogProblem and a Subscription's Err. Nothing is
// signed while it stands.
var ErrAuditBroken = auditlog.ErrAuditBroken

// AuditError is the first damage VerifyAudit found, or what Checkpoint and
// CheckLog found before signing (auditlog.AuditError: Seq, the first event
// position the damage concerns, or 0; Reason, what does not hold; Err, the
// refusal it was learned from, as ErrWitnessRefused, or nil). It wraps
// ErrAuditBroken, and Err if set.
type AuditError = auditlog.AuditError

// AuditReport is what VerifyAudit checked.
type AuditReport struct {
	First, Last uint64 // the first and last seq present; zero for an empty log
	Events      uint64 // how many events were checked
	// TreeSize and Root state the log as VerifyAudit recomputed it from
	// the events: the number of events ever sequenced (purged ones
	// included) and the Merkle tree's root hash. A Checkpoint states the
	// same two values, signed.
	TreeSize uint64
	Root     tlog.Hash
	// Checkpoint is the latest stored checkpoint, checked against the
	// tree (nil if none was signed yet).
	Checkpoint *Checkpoint
	// Pending counts events committed but not yet sequenced into the log
	// (on a store with store.Appender); they are checked once sequenced.
	Pending uint64
}

// verifyBatch is how many events VerifyAudit reads at a time.
const verifyBatch = 512

// VerifyAudit checks the audit log against itself and against checkpoints:
// every event is stored under its position with that position as its seq,
// in its canonical form (EventLeaf); the Merkle tree is rebuilt from the
// events and every stored tree hash compared with the rebuilt one; no event
// is missing, added before the log's start or after its end; and the
// rebuilt tree extends the latest checkpoint stored by Checkpoint (its
// signature checked with Config.LogKey's public key) and every checkpoint
// in kept — checkpoints a human or auditor kept earlier, which no one who
// can write the store can forge. A log cut short and its state rewritten
// to match is caught by any checkpoint signed before the cut. It returns
// what it checked, or an *AuditError (wrapping ErrAuditBroken) naming the
// first position found damaged. It reads the whole log in one read
// transaction; events purged by retention are not read (their tree hashes
// that later proofs need are kept).
func (s *Switchboard) VerifyAudit(ctx context.Context, kept ...Checkpoint) (AuditReport, error) {
	return s.VerifyAuditWith(ctx, VerifyOptions{Kept: kept})
}

// VerifyOptions tunes VerifyAuditWith.
type VerifyOptions struct {
	// Kept are checkpoints kept outside the store, as VerifyAudit takes.
	Kept []Checkpoint
	// Progress, if set, is called as the events are checked, with how
	// many of the log's kept events are checked so far and how many
	// there are: once before the first, then after every batch of 512.
	// It runs on the calling goroutine, inside the read transaction, so
	// it must return quickly and must not call the Switchboard.
	Progress func(checked, total uint64)
}

// VerifyAuditWith is VerifyAudit with options: checkpoints kept outside
// the store and a progress callback for long logs (a command line's
// progress bar). A verification cancelled through ctx stops at the next
// batch of events with ctx's error.
func (s *Switchboard) VerifyAuditWith(ctx context.Context, opts VerifyOptions) (AuditReport, error) {
	var rep AuditReport
	err := s.view(ctx, func(t *txn) error {
		var err error
		rep, err = s.verifyAudit(ctx, t, opts)
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("switchboard: verify audit: %w", err)
	}
	return rep, nil
}

func (s *Switchboard) verifyAudit(ctx context.Context, t *txn, opts VerifyOptions) (AuditReport, error) {
	var rep AuditReport
	kept := opts.Kept
	st, err := t.lg.State()
	if err != nil {
		return rep, err
	}
	rep.TreeSize = st.Size
	seqOf := func(n uint64) uint64 { return st.Offset + n + 1 }
	if st.Purged > st.Size {
		return rep, &AuditError{Seq: seqOf(st.Size), Reason: fmt.Sprintf("the log's state says %d events were purged of %d", st.Purged, st.Size)}
	}

	// No event may sit before the log's first kept position, nor past
	// its end.
	if err := t.lg.Strays(); err != nil {
		return rep, err
	}

	// The rebuild starts from the tree hashes kept for the purged events.
	fr := auditlog.NewRebuild()
	if st.Purged > 0 {
		idx := auditlog.FrontierIndexes(st.Purged)
		hs, err := t.lg.ReadHashes(idx)
		if err != nil {
			return rep, &AuditError{Seq: seqOf(st.Purged), Reason: fmt.Sprintf("the tree hashes kept for the %d purged events are unreadable: %v", st.Purged, err)}
		}
		for i, x := range idx {
			fr.Set(x, hs[i])
		}
	}

	progress := func(uint64) {}
	if opts.Progress != nil {
		progress = func(n uint64) { opts.Progress(n-st.Purged, st.Size-st.Purged) }
	}
	progress(st.Purged)
	for n := st.Purged; n < st.Size; progress(n) {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		end := min(st.Size, n+verifyBatch)
		var seqs []uint64
		var leaves, stores [][]byte
		if err := t.lg.Entries(seqOf(n), int(end-n), func(seq uint64, leaf, hashes []byte) bool {
			seqs, leaves, stores = append(seqs, seq), append(leaves, leaf), append(stores, hashes)
			return true
		}); err != nil {
			return rep, err
		}
		for i := 0; n < end; n, i = n+1, i+1 {
			want := seqOf(n)
			if i >= len(seqs) || seqs[i] != want {
				return rep, &AuditError{Seq: want, Reason: "missing"}
			}
			leaf, stored := leaves[i], stores[i]
			if _, err := storedEvent(want, leaf); err != nil {
				return rep, err
			}
			hashes, err := tlog.StoredHashes(int64(n), leaf, fr)
			if err != nil {
				return rep, &AuditError{Seq: want, Reason: fmt.Sprintf("the tree cannot be rebuilt here: %v", err)}
			}
			first := tlog.StoredHashIndex(0, int64(n))
			for j, h := range hashes {
				from := n + 1 - 1<<j // the first leaf the hash covers
				switch {
				case !bytes.Equal(stored[j*tlog.HashSize:(j+1)*tlog.HashSize], h[:]) && j == 0:
					return rep, &AuditError{Seq: want, Reason: "its record does not hash to its leaf in the tree"}
				case !bytes.Equal(stored[j*tlog.HashSize:(j+1)*tlog.HashSize], h[:]):
					return rep, &AuditError{Seq: seqOf(from), Reason: fmt.Sprintf("the tree hash over events %d to %d differs from the events: one of them, or a hash, was changed", seqOf(from), want)}
				}
				fr.Set(first+int64(j), h)
			}
			fr.Forget()
			if rep.Events == 0 {
				rep.First = want
			}
			rep.Events++
			rep.Last = want
		}
	}
	if rep.Root, err = treeHash(st.Size, fr); err != nil {
		return rep, &AuditError{Seq: seqOf(st.Size), Reason: fmt.Sprintf("the root cannot be computed: %v", err)}
	}

	// The checkpoints: the stored one and those kept outside the store.
	check := func(cp Checkpoint, which string) error {
		switch {
		case cp.Size > st.Size:
			return &AuditError{Seq: seqOf(st.Size), Reason: fmt.Sprintf("%s states %d events, the log has %d: events were cut from its end", which, cp.Size, st.Size)}
		case cp.Size == st.Size:
			if cp.Root != rep.Root {
				return &AuditError{Seq: seqOf(st.Purged), Reason: fmt.Sprintf("the events do not hash to the root %s states", which)}
			}
			return nil
		case cp.Size == 0:
			return nil
		}
		root, err := tlog.TreeHash(int64(cp.Size), &t.lg)
		if errors.Is(err, auditlog.ErrHashGone) {
			return fmt.Errorf("%w: %s is older than the purged events", ErrEventPurged, which)
		}
		if err != nil {
			return err
		}
		if root != cp.Root {
			return &AuditError{Seq: seqOf(min(st.Purged, cp.Size-1)), Reason: fmt.Sprintf("the first %d events do not hash to the root %s states", cp.Size, which)}
		}
		return nil
	}
	if b, err := t.tx.Get(tMeta, []byte(checkpointKey)); err == nil {
		var cp Checkpoint
		if s.logVerifier != nil {
			cp, _, err = openCheckpointWith(b, s.logVerifiers)
		} else {
			cp, err = openCheckpoint(b, nil)
		}
		if err != nil {
			return rep, checkpointErr("the stored checkpoint", 0, err)
		}
		if cp.Size < st.Purged {
			// Retention never purges past the stored checkpoint (it is
			// what the next signature is checked against).
			return rep, &AuditError{Seq: seqOf(cp.Size), Reason: fmt.Sprintf("the log's state says its first %d events were purged, past the %d the stored checkpoint signed: retention never purges past it, so the state was rewritten", st.Purged, cp.Size)}
		}
		if err := check(cp, "the stored checkpoint"); err != nil {
			return rep, err
		}
		rep.Checkpoint = &cp
	} else if !errors.Is(err, store.ErrNotFound) {
		return rep, err
	}
	for i, cp := range kept {
		if s.logVerifier != nil {
			var err error
			if cp, _, err = openCheckpointWith(cp.Note, s.logVerifiers); err != nil {
				return rep, checkpointErr(fmt.Sprintf("kept checkpoint %d", i), 0, err)
			}
		}
		if err := check(cp, fmt.Sprintf("kept checkpoint %d", i)); err != nil {
			return rep, err
		}
	}
	var bad error
	err = t.lg.PendingRows(func(k, v []byte) bool {
		evs, err := parsePending(v)
		if err != nil {
			bad = &AuditError{Reason: fmt.Sprintf("pending events %x: %v", k, err)}
			return false
		}
		rep.Pending += uint64(len(evs))
		return true
	})
	if err == nil {
		err = bad
	}
	return rep, err
}

// keySeq reads an 8-byte big-endian key (0 for any other length).
func keySeq(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}

// Events returns up to limit audit events with Seq greater than after, in
// order. It is an operator's view of the whole store: hosts must not expose
// it to agents. A limit of zero or less means 100. A stored event that
// cannot be read, or names another seq than the one it is stored under, is
// an *AuditError (ErrAuditBroken) naming that seq.
func (s *Switchboard) Events(ctx context.Context, after uint64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []Event
	err := s.view(ctx, func(t *txn) error {
		// The events travel with the log state's read (Entries): one
		// round trip for a subscription's every wake.
		var derr error
		err := t.lg.Entries(after+1, limit, func(seq uint64, leaf, _ []byte) bool {
			// A stored event that cannot be read, or names another
			// seq, is a broken log (ErrAuditBroken), not a failure to
			// read the store.
			e, err := storedEvent(seq, leaf)
			if err != nil {
				derr = err
				return false
			}
			out = append(out, e)
			return true
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
