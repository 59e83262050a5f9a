// Command bench measures the PostgreSQL store with several processes on
// one database, beside the bolt store's figure from the same run:
//
//	eval "$(.ci/postgres start)"          # or set SWITCHBOARD_POSTGRES_DSN
//	go run ./store/postgres/bench          # -d per scenario, -procs, -workers
//
// Scenarios (each on a fresh table; workers are split evenly over -procs
// child processes, which are this program re-executed):
//
//   - claim, naive: each Claim is its own SERIALIZABLE transaction, run
//     concurrently (Options.ConcurrentWriters and CommitEachUpdate) — what a
//     plain key-value backend does;
//   - claim: the store's defaults (writer lock, group commit);
//   - claim+complete, naive and default: the same, completing each todo;
//   - lifecycle: Work with the workers, fed by as many creators, counting
//     completions; and the same in one process on the bolt store.
//
// Retried is the share of write transactions rolled back by a
// serialization failure or deadlock and run again.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var (
	dur     = flag.Duration("d", 10*time.Second, "duration of each scenario")
	procs   = flag.Int("procs", 2, "processes sharing the database")
	workers = flag.Int("workers", 16, "workers in all (split over the processes)")
	dsnFlag = flag.String("dsn", os.Getenv("SWITCHBOARD_POSTGRES_DSN"), "PostgreSQL DSN (default $SWITCHBOARD_POSTGRES_DSN)")
)

const childEnv = "SWITCHBOARD_BENCH_CHILD"

var ctx = context.Background()

// job is what a child runs; result what it reports.
type job struct {
	DSN      string           `json:"dsn"`
	Options  postgres.Options `json:"options"`
	Scenario string           `json:"scenario"` // claim | lifecycle
	Workers  int              `json:"workers"`
	Friend   string           `json:"friend"`
	Worker   string           `json:"worker"`
	Start    time.Time        `json:"start"`
	Duration time.Duration    `json:"duration"`
}

type result struct {
	Done    int64         `json:"done"`
	Elapsed time.Duration `json:"elapsed"`
	Stats   postgres.Stats
}

func main() {
	if raw := os.Getenv(childEnv); raw != "" {
		var j job
		must(json.Unmarshal([]byte(raw), &j))
		must(json.NewEncoder(os.Stdout).Encode(runChild(j)))
		return
	}
	flag.Parse()
	if *dsnFlag == "" {
		log.Fatal("set SWITCHBOARD_POSTGRES_DSN or -dsn (.ci/postgres start prints one)")
	}
	fmt.Printf("%d workers in %d processes, %s per scenario, PostgreSQL at %s\n\n", *workers, *procs, *dur, *dsnFlag)
	fmt.Printf("%-44s %12s %28s\n", "scenario", "per second", "retried")
	naiveOpts := postgres.Options{ConcurrentWriters: true, CommitEachUpdate: true, MaxRetries: 1 << 20}
	naive := claim(naiveOpts, "claim", "claim, naive SERIALIZABLE", 0)
	claim(postgres.Options{}, "claim", "claim, switchboard (writer lock)", naive)
	naive = claim(naiveOpts, "claim+complete", "claim+complete, naive SERIALIZABLE", 0)
	claim(postgres.Options{}, "claim+complete", "claim+complete, switchboard", naive)
	lifecycle()
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func row(name string, v float64, retried string, base float64) {
	vs := ""
	if base > 0 {
		vs = fmt.Sprintf("  %.2f× naive", v/base)
	}
	fmt.Printf("%-44s %12.0f %28s%s\n", name, v, retried, vs)
}

// deployment is a fresh table with a friend grant and a worker credential
// on bob-desk/inbox.
type deployment struct {
	st             *postgres.Store
	sb             *switchboard.Switchboard
	friend, worker switchboard.Credential
	table          string
}

var tables int

func newDeployment(opts postgres.Options) *deployment {
	tables++
	opts.Table = fmt.Sprintf("bench_%d_%d", os.Getpid(), tables)
	st, err := postgres.Open(ctx, *dsnFlag, &opts)
	must(err)
	d := &deployment{st: st, table: opts.Table}
	d.sb, d.friend, d.worker = setup(st)
	return d
}

// drop removes the deployment's tables.
func (d *deployment) drop() {
	must(d.st.Close())
	c, err := pgx.Connect(ctx, *dsnFlag)
	must(err)
	_, err = c.Exec(ctx, `DROP TABLE `+d.table+`, `+d.table+`_schema`)
	must(err)
	must(c.Close(ctx))
}

var off = switchboard.Quotas{LiveEdgesPerRequester: -1, RequesterBurst: -1, TargetBurst: -1, PendingPerTarget: -1, Cooldown: -1}

// setup publishes alice-bot and bob-desk, friends them on inbox and vends
// bob-desk's own worker.
func setup(st store.Store) (*switchboard.Switchboard, switchboard.Credential, switchboard.Credential) {
	iss, err := switchboardtest.NewIssuer("bench")
	must(err)
	defer iss.Close()
	sb, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}, Quotas: off})
	must(err)
	for _, p := range [][2]string{{"alice", "alice-bot"}, {"bob", "bob-desk"}} {
		_, err := sb.Publish(ctx, switchboard.Persona{ID: p[1], Owner: iss.Human(p[0]), Discoverable: true,
			Card: switchboard.PersonaCard(p[1], "bench agent", "1.0.0", "https://hub.example/agents/"+p[1])})
		must(err)
	}
	scope := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: scope, Why: "bench", Pickup: pickup}
	req.IDToken = iss.RequestToken("alice", req, time.Now())
	e, _, err := sb.Request(ctx, req)
	must(err)
	_, err = sb.Approve(ctx, iss.Human("bob"), e.ID, nil)
	must(err)
	_, friend, err := sb.Collect(ctx, e.ID, secret)
	must(err)
	all := []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbHeartbeat, switchboard.VerbComplete,
		switchboard.VerbFail, switchboard.VerbRelease, switchboard.VerbGet}
	_, worker, err := sb.Vend(ctx, iss.Human("bob"), switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{{Queue: "inbox", Verbs: all}}})
	must(err)
	return sb, friend, worker
}

// fill creates n todos with 32 goroutines.
func (d *deployment) fill(n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				_, _, err := d.sb.CreateFor(ctx, d.friend, "inbox", switchboard.NewTodo{Kind: "k", Payload: make([]byte, 256)})
				must(err)
			}
		})
	}
	wg.Wait()
}

// spawn runs j in *procs children at once and sums what they report.
func spawn(j job) (done int64, elapsed time.Duration, stats postgres.Stats) {
	j.DSN = *dsnFlag
	j.Workers = max(1, *workers / *procs)
	j.Start = time.Now().Add(2 * time.Second) // all children start together, connected
	j.Duration = *dur
	raw, err := json.Marshal(j)
	must(err)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range *procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			must(err)
			var r result
			must(json.Unmarshal(out, &r))
			mu.Lock()
			done += r.Done
			elapsed = max(elapsed, r.Elapsed)
			stats.Commits += r.Stats.Commits
			stats.Retries += r.Stats.Retries
			stats.Updates += r.Stats.Updates
			mu.Unlock()
		})
	}
	wg.Wait()
	return done, elapsed, stats
}

func retried(s postgres.Stats) string {
	if s.Commits+s.Retries == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% (%.1f calls/commit)", 100*float64(s.Retries)/float64(s.Commits+s.Retries), float64(s.Updates)/float64(s.Commits))
}

// claim measures claims (completed or not, by scenario) per second from a
// queue filled beforehand.
func claim(opts postgres.Options, scenario, name string, naive float64) float64 {
	d := newDeployment(postgres.Options{})
	defer d.drop()
	// Enough for the whole run at a rate well above what is measured.
	d.fill(int(dur.Seconds() * 3000))
	opts.Table = d.table
	done, el, stats := spawn(job{Options: opts, Scenario: scenario, Worker: string(d.worker)})
	v := float64(done) / el.Seconds()
	row(name, v, retried(stats), naive)
	return v
}

// lifecycle measures Work fed by creators, on PostgreSQL across processes
// and on bolt in one.
func lifecycle() {
	d := newDeployment(postgres.Options{})
	done, el, stats := spawn(job{Options: postgres.Options{Table: d.table}, Scenario: "lifecycle", Friend: string(d.friend), Worker: string(d.worker)})
	d.drop()
	pg := float64(done) / el.Seconds()
	row(fmt.Sprintf("lifecycle, Work %d + %d creators, postgres", *workers, *workers), pg, retried(stats), 0)

	dir, err := os.MkdirTemp("", "switchboard-bench")
	must(err)
	defer os.RemoveAll(dir)
	st, err := bolt.Open(filepath.Join(dir, "bench.db"), nil)
	must(err)
	defer st.Close()
	sb, friend, worker := setup(st)
	n, el := work(sb, friend, worker, *workers, *workers, time.Now(), *dur)
	v := float64(n) / el.Seconds()
	fmt.Printf("%-44s %12.0f %9s  postgres is %.2f× bolt\n", fmt.Sprintf("lifecycle, Work %d + %d creators, bolt", *workers, *workers), v, "-", pg/v)
}

// runChild runs one child's share of a scenario.
func runChild(j job) result {
	o := j.Options
	st, err := postgres.Open(ctx, j.DSN, &o)
	must(err)
	defer st.Close()
	sb, err := switchboard.New(st, &switchboard.Config{Quotas: off})
	must(err)
	var r result
	switch j.Scenario {
	case "claim", "claim+complete":
		r.Done, r.Elapsed = claimLoop(sb, switchboard.Credential(j.Worker), j.Workers, j.Scenario == "claim+complete", j.Start, j.Duration)
	case "lifecycle":
		r.Done, r.Elapsed = work(sb, switchboard.Credential(j.Friend), switchboard.Credential(j.Worker), j.Workers, j.Workers, j.Start, j.Duration)
	}
	r.Stats = st.Stats()
	return r
}

// claimLoop claims (and completes, if complete) with n goroutines until d
// has passed or the queue is empty.
func claimLoop(sb *switchboard.Switchboard, cred switchboard.Credential, n int, complete bool, start time.Time, d time.Duration) (int64, time.Duration) {
	time.Sleep(time.Until(start))
	deadline := start.Add(d)
	var done atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				_, l, err := sb.Claim(ctx, cred, "inbox", nil)
				if errors.Is(err, switchboard.ErrQueueEmpty) {
					return
				}
				must(err)
				if complete {
					must(sb.Complete(ctx, cred, l, nil))
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return done.Load(), time.Since(start)
}

// work runs Work with the given concurrency from start for d while
// creators goroutines create, and returns the completions.
func work(sb *switchboard.Switchboard, friend, worker switchboard.Credential, concurrency, creators int, start time.Time, d time.Duration) (int64, time.Duration) {
	time.Sleep(time.Until(start))
	wctx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var done atomic.Int64
	var wg sync.WaitGroup
	for range creators {
		wg.Go(func() {
			for wctx.Err() == nil {
				_, _, err := sb.CreateFor(wctx, friend, "inbox", switchboard.NewTodo{Kind: "k", Payload: make([]byte, 256)})
				if err != nil && wctx.Err() == nil {
					must(err)
				}
			}
		})
	}
	err := sb.Work(wctx, worker, "inbox", func(context.Context, switchboard.Todo) ([]byte, error) {
		done.Add(1)
		return nil, nil
	}, &switchboard.WorkOptions{Concurrency: concurrency})
	if !errors.Is(err, context.DeadlineExceeded) {
		must(err)
	}
	el := time.Since(start)
	wg.Wait()
	return done.Load(), el
}
