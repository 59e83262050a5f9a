// Package strictjson decodes outside JSON one way only: the reader every
// check and every use of an outside document goes through, so what is
// checked is what is used.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of a decoded value.
const MaxDepth = 64

// Decode reads exactly one JSON value from data into a tree of
// map[string]any, []any, string, json.Number, bool and nil. It refuses what
// a lenient decoder would quietly resolve one way while another reader
// resolves it another: invalid UTF-8 (encoding/json replaces it), an object
// with the same key twice (encoding/json keeps the last, other readers the
// first), nesting deeper than MaxDepth, and anything after the value.
func Decode(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int, path string) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if _, dup := obj[k]; dup {
					return nil, fmt.Errorf("%s: key %q appears twice", Where(path), k)
				}
				v, err := decodeValue(dec, depth+1, path+"."+k)
				if err != nil {
					return nil, err
				}
				obj[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return obj, nil
		case '[':
			arr := []any{}
			for i := 0; dec.More(); i++ {
				v, err := decodeValue(dec, depth+1, fmt.Sprintf("%s[%d]", path, i))
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil // string, json.Number, bool or nil
	}
}

// Where names a path built by these readers (".a.b[0]") for an error
// message: "document" for the root.
func Where(path string) string {
	if path == "" {
		return "document"
	}
	return strings.TrimPrefix(path, ".")
}

// CaseTwin returns the first key of obj that differs from one of fields only
// by case ("" if none): encoding/json would read it as that field, while
// exact-match readers would not.
func CaseTwin(obj map[string]any, fields ...string) (key, field string) {
	for k := range obj {
		for _, f := range fields {
			if k != f && strings.EqualFold(k, f) {
				return k, f
			}
		}
	}
	return "", ""
}
