// Decoding a card once: the strict JSON reader, the v1.0 schema (JSON and
// proto names, oneofs) and the normalized document that both the parsed
// Card and the signed payload are built from.

package agentcard

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"github.com/switchboardhq/switchboard/internal/strictjson"
)

func orRoot(path string) string {
	if path == "" {
		return "card"
	}
	return strings.TrimPrefix(path, ".")
}

// kind is what the schema expects at one place of a card.
type kind int

const (
	kString  kind = iota // a string
	kBool                // an optional bool: an explicit false is kept
	kFlag                // a plain bool: false is its default and is dropped
	kStrings             // a list of strings
	kList                // a list of messages (elem)
	kMsg                 // a message (fields)
	kMap                 // a map<string, elem>
	kStruct              // google.protobuf.Struct: any JSON object, kept whole
)

// shape is the v1.0 schema of one place of a card.
type shape struct {
	kind   kind
	elem   *shape            // kList, kMap
	fields map[string]*shape // kMsg, by JSON name
	proto  map[string]string // kMsg: proto name → JSON name, where they differ
	oneofs [][]string        // kMsg: groups of JSON names of which at most one may be set
}

var (
	str     = &shape{kind: kString}
	optBool = &shape{kind: kBool}
	flagB   = &shape{kind: kFlag}
	strs    = &shape{kind: kStrings}
	object  = &shape{kind: kStruct}
)

func listOf(s *shape) *shape { return &shape{kind: kList, elem: s} }
func mapOf(s *shape) *shape  { return &shape{kind: kMap, elem: s} }

// msg builds a message shape from its fields by JSON name; each field is
// also accepted under its proto name (the protobuf JSON mapping's other
// spelling: snake_case), as the official SDKs accept it.
func msg(fields map[string]*shape, oneofs ...[]string) *shape {
	s := &shape{kind: kMsg, fields: fields, proto: map[string]string{}, oneofs: oneofs}
	for name := range fields {
		if p := protoName(name); p != name {
			s.proto[p] = name
		}
	}
	return s
}

// protoName turns a lowerCamel JSON name into the proto field name it was
// derived from (documentationUrl → documentation_url).
func protoName(json string) string {
	var b strings.Builder
	for _, r := range json {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func flow(fields ...string) *shape {
	f := map[string]*shape{"scopes": mapOf(str)}
	for _, n := range fields {
		f[n] = str
	}
	return msg(f)
}

var (
	requirementShape = msg(map[string]*shape{"schemes": mapOf(msg(map[string]*shape{"list": strs}))})
	authCodeFlow     = func() *shape {
		s := flow("authorizationUrl", "tokenUrl", "refreshUrl")
		s.fields["pkceRequired"] = flagB
		s.proto["pkce_required"] = "pkceRequired"
		return s
	}()
	cardShape = msg(map[string]*shape{
		"name": str, "description": str, "version": str,
		"documentationUrl": str, "iconUrl": str,
		"defaultInputModes": strs, "defaultOutputModes": strs,
		"supportedInterfaces": listOf(msg(map[string]*shape{"url": str, "protocolBinding": str, "tenant": str, "protocolVersion": str})),
		"provider":            msg(map[string]*shape{"url": str, "organization": str}),
		"capabilities": msg(map[string]*shape{
			"streaming": optBool, "pushNotifications": optBool, "extendedAgentCard": optBool,
			"extensions": listOf(msg(map[string]*shape{"uri": str, "description": str, "required": flagB, "params": object})),
		}),
		"securitySchemes": mapOf(msg(map[string]*shape{
			"apiKeySecurityScheme":   msg(map[string]*shape{"description": str, "location": str, "name": str}),
			"httpAuthSecurityScheme": msg(map[string]*shape{"description": str, "scheme": str, "bearerFormat": str}),
			"oauth2SecurityScheme": msg(map[string]*shape{"description": str, "oauth2MetadataUrl": str,
				"flows": msg(map[string]*shape{
					"authorizationCode": authCodeFlow,
					"clientCredentials": flow("tokenUrl", "refreshUrl"),
					"implicit":          flow("authorizationUrl", "refreshUrl"),
					"password":          flow("tokenUrl", "refreshUrl"),
					"deviceCode":        flow("deviceAuthorizationUrl", "tokenUrl", "refreshUrl"),
				}, []string{"authorizationCode", "clientCredentials", "implicit", "password", "deviceCode"})}),
			"openIdConnectSecurityScheme": msg(map[string]*shape{"description": str, "openIdConnectUrl": str}),
			"mtlsSecurityScheme":          msg(map[string]*shape{"description": str}),
		}, []string{"apiKeySecurityScheme", "httpAuthSecurityScheme", "oauth2SecurityScheme", "openIdConnectSecurityScheme", "mtlsSecurityScheme"})),
		"securityRequirements": listOf(requirementShape),
		"skills": listOf(msg(map[string]*shape{
			"id": str, "name": str, "description": str, "tags": strs, "examples": strs,
			"inputModes": strs, "outputModes": strs, "securityRequirements": listOf(requirementShape),
		})),
		"signatures": listOf(msg(map[string]*shape{"protected": str, "signature": str, "header": object})),
	})
)

// normalize checks v against s and returns it in normal form: every field
// under its JSON name (a proto-named field is read as the SDKs read it, the
// JSON name winning when both are given), fields the schema does not know
// dropped, nulls dropped (JSON null is "not set"). It refuses a value of the
// wrong type, a key that differs from a schema field only by case (a
// case-insensitive decoder would read it as that field), and a oneof with
// more than one member set.
func (s *shape) normalize(v any, path string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch s.kind {
	case kString:
		if _, ok := v.(string); !ok {
			return nil, fmt.Errorf("%s: want a string", orRoot(path))
		}
		return v, nil
	case kBool, kFlag:
		if _, ok := v.(bool); !ok {
			return nil, fmt.Errorf("%s: want true or false", orRoot(path))
		}
		return v, nil
	case kStrings:
		arr, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a list of strings", orRoot(path))
		}
		for i, e := range arr {
			if _, ok := e.(string); !ok {
				return nil, fmt.Errorf("%s[%d]: want a string", orRoot(path), i)
			}
		}
		return arr, nil
	case kList:
		arr, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a list", orRoot(path))
		}
		out := make([]any, 0, len(arr))
		for i, e := range arr {
			if e == nil {
				return nil, fmt.Errorf("%s[%d]: null in a list", orRoot(path), i)
			}
			n, err := s.elem.normalize(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		}
		return out, nil
	case kStruct:
		if _, ok := v.(map[string]any); !ok {
			return nil, fmt.Errorf("%s: want an object", orRoot(path))
		}
		return v, nil
	case kMap:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want an object", orRoot(path))
		}
		out := make(map[string]any, len(obj))
		for k, e := range obj {
			if e == nil {
				return nil, fmt.Errorf("%s.%s: null map value", orRoot(path), k)
			}
			n, err := s.elem.normalize(e, path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want an object", orRoot(path))
	}
	out := map[string]any{}
	for k, e := range obj {
		name, known := k, false
		if _, known = s.fields[k]; !known {
			if name, known = s.proto[k]; known {
				if _, both := obj[name]; both {
					continue // the JSON name wins, as in the SDKs
				}
			}
		}
		if !known {
			if f := s.caseTwin(k); f != "" {
				return nil, fmt.Errorf("%s: key %q differs from field %q only by case", orRoot(path), k, f)
			}
			continue // not in the schema: not covered by any signature, dropped
		}
		n, err := s.fields[name].normalize(e, path+"."+name)
		if err != nil {
			return nil, err
		}
		if n != nil {
			out[name] = n
		}
	}
	for _, group := range s.oneofs {
		var set []string
		for _, m := range group {
			if _, ok := out[m]; ok {
				set = append(set, m)
			}
		}
		if len(set) > 1 {
			return nil, fmt.Errorf("%s: %s are one of a kind; set only one", orRoot(path), strings.Join(set, " and "))
		}
	}
	return out, nil
}

// caseTwin returns the field (JSON or proto name) that k equals but for
// case, or "".
func (s *shape) caseTwin(k string) string {
	for f := range s.fields {
		if strings.EqualFold(f, k) {
			return f
		}
	}
	for p := range s.proto {
		if strings.EqualFold(p, k) {
			return p
		}
	}
	return ""
}

// checkKeys refuses, in a tree decoded for the struct type t, a key that
// equals one of t's JSON field names but for case: encoding/json would read
// it as that field while the signed payload keeps it apart. It walks the
// tree alongside t; map keys and untyped values are free.
func checkKeys(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch x := v.(type) {
	case []any:
		if t.Kind() != reflect.Slice {
			return nil
		}
		for i, e := range x {
			if err := checkKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, e := range x {
				if err := checkKeys(e, t.Elem(), path+"."+k); err != nil {
					return err
				}
			}
		case reflect.Struct:
			fields := map[string]reflect.Type{}
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "" {
					name = f.Name
				}
				if f.IsExported() && name != "-" {
					fields[name] = f.Type
				}
			}
			for k, e := range x {
				ft, exact := fields[k]
				if !exact {
					for name := range fields {
						if strings.EqualFold(name, k) {
							return fmt.Errorf("%s: key %q differs from field %q only by case", orRoot(path), k, name)
						}
					}
					continue
				}
				if err := checkKeys(e, ft, path+"."+k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// fill reads a document that strictjson.Decode produced and normalize (or
// checkKeys) vetted into v. Every key of doc is then an exact field name,
// present once, so encoding/json's case-insensitive matching and
// last-duplicate-wins rule have nothing to act on: v holds exactly what doc
// holds. It is the only place a card's content reaches a Go struct.
func fill(doc any, v any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// header reads the alg and kid of a JWS protected header with the same strict
// decoding as a card: no duplicate keys, no case variants of alg or kid.
func header(b []byte) (alg, kid string, err error) {
	tree, err := strictjson.Decode(b)
	if err != nil {
		return "", "", err
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return "", "", errors.New("not a JSON object")
	}
	if k, f := strictjson.CaseTwin(obj, "alg", "kid"); k != "" {
		return "", "", fmt.Errorf("key %q differs from %q only by case", k, f)
	}
	alg, okA := obj["alg"].(string)
	kid, okK := obj["kid"].(string)
	if _, present := obj["alg"]; present && !okA {
		return "", "", errors.New("alg is not a string")
	}
	if _, present := obj["kid"]; present && !okK {
		return "", "", errors.New("kid is not a string")
	}
	return alg, kid, nil
}
