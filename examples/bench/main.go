// Command bench measures switchboard's hot paths on this machine and prints
// one table: each figure beside its baseline, measured in the same run, on
// file stores with fsync on (except the NoSync ceiling).
//
//	go run ./examples/bench                 # the full table (a few minutes)
//	go run ./examples/bench -big=100000 -steady=100000 -d=1s   # quicker
//
// Baselines: raw bbolt with one Put per Update at 1 writer, raw bbolt
// DB.Batch at 16 writers, raw bbolt with NoSync (the CPU ceiling of a
// commit), and go-oidc's own IDTokenVerifier.Verify of the same tokens.
// Each throughput figure and the token figures run in alternating rounds
// with their baseline (see paired), so drift in the machine's fsync latency
// or load hits both alike; the ratio is the median of the rounds' ratios.
package main

import (
	"context"
	"crypto"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	bbolt "go.etcd.io/bbolt"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var (
	dur     = flag.Duration("d", 2*time.Second, "how long each throughput figure runs")
	big     = flag.Int("big", 1_000_000, "ready todos for the large-queue claim figure")
	steady  = flag.Int("steady", 1_000_000, "todos created and completed for the steady-state size figure")
	cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	only    = flag.String("only", "", "run only the rows whose group is this (raw, create, lifecycle, claim, token, size, proof)")
)

var ctx = context.Background()

type row struct {
	name, value, base, ratio, target string
}

var rows []row

func add(name string, v float64, unit string, baseName string, base float64, target string) {
	r := row{name: name, value: fmt.Sprintf("%.0f %s", v, unit), target: target}
	if baseName != "" {
		r.base = fmt.Sprintf("%s %.0f %s", baseName, base, unit)
		r.ratio = fmt.Sprintf("%.2f×", v/base)
	}
	addRow(r)
}

// addPaired adds a row measured by paired: the ratio is the median of the
// per-round ratios.
func addPaired(name string, v float64, unit string, baseName string, base, ratio float64, target string) {
	addRow(row{name: name, value: fmt.Sprintf("%.0f %s", v, unit), target: target,
		base: fmt.Sprintf("%s %.0f %s", baseName, base, unit), ratio: fmt.Sprintf("%.2f×", ratio)})
}

func addRow(r row) {
	rows = append(rows, r)
	fmt.Fprintf(os.Stderr, "  %-46s %14s  %s\n", r.name, r.value, r.ratio)
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "switchboard-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b := &bench{dir: dir}
	groups := []struct {
		name string
		fn   func()
	}{
		{"raw", b.raw}, {"create", b.create}, {"lifecycle", b.lifecycle},
		{"webhook", b.webhook}, {"claim", b.claim}, {"token", b.token}, {"size", b.size}, {"proof", b.proof},
	}
	for _, g := range groups {
		if *only != "" && *only != g.name {
			continue
		}
		g.fn()
	}
	fmt.Printf("| %s | %s | %s | %s | %s |\n", "figure", "value", "baseline (same run)", "ratio", "target")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %s | %s |\n", r.name, r.value, r.base, r.ratio, r.target)
	}
}

type bench struct {
	dir string
	n   int
}

func (b *bench) path() string {
	b.n++
	return filepath.Join(b.dir, fmt.Sprintf("db%d", b.n))
}

// rate runs fn from workers goroutines for d and returns calls per second.
func rate(d time.Duration, workers int, fn func(w int) int) float64 {
	var n atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				n.Add(int64(fn(w)))
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

// rounds is how many alternating rounds paired runs.
const rounds = 6

// paired measures a figure and its baseline in alternating rounds of
// *dur/rounds each, so that drift in this shared machine's fsync latency
// (it moves by ±30% within a minute) hits both alike. It returns the
// medians of each and the median of the per-round ratios.
func paired(base, fig func(d time.Duration) float64) (b, f, ratio float64) {
	d := *dur / rounds
	var bs, fs, rs []float64
	for range rounds {
		x, y := base(d), fig(d)
		bs, fs, rs = append(bs, x), append(fs, y), append(rs, y/x)
	}
	return median(bs), median(fs), median(rs)
}

// median returns the middle of xs (the mean of the two middle ones).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func value256() []byte { return make([]byte, 256) }

// rawDB is a raw bbolt file with the baselines' write: one 256-byte value
// under the next sequential key.
type rawDB struct {
	db  *bbolt.DB
	seq atomic.Uint64
}

func (b *bench) openRaw(noSync bool) *rawDB {
	db, err := bbolt.Open(b.path(), 0o600, &bbolt.Options{NoSync: noSync})
	must(err)
	return &rawDB{db: db}
}

func (r *rawDB) put(tx *bbolt.Tx) error {
	bk, err := tx.CreateBucketIfNotExists([]byte("b"))
	if err != nil {
		return err
	}
	return bk.Put(binary.BigEndian.AppendUint64(nil, r.seq.Add(1)), value256())
}

// put1 is the one-Put-per-Update baseline, in commits per second over d.
func (r *rawDB) put1(d time.Duration) float64 {
	return rate(d, 1, func(int) int { must(r.db.Update(r.put)); return 1 })
}

// batch16 is the DB.Batch baseline at 16 writers, in puts per second.
func (r *rawDB) batch16(d time.Duration) float64 {
	return rate(d, 16, func(int) int { must(r.db.Batch(r.put)); return 1 })
}

// raw measures the bbolt baselines on their own.
func (b *bench) raw() {
	r := b.openRaw(false)
	add("raw bbolt: one Put per Update, 1 writer", r.put1(*dur), "commits/s", "", 0, "baseline")
	add("raw bbolt: DB.Batch, 16 writers", r.batch16(*dur), "puts/s", "", 0, "baseline")
	must(r.db.Close())
	r = b.openRaw(true)
	add("raw bbolt: NoSync, 1 writer (CPU ceiling)", r.put1(*dur), "commits/s", "", 0, "ceiling")
	must(r.db.Close())
}

// setup is a Switchboard on st with one friend grant (alice-bot → bob-desk
// inbox) and bob's own worker grant.
type setup struct {
	sb           *switchboard.Switchboard
	iss          *switchboardtest.Issuer
	friend, self switchboard.Credential
	clock        *clock
}

type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time                         { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *clock) advance(d time.Duration)                { c.off.Add(int64(d)) }

var off = switchboard.Quotas{LiveEdgesPerRequester: -1, RequesterBurst: -1, TargetBurst: -1, PendingPerTarget: -1, Cooldown: -1}

func newSetup(st store.Store, cfg switchboard.Config) *setup {
	iss, err := switchboardtest.NewIssuer("bench")
	must(err)
	clk := &clock{}
	cfg.Issuers = []switchboard.Issuer{iss.Config()}
	cfg.Clock = clk
	cfg.Quotas = off
	sb, err := switchboard.New(st, &cfg)
	must(err)
	s := &setup{sb: sb, iss: iss, clock: clk}
	alice, bob := iss.Human("alice"), iss.Human("bob")
	for _, p := range []struct {
		id    string
		owner switchboard.Human
	}{{"alice-bot", alice}, {"bob-desk", bob}} {
		_, err := sb.Publish(ctx, switchboard.Persona{ID: p.id, Owner: p.owner, Discoverable: true,
			Card: switchboard.PersonaCard(switchboard.CardFields{Name: p.id, Description: "bench agent", Version: "1.0.0", URL: "https://hub.example/agents/" + p.id})})
		must(err)
	}
	scope := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	if cfg.Webhooks != nil {
		scope[0].Verbs = append(scope[0].Verbs, switchboard.VerbWebhook)
	}
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: scope, Why: "bench", Pickup: pickup}
	req.IDToken = iss.RequestToken("alice", req, clk.Now())
	e, _, err := sb.Request(ctx, req)
	must(err)
	_, err = sb.Approve(ctx, bob, e.ID, nil)
	must(err)
	_, s.friend, err = sb.Collect(ctx, e.ID, secret)
	must(err)
	all := []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbHeartbeat, switchboard.VerbComplete,
		switchboard.VerbFail, switchboard.VerbRelease, switchboard.VerbList, switchboard.VerbGet, switchboard.VerbCreateFor}
	_, s.self, err = sb.Vend(ctx, bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{{Queue: "inbox", Verbs: all}}})
	must(err)
	return s
}

func (b *bench) openBolt(opts *bolt.Options) *bolt.Store {
	st, err := bolt.Open(b.path(), opts)
	must(err)
	return st
}

func (s *setup) create(n switchboard.NewTodo) {
	if n.Kind == "" {
		n.Kind = "k"
	}
	_, _, err := s.sb.CreateFor(ctx, s.friend, "inbox", n)
	must(err)
}

// create measures CreateFor against the raw baselines, paired.
func (b *bench) create() {
	r := b.openRaw(false)
	defer func() { must(r.db.Close()) }()
	st := b.openBolt(nil)
	s := newSetup(st, switchboard.Config{})
	create := func(workers int) func(time.Duration) float64 {
		return func(d time.Duration) float64 {
			return rate(d, workers, func(int) int { s.create(switchboard.NewTodo{Payload: value256()}); return 1 })
		}
	}
	base, v, ratio := paired(r.put1, create(1))
	addPaired("CreateFor, 1 caller", v, "todos/s", "one-Put Update", base, ratio, "≥ 2.5×")
	base, v, ratio = paired(r.batch16, create(16))
	addPaired("CreateFor, 16 callers", v, "todos/s", "DB.Batch@16", base, ratio, "≥ 8×")
	must(st.Close())
}

// lifecycle measures todos created, claimed and completed per second,
// paired with the raw baselines.
func (b *bench) lifecycle() {
	r := b.openRaw(false)
	defer func() { must(r.db.Close()) }()
	st := b.openBolt(nil)
	s := newSetup(st, switchboard.Config{})
	// 16 workers through Work (CompleteAndClaim: one commit per delivered
	// todo), fed by 16 creators; counted: completions per second.
	var allocs, todos uint64
	base, v, ratio := paired(r.batch16, func(d time.Duration) float64 {
		before := mallocs()
		rate := s.work(d, 16, 16)
		allocs += mallocs() - before
		todos += uint64(rate * d.Seconds())
		return rate
	})
	addPaired("lifecycle, 16 workers (Work) + 16 creators", v, "todos/s", "DB.Batch@16", base, ratio, "≥ 6×")
	// Every allocation of the process while the lifecycle ran — the
	// creators' CreateFor, the claims, the completions, the store's
	// commits and the checkpointer — per todo completed.
	add("allocations per lifecycle todo", float64(allocs)/float64(max(todos, 1)), "allocs", "", 0, "≤ the build before")
	must(st.Close())
	// One worker draining a queue filled beforehand (more than it can
	// drain in the run).
	st, s = b.fill(40_000, func(int) switchboard.NewTodo { return switchboard.NewTodo{} })
	base, v, ratio = paired(r.put1, func(d time.Duration) float64 { return s.work(d, 1, 0) })
	addPaired("drain, 1 worker (Work)", v, "todos/s", "one-Put Update", base, ratio, "≥ 0.45×")
	must(st.Close())
}

// webhook measures the lifecycle with a webhook registered for every
// todo the creators make — each completion queues a delivery in its
// transaction, and Run's delivery loop POSTs it to a local receiver
// meanwhile — paired with the same lifecycle without webhooks.
func (b *bench) webhook() {
	var delivered atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	plainSt := b.openBolt(nil)
	plain := newSetup(plainSt, switchboard.Config{})
	hookSt := b.openBolt(nil)
	hooked := newSetup(hookSt, switchboard.Config{Webhooks: &switchboard.WebhookConfig{
		Key: make([]byte, 32), Origins: []string{rcv.URL}, AllowHTTP: true, AllowPrivate: true}})
	_, _, err := hooked.sb.RegisterWebhook(ctx, hooked.friend, rcv.URL+"/hook")
	must(err)
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = hooked.sb.Run(rctx) }()
	base, v, ratio := paired(func(d time.Duration) float64 { return plain.work(d, 16, 16) }, func(d time.Duration) float64 { return hooked.work(d, 16, 16) })
	stop()
	<-ran
	addPaired(fmt.Sprintf("lifecycle with a webhook on every todo (%d delivered meanwhile)", delivered.Load()), v, "todos/s", "lifecycle without", base, ratio, "≥ 0.7×")
	must(plainSt.Close())
	must(hookSt.Close())
	b.resultLatency()
}

// resultLatency measures how soon the agent that created a todo can know
// its result, from the return of the worker's Complete, one todo at a
// time on an idle bolt store: a webhook received and checked
// (ReceiveWebhook), and a Subscribe of the queue's events (the host's
// view). Polling with Get is the caller's interval, not measured.
func (b *bench) resultLatency() {
	const n = 300
	arrived := make(chan string, n)
	var secret atomic.Value
	secret.Store("")
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := switchboard.ReceiveWebhook(r, secret.Load().(string), time.Now())
		if err != nil {
			http.Error(w, "bad delivery", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		arrived <- d.Todo.ID
	}))
	defer rcv.Close()
	st := b.openBolt(nil)
	defer func() { must(st.Close()) }()
	s := newSetup(st, switchboard.Config{Webhooks: &switchboard.WebhookConfig{
		Key: make([]byte, 32), Origins: []string{rcv.URL}, AllowHTTP: true, AllowPrivate: true}})
	defer s.sb.Close()
	_, sec, err := s.sb.RegisterWebhook(ctx, s.friend, rcv.URL+"/hook")
	must(err)
	secret.Store(sec)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan struct{})
	go func() { defer close(ran); _ = s.sb.Run(rctx) }()
	defer func() { stop(); <-ran }()
	sub := s.sb.Subscribe(rctx, 0, &switchboard.EventFilter{Queue: switchboard.QueueAddress("bob-desk", "inbox"), Types: []switchboard.EventType{switchboard.EventTodoCompleted}})
	defer sub.Close()
	var hook, event []float64
	for range n {
		s.create(switchboard.NewTodo{})
		td, l, err := s.sb.Claim(ctx, s.self, "inbox", nil)
		must(err)
		must(s.sb.Complete(ctx, s.self, l, nil))
		t0 := time.Now()
		gotHook, gotEvent := false, false
		for !gotHook || !gotEvent {
			select {
			case id := <-arrived:
				if id == td.ID {
					hook = append(hook, float64(time.Since(t0).Microseconds()))
					gotHook = true
				}
			case e, ok := <-sub.C:
				if !ok {
					must(sub.Err())
				}
				if e.Todo == td.ID {
					event = append(event, float64(time.Since(t0).Microseconds()))
					gotEvent = true
				}
			case <-time.After(10 * time.Second):
				log.Fatalf("result of %s: no webhook or event in 10 s", td.ID)
			}
		}
	}
	add(fmt.Sprintf("Complete → webhook received and checked, p50 (p99 %.0f µs; %d todos, one at a time)", percentile(hook, 99), n), percentile(hook, 50), "µs", "", 0, "")
	add(fmt.Sprintf("Complete → Subscribe event, p50 (p99 %.0f µs)", percentile(event, 99)), percentile(event, 50), "µs", "", 0, "")
}

// work runs Work with the given concurrency for d while creators
// goroutines create, and returns completions per second.
func (s *setup) work(d time.Duration, concurrency, creators int) float64 {
	wctx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var done atomic.Int64
	var wg sync.WaitGroup
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				s.create(switchboard.NewTodo{Payload: value256()})
			}
		}()
	}
	start := time.Now()
	err := s.sb.Work(wctx, s.self, "inbox", func(context.Context, switchboard.Todo) ([]byte, error) {
		done.Add(1)
		return nil, nil
	}, &switchboard.WorkOptions{Concurrency: concurrency})
	if !errors.Is(err, context.DeadlineExceeded) {
		must(err)
	}
	el := time.Since(start)
	wg.Wait()
	return float64(done.Load()) / el.Seconds()
}

// mallocs is the process's allocation count so far.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// claimCost returns the latencies of n Claims in µs over a queue s keeps
// at its size: each claim is completed and replaced outside the timing.
func claimCost(s *setup, n int) []float64 {
	out := make([]float64, 0, n)
	for range n {
		t0 := time.Now()
		_, l, err := s.sb.Claim(ctx, s.self, "inbox", nil)
		out = append(out, float64(time.Since(t0).Nanoseconds())/1e3)
		must(err)
		must(s.sb.Complete(ctx, s.self, l, nil))
		s.create(switchboard.NewTodo{})
	}
	return out
}

// percentile returns the p-th percentile of xs (nearest rank).
func percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// fill creates n todos fast: 32 callers on a NoSync store, reopened with
// fsync for the measurement.
func (b *bench) fill(n int, todo func(i int) switchboard.NewTodo) (*bolt.Store, *setup) {
	path := b.path()
	st, err := bolt.Open(path, &bolt.Options{NoSync: true})
	must(err)
	s := newSetup(st, switchboard.Config{})
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				s.create(todo(i))
			}
		}()
	}
	wg.Wait()
	must(st.Close())
	st, err = bolt.Open(path, nil)
	must(err)
	s.sb, err = switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{s.iss.Config()}, Clock: s.clock, Quotas: off})
	must(err)
	return st, s
}

// claim measures Claim's cost against what is queued: the three queues are
// filled first, then sampled in alternating rounds (the order rotating from
// round to round), so drift in fsync latency hits them alike; reported are
// the median of each queue's round means and the median of the rounds'
// ratios.
func (b *bench) claim() {
	const rounds, per = 10, 300
	ready := func(int) switchboard.NewTodo { return switchboard.NewTodo{} }
	far := time.Now().Add(24 * time.Hour)
	type queue struct {
		st *bolt.Store
		s  *setup
	}
	var qs []queue
	for _, f := range []struct {
		n    int
		todo func(int) switchboard.NewTodo
	}{
		{1000, ready},
		{50_000 + 1000, func(i int) switchboard.NewTodo {
			if i <= 50_000 {
				return switchboard.NewTodo{Priority: 10, NotBefore: far} // ahead of the ready ones in claim order
			}
			return switchboard.NewTodo{}
		}},
		{*big, ready},
	} {
		st, s := b.fill(f.n, f.todo)
		qs = append(qs, queue{st, s})
	}
	times := make([][]float64, len(qs))  // each round's mean
	all := make([][]float64, len(qs))    // every claim
	ratios := make([][]float64, len(qs)) // each round's mean over the 1,000's
	for r := range rounds {
		got := make([]float64, len(qs))
		for j := range qs {
			k := (j + r) % len(qs)
			lat := claimCost(qs[k].s, per)
			all[k] = append(all[k], lat...)
			got[k] = mean(lat)
			times[k] = append(times[k], got[k])
		}
		for k := range qs {
			ratios[k] = append(ratios[k], got[k]/got[0])
		}
	}
	for _, q := range qs {
		must(q.st.Close())
	}
	base := median(times[0])
	add("Claim, 1,000 ready", base, "µs", "", 0, "")
	addPaired("Claim, 50,000 delayed ahead + 1,000 ready", median(times[1]), "µs", "1,000 ready", base, median(ratios[1]), "≤ 1.2×")
	addPaired(fmt.Sprintf("Claim, %d ready", *big), median(times[2]), "µs", "1,000 ready", base, median(ratios[2]), "≤ 1.2×")
	p99 := percentile(all[0], 99)
	add("Claim p99, 1,000 ready", p99, "µs", "", 0, "")
	add(fmt.Sprintf("Claim p99, %d ready", *big), percentile(all[2], 99), "µs", "1,000 ready p99", p99, "≤ 1.2×")
}

func mean(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

// proof measures the audit log's proofs over a log of at least -big
// events (one per todo created): producing an inclusion proof for a random
// event against a signed checkpoint, verifying it with the public key
// alone, and VerifyAudit's rebuild of the whole tree.
func (b *bench) proof() {
	st, s := b.fill(*big, func(int) switchboard.NewTodo { return switchboard.NewTodo{} })
	defer func() { must(st.Close()) }()
	skey, vkey, err := switchboard.NewLogKey("bench.example/log")
	must(err)
	sb, err := switchboard.New(st, &switchboard.Config{LogKey: skey, Clock: s.clock})
	must(err)
	defer sb.Close()
	signed, err := sb.Checkpoint(ctx)
	must(err)
	cp, err := switchboard.OpenCheckpoint(signed.Note, vkey)
	must(err)
	const n = 2000
	proofs := make([]switchboard.InclusionProof, n)
	t0 := time.Now()
	for i := range proofs {
		seq := 1 + uint64(i)*(cp.Size-1)/(n-1) // spread over the whole log
		proofs[i], err = sb.ProveEvent(ctx, seq, cp.Size)
		must(err)
	}
	prove := time.Since(t0)
	t0 = time.Now()
	for _, p := range proofs {
		_, err := switchboard.VerifyInclusion(cp, p)
		must(err)
	}
	verify := time.Since(t0)
	add(fmt.Sprintf("ProveEvent, log of %d events", cp.Size), float64(prove.Microseconds())/n, "µs", "", 0, "≤ 1,000 µs")
	add("VerifyInclusion (public key only)", float64(verify.Microseconds())/n, "µs", "", 0, "≤ 100 µs")
	t0 = time.Now()
	rep, err := sb.VerifyAudit(ctx, cp)
	must(err)
	add(fmt.Sprintf("VerifyAudit, %d events", rep.Events), float64(rep.Events)/time.Since(t0).Seconds(), "events/s", "", 0, "")
}

// token measures Request and VerifyHuman against go-oidc's Verify of the
// same tokens, on the memory store.
func (b *bench) token() {
	const n = 2000
	s := newSetup(memory.New(), switchboard.Config{})
	key, _ := s.iss.Key()
	v := oidc.NewVerifier(s.iss.URL(), &oidc.StaticKeySet{PublicKeys: []crypto.PublicKey{key.Public()}}, &oidc.Config{ClientID: s.iss.ClientID})
	scope := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	reqs := make([]switchboard.FriendRequest, n)
	logins := make([]string, n)
	for i := range reqs {
		from, to := fmt.Sprintf("u%d-bot", i), fmt.Sprintf("t%d", i)
		for _, p := range []struct{ id, owner string }{{from, fmt.Sprintf("u%d", i)}, {to, fmt.Sprintf("owner%d", i)}} {
			_, err := s.sb.Publish(ctx, switchboard.Persona{ID: p.id, Owner: s.iss.Human(p.owner), Discoverable: true,
				Card: switchboard.PersonaCard(switchboard.CardFields{Name: p.id, Description: "bench agent", Version: "1.0.0", URL: "https://hub.example/agents/" + p.id})})
			must(err)
		}
		_, pickup := switchboard.NewPickup()
		reqs[i] = switchboard.FriendRequest{From: from, To: to, Scope: scope, Why: "bench", Pickup: pickup}
		reqs[i].IDToken = s.iss.RequestToken(fmt.Sprintf("u%d", i), reqs[i], s.clock.Now())
		logins[i] = s.iss.Token(switchboardtest.Login{Subject: fmt.Sprintf("h%d", i), Name: "H", Email: "h@example.com", Nonce: "nonce", At: s.clock.Now()})
	}
	// Interleaved: each round times the three on its own slice of tokens,
	// one after the other — in an order that rotates from round to round,
	// so none always runs right after another's garbage — so a burst of
	// load on this shared machine hits the figure and its baseline alike.
	// Reported: the median time of each, and the median of the rounds'
	// ratios.
	const rounds = 20
	per := func(lo, hi int, f func(i int)) float64 {
		t0 := time.Now()
		for i := lo; i < hi; i++ {
			f(i)
		}
		return float64(time.Since(t0).Microseconds()) / float64(hi-lo)
	}
	fns := []func(i int){
		func(i int) { _, err := v.Verify(ctx, reqs[i].IDToken); must(err) },
		func(i int) { _, err := s.sb.VerifyHuman(ctx, logins[i], "nonce"); must(err) },
		func(i int) { _, _, err := s.sb.Request(ctx, reqs[i]); must(err) },
	}
	times := make([][]float64, len(fns))
	var vhr, rqr []float64
	runtime.GC() // not the garbage of the figures before
	for r := range rounds {
		lo, hi := r*n/rounds, (r+1)*n/rounds
		got := make([]float64, len(fns))
		for j := range fns {
			k := (j + r) % len(fns)
			got[k] = per(lo, hi, fns[k])
			times[k] = append(times[k], got[k])
		}
		vhr, rqr = append(vhr, got[1]/got[0]), append(rqr, got[2]/got[0])
	}
	base := median(times[0])
	add("go-oidc IDTokenVerifier.Verify", base, "µs", "", 0, "baseline")
	addPaired("VerifyHuman", median(times[1]), "µs", "go-oidc Verify", base, median(vhr), "≤ 1.2×")
	addPaired("Request (memory store)", median(times[2]), "µs", "go-oidc Verify", base, median(rqr), "≤ 1.5×")
}

// size runs *steady todos through create, claim and complete with at most
// a few live, the injected clock moving 10 minutes per todo (so the 7-day
// todo and 30-day event retentions keep elapsing) and Reap running
// alongside, and reports the file size at the end.
func (b *bench) size() {
	path := b.path()
	st, err := bolt.Open(path, &bolt.Options{NoSync: true})
	must(err)
	s := newSetup(st, switchboard.Config{MaxLease: 48 * time.Hour})
	var created atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for created.Add(1) <= int64(*steady) {
				s.create(switchboard.NewTodo{Payload: value256()})
				_, l, err := s.sb.Claim(ctx, s.self, "inbox", &switchboard.ClaimOptions{Lease: 47 * time.Hour})
				must(err)
				must(s.sb.Complete(ctx, s.self, l, nil))
				s.clock.advance(10 * time.Minute)
			}
		}()
	}
	reaped := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(reaped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := s.sb.Reap(ctx)
			must(err)
			if r.TodosPurged == 0 && r.EventsPurged == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-reaped
	s.clock.advance(31 * 24 * time.Hour) // every retention has elapsed
	for {
		r, err := s.sb.Reap(ctx)
		must(err)
		if r.TodosPurged == 0 && r.EventsPurged == 0 {
			break
		}
	}
	must(st.Close())
	fi, err := os.Stat(path)
	must(err)
	add(fmt.Sprintf("file after %d todos (≤ 4 live), retention elapsed", *steady), float64(fi.Size())/(1<<20), "MiB", "", 0, "≤ 64 MiB")
}
