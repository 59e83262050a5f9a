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
	meter    metric.Meter
	calls    metric.Int64Counter
	todos    metric.Int64Counter
	duration metric.Float64Histogram
	wait     metric.Float64Histogram
	held     metric.Float64Histogram
	prop     propagation.TraceContext
}

var _ switchboard.Observer = (*Observer)(nil)

// New returns an Observer making spans with tp and metrics with mp. Every
// metric has the attribute switchboard.queue, the queue's name as the
// grant names it:
//   - switchboard.calls (counter): calls by verb, queue and outcome ("ok",
//     "empty" for a claim that found no work, or the error's status code).
//   - switchboard.todos (counter): todos by queue and event — "created"
//     (a create_for that made one; a dedup hit is not counted), "claimed"
//     (each todo a claim, claim_n or complete-and-claim leased),
//     "completed", "failed" (an attempt failed, to be retried) and "dead"
//     (a fail that dead-lettered it).
//   - switchboard.duration (histogram, seconds): how long each call took,
//     by verb and queue — a claim's includes its wait for work, a work
//     call is the handler's time.
//   - switchboard.claim.wait (histogram, seconds): how long each claimed
//     todo had been ready before it was leased.
//   - switchboard.lease.duration (histogram, seconds): how long a lease
//     was held, from its claim to its complete or fail.
//
// Queue depth is a gauge read from the store: see ObserveQueues.
func New(tp trace.TracerProvider, mp metric.MeterProvider) *Observer {
	m := mp.Meter(Scope)
	o := &Observer{tracer: tp.Tracer(Scope), meter: m}
	// The SDK's instruments never fail for these valid names; a no-op
	// provider's never do.
	o.calls, _ = m.Int64Counter("switchboard.calls", metric.WithDescription("switchboard verb calls, by verb, queue and outcome"))
	o.todos, _ = m.Int64Counter("switchboard.todos", metric.WithDescription("todos created, claimed, completed, failed and dead-lettered, by queue"))
	o.duration, _ = m.Float64Histogram("switchboard.duration", metric.WithUnit("s"), metric.WithDescription("switchboard verb call durations"))
	o.wait, _ = m.Float64Histogram("switchboard.claim.wait", metric.WithUnit("s"), metric.WithDescription("how long a todo was ready before it was claimed"))
	o.held, _ = m.Float64Histogram("switchboard.lease.duration", metric.WithUnit("s"), metric.WithDescription("how long a lease was held, from claim to complete or fail"))
	return o
}

// ObserveQueues reports sb's queue depths as the gauge switchboard.queue.depth:
// the number of todos by queue (its address, "persona/queue") and state
// ("ready", "delayed", "leased", "dead"), read with InspectQueues each time
// the meter provider collects. That reads every todo the store keeps, so
// give the provider's reader a collection interval of tens of seconds on a
// large store. Unregister the returned registration before closing sb.
func (o *Observer) ObserveQueues(sb *switchboard.Switchboard) (metric.Registration, error) {
	depth, err := o.meter.Int64ObservableGauge("switchboard.queue.depth", metric.WithDescription("todos by queue and state"))
	if err != nil {
		return nil, err
	}
	return o.meter.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		qs, err := sb.InspectQueues(ctx)
		if err != nil {
			return err
		}
		for _, q := range qs {
			for _, st := range []struct {
				state string
				n     int
			}{{"ready", q.Ready}, {"delayed", q.Delayed}, {"leased", q.Leased}, {"dead", q.Dead}} {
				obs.ObserveInt64(depth, int64(st.n), metric.WithAttributes(attribute.String("switchboard.queue", q.Queue), attribute.String("switchboard.state", st.state)))
			}
		}
		return nil
	}, depth)
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

func (ob *observation) End(r switchboard.Result) {
	outcome := "ok"
	switch {
	case errors.Is(r.Err, switchboard.ErrQueueEmpty):
		outcome = "empty"
	case r.Err != nil:
		outcome = switchboard.StatusOf(r.Err).Code
		ob.span.SetStatus(codes.Error, outcome)
		ob.span.SetAttributes(attribute.String("switchboard.error", outcome))
	}
	queue := ob.queue
	if r.Queue != "" {
		queue = r.Queue
		if ob.queue == "" {
			ob.span.SetAttributes(attribute.String("switchboard.queue", queue))
		}
	}
	if r.Todo != "" {
		ob.span.SetAttributes(attribute.String("switchboard.todo", r.Todo))
	}
	ob.span.End()
	q := attribute.String("switchboard.queue", queue)
	set := metric.WithAttributes(attribute.String("switchboard.verb", string(ob.verb)), q)
	ob.o.calls.Add(ob.ctx, 1, set, metric.WithAttributes(attribute.String("switchboard.outcome", outcome)))
	ob.o.duration.Record(ob.ctx, time.Since(ob.start).Seconds(), set)

	inQueue := metric.WithAttributes(q)
	event := func(name string, n int) {
		if n > 0 {
			ob.o.todos.Add(ob.ctx, int64(n), inQueue, metric.WithAttributes(attribute.String("switchboard.event", name)))
		}
	}
	for _, w := range r.Waits {
		ob.o.wait.Record(ob.ctx, w.Seconds(), inQueue)
	}
	event("claimed", len(r.Waits))
	if r.Err != nil {
		return
	}
	switch ob.verb {
	case switchboard.VerbCreateFor:
		if !r.Existing {
			event("created", 1)
		}
	case switchboard.VerbComplete:
		event("completed", 1)
		ob.o.held.Record(ob.ctx, r.Held.Seconds(), inQueue)
	case switchboard.VerbFail:
		if r.Dead {
			event("dead", 1)
		} else {
			event("failed", 1)
		}
		ob.o.held.Record(ob.ctx, r.Held.Seconds(), inQueue)
	}
}
