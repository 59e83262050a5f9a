// Observing the verbs: a hook a host wires to tracing and metrics (the
// otel module is one), so the core library needs no telemetry dependency.

package switchboard

import (
	"context"
	"time"
)

// VerbWork names a Work handler's call of one todo in an Operation.
const VerbWork Verb = "work"

// Operation is one call an Observer sees.
type Operation struct {
	Verb  Verb   // the verb called, or VerbWork for a Work handler
	Queue string // the queue, when the call names one
	Todo  string // the todo, when known at the start
	// Parent is, for VerbWork, the trace context of the call that created
	// the todo: the handler's span continues that trace.
	Parent Trace
}

// Observer watches the verbs (Config.Observer). It sees no credential,
// token or payload: only the verb, the queue, the todo's id and the
// outcome.
type Observer interface {
	// Start begins observing op and returns the context the call goes on
	// with (a span in it, say) and what ends the observation.
	Start(ctx context.Context, op Operation) (context.Context, Observation)
	// Trace returns ctx's trace context: CreateFor records it on a todo
	// whose NewTodo.Trace is empty, after Start, so the create_for span
	// is the worker's parent.
	Trace(ctx context.Context) Trace
}

// Observation is one observed call.
type Observation interface {
	// End records the call's outcome.
	End(r Result)
}

// Result is how an observed call ended.
type Result struct {
	// Todo is the todo the call concerned, if any (for a claim, the
	// first it leased).
	Todo string
	// Queue is, for complete and fail, the queue's name as the grant
	// names it, learned from the todo (empty if the call was refused
	// before it read the todo); other calls name theirs in Operation.
	Queue string
	// Err is the call's error, nil on success.
	Err error
	// Waits is, for a call that leased todos (claim, claim_n, complete
	// with a next claim), how long each had been ready — since it was
	// created, retried or released — when it was leased.
	Waits []time.Duration
	// Held is, for complete and fail, how long the lease was held: from
	// the claim to this call's commit.
	Held time.Duration
	// Dead is true when a fail dead-lettered the todo (it was its last
	// attempt).
	Dead bool
	// Existing is true when a create_for's DedupKey matched a todo that
	// already existed, which it returned: nothing was created.
	Existing bool
}

type noObservation struct{}

func (noObservation) End(Result) {}

// waits is how long each claimed todo had been ready when leased (nil
// when no Observer would read it).
func (s *Switchboard) waits(got []Claimed) []time.Duration {
	if len(got) == 0 || s.cfg.Observer == nil {
		return nil
	}
	out := make([]time.Duration, len(got))
	for i, c := range got {
		if h := c.Todo.History; len(h) > 0 && !c.Todo.AvailableAt.IsZero() {
			out[i] = max(h[len(h)-1].ClaimedAt.Sub(c.Todo.AvailableAt), 0)
		}
	}
	return out
}

// observe starts observing op, if an Observer is configured.
func (s *Switchboard) observe(ctx context.Context, op Operation) (context.Context, Observation) {
	if s.cfg.Observer == nil {
		return ctx, noObservation{}
	}
	return s.cfg.Observer.Start(ctx, op)
}
