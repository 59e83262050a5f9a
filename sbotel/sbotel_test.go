package sbotel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

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
		{ID: "alice-bot", Owner: alice, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{Name: "A", Description: "a", Version: "1", URL: "https://x.example/agents/alice-bot"})},
		{ID: "bob-desk", Owner: bob, Discoverable: true, Card: switchboard.PersonaCard(switchboard.CardFields{Name: "B", Description: "b", Version: "1", URL: "https://x.example/agents/bob-desk"})},
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

// stepClock is a clock the test moves by hand.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *stepClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *stepClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The per-queue metrics: todos by event, claim wait, lease duration and
// queue depth, with the times the clock made.
func TestQueueMetrics(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs := sbotel.New(tracenoop.NewTracerProvider(), mp)
	clock := &stepClock{now: time.Now()}
	k := switchboardtest.NewKit(t, &switchboard.Config{Observer: obs, Clock: clock})
	reg, err := obs.ObserveQueues(k.SB)
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	_, friend := k.Friend("alice-bot", "bob-desk", switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}})
	worker := k.Worker("bob-desk", "inbox")

	for i, n := range []switchboard.NewTodo{{Kind: "a", MaxAttempts: 1}, {Kind: "b", MaxAttempts: 2}, {Kind: "c", DedupKey: "c"}, {Kind: "c", DedupKey: "c"}} {
		_, created, err := k.SB.CreateFor(ctx, friend, "inbox", n)
		require.NoError(t, err)
		require.Equal(t, i < 3, created)
	}
	clock.step(2 * time.Second) // each todo waits 2 s to be claimed
	_, l1, err := k.SB.Claim(ctx, worker, "inbox", nil)
	require.NoError(t, err)
	got, err := k.SB.ClaimN(ctx, worker, "inbox", 2, nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	clock.step(3 * time.Second)                                         // each lease is held 3 s
	require.NoError(t, k.SB.Fail(ctx, worker, l1, "no"))                // its only attempt: dead
	require.NoError(t, k.SB.Fail(ctx, worker, got[0].Lease, "not yet")) // retried later
	require.NoError(t, k.SB.Complete(ctx, worker, got[1].Lease, nil))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	todos := map[string]int64{}
	hist := map[string]metricdata.HistogramDataPoint[float64]{}
	depth := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "switchboard.todos":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					q, _ := dp.Attributes.Value("switchboard.queue")
					ev, _ := dp.Attributes.Value("switchboard.event")
					todos[q.AsString()+"/"+ev.AsString()] += dp.Value
				}
			case "switchboard.claim.wait", "switchboard.lease.duration":
				dps := m.Data.(metricdata.Histogram[float64]).DataPoints
				require.Len(t, dps, 1, m.Name)
				q, _ := dps[0].Attributes.Value("switchboard.queue")
				require.Equal(t, "inbox", q.AsString())
				hist[m.Name] = dps[0]
			case "switchboard.queue.depth":
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					q, _ := dp.Attributes.Value("switchboard.queue")
					st, _ := dp.Attributes.Value("switchboard.state")
					depth[q.AsString()+"/"+st.AsString()] = dp.Value
				}
			}
		}
	}
	require.Equal(t, map[string]int64{"inbox/created": 3, "inbox/claimed": 3, "inbox/dead": 1, "inbox/failed": 1, "inbox/completed": 1}, todos)
	require.Equal(t, uint64(3), hist["switchboard.claim.wait"].Count)
	require.InDelta(t, 6.0, hist["switchboard.claim.wait"].Sum, 1e-9)
	require.Equal(t, uint64(3), hist["switchboard.lease.duration"].Count)
	require.InDelta(t, 9.0, hist["switchboard.lease.duration"].Sum, 1e-9)
	require.Equal(t, int64(1), depth["bob-desk/inbox/delayed"], "the failed todo waits for its retry")
	require.Equal(t, int64(1), depth["bob-desk/inbox/dead"])
	require.Equal(t, int64(0), depth["bob-desk/inbox/ready"])
	require.Equal(t, int64(0), depth["bob-desk/inbox/leased"])
}
