// The binary stored forms of todo and persona records.

package switchboard

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/switchboardhq/switchboard/agentcard"
)

// todoFormatV1 is the first byte of a todo record in the binary stored
// form. Records written before it are JSON and start with '{'; both are
// read, and every write uses the binary form, so a store converts itself
// as its todos change.
//
// The binary form is about half the size of the JSON one (a payload is its
// own bytes, not base64; no field names; no zero times spelled out), so a
// commit writes fewer pages, and it encodes and decodes several times
// faster — a todo is written on every transition and read by every claim,
// heartbeat and complete. Layout, after the format byte: the fields of
// todoRec in a fixed order, strings and byte slices as a uvarint length
// and the bytes, integers as varints, times as a presence byte then unix
// seconds (varint) and nanoseconds (uvarint), the approval (rare: only
// approval todos have one) as JSON bytes, the history as a count then its
// attempts. Nothing may follow the last field.
const todoFormatV1 = 0x01

// todoFormatV2 is todoFormatV1's layout followed by the trace context's
// traceparent and tracestate. A todo without a trace context is still
// written as V1 (two bytes fewer); both are read.
const todoFormatV2 = 0x02

// todoFormatV3 is the first byte of a todo record in the form laid out for
// updates in place (written on stores at layout 8, read by every version
// since): after it a CRC-32C (Castagnoli) of everything that follows, then
// the fields a todo's life changes — state, attempts, times, lease token,
// error, result, history — then those it is created with and keeps, the
// payload last. PostgreSQL logs an update that stays on its page as the
// bytes between the prefix and the suffix the two versions share, so an
// update of this form logs about the changed fields only: the unchanged
// suffix is every field a todo keeps. The checksum comes first so that it
// spoils no shared suffix, and a record whose bytes changed underneath
// (a flipped bit on a disk, a store written by hand) is ErrDamaged when
// read, never a todo with another payload.
const todoFormatV3 = 0x03

// castagnoli is CRC-32C's table.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// storedSize is about the length of r's stored form V3 (its fixed-size
// fields at their longest, its strings and bytes as they are, an approval
// guessed at), for a buffer that need not grow.
func (r *todoRec) storedSize() int {
	n := 128 + len(r.State) + len(r.LeaseToken) + len(r.Error) + len(r.Result) + len(r.ID) + len(r.Queue) +
		len(r.QueueKey) + len(r.Kind) + len(r.Title) + len(r.DedupKey) + len(r.Origin.Agent) + len(r.Origin.Grant) +
		len(r.Origin.Edge) + len(r.Origin.Human.Issuer) + len(r.Origin.Human.Subject) + len(r.Trace.Parent) +
		len(r.Trace.State) + len(r.Payload)
	for _, h := range r.History {
		n += 48 + len(h.Agent) + len(h.Grant) + len(h.Outcome) + len(h.Reason)
	}
	if r.Approval != nil {
		n += 512
	}
	return n
}

// appendStoredV3 appends r's stored form V3 to b.
func (r todoRec) appendStoredV3(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, todoFormatV3, 0, 0, 0, 0)
	// What a todo's life changes.
	b = appendString(b, string(r.State))
	b = binary.AppendVarint(b, int64(r.Attempts))
	b = appendTime(b, r.AvailableAt)
	b = appendTime(b, r.LeaseExpiresAt)
	b = appendTime(b, r.UpdatedAt)
	b = appendTime(b, r.EndedAt)
	b = appendString(b, r.LeaseToken)
	b = appendString(b, r.Error)
	b = appendBytes(b, r.Result)
	b = binary.AppendUvarint(b, uint64(len(r.History)))
	for _, h := range r.History {
		b = binary.AppendVarint(b, int64(h.N))
		b = appendString(b, h.Agent)
		b = appendString(b, h.Grant)
		b = appendTime(b, h.ClaimedAt)
		b = appendTime(b, h.EndedAt)
		b = appendString(b, string(h.Outcome))
		b = appendString(b, h.Reason)
	}
	// What it keeps.
	b = appendString(b, r.ID)
	b = appendString(b, r.Queue)
	b = appendString(b, r.QueueKey)
	b = binary.AppendUvarint(b, r.Seq)
	b = appendString(b, r.Kind)
	b = appendString(b, r.Title)
	b = binary.AppendVarint(b, int64(r.Priority))
	b = appendString(b, r.DedupKey)
	b = binary.AppendVarint(b, int64(r.MaxAttempts))
	b = appendString(b, r.Origin.Agent)
	b = appendString(b, r.Origin.Grant)
	b = appendString(b, r.Origin.Edge)
	b = appendString(b, r.Origin.Human.Issuer)
	b = appendString(b, r.Origin.Human.Subject)
	b = appendTime(b, r.CreatedAt)
	b = appendString(b, r.Trace.Parent)
	b = appendString(b, r.Trace.State)
	if r.Approval == nil {
		b = append(b, 0)
	} else {
		a, err := json.Marshal(r.Approval)
		if err != nil {
			return nil, fmt.Errorf("encode approval: %w", err)
		}
		b = appendBytes(b, a)
	}
	b = appendBytes(b, r.Payload)
	binary.BigEndian.PutUint32(b[start+1:], crc32.Checksum(b[start+5:], castagnoli))
	return b, nil
}

// decodeV3 decodes a record of the form V3 (b without its format byte).
func (r *todoRec) decodeV3(b []byte) error {
	if len(b) < 4 {
		return fmt.Errorf("%w: a V3 todo record of %d bytes", errRecord, len(b)+1)
	}
	if got, want := crc32.Checksum(b[4:], castagnoli), binary.BigEndian.Uint32(b); got != want {
		return fmt.Errorf("%w: its CRC-32C is %08x, its bytes give %08x", ErrDamaged, want, got)
	}
	d := decoder{b: b[4:]}
	var t todoRec
	t.State = TodoState(d.string())
	t.Attempts = d.int()
	t.AvailableAt = d.time()
	t.LeaseExpiresAt = d.time()
	t.UpdatedAt = d.time()
	t.EndedAt = d.time()
	t.LeaseToken = d.string()
	t.Error = d.string()
	t.Result = d.bytes()
	n := d.uint()
	if n > maxHistory || n > uint64(len(d.b)) {
		d.fail("history of %d attempts", n)
	}
	if n > 0 && d.err == nil {
		t.History = make([]Attempt, n)
		for i := range t.History {
			h := &t.History[i]
			h.N = d.int()
			h.Agent = d.string()
			h.Grant = d.string()
			h.ClaimedAt = d.time()
			h.EndedAt = d.time()
			h.Outcome = Outcome(d.string())
			h.Reason = d.string()
		}
	}
	t.ID = d.string()
	t.Queue = d.string()
	t.QueueKey = d.string()
	t.Seq = d.uint()
	t.Kind = d.string()
	t.Title = d.string()
	t.Priority = d.int()
	t.DedupKey = d.string()
	t.MaxAttempts = d.int()
	t.Origin.Agent = d.string()
	t.Origin.Grant = d.string()
	t.Origin.Edge = d.string()
	t.Origin.Human.Issuer = d.string()
	t.Origin.Human.Subject = d.string()
	t.CreatedAt = d.time()
	t.Trace.Parent = d.string()
	t.Trace.State = d.string()
	if a := d.bytes(); a != nil && d.err == nil {
		t.Approval = new(Approval)
		if err := json.Unmarshal(a, t.Approval); err != nil {
			return fmt.Errorf("%w: approval: %w", errRecord, err)
		}
	}
	t.Payload = d.bytes()
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last field", len(d.b))
	}
	if d.err != nil {
		return d.err
	}
	*r = t
	return nil
}

// appendStored appends r's binary stored form to b.
func (r todoRec) appendStored(b []byte) ([]byte, error) {
	if r.Trace.IsZero() {
		b = append(b, todoFormatV1)
	} else {
		b = append(b, todoFormatV2)
	}
	b = appendString(b, r.ID)
	b = appendString(b, r.Queue)
	b = appendString(b, r.Kind)
	b = appendString(b, r.Title)
	b = appendBytes(b, r.Payload)
	b = binary.AppendVarint(b, int64(r.Priority))
	b = appendString(b, r.DedupKey)
	b = appendString(b, string(r.State))
	b = binary.AppendVarint(b, int64(r.Attempts))
	b = binary.AppendVarint(b, int64(r.MaxAttempts))
	b = appendTime(b, r.AvailableAt)
	b = appendTime(b, r.LeaseExpiresAt)
	b = appendString(b, r.Origin.Agent)
	b = appendString(b, r.Origin.Grant)
	b = appendString(b, r.Origin.Edge)
	b = appendString(b, r.Origin.Human.Issuer)
	b = appendString(b, r.Origin.Human.Subject)
	b = appendBytes(b, r.Result)
	b = appendString(b, r.Error)
	if r.Approval == nil {
		b = append(b, 0)
	} else {
		a, err := json.Marshal(r.Approval)
		if err != nil {
			return nil, fmt.Errorf("encode approval: %w", err)
		}
		b = appendBytes(b, a)
	}
	b = binary.AppendUvarint(b, uint64(len(r.History)))
	for _, h := range r.History {
		b = binary.AppendVarint(b, int64(h.N))
		b = appendString(b, h.Agent)
		b = appendString(b, h.Grant)
		b = appendTime(b, h.ClaimedAt)
		b = appendTime(b, h.EndedAt)
		b = appendString(b, string(h.Outcome))
		b = appendString(b, h.Reason)
	}
	b = appendTime(b, r.CreatedAt)
	b = appendTime(b, r.UpdatedAt)
	b = appendTime(b, r.EndedAt)
	b = appendString(b, r.QueueKey)
	b = binary.AppendUvarint(b, r.Seq)
	b = appendString(b, r.LeaseToken)
	if !r.Trace.IsZero() {
		b = appendString(b, r.Trace.Parent)
		b = appendString(b, r.Trace.State)
	}
	return b, nil
}

// loadStored decodes a todo record in any stored form.
func (r *todoRec) loadStored(b []byte) error {
	if len(b) > 0 && b[0] == todoFormatV3 {
		return r.decodeV3(b[1:])
	}
	if len(b) > 0 && (b[0] == todoFormatV1 || b[0] == todoFormatV2) {
		return r.decodeBinary(b[1:], b[0] == todoFormatV2)
	}
	var s todoRecStored
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*r = todoRec{Todo: Todo(s.todoPlain), QueueKey: s.QueueKey, Seq: s.Seq, LeaseToken: s.LeaseToken}
	return nil
}

// errRecord is a stored record that does not decode.
var errRecord = errors.New("malformed record")

func (r *todoRec) decodeBinary(b []byte, traced bool) error {
	d := decoder{b: b}
	var t todoRec
	t.ID = d.string()
	t.Queue = d.string()
	t.Kind = d.string()
	t.Title = d.string()
	t.Payload = d.bytes()
	t.Priority = d.int()
	t.DedupKey = d.string()
	t.State = TodoState(d.string())
	t.Attempts = d.int()
	t.MaxAttempts = d.int()
	t.AvailableAt = d.time()
	t.LeaseExpiresAt = d.time()
	t.Origin.Agent = d.string()
	t.Origin.Grant = d.string()
	t.Origin.Edge = d.string()
	t.Origin.Human.Issuer = d.string()
	t.Origin.Human.Subject = d.string()
	t.Result = d.bytes()
	t.Error = d.string()
	if a := d.bytes(); a != nil && d.err == nil {
		t.Approval = new(Approval)
		if err := json.Unmarshal(a, t.Approval); err != nil {
			return fmt.Errorf("%w: approval: %w", errRecord, err)
		}
	}
	n := d.uint()
	if n > maxHistory || n > uint64(len(d.b)) {
		d.fail("history of %d attempts", n)
	}
	if n > 0 && d.err == nil {
		t.History = make([]Attempt, n)
		for i := range t.History {
			h := &t.History[i]
			h.N = d.int()
			h.Agent = d.string()
			h.Grant = d.string()
			h.ClaimedAt = d.time()
			h.EndedAt = d.time()
			h.Outcome = Outcome(d.string())
			h.Reason = d.string()
		}
	}
	t.CreatedAt = d.time()
	t.UpdatedAt = d.time()
	t.EndedAt = d.time()
	t.QueueKey = d.string()
	t.Seq = d.uint()
	t.LeaseToken = d.string()
	if traced {
		t.Trace.Parent = d.string()
		t.Trace.State = d.string()
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last field", len(d.b))
	}
	if d.err != nil {
		return d.err
	}
	*r = t
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

// decoder reads the binary stored form; the first problem sticks in err
// and every later read returns a zero value.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errRecord, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || v < math.MinInt || v > math.MaxInt {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

// raw returns the next length-prefixed field, aliasing the input.
func (d *decoder) raw() []byte {
	n := d.uint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("field of %d bytes with %d left", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.raw()) }

// bytes returns a copy of the next field; empty is nil, as in the JSON
// form (which omits empty byte fields).
func (d *decoder) bytes() []byte {
	v := d.raw()
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}

func (d *decoder) time() time.Time {
	if d.err != nil {
		return time.Time{}
	}
	if len(d.b) == 0 {
		d.fail("truncated time")
		return time.Time{}
	}
	flag := d.b[0]
	d.b = d.b[1:]
	switch flag {
	case 0:
		return time.Time{}
	case 1:
	default:
		d.fail("bad time flag %d", flag)
		return time.Time{}
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad time")
		return time.Time{}
	}
	d.b = d.b[n:]
	ns := d.uint()
	if ns >= 1e9 {
		d.fail("bad time nanoseconds %d", ns)
		return time.Time{}
	}
	return time.Unix(v, int64(ns)).UTC()
}

// personaFormatV1 is the first byte of a persona record whose head (the
// fields personaHead holds) is stored in binary ahead of the JSON of the
// rest: the checks of every friend request read the target's head without
// scanning its card. The fields that decide access — id, owner,
// discoverable — are stored once, in the head; the card's name is in the
// head too (for the approval's title) and must match the card's. Records
// written before it are plain JSON and are still read.
const personaFormatV1 = 0x01

// personaRec is the stored form of a Persona.
type personaRec struct{ Persona }

// personaBody is what the JSON after the head holds.
type personaBody struct {
	Card      agentcard.Card `json:"card"`
	CreatedAt time.Time      `json:"created_at,omitzero"`
	UpdatedAt time.Time      `json:"updated_at,omitzero"`
}

func (r personaRec) appendStored(b []byte) ([]byte, error) {
	body, err := json.Marshal(personaBody{Card: r.Card, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt})
	if err != nil {
		return nil, err
	}
	b = append(b, personaFormatV1)
	b = appendString(b, r.ID)
	b = appendString(b, r.Owner.Issuer)
	b = appendString(b, r.Owner.Subject)
	// The flags byte: 1 discoverable, 2 require proof. An older version
	// refuses a persona with a flag it does not know, instead of
	// accepting bearer grants into it.
	var flags byte
	if r.Discoverable {
		flags |= 1
	}
	if r.RequireProof {
		flags |= 2
	}
	b = append(b, flags)
	b = appendString(b, r.Card.Name)
	return append(b, body...), nil
}

func (r *personaRec) loadStored(b []byte) error {
	if len(b) == 0 || b[0] != personaFormatV1 {
		var p Persona
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		r.Persona = p
		return nil
	}
	h, rest, err := decodePersonaHead(b[1:])
	if err != nil {
		return err
	}
	var body personaBody
	if err := json.Unmarshal(rest, &body); err != nil {
		return fmt.Errorf("%w: persona card: %w", errRecord, err)
	}
	if body.Card.Name != h.Card.Name {
		return fmt.Errorf("%w: the head names the card %q, the card says %q", errRecord, h.Card.Name, body.Card.Name)
	}
	r.Persona = Persona{ID: h.ID, Owner: h.Owner, Discoverable: h.Discoverable, RequireProof: h.RequireProof, Card: body.Card, CreatedAt: body.CreatedAt, UpdatedAt: body.UpdatedAt}
	return nil
}

func (h *personaHead) loadStored(b []byte) error {
	if len(b) > 0 && b[0] == personaFormatV1 {
		head, _, err := decodePersonaHead(b[1:])
		if err != nil {
			return err
		}
		*h = head
		return nil
	}
	return json.Unmarshal(b, h)
}

// decodePersonaHead reads the binary head and returns the JSON after it.
func decodePersonaHead(b []byte) (personaHead, []byte, error) {
	d := decoder{b: b}
	var h personaHead
	h.ID = d.string()
	h.Owner.Issuer = d.string()
	h.Owner.Subject = d.string()
	flags := d.raw1()
	if flags&^3 != 0 {
		d.fail("bad persona flags %d", flags)
	}
	h.Discoverable, h.RequireProof = flags&1 != 0, flags&2 != 0
	h.Card.Name = d.string()
	if d.err != nil {
		return personaHead{}, nil, d.err
	}
	return h, d.b, nil
}

// raw1 returns the next byte.
func (d *decoder) raw1() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}
