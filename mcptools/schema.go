// The JSON schemas of the tools' inputs and outputs, written out so they
// say exactly what the wire carries (payloads as JSON, durations as Go
// duration strings), which a schema inferred from the Go types would not.

package mcptools

import "github.com/google/jsonschema-go/jsonschema"

func str(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Description: desc}
}
func integer(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "integer", Description: desc}
}
func boolean(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "boolean", Description: desc}
}
func anyJSON(desc string) *jsonschema.Schema { return &jsonschema.Schema{Description: desc} }
func timestamp(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Format: "date-time", Description: desc}
}

// input is a closed object: unknown arguments are refused.
func input(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Properties: props, Required: required, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
}

// output is an open object: a newer switchboard may add fields.
func output(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Properties: props, Required: required}
}

func lease() *jsonschema.Schema {
	return output(map[string]*jsonschema.Schema{
		"todo":       str("the leased todo's id"),
		"token":      str("the fencing token: pass it with todo to heartbeat, complete, fail and release"),
		"attempt":    integer("which attempt this claim is, from 1"),
		"expires_at": timestamp("when the lease lapses unless heartbeated"),
	}, "todo", "token")
}

// traceContext is a W3C trace context, as a closed object.
func traceContext() *jsonschema.Schema {
	return input(map[string]*jsonschema.Schema{
		"traceparent": str("the W3C traceparent of the creator's call: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"),
		"tracestate":  str("the W3C tracestate, at most 512 bytes"),
	}, "traceparent")
}

func todo() *jsonschema.Schema {
	return output(map[string]*jsonschema.Schema{
		"trace":            traceContext(),
		"id":               str("the todo's id"),
		"queue":            str("its queue"),
		"kind":             str("what sort of work"),
		"title":            str("a line for humans"),
		"payload":          anyJSON("the payload, when it is JSON"),
		"payload_base64":   str("the payload, when it is not JSON"),
		"priority":         integer("higher is claimed first"),
		"dedup_key":        str("the creator's dedup key"),
		"state":            &jsonschema.Schema{Type: "string", Enum: []any{"queued", "leased", "done", "dead", "cancelled"}},
		"attempts":         integer("claims so far"),
		"max_attempts":     integer("attempts before it is dead-lettered"),
		"available_at":     timestamp("not claimable before"),
		"lease_expires_at": timestamp("when the current lease lapses"),
		"origin":           output(map[string]*jsonschema.Schema{"agent": str("the creating agent"), "grant": str("the grant it used"), "edge": str("the friend edge")}),
		"result":           anyJSON("what complete recorded, when it is JSON"),
		"result_base64":    str("what complete recorded, when it is not JSON"),
		"error":            str("the last failure's reason"),
		"history":          &jsonschema.Schema{Type: "array", Items: output(nil)},
		"created_at":       timestamp(""),
		"updated_at":       timestamp(""),
		"ended_at":         timestamp(""),
	}, "id", "queue", "kind", "state")
}

var (
	todoRef  = map[string]*jsonschema.Schema{"todo": str("the leased todo's id"), "token": str("the lease's fencing token")}
	okOutput = output(map[string]*jsonschema.Schema{"ok": boolean("true when the call took effect")}, "ok")
)

func withLease(extra map[string]*jsonschema.Schema) map[string]*jsonschema.Schema {
	m := map[string]*jsonschema.Schema{}
	for k, v := range todoRef {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// createForSchemas are the input and output schemas of create_for.
var createForSchemas = [2]*jsonschema.Schema{input(map[string]*jsonschema.Schema{
	"queue":          str("the target persona's queue, as the grant names it"),
	"kind":           str("what sort of work, e.g. invoice.review"),
	"title":          str("a line for humans"),
	"payload":        anyJSON("the work's input, as JSON"),
	"payload_base64": str("the work's input as base64 bytes, when it is not JSON (not with payload)"),
	"priority":       integer("higher is claimed first; within ±1,000,000"),
	"dedup_key":      str("makes the call idempotent: the same key returns the same todo"),
	"not_before":     timestamp("delay the todo until this time"),
	"max_attempts":   integer("attempts before the todo is dead-lettered"),
	"trace":          traceContext(),
}, "queue", "kind"), output(map[string]*jsonschema.Schema{
	"todo":    todo(),
	"created": boolean("false when the dedup key returned an existing todo"),
}, "todo", "created")}

// listTodosSchemas are the input and output schemas of list_todos.
var listTodosSchemas = [2]*jsonschema.Schema{input(map[string]*jsonschema.Schema{
	"queue": str("the queue"),
	"state": &jsonschema.Schema{Type: "string", Enum: []any{"queued", "leased", "done", "dead", "cancelled"}, Description: "only todos in this state"},
	"after": str("continue after this todo id (next_after of the previous page)"),
	"limit": integer("at most this many (default 100, at most 1000)"),
}, "queue"), output(map[string]*jsonschema.Schema{
	"todos":      &jsonschema.Schema{Type: "array", Items: todo()},
	"next_after": str("pass as after for the next page; empty on the last page"),
}, "todos")}

// getTodoSchemas are the input and output schemas of get_todo.
var getTodoSchemas = [2]*jsonschema.Schema{input(map[string]*jsonschema.Schema{"id": str("the todo's id")}, "id"),
	output(map[string]*jsonschema.Schema{"todo": todo()}, "todo")}

// claimSchemas are the input and output schemas of claim.
var claimSchemas = [2]*jsonschema.Schema{input(map[string]*jsonschema.Schema{
	"queue": str("the queue"),
	"lease": str(`lease length as a Go duration ("5m"); default the grant's`),
	"wait":  str(`wait this long for work when none is ready ("30s", at most the server's limit); default no wait`),
}, "queue"), output(map[string]*jsonschema.Schema{
	"todo":  todo(),
	"lease": lease(),
	"empty": boolean("true when no todo was ready; todo and lease are then absent"),
}, "empty")}

// heartbeatSchemas are the input and output schemas of heartbeat.
var heartbeatSchemas = [2]*jsonschema.Schema{input(withLease(map[string]*jsonschema.Schema{"extend": str(`new lease length from now, as a Go duration; default the claim's`)}), "todo", "token"),
	output(map[string]*jsonschema.Schema{"lease": lease()}, "lease")}

// completeSchemas are the input and output schemas of complete.
var completeSchemas = [2]*jsonschema.Schema{input(withLease(map[string]*jsonschema.Schema{
	"result":        anyJSON("the outcome, as JSON"),
	"result_base64": str("the outcome as base64 bytes, when it is not JSON (not with result)"),
}), "todo", "token"), okOutput}

// failSchemas are the input and output schemas of fail.
var failSchemas = [2]*jsonschema.Schema{input(withLease(map[string]*jsonschema.Schema{"reason": str("why it failed; it is retried with backoff until max attempts")}), "todo", "token"), okOutput}

// releaseSchemas are the input and output schemas of release.
var releaseSchemas = [2]*jsonschema.Schema{input(todoRef, "todo", "token"), okOutput}

func webhook() *jsonschema.Schema {
	return output(map[string]*jsonschema.Schema{
		"id":         str("the webhook's id"),
		"grant":      str("the grant that registered it"),
		"holder":     str("that grant's agent"),
		"url":        str("where deliveries go"),
		"arrivals":   {Type: "array", Items: str("a queue"), Description: "the queues it watches for new todos"},
		"created_at": timestamp("when it was registered"),
	}, "id", "url")
}

// registerWebhookSchemas are the input and output schemas of register_webhook.
var registerWebhookSchemas = [2]*jsonschema.Schema{
	input(map[string]*jsonschema.Schema{
		"url":      str("the https URL deliveries are POSTed to; its origin must be one the host allows"),
		"arrivals": {Type: "array", Items: str("a queue"), Description: "queues whose new todos to be told of (todo.created): only for the queue owner's own agent"},
	}, "url"),
	output(map[string]*jsonschema.Schema{"webhook": webhook(), "secret": str("the signing secret (whsec_…), shown this once")}, "webhook", "secret"),
}

// listWebhooksSchemas are the input and output schemas of list_webhooks.
var listWebhooksSchemas = [2]*jsonschema.Schema{
	input(map[string]*jsonschema.Schema{}),
	output(map[string]*jsonschema.Schema{"webhooks": {Type: "array", Items: webhook()}}, "webhooks"),
}

// deleteWebhookSchemas are the input and output schemas of delete_webhook.
var deleteWebhookSchemas = [2]*jsonschema.Schema{input(map[string]*jsonschema.Schema{"id": str("the webhook's id")}, "id"), okOutput}

// redriveWebhookSchemas are the input and output schemas of redrive_webhook.
var redriveWebhookSchemas = [2]*jsonschema.Schema{input(map[string]*jsonschema.Schema{"id": str("the webhook's id")}, "id"),
	output(map[string]*jsonschema.Schema{"redriven": integer("how many dead deliveries were queued again")}, "redriven")}
