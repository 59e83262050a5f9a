// Typed payloads: a todo's payload (and a result) as a Go value, encoded as
// JSON, so callers need not marshal bytes by hand.

package switchboard

import (
	"encoding/json"
	"fmt"
)

// NewTodoOf returns a NewTodo of the given kind whose payload is v encoded
// as JSON. Set the other fields (Title, DedupKey, Priority…) on the result.
func NewTodoOf[T any](kind string, v T) (NewTodo, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return NewTodo{}, fmt.Errorf("switchboard: encode payload: %w", err)
	}
	return NewTodo{Kind: kind, Payload: b}, nil
}

// PayloadOf decodes a todo's payload as a T, one strict way (DecodeJSON:
// no unknown or case-folded keys, no duplicates), so what a handler acts
// on is what every other reader of the payload sees. A payload that does
// not decode is ErrInvalidArgument.
func PayloadOf[T any](t Todo) (T, error) {
	var v T
	if err := decodeJSON(t.Payload, &v); err != nil {
		return v, fmt.Errorf("switchboard: payload: todo %s: %w", t.ID, err)
	}
	return v, nil
}

// ResultOf decodes a finished todo's result as a T, as PayloadOf does its
// payload.
func ResultOf[T any](t Todo) (T, error) {
	var v T
	if err := decodeJSON(t.Result, &v); err != nil {
		return v, fmt.Errorf("switchboard: result: todo %s: %w", t.ID, err)
	}
	return v, nil
}
