// Observing the verbs: a hook a host wires to tracing and metrics (the
// otel module is one), so the core library needs no telemetry dependency.

package switchboard

import "context"

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
	// End records the outcome: the todo the call concerned, if any, and
	// its error (nil on success).
	End(todo string, err error)
}

type noObservation struct{}

func (noObservation) End(string, error) {}

// observe starts observing op, if an Observer is configured.
func (s *Switchboard) observe(ctx context.Context, op Operation) (context.Context, Observation) {
	if s.cfg.Observer == nil {
		return ctx, noObservation{}
	}
	return s.cfg.Observer.Start(ctx, op)
}
