package postgres_test

// Failover: a primary with a synchronous standby, both started from the
// PostgreSQL binaries; two processes (and the parent) reach them through a
// multi-host DSN. Mid-traffic the primary's postmaster and every backend
// are SIGKILLed and the standby promoted; the history must be linearizable
// under the exact model (unknown outcomes only for the calls in flight at
// the kill), every acknowledged write present, the audit log verifying and
// consistent with a checkpoint signed before the kill, and claims,
// subscriptions and the sequencer resuming by themselves. CI runs one
// short history; -failover.rounds and -failover.ops make a long run:
//
//	go test ./store/postgres -run TestFailover -failover.rounds=10 -failover.ops=200
//
// An asynchronous standby loses what it had not received; the library
// must notice that from the checkpoint kept outside the database and
// refuse to sign over the gap (TestAsyncFailoverLossIsReported).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
)

var (
	failoverRounds = flag.Int("failover.rounds", 1, "failovers TestFailover runs, each on new servers")
	failoverOps    = flag.Int("failover.ops", 150, "calls per client in each history of TestFailover")
)

func TestFailover(t *testing.T) {
	for round := range *failoverRounds {
		// Even rounds revoke once the standby is promoted (and time the
		// first claim after the kill); odd ones revoke as the primary
		// dies, the revocation racing the kill.
		t.Run(fmt.Sprint("round", round), func(t *testing.T) { failoverRound(t, round%2 == 1) })
	}
}

// syncPair starts a primary and a synchronous standby of it ("s1"): a
// commit returns once the standby has it.
func syncPair(t *testing.T) (primary, standby *pgServer) {
	primary = newPrimary(t)
	standby = primary.newStandby("s1")
	primary.setting("synchronous_standby_names", "s1")
	require.Eventually(t, func() bool {
		return primary.query(`SELECT sync_state FROM pg_stat_replication WHERE application_name = 's1'`) == "sync"
	},
		30*time.Second, 20*time.Millisecond, "the standby never became synchronous")
	return primary, standby
}

func failoverRound(t *testing.T, racing bool) {
	primary, standby := syncPair(t)
	dsn := failoverDSN(primary, standby)
	skey, _, err := switchboard.NewLogKey("failover.test/log")
	require.NoError(t, err)
	kept := switchboard.CheckpointFile(filepath.Join(t.TempDir(), "checkpoint"))
	hooks := newHookReceiver(t)
	plenty := switchboard.Quotas{LiveEdgesPerRequester: 1 << 20, RequesterBurst: 1 << 20, TargetBurst: 1 << 20, PendingPerTarget: 1 << 20, Cooldown: -1}
	d := newDeploymentOn(t, dsn, postgres.Options{}, plenty, 100*time.Millisecond, func(c *switchboard.Config) {
		c.LogKey, c.Checkpoints = skey, kept
		c.Webhooks = hooks.config()
	})
	grant, friend, worker := d.friend()
	ctx := context.Background()

	// Beside the history: the parent runs the Switchboard's background
	// work (Run: webhook delivery, the reaper) and a Work loop on another
	// queue, whose completions a webhook reports. Both must go on by
	// themselves across the failover.
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = d.sb.Run(runCtx) }()
	defer func() { stopRun(); <-ran }()
	jobVerbs := []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbClaim, switchboard.VerbComplete, switchboard.VerbFail,
		switchboard.VerbRelease, switchboard.VerbHeartbeat, switchboard.VerbWebhook}
	_, jobs, err := d.sb.Vend(ctx, d.bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{{Queue: "jobs", Verbs: jobVerbs}}})
	require.NoError(t, err)
	_, secret, err := d.sb.RegisterWebhook(ctx, jobs, hooks.url())
	require.NoError(t, err)
	hooks.setSecret(secret)
	worked := newIDSet()
	workErr := make(chan error, 1)
	go func() {
		workErr <- d.sb.Work(runCtx, jobs, "jobs", func(_ context.Context, td switchboard.Todo) ([]byte, error) {
			worked.add(td.ID)
			return []byte(`{}`), nil
		}, &switchboard.WorkOptions{Concurrency: 2})
	}()
	var jobIDs []string
	createJobs := func(n int) {
		for range n {
			var td switchboard.Todo
			require.Eventually(t, func() bool {
				var err error
				td, _, err = d.sb.CreateFor(ctx, jobs, "jobs", switchboard.NewTodo{Kind: "job"})
				return err == nil
			}, time.Minute, 20*time.Millisecond)
			jobIDs = append(jobIDs, td.ID)
		}
	}
	createJobs(5)

	// Friend requests and approvals go on through the kill: carol's
	// agents ask bob's desk, bob approves. What was acknowledged must be
	// there after the failover.
	type friending struct{ edge, grant string }
	var friendings []friending
	friendCtx, stopFriending := context.WithCancel(ctx)
	friended := make(chan struct{})
	go func() {
		defer close(friended)
		carol := d.iss.Human("carol")
		for i := 0; friendCtx.Err() == nil; i++ {
			id := fmt.Sprintf("carol-agent-%d", i)
			if _, err := d.sb.Publish(ctx, switchboard.Persona{ID: id, Owner: carol, Discoverable: true,
				Card: switchboard.PersonaCard(switchboard.CardFields{Name: id, Description: "carol's agent", Version: "1.0", URL: "https://example.test/" + id})}); err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			_, pickup := switchboard.NewPickup()
			req := switchboard.FriendRequest{From: id, To: "bob-desk", Scope: switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}, Why: "work", Pickup: pickup}
			req.IDToken = d.iss.RequestToken("carol", req, time.Now())
			e, _, err := d.sb.Request(ctx, req)
			if err != nil {
				continue
			}
			f := friending{edge: e.ID}
			if g, err := d.sb.Approve(ctx, d.bob, e.ID, nil); err == nil {
				f.grant = g.ID
			}
			friendings = append(friendings, f)
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// A subscription from before the kill must go on delivering after it.
	sub := d.sb.Subscribe(ctx, 0, &switchboard.EventFilter{Types: []switchboard.EventType{switchboard.EventTodoCreated}})
	defer sub.Close()
	created := make(chan uint64, 1<<16)
	go func() {
		for e := range sub.C {
			created <- e.Seq
		}
	}()

	procs := []*proc{d.start(), d.start()}
	for i, p := range procs {
		p.send(command{Op: "history", Cred: string(friend), Worker: string(worker), Workers: 2, N: *failoverOps, First: 1 + 2*i, Pace: 10 * time.Millisecond})
	}
	// The kill comes once the clients have created and claimed, after a
	// checkpoint signed (and kept outside the database) with traffic
	// running.
	require.Eventually(t, func() bool { return countTodos(t, d.st) >= *failoverOps/8 }, time.Minute, 5*time.Millisecond, "the clients create nothing")
	before, err := d.sb.Checkpoint(ctx)
	require.NoError(t, err)
	// The revocation races the kill: it may commit before, be cut off
	// (its outcome unknown), or fail — and must then be said again.
	revoke := func() linOp {
		r := linOp{Client: 0, In: linInput{Op: "revoke"}, Call: time.Now().UnixNano()}
		if err := d.sb.Revoke(ctx, d.bob, grant.ID); err != nil {
			r.Out.failed(err)
		}
		r.Return = time.Now().UnixNano()
		return r
	}
	first := make(chan linOp, 1)
	if racing {
		go func() { first <- revoke() }()
		time.Sleep(rand.N(8 * time.Millisecond)) // the kill lands before, during or after its commit
	}
	killStart := time.Now().UnixNano()
	primary.kill()
	killEnd := time.Now().UnixNano()
	standby.promote()
	promoted := time.Now()
	t.Logf("primary killed in %v; standby promoted %v later", time.Duration(killEnd-killStart).Round(time.Millisecond), time.Duration(promoted.UnixNano()-killEnd).Round(time.Millisecond))
	if !racing {
		time.Sleep(300 * time.Millisecond) // claims meet the queue before the revocation
		first <- revoke()
	}

	// Once acknowledged, the friend's creates are refused.
	history := []linOp{<-first}
	for last := history[0]; last.Out.Failed || last.Out.Unknown; {
		time.Sleep(50 * time.Millisecond)
		last = revoke()
		history = append(history, last)
		require.Less(t, len(history), 600, "Revoke does not succeed after the failover: %s", last.Out.Err)
	}
	t.Logf("the revocation (racing the kill: %v): %+v", racing, history[0].Out)
	for i, p := range procs {
		a := p.recv()
		require.Empty(t, a.Err, "process %d", i)
		history = append(history, a.History...)
	}

	// Every todo still queued is claimed and completed by the parent,
	// until the queue says empty: a create that was acknowledged and lost
	// would leave the model holding a queued todo the store does not.
	for {
		op := linOp{Client: 0, In: linInput{Op: "claim"}, Call: time.Now().UnixNano()}
		td, l, err := d.sb.Claim(ctx, worker, "inbox", nil)
		op.Return = time.Now().UnixNano()
		if errors.Is(err, switchboard.ErrQueueEmpty) {
			op.Out.Empty = true
			history = append(history, op)
			break
		}
		require.NoError(t, err, "claims after the failover")
		op.Out.Key, op.Out.Token = td.DedupKey, l.Token
		history = append(history, op)
		c := linOp{Client: 0, In: linInput{Op: "complete", Key: td.DedupKey, Token: l.Token}, Call: time.Now().UnixNano()}
		require.NoError(t, d.sb.Complete(ctx, worker, l, nil))
		c.Return = time.Now().UnixNano()
		history = append(history, c)
	}

	var ops []porcupine.Operation
	var firstClaim int64
	kinds := map[string]int{}
	errs := map[string]int{}
	for _, o := range history {
		if o.Out.Err != "" {
			errs[o.Out.Err]++
			if o.Call > promoted.UnixNano() {
				errs["after promotion ("+fmt.Sprint(o.Client)+"): "+o.Out.Err]++
			}
		}
		kinds[fmt.Sprintf("%s %+v", o.In.Op, linOutput{Created: o.Out.Created, Empty: o.Out.Empty, Lost: o.Out.Lost, Refused: o.Out.Refused, Unknown: o.Out.Unknown, Failed: o.Out.Failed})]++
		ret := o.Return
		if o.Out.Unknown {
			require.True(t, o.Call <= killEnd && o.Return >= killStart,
				"only a call in flight at the kill may end with its outcome unknown: %+v (called %v after the kill)", o, time.Duration(o.Call-killEnd))
			ret = 1 << 62
		}
		if o.In.Op == "claim" && o.Out.Key != "" && o.Call > killEnd && (firstClaim == 0 || o.Return < firstClaim) {
			firstClaim = o.Return
		}
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: o.In, Output: o.Out, Call: o.Call, Return: ret})
	}
	res, info := porcupine.CheckOperationsVerbose(queueModel.ToModel(), ops, 2*time.Minute)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "failover.html")
		_ = porcupine.VisualizePath(queueModel.ToModel(), info, path)
		t.Fatalf("history of %d calls across the failover is %s (visualization: %s)", len(ops), res, path)
	}
	t.Logf("%d calls linearizable: %v", len(ops), kinds)
	for e, n := range errs {
		t.Logf("%d× %s", n, e)
	}
	if !racing { // (a revocation that won the race leaves nothing to claim)
		require.NotZero(t, firstClaim, "nothing was claimed after the failover")
		t.Logf("from the kill to the first successful claim: %v", time.Duration(firstClaim-killEnd).Round(time.Millisecond))
	}

	stopFriending()
	<-friended
	carol := d.iss.Human("carol")
	approved := 0
	for _, f := range friendings {
		e, err := d.sb.Edge(ctx, carol, f.edge)
		require.NoError(t, err, "an acknowledged friend request is gone")
		if f.grant != "" {
			approved++
			require.Equal(t, switchboard.EdgeApproved, e.State, "an acknowledged approval is gone")
			require.Equal(t, f.grant, e.GrantID)
		}
	}
	require.NotZero(t, approved, "no approval was made")
	t.Logf("%d friend requests acknowledged across the failover, %d approved: all there", len(friendings), approved)

	// Work and webhook delivery went on by themselves: every job, before
	// and after the failover, was worked and its completion delivered.
	createJobs(5)
	count := func() (w, hk int) {
		for _, id := range jobIDs {
			if worked.has(id) {
				w++
			}
			if hooks.got.has(id) {
				hk++
			}
		}
		return w, hk
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-workErr:
			t.Fatalf("Work ended: %v", err)
		default:
		}
		w, hk := count()
		if w == len(jobIDs) && hk == len(jobIDs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Work or webhook delivery did not resume after the failover: %d of %d jobs worked, %d delivered", w, len(jobIDs), hk)
		}
	}

	// The audit log: sequenced to its end, verifying, and consistent with
	// the checkpoint signed before the kill (Checkpoint checks that, and
	// the one kept outside the database, before it signs).
	report := sequenced(t, d.sb, d.st)
	_, err = d.sb.VerifyAudit(ctx, before)
	require.NoError(t, err)
	require.NoError(t, d.sb.CheckLog(ctx))
	after, err := d.sb.Checkpoint(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, after.Size, before.Size)
	t.Logf("audit log: %d events verify; checkpoint %d → %d", report.Events, before.Size, after.Size)

	// The subscription went on: it delivered a todo.created committed
	// after the promotion.
	last := lastEventSeq(t, d.sb)
	deadline := time.After(30 * time.Second)
	for got := uint64(0); got < last; {
		select {
		case got = <-created:
		case <-deadline:
			t.Fatalf("the subscription stopped at event %d of %d (err %v)", got, last, sub.Err())
		}
	}
}

// countTodos counts the todos in the store.
func countTodos(t *testing.T, st store.Store) int {
	n := 0
	require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
		return tx.Scan("todos", nil, nil, func(_, _ []byte) bool { n++; return true })
	}))
	return n
}

// lastEventSeq is the seq of the last todo.created event in the log.
func lastEventSeq(t *testing.T, sb *switchboard.Switchboard) uint64 {
	var last uint64
	for after := uint64(0); ; {
		evs, err := sb.Events(context.Background(), after, 256)
		require.NoError(t, err)
		if len(evs) == 0 {
			return last
		}
		for _, e := range evs {
			if e.Type == switchboard.EventTodoCreated {
				last = e.Seq
			}
			after = e.Seq
		}
	}
}

// An asynchronous standby that is behind when the primary dies loses
// what it had not received — acknowledged creates, and the audit events
// that recorded them. The library notices and refuses to sign over the
// gap: CheckLog and Checkpoint report ErrAuditBroken. Two ways:
//
//   - "signed": the lost events were covered by a checkpoint, kept outside
//     the database (Config.Checkpoints), which the promoted server's log
//     no longer reaches. The runbook (docs/scaling.md) then archives the
//     kept checkpoint and signing resumes from the promoted server's own.
//   - "sequenced": no checkpoint covered them, and none is kept outside;
//     the process that sequenced them remembers the tree it built, and
//     the promoted server's log is behind it. A restart forgets that (it
//     is in memory), so the runbook's step is a restart.
func TestAsyncFailoverLossIsReported(t *testing.T) {
	for _, signed := range []bool{true, false} {
		name := map[bool]string{true: "signed", false: "sequenced"}[signed]
		t.Run(name, func(t *testing.T) { asyncLoss(t, signed) })
	}
}

func asyncLoss(t *testing.T, signed bool) {
	primary := newPrimary(t)
	standby := primary.newStandby("s1")
	dsn := failoverDSN(primary, standby)
	skey, _, err := switchboard.NewLogKey("failover.test/log")
	require.NoError(t, err)
	keptPath := filepath.Join(t.TempDir(), "checkpoint")
	d := newDeploymentOn(t, dsn, postgres.Options{}, switchboard.Quotas{}, 100*time.Millisecond, func(c *switchboard.Config) {
		c.LogKey = skey
		if signed {
			c.Checkpoints = switchboard.CheckpointFile(keptPath)
		}
	})
	_, friend, _ := d.friend()
	ctx := context.Background()
	create := func(n int) {
		for range n {
			_, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "async"})
			require.NoError(t, err)
		}
		sequenced(t, d.sb, d.st)
	}
	create(5)
	replicated, err := d.sb.Checkpoint(ctx)
	require.NoError(t, err)
	lsn := primary.query(`SELECT pg_current_wal_lsn()::text`)
	require.Eventually(t, func() bool {
		return standby.query(`SELECT pg_last_wal_replay_lsn() >= '`+lsn+`'::pg_lsn`) == "true"
	}, 30*time.Second, 10*time.Millisecond, "the standby did not catch up")

	// The standby falls behind (it is stopped), the primary acknowledges
	// more (and, in "signed", signs them), then dies; the standby comes
	// back and is promoted with what it had.
	standby.stop()
	create(5)
	var lost switchboard.Checkpoint
	if signed {
		lost, err = d.sb.Checkpoint(ctx)
		require.NoError(t, err)
		require.Greater(t, lost.Size, replicated.Size)
	}
	primary.kill()
	standby.start()
	standby.promote()

	var checkErr error
	require.Eventually(t, func() bool {
		checkErr = d.sb.CheckLog(ctx)
		return errors.Is(checkErr, switchboard.ErrAuditBroken)
	}, 30*time.Second, 50*time.Millisecond, "the loss went unnoticed: %v", checkErr)
	t.Logf("CheckLog after the failover: %v", checkErr)
	var ae *switchboard.AuditError
	require.ErrorAs(t, checkErr, &ae)
	// New events are sequenced meanwhile onto the shorter log, past
	// its old length: still refused, the history having forked where the
	// loss began.
	create(8)
	_, err = d.sb.Checkpoint(ctx)
	require.ErrorIs(t, err, switchboard.ErrAuditBroken, "a history over the gap must not be signed")
	t.Logf("Checkpoint after more writes: %v", err)
	if !signed {
		return
	}
	_, err = d.sb.VerifyAudit(ctx, lost)
	require.Error(t, err, "the lost checkpoint's events are gone")

	// The runbook: keep the lost checkpoint as the record of what was
	// lost, remove it from where the Switchboard keeps it, restart, and
	// signing resumes from the last checkpoint the promoted server holds.
	require.NoError(t, renameAside(keptPath))
	restarted, err := switchboard.New(d.st, &switchboard.Config{Issuers: []switchboard.Issuer{d.iss.Config()}, LogKey: skey,
		Checkpoints: switchboard.CheckpointFile(keptPath)})
	require.NoError(t, err)
	defer restarted.Close()
	require.NoError(t, restarted.CheckLog(ctx))
	resumed, err := restarted.Checkpoint(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, resumed.Size, replicated.Size)
	_, err = restarted.VerifyAudit(ctx, replicated)
	require.NoError(t, err, "consistent with what the standby had")
}

// renameAside moves the file at path to path + ".lost", keeping it.
func renameAside(path string) error { return os.Rename(path, path+".lost") }

// idSet is a set of ids, safe for concurrent use.
type idSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func newIDSet() *idSet { return &idSet{ids: map[string]bool{}} }

func (s *idSet) add(id string) { s.mu.Lock(); s.ids[id] = true; s.mu.Unlock() }

func (s *idSet) has(id string) bool { s.mu.Lock(); defer s.mu.Unlock(); return s.ids[id] }

// hookReceiver is a webhook endpoint that records the todos whose
// verified deliveries reached it.
type hookReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	got    *idSet
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{got: newIDSet()}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		secret := h.secret
		h.mu.Unlock()
		if _, err := switchboard.VerifyWebhook(secret, r.Header, body, time.Now(), 0); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var b struct {
			Data struct{ Todo switchboard.Todo }
		}
		if json.Unmarshal(body, &b) == nil {
			h.got.add(b.Data.Todo.ID)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) config() *switchboard.WebhookConfig {
	return &switchboard.WebhookConfig{Key: bytes.Repeat([]byte{7}, 32), Origins: []string{h.srv.URL}, AllowPrivate: true, AllowHTTP: true}
}

func (h *hookReceiver) url() string { return h.srv.URL + "/hook" }

func (h *hookReceiver) setSecret(s string) { h.mu.Lock(); h.secret = s; h.mu.Unlock() }
