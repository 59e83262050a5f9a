// Kinds: typed work per kind, served by one Work loop.

package switchboard

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
)

// Kinds routes each todo to the handler registered for its Kind, with the
// payload decoded to the handler's own type and its result encoded from
// another — so a worker serving several kinds from one queue writes one
// function per kind instead of a switch on Todo.Kind with PayloadOf in
// each case:
//
//	var kinds switchboard.Kinds
//	switchboard.HandleKind(&kinds, "invoice.review", func(ctx context.Context, t switchboard.Todo, in Invoice) (Verdict, error) {
//		…
//	})
//	err := sb.Work(ctx, cred, "inbox", kinds.Handler(), nil)
//
// The zero value is ready to use. Register every kind before Work starts;
// a Kinds is safe for concurrent use once Work runs, not while kinds are
// still being added.
//
// The rule for a todo no handler is registered for: its attempt fails with
// an error wrapping ErrUnknownKind that names the kind, like any handler
// error — retried after its backoff and dead-lettered after its last
// attempt (then listable and re-drivable with Redrive), never completed.
// The retries are what a rolling deploy needs: a todo of a kind only newer
// processes know may be claimed first by an older one.
type Kinds struct {
	m map[string]Handler
}

// HandleKind registers fn on k for todos whose Kind is kind. Each todo's
// payload is decoded as a P with PayloadOf's strict rules — a payload that
// does not decode fails the attempt with an error wrapping
// ErrInvalidArgument, and fn is not called — and the R fn returns is
// encoded as JSON and recorded as the todo's result (read it back with
// ResultOf). An error from fn fails the attempt, as a Handler's does.
//
// An empty kind, a nil fn or a kind registered twice on k is a programming
// error and panics, as http.ServeMux does.
func HandleKind[P, R any](k *Kinds, kind string, fn func(ctx context.Context, t Todo, payload P) (R, error)) {
	if kind == "" {
		panic("switchboard: HandleKind: empty kind")
	}
	if fn == nil {
		panic("switchboard: HandleKind: nil handler for kind " + fmt.Sprintf("%q", kind))
	}
	if _, dup := k.m[kind]; dup {
		panic("switchboard: HandleKind: kind " + fmt.Sprintf("%q", kind) + " registered twice")
	}
	if k.m == nil {
		k.m = map[string]Handler{}
	}
	k.m[kind] = func(ctx context.Context, t Todo) ([]byte, error) {
		in, err := PayloadOf[P](t)
		if err != nil {
			return nil, err
		}
		out, err := fn(ctx, t, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("switchboard: kind %q: result of todo %s: %w", kind, t.ID, err)
		}
		return b, nil
	}
}

// Kinds lists the kinds registered on k, sorted.
func (k *Kinds) Kinds() []string {
	out := make([]string, 0, len(k.m))
	for kind := range k.m {
		out = append(out, kind)
	}
	sort.Strings(out)
	return out
}

// Handler is the Handler that serves k: it calls the function registered
// for the todo's kind, and fails a todo of any other kind with an error
// wrapping ErrUnknownKind (see Kinds for what then happens to it).
func (k *Kinds) Handler() Handler {
	return func(ctx context.Context, t Todo) ([]byte, error) {
		h, ok := k.m[t.Kind]
		if !ok {
			return nil, fmt.Errorf("switchboard: todo %s: kind %q: %w", t.ID, t.Kind, ErrUnknownKind)
		}
		return h(ctx, t)
	}
}
