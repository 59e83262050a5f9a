// Package sbotel connects switchboard to OpenTelemetry: a
// switchboard.Observer that makes a span of every queue verb and of every
// Work handler call — the handler's span a child of the span that created
// the todo, in whichever agent and process that was — and records per-queue
// counts and latencies as metrics.
//
//	sb, _ := switchboard.New(st, &switchboard.Config{
//		Observer: sbotel.New(otel.GetTracerProvider(), otel.GetMeterProvider()),
//	})
//
// Spans and metrics carry the verb, the queue and the todo's id — never a
// credential, token, payload or result. It is its own module, so the core
// library does not depend on OpenTelemetry.
package sbotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboardhq/switchboard"
)

// Scope is the instrumentation scope name of the tracer and meter.
const Scope = "github.com/switchboardhq/switchboard/sbotel"

// Observer is a switchboard.Observer reporting to OpenTelemetry.
type Observer struct {
	tracer   trace.Tracer
	calls    metric.Int64Counter
	duration metric.Float64Histogram
	prop     propagation.TraceContext
}

var _ switchboard.Observer = (*Observer)(nil)

// New returns an Observer making spans with tp and metrics with mp:
//   - switchboard.calls (counter): calls by verb, queue and outcome ("ok",
//     "empty" for a claim that found no work, or the error's status code);
//     per queue, create_for counts todos created, claim claimed, complete
//     completed, fail failed attempts.
//   - switchboard.duration (histogram, seconds): how long each call took,
//     by verb and queue — a claim's includes its wait for work, a work
//     call is the handler's time.
func New(tp trace.TracerProvider, mp metric.MeterProvider) *Observer {
	m := mp.Meter(Scope)
	calls, _ := m.Int64Counter("switchboard.calls", metric.WithDescription("switchboard verb calls, by verb, queue and outcome"))
	dur, _ := m.Float64Histogram("switchboard.duration", metric.WithUnit("s"), metric.WithDescription("switchboard verb call durations"))
	return &Observer{tracer: tp.Tracer(Scope), calls: calls, duration: dur}
}

// Start starts a span for op: for a Work handler call, a consumer span
// whose parent is the creator's span (from the todo's trace context);
// otherwise a span under ctx's.
func (o *Observer) Start(ctx context.Context, op switchboard.Operation) (context.Context, switchboard.Observation) {
	attrs := []attribute.KeyValue{attribute.String("switchboard.verb", string(op.Verb))}
	if op.Queue != "" {
		attrs = append(attrs, attribute.String("switchboard.queue", op.Queue))
	}
	if op.Todo != "" {
		attrs = append(attrs, attribute.String("switchboard.todo", op.Todo))
	}
	kind := trace.SpanKindInternal
	switch op.Verb {
	case switchboard.VerbWork:
		kind = trace.SpanKindConsumer
		if !op.Parent.IsZero() {
			ctx = o.prop.Extract(ctx, propagation.MapCarrier{"traceparent": op.Parent.Parent, "tracestate": op.Parent.State})
		}
	case switchboard.VerbCreateFor:
		kind = trace.SpanKindProducer
	}
	ctx, span := o.tracer.Start(ctx, "switchboard."+string(op.Verb), trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return ctx, &observation{o: o, ctx: ctx, span: span, verb: op.Verb, queue: op.Queue, start: time.Now()}
}

// Trace returns ctx's span as a W3C trace context.
func (o *Observer) Trace(ctx context.Context) switchboard.Trace {
	c := propagation.MapCarrier{}
	o.prop.Inject(ctx, c)
	return switchboard.Trace{Parent: c["traceparent"], State: c["tracestate"]}
}

type observation struct {
	o     *Observer
	ctx   context.Context
	span  trace.Span
	verb  switchboard.Verb
	queue string
	start time.Time
}

func (ob *observation) End(todo string, err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, switchboard.ErrQueueEmpty):
		outcome = "empty"
	case err != nil:
		outcome = switchboard.StatusOf(err).Code
		ob.span.SetStatus(codes.Error, outcome)
		ob.span.SetAttributes(attribute.String("switchboard.error", outcome))
	}
	if todo != "" {
		ob.span.SetAttributes(attribute.String("switchboard.todo", todo))
	}
	ob.span.End()
	set := metric.WithAttributes(attribute.String("switchboard.verb", string(ob.verb)), attribute.String("switchboard.queue", ob.queue))
	ob.o.calls.Add(ob.ctx, 1, set, metric.WithAttributes(attribute.String("switchboard.outcome", outcome)))
	ob.o.duration.Record(ob.ctx, time.Since(ob.start).Seconds(), set)
}
