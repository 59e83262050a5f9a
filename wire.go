// The JSON a host sends and receives: todo payloads and results that are
// JSON travel as JSON (others as base64 under a _base64 name), durations as
// Go duration strings ("5m0s"). Stored records keep their own encoding.

package switchboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/switchboardhq/switchboard/internal/strictjson"
)

// DecodeJSON reads one JSON document a host received — a friend request, a
// NewTodo, ClaimOptions, a scope, a host's own envelope around them — into
// v, one way only, so that what switchboard checks is what every other
// reader of the same bytes would see. Beyond encoding/json it refuses, as
// ErrInvalidArgument: invalid UTF-8, a key that appears twice or twice up
// to case ("kind" and "Kind"), a key that is not the exact spelling of a
// field of v (encoding/json would read "KIND" as kind; exact-match readers
// would not), an unknown field with a non-empty value, nesting deeper than
// 64 levels, and anything after the value. Bound the size before calling
// (http.MaxBytesReader). The error names the offending key, never a value.
func DecodeJSON(data []byte, v any) error { return wrapErr("decode json", decodeJSON(data, v)) }

func decodeJSON(data []byte, v any) error {
	doc, err := strictjson.Decode(data)
	if err != nil {
		return invalid("JSON: %v", err)
	}
	if err := foldTwins(doc, ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("JSON: %v", err)
	}
	// Every key read must be one v writes back under the same spelling:
	// a key v does not re-encode was a case variant or an unknown field
	// (nested types with their own UnmarshalJSON do not see
	// DisallowUnknownFields), unless its value was empty anyway.
	out, err := json.Marshal(v)
	if err != nil {
		return invalid("JSON: %v", err)
	}
	back, err := strictjson.Decode(out)
	if err != nil {
		return invalid("JSON: %v", err)
	}
	return sameKeys(doc, back, "")
}

// foldTwins refuses an object with two keys equal up to case, at any depth.
func foldTwins(v any, path string) error {
	switch t := v.(type) {
	case map[string]any:
		seen := make(map[string]string, len(t))
		for k, e := range t {
			l := strings.ToLower(k)
			if o, ok := seen[l]; ok {
				return invalid("JSON: %s: keys %q and %q differ only by case", strictjson.Where(path), o, k)
			}
			seen[l] = k
			if err := foldTwins(e, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range t {
			if err := foldTwins(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameKeys checks that every key of in with a non-empty value is in out.
func sameKeys(in, out any, path string) error {
	switch t := in.(type) {
	case map[string]any:
		o, _ := out.(map[string]any)
		for k, e := range t {
			ov, ok := o[k]
			if !ok {
				if emptyJSON(e) {
					continue
				}
				return invalid("JSON: %s: unknown field %q", strictjson.Where(path), k)
			}
			if err := sameKeys(e, ov, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		o, _ := out.([]any)
		for i, e := range t {
			if i < len(o) {
				if err := sameKeys(e, o[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func emptyJSON(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case bool:
		return !t
	case string:
		return t == ""
	case json.Number:
		f, err := t.Float64()
		return err == nil && f == 0
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}

// bytesWire encodes b as raw JSON when it is valid JSON, else as base64
// under the second name.
func bytesWire(b []byte) (json.RawMessage, []byte) {
	if len(b) == 0 {
		return nil, nil
	}
	if json.Valid(b) {
		return json.RawMessage(b), nil
	}
	return nil, b
}

// bytesFromWire is the inverse of bytesWire; setting both is an error.
func bytesFromWire(name string, raw json.RawMessage, b64 []byte) ([]byte, error) {
	if len(raw) > 0 && len(b64) > 0 {
		return nil, fmt.Errorf("switchboard: both %s and %s_base64 are set", name, name)
	}
	if len(raw) > 0 {
		if string(raw) == "null" {
			return nil, nil
		}
		return []byte(raw), nil
	}
	return b64, nil
}

// wireDuration is a time.Duration that encodes in JSON as a Go duration
// string ("1m30s") and decodes from such a string or from a number of
// nanoseconds.
type wireDuration time.Duration

func (d wireDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *wireDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("switchboard: duration %q: %w", s, err)
		}
		*d = wireDuration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("switchboard: a duration is a string like \"5m\" or a number of nanoseconds")
	}
	*d = wireDuration(n)
	return nil
}

type todoPlain Todo

type todoWire struct {
	todoPlain
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 []byte          `json:"payload_base64,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	ResultBase64  []byte          `json:"result_base64,omitempty"`
}

// MarshalJSON encodes a todo for a wire: Payload and Result as JSON when
// they are JSON, else base64 under payload_base64 and result_base64.
func (t Todo) MarshalJSON() ([]byte, error) {
	w := todoWire{todoPlain: todoPlain(t)}
	w.Payload, w.PayloadBase64 = bytesWire(t.Payload)
	w.Result, w.ResultBase64 = bytesWire(t.Result)
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (t *Todo) UnmarshalJSON(b []byte) error {
	var w todoWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*t = Todo(w.todoPlain)
	var err error
	if t.Payload, err = bytesFromWire("payload", w.Payload, w.PayloadBase64); err != nil {
		return err
	}
	t.Result, err = bytesFromWire("result", w.Result, w.ResultBase64)
	return err
}

type newTodoPlain NewTodo

type newTodoWire struct {
	newTodoPlain
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 []byte          `json:"payload_base64,omitempty"`
}

// MarshalJSON encodes Payload as JSON when it is JSON, else base64 under
// payload_base64.
func (n NewTodo) MarshalJSON() ([]byte, error) {
	w := newTodoWire{newTodoPlain: newTodoPlain(n)}
	w.Payload, w.PayloadBase64 = bytesWire(n.Payload)
	return json.Marshal(w)
}

// UnmarshalJSON decodes a payload given as JSON (payload) or base64
// (payload_base64), not both.
func (n *NewTodo) UnmarshalJSON(b []byte) error {
	var w newTodoWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*n = NewTodo(w.newTodoPlain)
	var err error
	n.Payload, err = bytesFromWire("payload", w.Payload, w.PayloadBase64)
	return err
}

type grantPlain Grant

type grantWire struct {
	grantPlain
	DefaultLease wireDuration `json:"default_lease,omitempty"`
}

// MarshalJSON encodes DefaultLease as a duration string.
func (g Grant) MarshalJSON() ([]byte, error) {
	return json.Marshal(grantWire{grantPlain: grantPlain(g), DefaultLease: wireDuration(g.DefaultLease)})
}

// UnmarshalJSON decodes DefaultLease from a duration string or nanoseconds.
func (g *Grant) UnmarshalJSON(b []byte) error {
	var w grantWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*g = Grant(w.grantPlain)
	g.DefaultLease = time.Duration(w.DefaultLease)
	return nil
}

type vendPlain VendRequest

type vendWire struct {
	vendPlain
	DefaultLease wireDuration `json:"default_lease,omitempty"`
}

// MarshalJSON encodes DefaultLease as a duration string.
func (r VendRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(vendWire{vendPlain: vendPlain(r), DefaultLease: wireDuration(r.DefaultLease)})
}

// UnmarshalJSON decodes DefaultLease from a duration string or nanoseconds.
func (r *VendRequest) UnmarshalJSON(b []byte) error {
	var w vendWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = VendRequest(w.vendPlain)
	r.DefaultLease = time.Duration(w.DefaultLease)
	return nil
}

type claimPlain ClaimOptions

type claimWire struct {
	claimPlain
	Lease wireDuration `json:"lease,omitempty"`
}

// MarshalJSON encodes Lease as a duration string.
func (o ClaimOptions) MarshalJSON() ([]byte, error) {
	return json.Marshal(claimWire{claimPlain: claimPlain(o), Lease: wireDuration(o.Lease)})
}

// UnmarshalJSON decodes Lease from a duration string or nanoseconds.
func (o *ClaimOptions) UnmarshalJSON(b []byte) error {
	var w claimWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*o = ClaimOptions(w.claimPlain)
	o.Lease = time.Duration(w.Lease)
	return nil
}

// The stored records embed Todo and Grant; their stored forms keep every
// field (bytes as base64, durations as nanoseconds) instead of the promoted
// wire methods above.

// todoRecStored is the JSON form todo records had before the binary one
// (record.go); todoRec.loadStored still reads it.
type todoRecStored struct {
	todoPlain
	QueueKey   string `json:"qkey"`
	Seq        uint64 `json:"seq"`
	LeaseToken string `json:"lease_token,omitempty"`
}

type grantRecStored struct {
	grantPlain
	CredHash   []byte `json:"cred_hash"`
	ReplacedBy string `json:"replaced_by,omitempty"`
	Replaces   string `json:"replaces,omitempty"`
}

func (r grantRec) MarshalJSON() ([]byte, error) { return json.Marshal(r.storedForm()) }

func (r *grantRec) UnmarshalJSON(b []byte) error { return r.loadStored(b) }

func (r grantRec) storedForm() any {
	return grantRecStored{grantPlain(r.Grant), r.CredHash, r.ReplacedBy, r.Replaces}
}

func (r *grantRec) loadStored(b []byte) error {
	var s grantRecStored
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*r = grantRec{Grant: Grant(s.grantPlain), CredHash: s.CredHash, ReplacedBy: s.ReplacedBy, Replaces: s.Replaces}
	return nil
}
