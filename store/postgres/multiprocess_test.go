package postgres_test

// Several processes on one database: the test binary re-executes itself as
// child processes (TestMain, childEnv) that open the same table and serve
// switchboard calls given to them as JSON lines on stdin, one answer per
// line on stdout. The parent sets the deployment up through its own
// Switchboard and checks that what one process commits binds the others.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

const childEnv = "SWITCHBOARD_PG_CHILD"

// childConfig is what a child process is started with (JSON in childEnv).
type childConfig struct {
	DSN          string             `json:"dsn"`
	Table        string             `json:"table"`
	Issuer       string             `json:"issuer"`
	ClientID     string             `json:"client_id"`
	Quotas       switchboard.Quotas `json:"quotas"`
	PollInterval time.Duration      `json:"poll_interval"`
	// SequencerLease is the audit log sequencer's lease (Config).
	SequencerLease time.Duration    `json:"sequencer_lease,omitempty"`
	Options        postgres.Options `json:"options"`
	// AnnounceWaits makes the child write {"id":"waiting"} whenever the
	// library starts a wait of PollInterval on its clock (a blocking claim
	// that found its queue empty; the audit log's sequencer waits less),
	// so the parent knows it is blocked without guessing.
	AnnounceWaits bool `json:"announce_waits,omitempty"`
	// ApplicationName names the child's database connections, so a test
	// can find (and cut) them.
	ApplicationName string `json:"application_name,omitempty"`
}

// lockedEncoder is the child's stdout, shared by its answers and its
// clock's announcements.
type lockedEncoder struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *lockedEncoder) Encode(v any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enc.Encode(v)
}

// announcingClock is the system clock, announcing each wait of poll on
// stdout.
type announcingClock struct {
	out  *lockedEncoder
	poll time.Duration
}

func (announcingClock) Now() time.Time { return time.Now() }
func (c announcingClock) After(d time.Duration) <-chan time.Time {
	ch := time.After(d)
	if d == c.poll {
		_ = c.out.Encode(answer{ID: "waiting"})
	}
	return ch
}

// command is one call for a child; answer is its outcome.
type command struct {
	Op       string                      `json:"op"` // create, claim, drain, request, flood
	N        int                         `json:"n,omitempty"`
	Worker   string                      `json:"worker,omitempty"`
	First    int                         `json:"first,omitempty"`
	Cred     string                      `json:"cred,omitempty"`
	Queue    string                      `json:"queue,omitempty"`
	Wait     bool                        `json:"wait,omitempty"`
	Workers  int                         `json:"workers,omitempty"`
	Request  *switchboard.FriendRequest  `json:"request,omitempty"`
	Requests []switchboard.FriendRequest `json:"requests,omitempty"` // sent all at once (op "requests")
	Pace     time.Duration               `json:"pace,omitempty"`     // op "history": the longest pause before a call
}

type answer struct {
	ID      string              `json:"id,omitempty"`
	Err     string              `json:"err,omitempty"`
	Is      []string            `json:"is,omitempty"` // sentinels the error matches
	Leases  []switchboard.Lease `json:"leases,omitempty"`
	Elapsed time.Duration       `json:"elapsed,omitempty"`
	History []linOp             `json:"history,omitempty"`
	OK      int                 `json:"ok,omitempty"` // op "requests": how many created an edge
}

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		if err := child(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	switchboardtest.Main(m) // a skipped suite says why, without -v
}

// child serves commands from stdin until it closes.
func child(raw string) error {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return err
	}
	ctx := context.Background()
	o := cfg.Options
	o.Table = cfg.Table
	dsn := cfg.DSN
	if cfg.ApplicationName != "" {
		dsn += "&application_name=" + cfg.ApplicationName
	}
	st, err := postgres.Open(ctx, dsn, &o)
	if err != nil {
		return err
	}
	defer st.Close()
	out := &lockedEncoder{enc: json.NewEncoder(os.Stdout)}
	var clock switchboard.Clock
	if cfg.AnnounceWaits {
		clock = announcingClock{out, cfg.PollInterval}
	}
	sb, err := switchboard.New(st, &switchboard.Config{
		Issuers:        []switchboard.Issuer{{URL: cfg.Issuer, ClientID: cfg.ClientID}},
		Quotas:         cfg.Quotas,
		PollInterval:   cfg.PollInterval,
		SequencerLease: cfg.SequencerLease,
		Clock:          clock,
	})
	if err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	if err := out.Encode(answer{ID: "ready"}); err != nil {
		return err
	}
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			return err
		}
		if err := out.Encode(serve(ctx, sb, c)); err != nil {
			return err
		}
	}
	return in.Err()
}

func serve(ctx context.Context, sb *switchboard.Switchboard, c command) answer {
	start := time.Now()
	cred := switchboard.Credential(c.Cred)
	var a answer
	var err error
	switch c.Op {
	case "create":
		var t switchboard.Todo
		t, _, err = sb.CreateFor(ctx, cred, c.Queue, switchboard.NewTodo{Kind: "probe"})
		a.ID = t.ID
	case "claim":
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		var t switchboard.Todo
		t, _, err = sb.Claim(cctx, cred, c.Queue, &switchboard.ClaimOptions{Wait: c.Wait})
		cancel()
		a.ID = t.ID
	case "drain":
		a.Leases, err = drain(ctx, sb, cred, c.Queue, c.Workers)
	case "history":
		return linHistory(ctx, sb, c)
	case "requests":
		var ok atomic.Int64
		var wg sync.WaitGroup
		for _, r := range c.Requests {
			wg.Go(func() {
				if _, created, err := sb.Request(ctx, r); err == nil && created {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		a.OK = int(ok.Load())
	case "flood":
		// c.N creates from c.Workers goroutines, for a parent that kills
		// the process in the middle of them.
		var wg sync.WaitGroup
		var next atomic.Int64
		var failed atomic.Pointer[error]
		for range c.Workers {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(c.N) && failed.Load() == nil; i = next.Add(1) {
					if _, _, cerr := sb.CreateFor(ctx, cred, c.Queue, switchboard.NewTodo{Kind: "flood"}); cerr != nil {
						failed.Store(&cerr)
					}
				}
			})
		}
		wg.Wait()
		if e := failed.Load(); e != nil {
			err = *e
		}
	case "request":
		var e switchboard.Edge
		e, _, err = sb.Request(ctx, *c.Request)
		a.ID = e.ID
	default:
		err = fmt.Errorf("unknown op %q", c.Op)
	}
	a.Elapsed = time.Since(start)
	if err != nil {
		a.Err = err.Error()
		for name, s := range map[string]error{
			"unauthenticated": switchboard.ErrUnauthenticated, "provenance": switchboard.ErrProvenance,
			"rate-limited": switchboard.ErrRateLimited, "quota": switchboard.ErrQuotaExceeded,
			"empty": switchboard.ErrQueueEmpty, "lease-lost": switchboard.ErrLeaseLost,
		} {
			if errors.Is(err, s) {
				a.Is = append(a.Is, name)
			}
		}
	}
	return a
}

// drain claims and completes with n goroutines until the queue is empty,
// returning every lease it was granted (and completed).
func drain(ctx context.Context, sb *switchboard.Switchboard, cred switchboard.Credential, queue string, n int) ([]switchboard.Lease, error) {
	var mu sync.Mutex
	var leases []switchboard.Lease
	var firstErr error
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				_, l, err := sb.Claim(ctx, cred, queue, nil)
				if errors.Is(err, switchboard.ErrQueueEmpty) {
					return
				}
				if err == nil {
					err = sb.Complete(ctx, cred, l, []byte("done"))
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					leases = append(leases, l)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return leases, firstErr
}

// proc is a running child.
type proc struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *json.Decoder
}

// deployment is the parent's side: a store, a Switchboard and an issuer
// whose tokens the children verify too.
type deployment struct {
	t     *testing.T
	cfg   childConfig
	st    *postgres.Store
	sb    *switchboard.Switchboard
	iss   *switchboardtest.Issuer
	bob   switchboard.Human
	alice switchboard.Human
}

func newDeployment(t *testing.T, quotas switchboard.Quotas, poll time.Duration) *deployment {
	return newDeploymentOn(t, testDSN(t), postgres.Options{}, quotas, poll, nil)
}

// newDeploymentOnStore is a deployment on the server dsn names, its store
// opened with opts.
func newDeploymentOnStore(t *testing.T, dsn string, opts postgres.Options) *deployment {
	return newDeploymentOn(t, dsn, opts, switchboard.Quotas{}, time.Second, nil)
}

// newDeploymentOn is newDeployment on the server dsn names, its store
// opened with opts, the parent's Switchboard configured further by more
// (if not nil).
func newDeploymentOn(t *testing.T, dsn string, opts postgres.Options, quotas switchboard.Quotas, poll time.Duration, more func(*switchboard.Config)) *deployment {
	iss, err := switchboardtest.NewIssuer("multi-process")
	require.NoError(t, err)
	t.Cleanup(iss.Close)
	d := &deployment{t: t, iss: iss, bob: iss.Human("bob"), alice: iss.Human("alice")}
	d.cfg = childConfig{DSN: dsn, Table: freshTable(t, dsn), Issuer: iss.URL(), ClientID: "multi-process", Quotas: quotas, PollInterval: poll}
	opts.Table = d.cfg.Table
	d.cfg.Options = opts
	d.st = open(t, dsn, opts)
	t.Cleanup(func() { _ = d.st.Close() })
	cfg := &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}, Quotas: quotas, PollInterval: poll}
	if more != nil {
		more(cfg)
	}
	d.sb, err = switchboard.New(d.st, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.sb.Close() }) // before the store's (cleanups run last first)
	for _, p := range [][2]string{{"alice", "alice-bot"}, {"bob", "bob-desk"}, {"carol", "carol-desk"}, {"dave", "dave-desk"}} {
		_, err := d.sb.Publish(context.Background(), switchboard.Persona{ID: p[1], Owner: iss.Human(p[0]), Discoverable: true,
			Card: switchboard.PersonaCard(switchboard.CardFields{Name: p[1], Description: "test persona", Version: "1.0", URL: "https://example.test/" + p[1]})})
		require.NoError(t, err)
	}
	return d
}

// friend makes alice-bot a friend of bob-desk on inbox (create only) and
// vends bob-desk a worker credential for it.
func (d *deployment) friend() (grant switchboard.Grant, friend, worker switchboard.Credential) {
	ctx := context.Background()
	scope := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: scope, Why: "work", Pickup: pickup}
	req.IDToken = d.iss.RequestToken("alice", req, time.Now())
	e, _, err := d.sb.Request(ctx, req)
	require.NoError(d.t, err)
	grant, err = d.sb.Approve(ctx, d.bob, e.ID, nil)
	require.NoError(d.t, err)
	_, friend, err = d.sb.Collect(ctx, e.ID, secret)
	require.NoError(d.t, err)
	_, worker, err = d.sb.Vend(ctx, d.bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{
		{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbComplete, switchboard.VerbGet}}}})
	require.NoError(d.t, err)
	return grant, friend, worker
}

// start runs a child process on the deployment's table.
func (d *deployment) start() *proc {
	t := d.t
	raw, err := json.Marshal(d.cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{t: t, cmd: cmd, in: in, out: json.NewDecoder(out)}
	t.Cleanup(p.stop)
	var ready answer
	require.NoError(t, p.out.Decode(&ready), "child did not start")
	require.Equal(t, "ready", ready.ID)
	return p
}

func (p *proc) send(c command) {
	b, err := json.Marshal(c)
	require.NoError(p.t, err)
	_, err = p.in.Write(append(b, '\n'))
	require.NoError(p.t, err)
}

func (p *proc) recv() answer {
	var a answer
	require.NoError(p.t, p.out.Decode(&a), "child died")
	return a
}

func (p *proc) call(c command) answer { p.send(c); return p.recv() }

// kill ends the child with SIGKILL, whatever it is doing.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.in = nil
}

func (p *proc) stop() {
	if p.in != nil {
		_ = p.in.Close()
		p.in = nil
		_ = p.cmd.Wait()
	}
}

// A revocation committed in one process is refused by the very next call
// in another: the child's CreateFor works, the parent revokes, and the
// child's next call — made after Revoke returned — fails.
func TestMultiProcessRevocation(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Second)
	grant, friend, _ := d.friend()
	p := d.start()
	before := p.call(command{Op: "create", Cred: string(friend), Queue: "inbox"})
	require.Empty(t, before.Err)
	require.NoError(t, d.sb.Revoke(context.Background(), d.bob, grant.ID))
	a := p.call(command{Op: "create", Cred: string(friend), Queue: "inbox"})
	require.Contains(t, a.Is, "unauthenticated", "after revocation in another process: %s", a.Err)
	// The todo the child created before the revocation was cancelled with
	// it (it came from a party no longer trusted).
	td, err := d.sb.Get(context.Background(), d.workerCred(), before.ID)
	require.NoError(t, err)
	require.Equal(t, switchboard.TodoCancelled, td.State)
}

// workerCred vends bob-desk a credential able to read inbox.
func (d *deployment) workerCred() switchboard.Credential {
	_, c, err := d.sb.Vend(context.Background(), d.bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{
		{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbGet, switchboard.VerbList}}}})
	require.NoError(d.t, err)
	return c
}

// Two processes draining one queue with 8 workers each: every todo is
// leased exactly once (leases are long, so a second lease on a todo could
// only be a double claim), every Complete is accepted, and the audit chain
// the two processes wrote together verifies.
func TestMultiProcessLeasesAreExclusive(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Second)
	_, friend, worker := d.friend()
	ctx := context.Background()
	const n = 300
	want := map[string]bool{}
	for i := range n {
		td, _, err := d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "job", DedupKey: fmt.Sprint(i)})
		require.NoError(t, err)
		want[td.ID] = true
	}
	procs := []*proc{d.start(), d.start()}
	for _, p := range procs {
		p.send(command{Op: "drain", Cred: string(worker), Queue: "inbox", Workers: 8})
	}
	seen := map[string]int{}
	for i, p := range procs {
		a := p.recv()
		require.Empty(t, a.Err, "process %d", i)
		require.NotEmpty(t, a.Leases, "process %d claimed nothing: the test did not contend", i)
		for _, l := range a.Leases {
			seen[l.TodoID]++
		}
	}
	require.Len(t, seen, n, "every todo claimed")
	for id, c := range seen {
		require.True(t, want[id], "claimed a todo never created: %s", id)
		require.Equal(t, 1, c, "todo %s leased %d times", id, c)
	}
	list, err := d.sb.List(ctx, d.workerCred(), "inbox", &switchboard.ListOptions{State: switchboard.TodoDone, Limit: n + 1})
	require.NoError(t, err)
	require.Len(t, list, n, "every todo done")
	rep := sequenced(t, d.sb, d.st)
	require.Greater(t, rep.Events, uint64(3*n), "create, claim and complete of each todo are in the log")
}

// sequenced waits until no audit event is pending (read from the raw
// store) and returns VerifyAudit's report of the whole log.
func sequenced(t *testing.T, sb *switchboard.Switchboard, st store.Store) switchboard.AuditReport {
	t.Helper()
	require.Eventually(t, func() bool {
		pending := false
		require.NoError(t, st.View(context.Background(), func(tx store.Tx) error {
			return tx.Scan("events_pending", nil, nil, func(_, _ []byte) bool { pending = true; return false })
		}))
		return !pending
	}, 60*time.Second, 5*time.Millisecond, "audit events stay pending")
	rep, err := sb.VerifyAudit(context.Background())
	require.NoError(t, err)
	return rep
}

// The process that sequences the audit log is killed in the middle of its
// work: another process takes the sequencer over once the lease runs out,
// and the log has every event of every committed change once, without a
// gap.
func TestMultiProcessSequencerTakeover(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Second)
	d.cfg.SequencerLease = 300 * time.Millisecond
	require.NoError(t, d.sb.Close())
	var err error
	d.sb, err = switchboard.New(d.st, &switchboard.Config{Issuers: []switchboard.Issuer{d.iss.Config()}, SequencerLease: d.cfg.SequencerLease})
	require.NoError(t, err)
	_, friend, _ := d.friend()
	ctx := context.Background()
	before := sequenced(t, d.sb, d.st)
	// The parent stops sequencing; the child takes over once the
	// parent's lease has run out, and floods.
	require.NoError(t, d.sb.Close())
	p := d.start()
	started := time.Now()
	p.send(command{Op: "flood", Cred: string(friend), Queue: "inbox", N: 1_000_000, Workers: 8})
	require.Eventually(t, func() bool {
		n := 0 // events in the log past the setup's, read from the raw store
		require.NoError(t, d.st.View(ctx, func(tx store.Tx) error {
			return tx.Scan("events", binary.BigEndian.AppendUint64(nil, before.Last+1), nil, func(_, _ []byte) bool { n++; return n < 500 })
		}))
		return n >= 500
	}, 60*time.Second, 5*time.Millisecond, "the child sequences its events")
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // some random point of its work
	p.kill()
	t.Logf("child killed %v after it started", time.Since(started))

	var after *switchboard.Switchboard
	after, err = switchboard.New(d.st, &switchboard.Config{Issuers: []switchboard.Issuer{d.iss.Config()}, SequencerLease: d.cfg.SequencerLease})
	require.NoError(t, err)
	defer after.Close()
	t0 := time.Now()
	rep := sequenced(t, after, d.st)
	t.Logf("sequenced %d events %v after the kill", rep.Events, time.Since(t0))
	evs, err := after.Events(ctx, 0, int(rep.Last)+1)
	require.NoError(t, err)
	created := map[string]int{}
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.Seq, "gapless")
		if e.Type == switchboard.EventTodoCreated && e.Queue == "bob-desk/inbox" {
			created[e.Todo]++
		}
	}
	require.Greater(t, len(created), 500)
	for id, n := range created {
		require.Equal(t, 1, n, "todo %s's creation logged %d times", id, n)
	}
	// Every todo committed has its event, and every logged creation its
	// todo: the queue holds exactly the todos the log created.
	w := d.workerCred()
	stored := map[string]bool{}
	for page := (&switchboard.ListOptions{Limit: 1000}); ; {
		todos, err := after.List(ctx, w, "inbox", page)
		require.NoError(t, err)
		for _, td := range todos {
			stored[td.ID] = true
		}
		if len(todos) < page.Limit {
			break
		}
		page.After = todos[len(todos)-1].ID
	}
	require.Len(t, stored, len(created))
	for id := range created {
		require.True(t, stored[id], "a logged creation whose todo is not there: %s", id)
	}
}

// Quotas and replay protection live in the database: a token used in one
// process is refused in another, and a requester bucket drained partly in
// each process refuses the request that goes over it.
func TestMultiProcessQuotasAndReplay(t *testing.T) {
	q := switchboard.Quotas{RequesterBurst: 2, RequesterRefill: time.Hour}
	d := newDeployment(t, q, time.Second)
	ctx := context.Background()
	scope := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	request := func(to, why string) switchboard.FriendRequest {
		_, pickup := switchboard.NewPickup()
		r := switchboard.FriendRequest{From: "alice-bot", To: to, Scope: scope, Why: why, Pickup: pickup}
		r.IDToken = d.iss.RequestToken("alice", r, time.Now())
		return r
	}
	p := d.start()

	first := request("bob-desk", "first")
	e, _, err := d.sb.Request(ctx, first)
	require.NoError(t, err)
	require.NoError(t, d.sb.Withdraw(ctx, d.alice, e.ID))
	a := p.call(command{Op: "request", Request: &first})
	require.Contains(t, a.Is, "provenance", "a token used in the parent, replayed in the child: %s", a.Err)
	require.Contains(t, a.Err, "already used")

	second := request("carol-desk", "second") // the bucket's second request, in the child
	a = p.call(command{Op: "request", Request: &second})
	require.Empty(t, a.Err)
	_, _, err = d.sb.Request(ctx, request("dave-desk", "third"))
	require.ErrorIs(t, err, switchboard.ErrRateLimited, "the bucket was drained across both processes")
}

// A blocking claim in one process wakes for work created in another at
// once, not at its next poll: the child polls once a minute, and the claim
// returns the todo the parent created long before that.
func TestMultiProcessClaimWakes(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Minute)
	d.cfg.AnnounceWaits = true
	_, friend, worker := d.friend()
	p := d.start()
	p.send(command{Op: "claim", Cred: string(worker), Queue: "inbox", Wait: true})
	require.Equal(t, "waiting", p.recv().ID, "the claim found the queue empty and blocks")
	td, _, err := d.sb.CreateFor(context.Background(), friend, "inbox", switchboard.NewTodo{Kind: "job"})
	require.NoError(t, err)
	done := make(chan answer, 1)
	go func() { done <- p.recv() }()
	select {
	case a := <-done:
		require.Empty(t, a.Err)
		require.Equal(t, td.ID, a.ID)
	case <-time.After(30 * time.Second): // half the poll interval: only a notification explains a return
		t.Fatal("the blocked claim in the other process did not wake")
	}
}

// Under contention, from two processes at once: a requester's bucket of 4
// admits exactly 4 of 16 concurrent requests, and one ID token sent 8
// times at once is accepted exactly once. (Run at a weaker isolation, the
// read-modify-write of the bucket and the replay record admit more.)
func TestMultiProcessQuotaAndReplayUnderContention(t *testing.T) {
	q := switchboard.Quotas{RequesterBurst: 4, RequesterRefill: time.Hour, TargetBurst: -1, PendingPerTarget: -1, LiveEdgesPerRequester: -1, Cooldown: -1}
	d := newDeployment(t, q, time.Second)
	ctx := context.Background()
	var targets []string
	for i := range 16 {
		id := fmt.Sprintf("t%02d-desk", i)
		_, err := d.sb.Publish(ctx, switchboard.Persona{ID: id, Owner: d.iss.Human(fmt.Sprintf("t%02d", i)), Discoverable: true,
			Card: switchboard.PersonaCard(switchboard.CardFields{Name: id, Description: "test persona", Version: "1.0", URL: "https://example.test/" + id})})
		require.NoError(t, err)
		targets = append(targets, id)
	}
	scope := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	request := func(from, human, to string) switchboard.FriendRequest {
		_, pickup := switchboard.NewPickup()
		r := switchboard.FriendRequest{From: from, To: to, Scope: scope, Why: "contention", Pickup: pickup}
		r.IDToken = d.iss.RequestToken(human, r, time.Now())
		return r
	}
	procs := []*proc{d.start(), d.start()}
	for i, p := range procs {
		var rs []switchboard.FriendRequest
		for _, to := range targets[8*i : 8*i+8] {
			rs = append(rs, request("alice-bot", "alice", to))
		}
		p.send(command{Op: "requests", Requests: rs})
	}
	ok := 0
	for _, p := range procs {
		a := p.recv()
		require.Empty(t, a.Err)
		ok += a.OK
	}
	require.Equal(t, 4, ok, "the bucket of 4 admitted %d of 16 concurrent requests", ok)

	// Replay: carol's one token, 4 times in each process at once.
	_, err := d.sb.Publish(ctx, switchboard.Persona{ID: "carol-bot", Owner: d.iss.Human("carol"), Discoverable: true,
		Card: switchboard.PersonaCard(switchboard.CardFields{Name: "carol-bot", Description: "test persona", Version: "1.0", URL: "https://example.test/carol-bot"})})
	require.NoError(t, err)
	same := request("carol-bot", "carol", "bob-desk")
	for _, p := range procs {
		p.send(command{Op: "requests", Requests: []switchboard.FriendRequest{same, same, same, same}})
	}
	ok = 0
	for _, p := range procs {
		a := p.recv()
		require.Empty(t, a.Err)
		ok += a.OK
	}
	require.Equal(t, 1, ok, "one ID token made %d edges", ok)
}

// Revocation wins under contention: while two processes create todos
// through a grant as fast as they can, the parent revokes it; afterwards no
// todo created through the grant is left queued — those that committed
// before the revocation were cancelled by it, and none committed after.
func TestMultiProcessRevocationUnderContention(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, time.Second)
	grant, friend, _ := d.friend()
	ctx := context.Background()
	procs := []*proc{d.start(), d.start()}
	for _, p := range procs {
		p.send(command{Op: "flood", Cred: string(friend), Queue: "inbox", N: 1_000_000, Workers: 8})
	}
	require.Eventually(t, func() bool {
		n := 0
		require.NoError(t, d.st.View(ctx, func(tx store.Tx) error {
			return tx.Scan("todos", nil, nil, func(_, _ []byte) bool { n++; return n < 200 })
		}))
		return n >= 200
	}, time.Minute, time.Millisecond, "the floods create nothing")
	require.NoError(t, d.sb.Revoke(ctx, d.bob, grant.ID))
	for i, p := range procs {
		a := p.recv()
		require.Contains(t, a.Is, "unauthenticated", "process %d's flood ended with %q", i, a.Err)
	}
	w := d.workerCred()
	queued, err := d.sb.List(ctx, w, "inbox", &switchboard.ListOptions{State: switchboard.TodoQueued, Limit: 1000})
	require.NoError(t, err)
	require.Empty(t, queued, "todos from the revoked grant still queued")
	cancelled, err := d.sb.List(ctx, w, "inbox", &switchboard.ListOptions{State: switchboard.TodoCancelled, Limit: 1000})
	require.NoError(t, err)
	require.NotEmpty(t, cancelled)
}

// Two Switchboards on one store, the lease short and the bursts of work
// apart by more than it: the sequencer changes hands back and forth, and
// each holder must build on the tree the other left — not on its own copy
// of the frontier from before (VerifyAudit compares every stored tree
// hash with the tree rebuilt from the events).
func TestSequencerChangesHandsBackAndForth(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, 20*time.Millisecond)
	_, friend, _ := d.friend()
	require.NoError(t, d.sb.Close())
	const lease = 100 * time.Millisecond
	var sbs []*switchboard.Switchboard
	for range 2 {
		s, err := switchboard.New(d.st, &switchboard.Config{Issuers: []switchboard.Issuer{d.iss.Config()}, SequencerLease: lease, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		sbs = append(sbs, s)
	}
	ctx := context.Background()
	created := map[string]bool{}
	for round := range 8 {
		s := sbs[round%2]
		for i := range 20 {
			td, _, err := s.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "k", DedupKey: fmt.Sprintf("%d-%d", round, i)})
			require.NoError(t, err)
			created[td.ID] = true
		}
		sequenced(t, s, d.st)
		time.Sleep(lease + lease/2) // the holder's lease runs out
	}
	rep := sequenced(t, sbs[0], d.st)
	evs, err := sbs[1].Events(ctx, 0, int(rep.Last)+1)
	require.NoError(t, err)
	logged := map[string]int{}
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.Seq, "gapless")
		if e.Type == switchboard.EventTodoCreated && e.Queue == "bob-desk/inbox" {
			logged[e.Todo]++
		}
	}
	require.Len(t, logged, len(created))
	for id := range created {
		require.Equal(t, 1, logged[id], "todo %s's creation logged once", id)
	}
}

// Reap purges old events while the sequencer adds new ones, from a second
// Switchboard on the same store (whichever of the two sequences, its
// passes race the purges): the purge's move of the log's start and the
// sequencer's of its end both land (neither overwrites the other's), and
// the log verifies.
func TestPurgeWhileSequencing(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, 20*time.Millisecond)
	_, friend, _ := d.friend()
	reaper, err := switchboard.New(d.st, &switchboard.Config{Issuers: []switchboard.Issuer{d.iss.Config()}, EventRetention: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reaper.Close() })
	ctx := context.Background()
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop) && errs[w] == nil; i++ {
				_, _, errs[w] = d.sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "k", DedupKey: fmt.Sprintf("%d-%d", w, i)})
			}
		})
	}
	purged := 0
	for time.Now().Before(stop) && err == nil {
		var st switchboard.ReapStats
		st, err = reaper.Reap(ctx)
		purged += st.EventsPurged
	}
	wg.Wait()
	require.NoError(t, err, "reap")
	require.NoError(t, errors.Join(errs...), "create")
	rep := sequenced(t, d.sb, d.st)
	st, err := reaper.Reap(ctx)
	require.NoError(t, err, "the log's start is where the purges left it")
	t.Logf("purged %d events meanwhile, %d after; log ends at %d", purged, st.EventsPurged, rep.Last)
	require.Positive(t, purged)
	_, err = reaper.VerifyAudit(ctx)
	require.NoError(t, err)
}

// withoutLockAhead is the PostgreSQL store as a store would be that has row
// locks but not store.AheadLocker: its locked transactions offer what
// switchboard uses (Locker, Appender, Prefetcher, Notifier) and no more.
type withoutLockAhead struct{ *postgres.Store }

func (s withoutLockAhead) UpdateLocked(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.UpdateLocked(ctx, func(tx store.Tx) error { return fn(plainLocker{tx}) })
}

type plainLocker struct{ store.Tx }

func (t plainLocker) ScanLocked(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	return t.Tx.(store.Locker).ScanLocked(table, start, end, limit, fn)
}
func (t plainLocker) GetLocked(table string, key []byte) ([]byte, error) {
	return t.Tx.(store.Locker).GetLocked(table, key)
}
func (t plainLocker) Append(table string, value []byte) error {
	return t.Tx.(store.Appender).Append(table, value)
}
func (t plainLocker) Sequence() (uint64, error) { return t.Tx.(store.Appender).Sequence() }
func (t plainLocker) Prefetch(table string, keys [][]byte) error {
	return t.Tx.(store.Prefetcher).Prefetch(table, keys)
}
func (t plainLocker) Notify(key string) { t.Tx.(store.Notifier).Notify(key) }

// On a store whose locked transactions cannot lock ahead, the sequencer
// locks the lease before it reads the pending events (a round trip of its
// own): two Switchboards sequencing in turn still log every event once,
// without a gap.
func TestSequencerWithoutLockAhead(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, 20*time.Millisecond)
	require.Empty(t, sequenceThrough(t, d, withoutLockAhead{d.st}).all())
}

// sequenceThrough has two Switchboards on st (d's store, wrapped) create
// 200 todos from four goroutines and checks that the log has each
// creation once, without a gap. It returns the warnings they logged.
func sequenceThrough(t *testing.T, d *deployment, st store.Store) *warnings {
	t.Helper()
	_, friend, _ := d.friend()
	require.NoError(t, d.sb.Close())
	var sbs []*switchboard.Switchboard
	warned := &warnings{}
	for range 2 {
		s, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{d.iss.Config()}, SequencerLease: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond,
			Logger: slog.New(warned)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		sbs = append(sbs, s)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() {
			for i := range 50 {
				if _, _, errs[w] = sbs[w%2].CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "k", DedupKey: fmt.Sprintf("%d-%d", w, i)}); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	rep := sequenced(t, sbs[0], d.st)
	evs, err := sbs[1].Events(ctx, 0, int(rep.Last)+1)
	require.NoError(t, err)
	created := 0
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.Seq, "gapless")
		if e.Type == switchboard.EventTodoCreated && e.Queue == "bob-desk/inbox" {
			created++
		}
	}
	require.Equal(t, 200, created, "every creation logged once")
	return warned
}

// warnings is a slog.Handler that keeps the messages of warnings and
// errors.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// With SerializableClaims the store's locked transactions are serializable
// snapshots whose locked reads wait for no commit, so a sequencing pass
// begun while the one before commits would read the log as it was: the
// sequencer notices once and begins no pass early again — no pass fails.
func TestSequencerWithSerializableClaims(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, 20*time.Millisecond)
	st := open(t, d.cfg.DSN, postgres.Options{Table: d.cfg.Table, SerializableClaims: true})
	t.Cleanup(func() { _ = st.Close() })
	warned := sequenceThrough(t, d, st)
	require.Empty(t, warned.all(), "no sequencing pass failed")
}

// A sequencing pass begins the next one just before it commits; the next
// one's locks then wait for that commit. When the first pass's transaction
// runs again instead (a store may run a transaction's function more than
// once), the next one gives up rather than hold locks the rerun needs:
// here every locked transaction runs twice, the first run rolled back.
func TestSequencerPassRunsAgain(t *testing.T) {
	d := newDeployment(t, switchboard.Quotas{}, 20*time.Millisecond)
	require.Empty(t, sequenceThrough(t, d, rerunning{d.st}).all())
}

// rerunning is the PostgreSQL store with every row-locked transaction's
// function run twice: the first run is rolled back, the second commits.
type rerunning struct{ *postgres.Store }

var errRerun = errors.New("run again")

func (s rerunning) UpdateLocked(ctx context.Context, fn func(store.Tx) error) error {
	err := s.Store.UpdateLocked(ctx, func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errRerun
	})
	if !errors.Is(err, errRerun) {
		return err
	}
	return s.Store.UpdateLocked(ctx, fn)
}
