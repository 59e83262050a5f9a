package switchboard_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
)

// exportedErrors lists the package's exported sentinel errors (Err…
// variables) and error types (types with an Error method), read from its
// source: the cases the error-style test must cover.
func exportedErrors(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var out []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if vs, ok := s.(*ast.ValueSpec); ok {
						for _, n := range vs.Names {
							if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
								out = append(out, n.Name)
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Name.Name == "Error" && d.Recv != nil {
					if star, ok := d.Recv.List[0].Type.(*ast.StarExpr); ok {
						if id, ok := star.X.(*ast.Ident); ok && id.IsExported() {
							out = append(out, "*"+id.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// styled is switchboard's one error style: "switchboard: " once, at the
// start, then the verb.
var styled = regexp.MustCompile(`^switchboard: [a-z_]+( [a-z_]+){0,2}: `)

// One error style: every exported sentinel and error type, made to happen
// through a real call (switchboardtest.ErrorCases), reads "switchboard: "
// once, at the start, then the verb — and matches its sentinel. The CLI
// and the example host test the same cases through their surfaces.
func TestOneErrorStyle(t *testing.T) {
	cases := switchboardtest.ErrorCases(t)
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.Name] = true
		msg := c.Err.Error()
		assert.Equal(t, 1, strings.Count(msg, "switchboard: "), "%s: %q", c.Name, msg)
		assert.Regexp(t, styled, msg, "%s: the verb follows the prefix", c.Name)
	}
	for _, name := range exportedErrors(t) {
		assert.True(t, covered[name], "%s has no case in switchboardtest.ErrorCases", name)
	}
}

// The entry points that are not a Switchboard's methods — constructors,
// the directories, the strict decoder, the key helpers, package agentcard
// and package witness — and the methods that call other methods (Work, a
// lookup through the directories) read the one way too: "switchboard: "
// once, then the verb, and the sentinel still matches.
func TestEntryPointsReadOneWay(t *testing.T) {
	ctx := context.Background()
	k := switchboardtest.NewKit(t, nil)
	unsigned := k.Publish("bob", "bob-desk").Card
	cases := []struct {
		name string
		err  error
		is   error
	}{
		{"New without a store", second(switchboard.New(nil, nil)), switchboard.ErrInvalidArgument},
		{"New with a negative duration", second(switchboard.New(k.Store, &switchboard.Config{DefaultLease: -time.Second})), switchboard.ErrInvalidArgument},
		{"NewLogKey with a bad name", third(switchboard.NewLogKey("a name with spaces")), switchboard.ErrInvalidArgument},
		{"DecodeJSON", switchboard.DecodeJSON([]byte(`{"a":1,"a":2}`), new(map[string]int)), switchboard.ErrInvalidArgument},
		{"KeyThumbprint", second(switchboard.KeyThumbprint([]byte(`{"kty":"oct"}`))), switchboard.ErrInvalidArgument},
		{"NewRemoteDirectory", second(switchboard.NewRemoteDirectory(switchboard.RemoteOptions{})), switchboard.ErrInvalidArgument},
		{"a local directory's Lookup", second(switchboard.NewLocalDirectory(k.Store).Lookup(ctx, "nobody")), switchboard.ErrNotFound},
		{"Lookup through the directories", second(k.SB.Lookup(ctx, "nobody")), switchboard.ErrNotFound},
		{"PayloadOf", second(switchboard.PayloadOf[int](switchboard.Todo{ID: "todo_x", Payload: []byte(`"x"`)})), switchboard.ErrInvalidArgument},
		{"Work with an unknown credential", k.SB.Work(ctx, switchboard.Credential("sbg_unknown"), "inbox", func(context.Context, switchboard.Todo) ([]byte, error) { return nil, nil }, nil), switchboard.ErrUnauthenticated},
		{"agentcard.Parse", second(agentcard.Parse([]byte(`[]`))), agentcard.ErrInvalid},
		{"Card.Validate", agentcard.Card{}.Validate(), agentcard.ErrInvalid},
		{"agentcard.Sign", second(agentcard.Sign(unsigned, jose.JSONWebKey{})), agentcard.ErrInvalid},
		{"agentcard.Verify", second(agentcard.Verify(unsigned, nil, nil)), agentcard.ErrSignature},
		{"Trust.Validate", agentcard.Trust{Policy: agentcard.SignaturesRequired}.Validate(), agentcard.ErrInvalid},
		{"Trust.Check", agentcard.Trust{Policy: agentcard.SignaturesRequired}.Check(unsigned), agentcard.ErrSignature},
		{"witness.NewServer", second(witness.NewServer(witness.Config{})), nil},
	}
	for _, c := range cases {
		if !assert.Error(t, c.err, c.name) {
			continue
		}
		msg := c.err.Error()
		assert.Equal(t, 1, strings.Count(msg, "switchboard: "), "%s: %q", c.name, msg)
		assert.Regexp(t, styled, msg, "%s: the verb follows the prefix", c.name)
		if c.is != nil {
			assert.ErrorIs(t, c.err, c.is, c.name)
		}
	}
	_, err := k.SB.Lookup(ctx, "nobody")
	assert.Contains(t, err.Error(), `persona "nobody"`, "the lookup names what it did not find")
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }
