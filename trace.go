// Trace context across agents: the W3C Trace Context of the call that
// created a todo travels with it, so the worker that handles it continues
// the creator's trace.

package switchboard

import (
	"strings"
)

// Trace is a W3C Trace Context (https://www.w3.org/TR/trace-context/): the
// traceparent and tracestate of the creator's call. CreateFor records it on
// the todo (NewTodo.Trace) and Claim, ClaimN, Get, List and Work hand it
// back (Todo.Trace), so a worker — in another process, another agent — can
// start its span as a child of the creator's. switchboard only carries it:
// it never starts spans itself, and a trace context holds no secret.
type Trace struct {
	// Parent is the traceparent header: version 00, a 32-hex-digit trace
	// id, a 16-hex-digit parent span id (neither all zeros), 2 hex digits
	// of flags, lower case, dash-separated.
	Parent string `json:"traceparent,omitempty"`
	// State is the tracestate header (vendor data), at most 512 bytes of
	// printable ASCII; only with a Parent.
	State string `json:"tracestate,omitempty"`
}

// IsZero reports whether t carries no trace context.
func (t Trace) IsZero() bool { return t.Parent == "" && t.State == "" }

// maxTraceState is the W3C limit a tracestate header may be truncated to.
const maxTraceState = 512

// validate checks t is a well-formed trace context: the one parser of
// trace contexts from outside.
func (t Trace) validate() error {
	if t.IsZero() {
		return nil
	}
	p := t.Parent
	if len(p) != 55 || p[2] != '-' || p[35] != '-' || p[52] != '-' {
		return invalid("traceparent %q is not version-traceid-parentid-flags (00-32 hex-16 hex-2 hex)", clip(p, 64))
	}
	if p[:2] != "00" {
		return invalid("traceparent version %q: only 00 is accepted", p[:2])
	}
	for i, c := range p {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return invalid("traceparent %q: lower-case hex digits only", clip(p, 64))
		}
	}
	if p[3:35] == strings.Repeat("0", 32) || p[36:52] == strings.Repeat("0", 16) {
		return invalid("traceparent %q: an all-zero trace id or parent id is invalid", p)
	}
	if len(t.State) > maxTraceState {
		return invalid("tracestate is %d bytes, limit %d", len(t.State), maxTraceState)
	}
	for _, c := range []byte(t.State) {
		if c < 0x20 || c > 0x7e {
			return invalid("tracestate holds byte %#x: printable ASCII only", c)
		}
	}
	return nil
}
