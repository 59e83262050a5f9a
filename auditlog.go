// The audit log as a Merkle tree: each event's leaf, the tree's stored
// hashes, sequencing events into the tree, signed checkpoints, and the
// inclusion and consistency proofs a third party checks with the log's
// public key alone.

package switchboard

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
)

// The log's tables and tMeta keys.
const (
	// The Merkle tree's hashes (golang.org/x/mod/sumdb/tlog's layout:
	// every leaf adds its own hash and those of the subtrees it completes)
	// are stored with the leaf that adds them, after its event record in
	// tEvents (see eventValue): no key of their own to write. Only the
	// few that outlive their events (the frontier of the purged leaves,
	// frontierIndexes) move to tLogHashes: tlog's stored hash index (8
	// bytes, big-endian) → the 32-byte hash.
	tLogHashes = "log_hashes"
	// tPending holds events committed but not yet in the log, on stores
	// whose transactions are store.Appenders: store-assigned key → one or
	// more events, each as a uvarint length and its leaf form with seq 0
	// (a store may join one transaction's appends into one row).
	tPending = "events_pending"

	logStateKey   = "log"                 // tMeta: logState
	checkpointKey = "checkpoint"          // tMeta: the latest signed checkpoint (a note, with the witnesses' cosignatures)
	frontierKey   = "checkpoint_frontier" // tMeta: the stored checkpoint's frontier hashes, largest subtree first (see matchTree)
)

// logLayout is where the audit log keeps its records (see the tables
// above, tEvents and tMeta).
var logLayout = auditlog.Layout{Entries: tEvents, Hashes: tLogHashes, Pending: tPending, Meta: tMeta, StateKey: logStateKey}

// nextTodoSeq numbers a new todo: from the store's own sequence where
// writers run concurrently (store.Appender), else from a counter beside the
// log's state, which the transaction writes anyway.
func (t *txn) nextTodoSeq() (uint64, error) {
	if a, ok := t.tx.(store.Appender); ok {
		return a.Sequence()
	}
	st, err := t.lg.State()
	if err != nil {
		return 0, err
	}
	st.Counter++
	t.logDirty = true
	return st.Counter, nil
}

// flushEvents ends a write transaction's part in the log: its events go
// into the tree at once on a store whose writers run one at a time, or are
// written pending — no writer reads or moves a shared head — for the
// sequencer to add after commit (see sequencer.go).
func (t *txn) flushEvents() error {
	if _, ok := t.tx.(store.Appender); ok && len(t.events) > 0 {
		var b, leaf []byte
		for i := range t.events {
			e := t.events[i]
			e.Seq = 0
			leaf = appendLeaf(leaf[:0], &e)
			b = auditlog.AppendPending(b, leaf)
		}
		if err := t.lg.AddPending(b); err != nil {
			return err
		}
		t.pending = len(t.events)
		return nil
	}
	if len(t.events) > 0 {
		if err := t.integrate(t.events); err != nil {
			return err
		}
		t.logged = len(t.events)
		return nil
	}
	if t.logDirty {
		return t.lg.SaveState()
	}
	return nil
}

// parsePending reads the events of one pending row.
func parsePending(v []byte) ([]Event, error) {
	var evs []Event
	err := auditlog.ParsePending(v, func(leaf []byte) error {
		e, err := parseLeaf(leaf)
		evs = append(evs, e)
		return err
	})
	return evs, err
}

// integrate appends evs to the log as its next leaves: each gets the next
// seq and is stored under it (auditlog.Tx.Append), and where each
// transition of an edge lands is noted for EdgeEvent.
func (t *txn) integrate(evs []Event) error {
	err := t.lg.Append(len(evs), func(i int, seq uint64, b []byte) []byte {
		evs[i].Seq = seq
		return appendLeaf(b, &evs[i])
	})
	if err != nil {
		return err
	}
	for i := range evs {
		if e := &evs[i]; e.Edge != "" && strings.HasPrefix(string(e.Type), "edge.") {
			// Where each transition of an edge is in the log, for
			// EdgeEvent: a few per edge, written by whoever sequences.
			if err := t.tx.Put(tEdgeEvents, []byte(e.Edge+sep+string(e.Type)), be64b(e.Seq)); err != nil {
				return err
			}
		}
	}
	return nil
}

func be64b(n uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), n) }

// EventLeaf returns the bytes an event is stored as and hashed into the
// audit log's Merkle tree (its leaf hash is tlog.RecordHash of them): the
// event as a JSON object in the canonical form of RFC 8785 (JCS) — members
// sorted by name, no insignificant whitespace, strings escaped as JCS
// escapes them — with "at" in RFC 3339 with nanoseconds, UTC, and the
// members whose value is empty left out. Any language with a JCS library
// computes the same bytes from the event's JSON. Invalid UTF-8 in a field
// reads as U+FFFD, as JSON encoders write it (events in the log never hold
// any).
func EventLeaf(e Event) []byte {
	e.sanitize()
	return appendLeaf(nil, &e)
}

// appendLeaf appends e's leaf form. Members in JCS order: actor, at,
// detail, edge, grant, persona, queue, seq, todo, type.
func appendLeaf(b []byte, e *Event) []byte {
	b = append(b, `{"actor":`...)
	b = appendJCSString(b, e.Actor)
	b = append(b, `,"at":"`...)
	b = e.At.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	for _, m := range []struct{ name, v string }{{"detail", e.Detail}, {"edge", e.Edge}, {"grant", e.Grant}, {"persona", e.Persona}, {"queue", e.Queue}} {
		if m.v != "" {
			b = append(b, `,"`...)
			b = append(b, m.name...)
			b = append(b, `":`...)
			b = appendJCSString(b, m.v)
		}
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	if e.Todo != "" {
		b = append(b, `,"todo":`...)
		b = appendJCSString(b, e.Todo)
	}
	b = append(b, `,"type":`...)
	b = appendJCSString(b, string(e.Type))
	return append(b, '}')
}

// appendJCSString appends s as RFC 8785 serializes a string: only the
// quote, the backslash and control characters are escaped (with the short
// forms where JSON has them, else \u00XX in lower case). s is valid UTF-8:
// emit made it so.
func appendJCSString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b = append(b, '\\', '"')
		case c == '\\':
			b = append(b, '\\', '\\')
		case c >= 0x20:
			b = append(b, c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(b, '"')
}

// validUTF8 replaces every invalid byte of s with U+FFFD, as JSON encoders
// do, so an event's leaf is always valid JSON and decodes to the event.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// storedEvent is the event stored under seq, whose leaf is leaf: the one
// place a stored leaf becomes an Event for a reader (Events, so
// subscriptions; VerifyAudit; retention's archive). A leaf that does not
// decode, or names another seq than the one it is stored under, is an
// *AuditError naming seq — never an event handed out under another seq.
func storedEvent(seq uint64, leaf []byte) (Event, error) {
	e, err := parseLeaf(leaf)
	if err != nil {
		return Event{}, &AuditError{Seq: seq, Reason: err.Error()}
	}
	if e.Seq != seq {
		return Event{}, &AuditError{Seq: seq, Reason: fmt.Sprintf("its record names seq %d", e.Seq)}
	}
	return e, nil
}

// parseLeaf decodes a leaf and accepts it only if it is exactly the
// canonical form of what it decodes to: one spelling per event, so what a
// proof covers is what the caller reads.
func parseLeaf(leaf []byte) (Event, error) {
	// The decode may be lenient (case-folded or repeated keys, unknown
	// members): the byte-for-byte comparison with the canonical form
	// after it refuses every such spelling. A leaf in the canonical form
	// — every stored one — decodes without encoding/json, which took a
	// third of the sequencer's CPU.
	if e, ok := decodeLeaf(leaf); ok && bytes.Equal(appendLeaf(make([]byte, 0, len(leaf)), &e), leaf) {
		return e, nil
	}
	var e Event
	if err := json.Unmarshal(leaf, &e); err != nil {
		return Event{}, fmt.Errorf("event record does not decode: %w", err)
	}
	if !bytes.Equal(appendLeaf(nil, &e), leaf) {
		return Event{}, errors.New("event record is not in its canonical form")
	}
	return e, nil
}

// decodeLeaf decodes a leaf in the shape appendLeaf writes — one flat
// object of string members and the number seq, strings with JSON's escapes
// and valid UTF-8 — and reports false for anything else (parseLeaf then
// lets encoding/json judge it). It does not check the form is canonical:
// parseLeaf compares the event's canonical form with the leaf.
func decodeLeaf(b []byte) (e Event, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return Event{}, false
	}
	b = b[1 : len(b)-1]
	for first := true; len(b) > 0; first = false {
		if !first {
			if b[0] != ',' {
				return Event{}, false
			}
			b = b[1:]
		}
		var name string
		if name, b, ok = cutJSONString(b); !ok || len(b) == 0 || b[0] != ':' {
			return Event{}, false
		}
		b = b[1:]
		if name == "seq" {
			i := 0
			for i < len(b) && b[i] >= '0' && b[i] <= '9' {
				i++
			}
			n, err := strconv.ParseUint(string(b[:i]), 10, 64)
			if err != nil {
				return Event{}, false
			}
			e.Seq, b = n, b[i:]
			continue
		}
		var v string
		if v, b, ok = cutJSONString(b); !ok {
			return Event{}, false
		}
		switch name {
		case "actor":
			e.Actor = v
		case "at":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return Event{}, false
			}
			e.At = t
		case "detail":
			e.Detail = v
		case "edge":
			e.Edge = v
		case "grant":
			e.Grant = v
		case "persona":
			e.Persona = v
		case "queue":
			e.Queue = v
		case "todo":
			e.Todo = v
		case "type":
			e.Type = EventType(v)
		default:
			return Event{}, false
		}
	}
	return e, true
}

// cutJSONString decodes the JSON string b starts with and returns it and
// the rest of b; false if b does not start with one this decoder takes
// (surrogate escapes and invalid UTF-8 are left to encoding/json).
func cutJSONString(b []byte) (string, []byte, bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	end := 1
	for end < len(b) && b[end] != '"' && b[end] != '\\' && b[end] >= 0x20 {
		end++
	}
	// The run before the first escape, without a copy; the full slice
	// expression makes a later append copy it rather than write into b.
	out := b[1:end:end]
	for i := end; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			if !utf8.Valid(out) {
				return "", nil, false
			}
			return string(out), b[i+1:], true
		case c < 0x20:
			return "", nil, false
		case c != '\\':
			out = append(out, c)
			continue
		}
		if i+1 >= len(b) {
			return "", nil, false
		}
		i++
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+4 >= len(b) {
				return "", nil, false
			}
			r, err := strconv.ParseUint(string(b[i+1:i+5]), 16, 16)
			if err != nil || utf16.IsSurrogate(rune(r)) {
				return "", nil, false
			}
			out = utf8.AppendRune(out, rune(r))
			i += 4
		default:
			return "", nil, false
		}
	}
	return "", nil, false
}

// Checkpoints and proofs.

// ErrNoLogKey is returned by Checkpoint when Config.LogKey is not set: the
// log can still be verified and proved against a tree size, but not signed.
var ErrNoLogKey = errors.New("no audit log key configured (Config.LogKey; the command line's --log-key)")

// ErrProof is wrapped by the errors of the proof and checkpoint checks: a
// checkpoint whose signature or text is wrong, a proof that does not lead
// to the checkpoint's root (auditlog.ErrProof).
var ErrProof = auditlog.ErrProof

// ErrEventPurged is wrapped by the error of ProveEvent and ProveConsistency
// when the proof would need events retention has deleted; an auditor
// holding the archived events (Config.Archive) recomputes it from them.
var ErrEventPurged = errors.New("audit event purged")

// Checkpoint is a signed statement of the audit log's state: its size and
// the root hash of its Merkle tree, in the C2SP tlog-checkpoint format as a
// signed note (golang.org/x/mod/sumdb/note, Ed25519). A human or auditor
// who keeps one can later check, with the log's public key alone, that an
// event is in the log (VerifyInclusion) and that the log has only been
// appended to since (VerifyConsistency). It is package auditlog's.
type Checkpoint = auditlog.Checkpoint

// InclusionProof proves that one event is in the log of a given size: its
// Leaf is the event's (EventLeaf), its Index the event's Seq-1 (see
// LogOffset). It is package auditlog's.
type InclusionProof = auditlog.InclusionProof

// ConsistencyProof proves that the log at NewSize extends the log at
// OldSize: every event of the older tree is in the newer, unchanged. It is
// package auditlog's.
type ConsistencyProof = auditlog.ConsistencyProof

// NewLogKey generates an Ed25519 key pair for signing the audit log's
// checkpoints, in golang.org/x/mod/sumdb/note's text forms. name is the
// log's origin, conventionally a host name and path ("example.com/audit").
// Put signerKey in Config.LogKey and keep it secret; publish verifierKey.
// A name a signed note cannot carry (empty, with a space or a '+', or not
// UTF-8) is ErrInvalidArgument. It is auditlog.NewKey.
func NewLogKey(name string) (signerKey, verifierKey string, err error) {
	signerKey, verifierKey, err = auditlog.NewKey(name)
	if err != nil {
		return "", "", fmt.Errorf("switchboard: new log key: %w: %w", ErrInvalidArgument, err)
	}
	return signerKey, verifierKey, nil
}

// LogVerifierKey returns the public key of Config.LogKey in note's text
// form — what a third party passes to OpenCheckpoint — or "" when no key is
// configured.
func (s *Switchboard) LogVerifierKey() string { return s.logVKey }

// CheckpointStore keeps the audit log's latest signed checkpoint outside
// the switchboard store (Config.Checkpoints): somewhere whoever can write
// the store cannot also rewrite — a file beside the log key
// (CheckpointFile), an object store, another database. It is package
// auditlog's.
type CheckpointStore = auditlog.CheckpointStore

// CheckpointFile is a CheckpointStore in the file at path: written whole
// to a temporary file, synced and renamed over the last, so a crash leaves
// one checkpoint or the other (auditlog.File).
func CheckpointFile(path string) CheckpointStore { return auditlog.File(path) }

// logProblem is the last checkpoint problem Reap met: reported (logged)
// once per distinct error, and readable with LogProblem.
type logProblem struct {
	mu  sync.Mutex
	err error
}

// set records err (nil: the log is sound again) and reports whether it
// differs from the last one recorded.
func (p *logProblem) set(err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := (err == nil) != (p.err == nil) || err != nil && err.Error() != p.err.Error()
	p.err = err
	return changed
}

// LogProblem returns the problem the last Reap met signing a checkpoint —
// an *AuditError when the stored log no longer holds what was signed (audit
// events are then not purged), or a witness or key trouble — or nil when
// it signed (or had nothing to sign) without one.
func (s *Switchboard) LogProblem() error {
	s.logProblem.mu.Lock()
	defer s.logProblem.mu.Unlock()
	return s.logProblem.err
}

// treeHash is tlog.TreeHash, with the empty tree's root for size 0.
func treeHash(size uint64, r tlog.HashReader) (tlog.Hash, error) { return auditlog.TreeHash(size, r) }

func checkpointText(cp Checkpoint) string { return auditlog.Text(cp.Origin, cp.Size, cp.Root) }

// OpenCheckpoint verifies a checkpoint's signature with the log's public
// key (verifierKey, as LogVerifierKey returns it) — or, after a key
// rotation, with any of the keys given — and returns what it states. It
// needs nothing from the store: a third party keeps the note's bytes and
// the key, and checks proofs against the result. Cosignatures the note
// carries besides the log's signature are ignored (see
// OpenWitnessedCheckpoint). A note that does not verify wraps ErrProof, and
// ErrUnknownLogKey too when it is signed by none of the keys given; a
// malformed key is ErrInvalidArgument.
func OpenCheckpoint(signed []byte, verifierKey string, previousKeys ...string) (Checkpoint, error) {
	var vs []note.Verifier
	for _, k := range append([]string{verifierKey}, previousKeys...) {
		v, err := note.NewVerifier(k)
		if err != nil {
			return Checkpoint{}, fmt.Errorf("switchboard: open checkpoint: %w: verifier key: %v", ErrInvalidArgument, err)
		}
		vs = append(vs, v)
	}
	cp, _, err := openCheckpointWith(signed, vs)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("switchboard: open checkpoint: %w", err)
	}
	return cp, nil
}

// openCheckpoint checks signed with v (nil: no key configured, so only the
// text is read) and parses its text strictly.
func openCheckpoint(signed []byte, v note.Verifier) (Checkpoint, error) {
	if v == nil {
		cp, _, err := openCheckpointWith(signed, nil)
		return cp, err
	}
	cp, _, err := openCheckpointWith(signed, []note.Verifier{v})
	return cp, err
}

// openCheckpointWith checks signed with any of vs (none: only the text is
// read; see auditlog.Open and auditlog.Unverified). first reports whether
// vs[0] (the current key) is among the signers.
func openCheckpointWith(signed []byte, vs []note.Verifier) (cp Checkpoint, first bool, err error) {
	if len(vs) == 0 {
		cp, err = auditlog.Unverified(signed)
		return cp, false, err
	}
	cp, sigs, err := auditlog.Open(signed, vs...)
	for _, sig := range sigs {
		first = first || sig.Hash == vs[0].KeyHash() && sig.Name == vs[0].Name()
	}
	return cp, first, err
}

// LogOffset returns how the seqs of events map to the tree's leaves: event
// seq is leaf seq-1-offset. It is 0 except in a store upgraded from the
// hash-chained layout after retention had purged events (their seqs are
// not in the tree).
func (s *Switchboard) LogOffset(ctx context.Context) (uint64, error) {
	var off uint64
	err := s.view(ctx, func(t *txn) error {
		st, err := t.lg.State()
		if err == nil {
			off = st.Offset
		}
		return err
	})
	return off, wrapErr("log offset", err)
}

// ProveEvent returns the proof that event seq is in the log of treeSize
// events — the Size of a checkpoint the caller holds (0 means the log's
// current size). The proof carries the event's leaf, so VerifyInclusion
// needs only it and the checkpoint. A treeSize larger than the log is
// ErrInvalidArgument; a seq not in the tree of treeSize events is
// ErrNotFound naming both; an event retention purged is ErrEventPurged.
func (s *Switchboard) ProveEvent(ctx context.Context, seq, treeSize uint64) (InclusionProof, error) {
	var p InclusionProof
	err := s.view(ctx, func(t *txn) error {
		st, err := t.lg.State()
		if err != nil {
			return err
		}
		if treeSize == 0 {
			treeSize = st.Size
		}
		if treeSize > st.Size {
			return invalid("tree size %d is larger than the log (%d events)", treeSize, st.Size)
		}
		if seq <= st.Offset || seq-st.Offset > treeSize {
			return fmt.Errorf("%w: event %d is not in a log of %d events", ErrNotFound, seq, treeSize)
		}
		n := seq - st.Offset - 1
		if n < st.Purged {
			return fmt.Errorf("%w: event %d (prove it from the archive)", ErrEventPurged, seq)
		}
		leaf, _, err := t.lg.Entry(seq)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: event %d", ErrNotFound, seq)
		}
		if err != nil {
			return err
		}
		hashes, err := tlog.ProveRecord(int64(treeSize), int64(n), &t.lg)
		if errors.Is(err, auditlog.ErrHashGone) {
			return fmt.Errorf("%w: event %d", ErrEventPurged, seq)
		}
		if err != nil {
			return err
		}
		p = InclusionProof{Index: n, TreeSize: treeSize, Leaf: leaf, Hashes: hashes}
		return nil
	})
	return p, wrapErr("prove event", err)
}

// ProveConsistency returns the proof that the log of newSize events (0:
// its current size) extends the log of oldSize events, as two checkpoints
// state them. Sizes not 0 < oldSize ≤ newSize ≤ the log's size are
// ErrInvalidArgument; a proof that needs hashes retention purged is
// ErrEventPurged.
func (s *Switchboard) ProveConsistency(ctx context.Context, oldSize, newSize uint64) (ConsistencyProof, error) {
	var p ConsistencyProof
	err := s.view(ctx, func(t *txn) error {
		st, err := t.lg.State()
		if err != nil {
			return err
		}
		if newSize == 0 {
			newSize = st.Size
		}
		if newSize > st.Size || oldSize > newSize || oldSize == 0 {
			return invalid("sizes %d and %d: want 0 < old ≤ new ≤ %d", oldSize, newSize, st.Size)
		}
		hashes, err := tlog.ProveTree(int64(newSize), int64(oldSize), &t.lg)
		if errors.Is(err, auditlog.ErrHashGone) {
			return fmt.Errorf("%w: the log of %d events (prove it from the archive)", ErrEventPurged, oldSize)
		}
		if err != nil {
			return err
		}
		p = ConsistencyProof{OldSize: oldSize, NewSize: newSize, Hashes: hashes}
		return nil
	})
	return p, wrapErr("prove consistency", err)
}

// VerifyInclusion checks that p proves its event is in the log cp states,
// and returns the event. cp must come from OpenCheckpoint (or Checkpoint),
// which checked its signature; nothing else is trusted. A proof for
// another size, or whose path does not reach cp.Root, wraps ErrProof.
func VerifyInclusion(cp Checkpoint, p InclusionProof) (Event, error) {
	if err := auditlog.CheckInclusion(cp, p); err != nil {
		return Event{}, fmt.Errorf("switchboard: verify inclusion: %w", err)
	}
	e, err := parseLeaf(p.Leaf)
	if err != nil {
		return Event{}, fmt.Errorf("switchboard: verify inclusion: %w: %v", ErrProof, err)
	}
	return e, nil
}

// VerifyConsistency checks that p proves the log newer states extends the
// log older states. Both must come from OpenCheckpoint.
func VerifyConsistency(older, newer Checkpoint, p ConsistencyProof) error {
	if err := auditlog.CheckConsistency(older, newer, p); err != nil {
		return fmt.Errorf("switchboard: verify consistency: %w", err)
	}
	return nil
}
