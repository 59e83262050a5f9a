package sbotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/sbotel"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// One trace from agent A's CreateFor to agent B's handler, across two
// Switchboard values (two processes' worth) on one store: B's work span is
// a child of A's create_for span, which is a child of A's own request span.
func TestOneTraceAcrossAgents(t *testing.T) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs := sbotel.New(tp, mp)

	iss, err := switchboardtest.NewIssuer("otel")
	require.NoError(t, err)
	defer iss.Close()
	st := memory.New()
	cfg := func() *switchboard.Config {
		return &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}, Observer: obs}
	}
	a, err := switchboard.New(st, cfg()) // agent A's process
	require.NoError(t, err)
	b, err := switchboard.New(st, cfg()) // agent B's process
	require.NoError(t, err)

	alice, bob := iss.Human("alice"), iss.Human("bob")
	for _, p := range []switchboard.Persona{
		{ID: "alice-bot", Owner: alice, Discoverable: true, Card: switchboard.PersonaCard("A", "a", "1", "https://x.example/agents/alice-bot")},
		{ID: "bob-desk", Owner: bob, Discoverable: true, Card: switchboard.PersonaCard("B", "b", "1", "https://x.example/agents/bob-desk")},
	} {
		_, err := a.Publish(ctx, p)
		require.NoError(t, err)
	}
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}, Why: "work", Pickup: pickup}
	req.IDToken = iss.RequestToken("alice", req, time.Now())
	e, _, err := a.Request(ctx, req)
	require.NoError(t, err)
	_, err = b.Approve(ctx, bob, e.ID, nil)
	require.NoError(t, err)
	_, friend, err := a.Collect(ctx, e.ID, secret)
	require.NoError(t, err)
	_, worker, err := b.Vend(ctx, bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{{Queue: "inbox",
		Verbs: []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbComplete, switchboard.VerbHeartbeat, switchboard.VerbFail}}}})
	require.NoError(t, err)

	// A's request, in a span of its own, hands B work.
	actx, root := tp.Tracer("agent-a").Start(ctx, "agent A handles a user request")
	td, _, err := a.CreateFor(actx, friend, "inbox", switchboard.NewTodo{Kind: "invoice"})
	require.NoError(t, err)
	root.End()
	require.Equal(t, root.SpanContext().TraceID().String(), td.Trace.Parent[3:35], "the todo carries A's trace")

	// B works it.
	handled := false
	err = b.Work(ctx, worker, "inbox", func(hctx context.Context, got switchboard.Todo) ([]byte, error) {
		handled = true
		return nil, nil
	}, &switchboard.WorkOptions{UntilEmpty: true})
	require.NoError(t, err)
	require.True(t, handled)

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	create, work := spans["switchboard.create_for"], spans["switchboard.work"]
	require.NotNil(t, create)
	require.NotNil(t, work)
	require.Equal(t, root.SpanContext().TraceID(), create.SpanContext().TraceID())
	require.Equal(t, root.SpanContext().SpanID(), create.Parent().SpanID(), "create_for is a child of A's span")
	require.Equal(t, create.SpanContext().TraceID(), work.SpanContext().TraceID(), "one trace across the agents")
	require.Equal(t, create.SpanContext().SpanID(), work.Parent().SpanID(), "B's handler is a child of A's create_for")
	require.True(t, work.Parent().IsRemote())
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			require.NotContains(t, kv.Value.String(), "sbc_", "a credential in span %s", s.Name())
		}
	}

	// Metrics: one todo created, claimed and completed on bob-desk's inbox.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "switchboard.calls" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				verb, _ := dp.Attributes.Value("switchboard.verb")
				outcome, _ := dp.Attributes.Value("switchboard.outcome")
				counts[verb.AsString()+"/"+outcome.AsString()] += dp.Value
			}
		}
	}
	require.Equal(t, int64(1), counts["create_for/ok"])
	require.Equal(t, int64(1), counts["work/ok"])
	require.Equal(t, int64(1), counts["complete/ok"])
}
