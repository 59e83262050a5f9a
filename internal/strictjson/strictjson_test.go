package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// refDecode is the reader Decode replaced (json.Decoder's Token API, one
// token at a time), kept as the oracle: Decode must accept exactly what it
// accepted and build the same tree.
func refDecode(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := refValue(dec, 0, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func refValue(dec *json.Decoder, depth int, path string) (any, error) {
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
				v, err := refValue(dec, depth+1, path+"."+k)
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
				v, err := refValue(dec, depth+1, fmt.Sprintf("%s[%d]", path, i))
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

// Decode agrees with the token reader it replaced on every input: the same
// documents accepted, the same trees built, the same refusals of duplicate
// keys and deep nesting.
func FuzzDecodeMatchesReference(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[true,false,null,"x\u00e9\ud83d\ude00"],"c":{"d":-1.5e+3}}`,
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[1,2,]`, `{"a":1} x`, ` "s" `,
		`{"k":"\ud800"}`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		"{\"a\":\"\xff\"}", `0`, `-0.0E-0`, `01`, `{"a" : [ ] , "b" : { } }`, `"\/\b\f\n\r\t\"\\"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		want, werr := refDecode(data)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: Decode err %v, reference err %v", data, err, werr)
		}
		if err != nil && json.Valid(data) {
			// On valid JSON, a refusal is for the same reason in the same
			// words. (On invalid JSON the reference may name a duplicate
			// key it met before the syntax error.)
			for _, words := range []string{"appears twice", "nested deeper", "UTF-8"} {
				if strings.Contains(werr.Error(), words) && err.Error() != werr.Error() {
					t.Fatalf("%q: Decode says %q, reference %q", data, err, werr)
				}
			}
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: Decode built %#v, reference %#v", data, got, want)
		}
	})
}

var claims = []byte(`{"iss":"https://issuer.example.com","sub":"alice","aud":"switchboard","exp":1764780000,"iat":1764776400,"nonce":"n-0123456789abcdef","name":"Alice Example","email":"alice@example.com","email_verified":true,"amr":["pwd","mfa"],"auth_time":1764776300}`)

// BenchmarkDecode compares Decode with the token reader it replaced, on
// an ID token's claims.
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct {
		name string
		fn   func([]byte) (any, error)
	}{{"decode", Decode}, {"token-reader", refDecode}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := c.fn(claims); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
