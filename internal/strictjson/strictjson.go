// Package strictjson decodes outside JSON one way only: the reader every
// check and every use of an outside document goes through, so what is
// checked is what is used.
package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
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
//
// The grammar is encoding/json's own (json.Valid decides what is JSON, and
// strings with escapes are unquoted by encoding/json), so a document means
// the same here as to encoding/json wherever both accept it; the tree is
// then built in one pass over the validated bytes.
func Decode(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not valid UTF-8")
	}
	if !json.Valid(data) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, err // encoding/json's words for what is wrong
		}
		return nil, errors.New("not valid JSON")
	}
	d := decoder{data: data}
	return d.value(0, "")
}

// decoder walks JSON that json.Valid accepted: only the structure is left
// to follow, never a syntax error.
type decoder struct {
	data []byte
	i    int
}

func (d *decoder) skipSpace() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int, path string) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
	}
	d.skipSpace()
	switch c := d.data[d.i]; c {
	case '{':
		d.i++
		obj := map[string]any{}
		d.skipSpace()
		if d.data[d.i] == '}' {
			d.i++
			return obj, nil
		}
		for {
			d.skipSpace()
			k, err := d.string()
			if err != nil {
				return nil, err
			}
			if _, dup := obj[k]; dup {
				return nil, fmt.Errorf("%s: key %q appears twice", Where(path), k)
			}
			d.skipSpace()
			d.i++ // ':'
			v, err := d.value(depth+1, path+"."+k)
			if err != nil {
				return nil, err
			}
			obj[k] = v
			d.skipSpace()
			if d.data[d.i] == '}' {
				d.i++
				return obj, nil
			}
			d.i++ // ','
		}
	case '[':
		d.i++
		arr := []any{}
		d.skipSpace()
		if d.data[d.i] == ']' {
			d.i++
			return arr, nil
		}
		for n := 0; ; n++ {
			v, err := d.value(depth+1, fmt.Sprintf("%s[%d]", path, n))
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
			d.skipSpace()
			if d.data[d.i] == ']' {
				d.i++
				return arr, nil
			}
			d.i++ // ','
		}
	case '"':
		return d.string()
	case 't':
		d.i += len("true")
		return true, nil
	case 'f':
		d.i += len("false")
		return false, nil
	case 'n':
		d.i += len("null")
		return nil, nil
	default: // a number
		start := d.i
		for d.i < len(d.data) && strings.IndexByte("+-.0123456789eE", d.data[d.i]) >= 0 {
			d.i++
		}
		return json.Number(d.data[start:d.i]), nil
	}
}

// string reads the string at d.i: as it is when it has no escapes (the
// input is valid UTF-8 and JSON, so those bytes are the string), else as
// encoding/json unquotes it.
func (d *decoder) string() (string, error) {
	start := d.i
	d.i++ // '"'
	escaped := false
	for {
		switch d.data[d.i] {
		case '\\':
			escaped = true
			d.i += 2
			continue
		case '"':
			d.i++
			if !escaped {
				return string(d.data[start+1 : d.i-1]), nil
			}
			var s string
			if err := json.Unmarshal(d.data[start:d.i], &s); err != nil {
				return "", err
			}
			return s, nil
		}
		d.i++
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
