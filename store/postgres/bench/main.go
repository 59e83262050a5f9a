// Command bench measures the PostgreSQL store with several processes on
// one database, beside River — the job queue Go teams run on PostgreSQL —
// doing the same cycle on the same server in the same run:
//
//	eval "$(.ci/postgres start)"          # or set SWITCHBOARD_POSTGRES_DSN
//	go run ./store/postgres/bench          # -d per round, -rounds, -procs 1,2,4
//
// SWITCHBOARD_BENCH_CPUPROFILE=dir makes each process write its CPU profile
// into dir, and SWITCHBOARD_BENCH_MEMPROFILE=dir each child what it
// allocated (with -switchboard-only, for profiling the store).
// SWITCHBOARD_BENCH_OPTIONS='{"CommitEachUpdate":true}' (postgres.Options as
// JSON) opens the lifecycle children's stores with those options.
// After each lifecycle round it prints what the round cost per completed
// todo — commits, rows written, WAL bytes, the server processes' CPU time
// and the CPU time of every process on the machine (read from /proc when
// the server runs on this machine), and the client processes' CPU time
// (getrusage), for River's rounds too — and switchboard's rows written and
// read per partition and the round trips its stores made per todo
// (postgres.Stats.RoundTrips; -server-cost=false skips all that, and the
// 1.5 s it waits for the statistics). River's pool is sized like the
// store's: 16 connections, 4 kept open.
//
// It is its own module so that River is a dependency of this command only.
//
// Figures (each on fresh tables; workers and creators are split evenly over
// the processes, which are this program re-executed, started together):
//
//   - claims, 16 workers in 2 processes, from a filled queue: each claim a
//     SERIALIZABLE key-value transaction of its own (how a plain key-value
//     backend claims: postgres.Options.SerializableClaims and
//     CommitEachUpdate) against the store's row-locked claims;
//   - the lifecycle — 16 creators each calling CreateFor in a loop, Work
//     with 16 workers, counted at the handler — over 1, 2 and 4 processes,
//     in rounds alternating with River's same cycle (16 goroutines each
//     calling Insert in a loop, a client with 16 workers, counted at the
//     worker); the ratio is the median of the rounds' ratios;
//   - commit to delivery through Subscribe: a subscriber in this process
//     follows the queue during the 2-process lifecycle rounds; for each
//     todo.created event, the time from CreateFor's return in the child
//     (the commit) to the event's delivery here — beside it, for scale,
//     how long CreateFor itself took (one write transaction under the same
//     load), and every event's delivery measured from its At (read inside
//     the committing transaction, so the commit is included);
//   - the lifecycle on the bolt store in one process, for scale.
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
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var (
	dur      = flag.Duration("d", 5*time.Second, "duration of each round")
	rounds   = flag.Int("rounds", 3, "alternating rounds per lifecycle figure")
	procList = flag.String("procs", "1,2,4", "process counts for the lifecycle")
	workers  = flag.Int("workers", 16, "workers (and creators) in all, split over the processes")
	noRiver  = flag.Bool("switchboard-only", false, "skip River and the claim figures (for profiling)")
	dsnFlag  = flag.String("dsn", os.Getenv("SWITCHBOARD_POSTGRES_DSN"), "PostgreSQL DSN (default $SWITCHBOARD_POSTGRES_DSN)")
	pgStats  = flag.Bool("server-cost", true, "print what each lifecycle round cost the server per todo created and completed (commits, rows written, WAL bytes, server CPU); -server-cost=false skips it")
	walFlag  = flag.Bool("wal", true, "with -server-cost: split each lifecycle round's WAL per todo by relation and record type (pg_walinspect, PostgreSQL 15+), and print the todos partition's HOT-update share")
	walComp  = flag.String("wal-compression", "", "set the server's wal_compression for the run (off, on, pglz, lz4, zstd; empty: leave it)")
	ckpts    = flag.Int("checkpoints", 0, "force this many CHECKPOINTs, evenly spaced, during each lifecycle round (the full-page images after a checkpoint are part of a long run's cost)")
)

const childEnv = "SWITCHBOARD_BENCH_CHILD"

var ctx = context.Background()

// job is what a child runs; result what it reports.
type job struct {
	DSN      string           `json:"dsn"`
	Options  postgres.Options `json:"options"`
	Scenario string           `json:"scenario"` // claim | lifecycle | river
	Workers  int              `json:"workers"`
	Friend   string           `json:"friend"`
	Worker   string           `json:"worker"`
	Schema   string           `json:"schema"` // River's
	Start    time.Time        `json:"start"`
	Duration time.Duration    `json:"duration"`
}

type result struct {
	Done    int64         `json:"done"`
	Elapsed time.Duration `json:"elapsed"`
	// Inserted is how many todos (jobs) the child created in the round;
	// after it the child drains the queue with the server cost still
	// counted, so that cost divides by whole lifecycles (creators outrun
	// workers while the round runs).
	Inserted int64          `json:"inserted,omitempty"`
	Stats    postgres.Stats `json:"stats"`
	// Created is, in lifecycle children, when each CreateFor returned
	// (Unix nanoseconds) by todo id: the commit a subscriber's delivery
	// of the todo's created event is measured from.
	Created map[string]int64 `json:"created,omitempty"`
	// CreateLatency is, in lifecycle children, how long each CreateFor
	// took (nanoseconds): one write transaction's commit under the load.
	CreateLatency []int64 `json:"create_latency,omitempty"`
	// CPU is the CPU time (user and system) the child used from the
	// round's start until it had drained the queue: the client's share of
	// the lifecycles the server cost is divided by.
	CPU time.Duration `json:"cpu"`
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	if raw := os.Getenv(childEnv); raw != "" {
		var j job
		must(json.Unmarshal([]byte(raw), &j))
		if dir := os.Getenv("SWITCHBOARD_BENCH_CPUPROFILE"); dir != "" {
			// Profiling: each child writes its CPU profile into dir.
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%s-%d.pprof", j.Scenario, os.Getpid())))
			must(err)
			must(pprof.StartCPUProfile(f))
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
		res := runChild(j)
		if dir := os.Getenv("SWITCHBOARD_BENCH_MEMPROFILE"); dir != "" {
			// Profiling: each child writes what it allocated (since it
			// started) into dir.
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("allocs-%s-%d.pprof", j.Scenario, os.Getpid())))
			must(err)
			must(pprof.Lookup("allocs").WriteTo(f, 0))
			must(f.Close())
		}
		must(json.NewEncoder(os.Stdout).Encode(res))
		return
	}
	flag.Parse()
	if dir := os.Getenv("SWITCHBOARD_BENCH_CPUPROFILE"); dir != "" {
		// This process too: it subscribes, and may run the sequencer.
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-main-%d.pprof", os.Getpid())))
		must(err)
		must(pprof.StartCPUProfile(f))
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if *dsnFlag == "" {
		log.Fatal("set SWITCHBOARD_POSTGRES_DSN or -dsn (.ci/postgres start prints one)")
	}
	var procs []int
	for _, f := range strings.Split(*procList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("-procs: %q", f)
		}
		procs = append(procs, n)
	}
	settings := map[string]string{}
	if *walComp != "" {
		settings["wal_compression"] = *walComp
	}
	if *ckpts > 0 && *walFlag && *pgStats {
		// The WAL split by relation reads the round's WAL back after it:
		// keep the segments the forced checkpoints would recycle.
		settings["wal_keep_size"] = "16GB"
	}
	if len(settings) > 0 {
		restore := setSystem(settings)
		defer restore()
	}
	fmt.Printf("PostgreSQL at %s; %d workers and %d creators in all; %s rounds", *dsnFlag, *workers, *workers, *dur)
	if *ckpts > 0 {
		fmt.Printf(", %d forced checkpoints in each", *ckpts)
	}
	fmt.Printf("; wal_compression %s\n\n", showSetting("wal_compression"))
	fmt.Println("| figure | value | baseline (same run) | ratio | retried |")
	fmt.Println("|---|---|---|---|---|")

	if *noRiver {
		for _, p := range procs {
			for range *rounds {
				v, st, lat := lifecycle(p, p == 2)
				fmt.Printf("| lifecycle, %d processes | %.0f/s | | | %s |\n", p, v, retried(st))
				printLatencies(p, lat)
			}
		}
		return
	}
	naive := claims(postgres.Options{SerializableClaims: true, CommitEachUpdate: true, MaxRetries: 1 << 20}, 2)
	locked := claims(postgres.Options{}, 2)
	fmt.Printf("| claims, %d workers in 2 processes | %.0f/s | naive SERIALIZABLE %.0f/s (%s retried) | %.2f× | %s |\n",
		*workers, locked.rate, naive.rate, naive.retried, locked.rate/naive.rate, locked.retried)

	byProcs := map[int]float64{}
	for _, p := range procs {
		sbRate, riverRate, ratio, retried, lat := lifecycleRounds(p)
		byProcs[p] = sbRate
		fmt.Printf("| lifecycle, %d+%d over %d process(es) | %.0f/s | River %.0f/s | %.2f× | %s |\n",
			*workers, *workers, p, sbRate, riverRate, ratio, retried)
		printLatencies(p, lat)
	}
	if byProcs[2] > 0 && byProcs[4] > 0 {
		fmt.Printf("| lifecycle, 4 processes / 2 processes | %.2f× | | | |\n", byProcs[4]/byProcs[2])
	}
	bolt := boltLifecycle()
	fmt.Printf("| lifecycle, %d+%d, bolt store, 1 process | %.0f/s | | | |\n", *workers, *workers, bolt)
}

// setSystem sets server settings for the run (ALTER SYSTEM, then a
// reload) and returns what puts the server back as it was: each old value
// if it had been set with ALTER SYSTEM, else the setting reset. An
// interrupt (^C, SIGTERM) or a fatal error puts them back too before the
// bench exits.
func setSystem(settings map[string]string) func() {
	alter := func(stmts ...string) error {
		conn, err := pgx.Connect(ctx, *dsnFlag)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		for _, stmt := range stmts {
			if _, err = conn.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		_, err = conn.Exec(ctx, `SELECT pg_reload_conf()`)
		return err
	}
	conn, err := pgx.Connect(ctx, *dsnFlag)
	must(err)
	defer conn.Close(ctx)
	var set, undo []string
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		var old, source string
		must(conn.QueryRow(ctx, `SELECT setting, source FROM pg_settings WHERE name = $1`, name).Scan(&old, &source))
		set = append(set, `ALTER SYSTEM SET `+pgx.Identifier{name}.Sanitize()+` = `+pgx.Identifier{settings[name]}.Sanitize())
		if source == "configuration file" {
			undo = append(undo, `ALTER SYSTEM SET `+pgx.Identifier{name}.Sanitize()+` = `+pgx.Identifier{old}.Sanitize())
		} else {
			undo = append(undo, `ALTER SYSTEM RESET `+pgx.Identifier{name}.Sanitize())
		}
	}
	must(alter(set...))
	var once sync.Once
	restore := func() {
		once.Do(func() {
			if err := alter(undo...); err != nil {
				log.Printf("server settings not put back (%s by hand): %v", strings.Join(undo, "; "), err)
			}
		})
	}
	beforeExit = restore
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		restore()
		os.Exit(1)
	}()
	return restore
}

// showSetting is a server setting's value, as a new connection sees it.
func showSetting(name string) string {
	conn, err := pgx.Connect(ctx, *dsnFlag)
	must(err)
	defer conn.Close(ctx)
	var v string
	must(conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v))
	return v
}

// printLatencies prints a subscriber's delivery latencies, if any.
func printLatencies(procs int, lat latencies) {
	if len(lat.fromCommit) > 0 {
		rounds := ""
		if len(lat.roundP99) > 1 {
			var each []string
			for _, d := range lat.roundP99 {
				each = append(each, d.Round(100*time.Microsecond).String())
			}
			rounds = "; p99 by round " + strings.Join(each, ", ")
		}
		fmt.Printf("| commit → Subscribe delivery, %d processes under that load | p50 %s, p99 %s | | | %d todo.created events, from CreateFor's return%s |\n",
			procs, pct(lat.fromCommit, 50), pct(lat.fromCommit, 99), len(lat.fromCommit), rounds)
	}
	if len(lat.create) > 0 {
		fmt.Printf("| CreateFor (one write transaction), %d processes under that load | p50 %s, p99 %s | | | %d calls |\n",
			procs, pct(lat.create, 50), pct(lat.create, 99), len(lat.create))
	}
	if len(lat.fromAt) > 0 {
		fmt.Printf("| event At → Subscribe delivery, %d processes under that load | p50 %s, p99 %s | | | %d events, commit included |\n",
			procs, pct(lat.fromAt, 50), pct(lat.fromAt, 99), len(lat.fromAt))
	}
}

// beforeExit runs before the bench exits on an error (must): it puts back
// what the bench changed on the server.
var beforeExit = func() {}

func must(err error) {
	if err != nil {
		beforeExit()
		log.Fatal(err)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func pct(v []time.Duration, p int) time.Duration {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(100 * time.Microsecond)
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

// createLatency collects the lifecycle children's CreateFor durations
// (see result.CreateLatency); lifecycle takes them.
var createLatency []time.Duration

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
	must(d.sb.Close())
	must(d.st.Close())
	c, err := pgx.Connect(ctx, *dsnFlag)
	must(err)
	_, err = c.Exec(ctx, `DROP TABLE `+d.table+`, `+d.table+`_schema; DROP SEQUENCE `+d.table+`_append, `+d.table+`_numbers`)
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
			Card: switchboard.PersonaCard(switchboard.CardFields{Name: p[1], Description: "bench agent", Version: "1.0.0", URL: "https://hub.example/agents/" + p[1]})})
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

// spawn runs j in procs children at once and sums what they report.
func spawn(j job, procs int) (done int64, elapsed time.Duration, stats postgres.Stats, created map[string]int64, inserted int64, cpu time.Duration) {
	created = map[string]int64{}
	j.DSN = *dsnFlag
	j.Workers = max(1, *workers/procs)
	j.Start = time.Now().Add(2 * time.Second) // all children start together, connected
	j.Duration = *dur
	raw, err := json.Marshal(j)
	must(err)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range procs {
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
			inserted += r.Inserted
			cpu += r.CPU
			elapsed = max(elapsed, r.Elapsed)
			stats.Commits += r.Stats.Commits
			stats.Retries += r.Stats.Retries
			stats.Updates += r.Stats.Updates
			stats.RoundTrips += r.Stats.RoundTrips
			maps.Copy(created, r.Created)
			for _, l := range r.CreateLatency {
				createLatency = append(createLatency, time.Duration(l))
			}
			mu.Unlock()
		})
	}
	if *ckpts > 0 {
		// Forced checkpoints, evenly spaced through the round: the
		// full-page images each page's first change after one logs are
		// part of what a long run costs.
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, *dsnFlag)
			must(err)
			defer conn.Close(ctx)
			step := j.Duration / time.Duration(*ckpts+1)
			for i := 1; i <= *ckpts; i++ {
				time.Sleep(time.Until(j.Start.Add(time.Duration(i) * step)))
				_, err := conn.Exec(ctx, `CHECKPOINT`)
				must(err)
			}
		})
	}
	wg.Wait()
	return done, elapsed, stats, created, inserted, cpu
}

func retried(s postgres.Stats) string {
	if s.Commits+s.Retries == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(s.Retries)/float64(s.Commits+s.Retries))
}

type figure struct {
	rate    float64
	retried string
}

// claims measures claims per second from a queue filled beforehand.
func claims(opts postgres.Options, procs int) figure {
	d := newDeployment(postgres.Options{})
	defer d.drop()
	d.fill(int(dur.Seconds()*2500) + 1000) // more than the run can claim
	opts.Table = d.table
	done, el, stats, _, _, _ := spawn(job{Options: opts, Scenario: "claim", Worker: string(d.worker)}, procs)
	return figure{float64(done) / el.Seconds(), retried(stats)}
}

// lifecycleRounds measures the lifecycle over procs processes in rounds
// alternating with River's, and returns the medians, the median of the
// per-round ratios, the retry share and (with 2 processes) the
// commit-to-delivery latencies seen by a subscriber.
func lifecycleRounds(procs int) (sbRate, riverRate, ratio float64, retry string, lat latencies) {
	var sbs, rivers, ratios []float64
	var stats postgres.Stats
	for r := range *rounds {
		var s, rv float64
		for i := range 2 {
			if (r+i)%2 == 0 {
				var st postgres.Stats
				var l latencies
				s, st, l = lifecycle(procs, procs == 2)
				stats.Commits += st.Commits
				stats.Retries += st.Retries
				if len(l.fromCommit) > 0 {
					l.roundP99 = []time.Duration{pct(l.fromCommit, 99)}
				}
				lat.add(l)
			} else {
				rv = riverLifecycle(procs)
			}
		}
		sbs, rivers, ratios = append(sbs, s), append(rivers, rv), append(ratios, s/rv)
	}
	return median(sbs), median(rivers), median(ratios), retried(stats), lat
}

// lifecycle runs switchboard's lifecycle once over procs processes; with
// subscribe, a subscriber in this process follows the queue meanwhile.
func lifecycle(procs int, subscribe bool) (float64, postgres.Stats, latencies) {
	d := newDeployment(postgres.Options{})
	defer d.drop()
	var lat latencies
	delivered := map[string]time.Time{}
	var wg sync.WaitGroup
	sctx, stop := context.WithCancel(ctx)
	if subscribe {
		// The setup's events may still be waiting for the sequencer:
		// follow from the start of the log and count only what the run
		// commits.
		begun := time.Now()
		sub := d.sb.Subscribe(sctx, 0, &switchboard.EventFilter{Queue: switchboard.QueueAddress("bob-desk", "inbox")})
		wg.Go(func() {
			for e := range sub.C {
				now := time.Now()
				if !e.At.Before(begun) {
					lat.fromAt = append(lat.fromAt, now.Sub(e.At))
					if e.Type == switchboard.EventTodoCreated {
						delivered[e.Todo] = now
					}
				}
			}
		})
	}
	before := serverCost()
	mine, mineCPU := d.st.Stats().RoundTrips, cpuTime()
	done, el, stats, created, inserted, cpu := spawn(job{Options: postgres.Options{Table: d.table}, Scenario: "lifecycle", Friend: string(d.friend), Worker: string(d.worker)}, procs)
	mineCPU = cpuTime() - mineCPU
	reportCost("switchboard", procs, inserted, before)
	if *pgStats && inserted > 0 {
		// This process subscribes (and may hold the sequencer); it also
		// runs the bench, which costs little while the children run.
		fmt.Fprintf(os.Stderr, "client CPU, switchboard, %d process(es): %.0f µs per todo created and completed in the children, %.0f µs in this process (it runs the sequencer when it holds it, and subscribes at 2 processes)\n",
			procs, float64(cpu.Microseconds())/float64(inserted), float64(mineCPU.Microseconds())/float64(inserted))
	}
	if *pgStats && inserted > 0 {
		// The client's side: every statement the stores waited for.
		// This process's store subscribes, and may hold the sequencer.
		fmt.Fprintf(os.Stderr, "round trips, switchboard, %d process(es): %.2f per todo created and completed (%.2f in the children, %.2f in the subscribing process)\n",
			procs, float64(stats.RoundTrips+d.st.Stats().RoundTrips-mine)/float64(inserted),
			float64(stats.RoundTrips)/float64(inserted), float64(d.st.Stats().RoundTrips-mine)/float64(inserted))
	}
	reportTables(d.table, inserted)
	stop()
	wg.Wait()
	if subscribe {
		lat.create = createLatency
	}
	createLatency = nil
	for id, at := range delivered {
		if c, ok := created[id]; ok {
			lat.fromCommit = append(lat.fromCommit, at.Sub(time.Unix(0, c)))
		}
	}
	return float64(done) / el.Seconds(), stats, lat
}

// latencies are a subscriber's delivery latencies: of every event from its
// At (read inside the committing transaction, so they include the commit
// itself), and of todo.created events from when CreateFor returned in the
// creating process (commit to delivery proper).
// create is how long each CreateFor took in the children meanwhile.
// roundP99 is commit → delivery's p99 in each round (rounds differ more
// than their medians on shared machines: the spread is part of the
// figure).
type latencies struct{ fromAt, fromCommit, create, roundP99 []time.Duration }

func (l *latencies) add(o latencies) {
	l.fromAt = append(l.fromAt, o.fromAt...)
	l.fromCommit = append(l.fromCommit, o.fromCommit...)
	l.create = append(l.create, o.create...)
	l.roundP99 = append(l.roundP99, o.roundP99...)
}

// riverLifecycle runs River's cycle once over procs processes, in a schema
// of its own.
func riverLifecycle(procs int) float64 {
	tables++
	schema := fmt.Sprintf("river_bench_%d_%d", os.Getpid(), tables)
	pool, err := pgxpool.New(ctx, *dsnFlag)
	must(err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+schema)
	must(err)
	defer func() {
		_, err := pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		must(err)
	}()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quiet})
	must(err)
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	must(err)
	before := serverCost()
	done, el, _, _, inserted, cpu := spawn(job{Scenario: "river", Schema: schema}, procs)
	reportCost("River", procs, inserted, before)
	if *pgStats && inserted > 0 {
		fmt.Fprintf(os.Stderr, "client CPU, River, %d process(es): %.0f µs per job inserted and worked in the children\n",
			procs, float64(cpu.Microseconds())/float64(inserted))
	}
	return float64(done) / el.Seconds()
}

var quiet = slog.New(slog.DiscardHandler)

// boltLifecycle runs the lifecycle on the bolt store in this process.
func boltLifecycle() float64 {
	dir, err := os.MkdirTemp("", "switchboard-bench")
	must(err)
	defer os.RemoveAll(dir)
	st, err := bolt.Open(filepath.Join(dir, "bench.db"), nil)
	must(err)
	defer st.Close()
	sb, friend, worker := setup(st)
	defer sb.Close()
	n, el := work(sb, friend, worker, *workers, *workers, time.Now(), *dur, nil)
	return float64(n) / el.Seconds()
}

// cost is what the server has done so far: transactions committed, rows
// written and WAL bytes, from pg_stat_database and the WAL position, and
// the CPU seconds its processes used (negative: not readable here).
type cost struct {
	commits, rows, wal, cpu float64
	machine                 float64 // CPU seconds every process of this machine used (-1: not readable)
	lsn                     string  // the WAL position then
}

// serverCost reads the server's counters (zero without -server-cost).
func serverCost() cost {
	if !*pgStats {
		return cost{}
	}
	c, err := pgx.Connect(ctx, *dsnFlag)
	must(err)
	defer c.Close(ctx)
	// Statistics reach pg_stat_database up to a second after a
	// transaction ends.
	time.Sleep(1500 * time.Millisecond)
	_, err = c.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
	must(err)
	var r cost
	must(c.QueryRow(ctx, `SELECT xact_commit::float8, (tup_inserted+tup_updated+tup_deleted)::float8,
		pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8, pg_current_wal_lsn()::text
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&r.commits, &r.rows, &r.wal, &r.lsn))
	r.cpu, r.machine = -1, machineCPU()
	var dir string
	if c.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&dir) == nil {
		r.cpu = serverCPU(dir)
	}
	return r
}

// machineCPU returns the CPU seconds every process of this machine has
// used (the busy time of /proc/stat's first line), or -1 where there is
// no /proc/stat.
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal …
	if len(f) < 9 || f[0] != "cpu" {
		return -1
	}
	var busy float64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return -1
		}
		busy += n
	}
	return busy / 100 // clock ticks, 100 a second on Linux
}

// serverCPU returns the CPU seconds used so far by the server whose data
// directory is dir — its postmaster, the children it reaped (cutime,
// cstime) and those alive — or -1 if it does not run on this machine.
func serverCPU(dir string) float64 {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return -1
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return -1
	}
	// /proc/<pid>/stat after the command's closing parenthesis: state,
	// ppid, … utime and stime are fields 14 and 15 of the line, cutime
	// and cstime 16 and 17 (11 to 14 here), in clock ticks (100 a second
	// on Linux).
	stat := func(p string) []string {
		b, err := os.ReadFile(filepath.Join("/proc", p, "stat"))
		if err != nil {
			return nil
		}
		return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	}
	ticks := func(f []string, from, to int) float64 {
		var t float64
		for i := from; i <= to && i < len(f); i++ {
			v, _ := strconv.ParseFloat(f[i], 64)
			t += v
		}
		return t
	}
	own := stat(strconv.Itoa(pid))
	if own == nil {
		return -1
	}
	total := ticks(own, 11, 14)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if f := stat(e.Name()); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			total += ticks(f, 11, 12)
		}
	}
	return total / 100
}

// reportCost prints the server's work per todo since before: the round
// and the drain after it, over the todos created in the round — each
// created and completed once.
func reportCost(who string, procs int, done int64, before cost) {
	if !*pgStats || done == 0 {
		return
	}
	after := serverCost()
	n := float64(done)
	cpu := "server CPU not readable here"
	if before.cpu >= 0 && after.cpu >= 0 {
		cpu = fmt.Sprintf("%.0f µs server CPU", (after.cpu-before.cpu)/n*1e6)
	}
	if before.machine >= 0 && after.machine >= 0 {
		cpu += fmt.Sprintf(" (%.0f µs for every process of this machine)", (after.machine-before.machine)/n*1e6)
	}
	fmt.Fprintf(os.Stderr, "server cost, %s, %d process(es): %.2f commits, %.1f rows written, %.0f WAL bytes, %s per todo created and completed (%d todos)\n",
		who, procs, (after.commits-before.commits)/n, (after.rows-before.rows)/n, (after.wal-before.wal)/n, cpu, done)
	reportWAL(before.lsn, after.lsn, n)
}

// reportWAL prints, with -wal, the WAL written between two positions per
// todo, split by the relation each record touches (its first block
// reference; "-" for records that touch none: commits, and the like) and
// by record type, largest first — with the share of full-page images.
func reportWAL(from, to string, n float64) {
	if !*walFlag || from == "" || to == "" {
		return
	}
	c, err := pgx.Connect(ctx, *dsnFlag)
	must(err)
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		fmt.Fprintf(os.Stderr, "  (no WAL split: pg_walinspect: %v)\n", err)
		return
	}
	rows, err := c.Query(ctx, `
		SELECT coalesce(cl.relname, CASE WHEN r.rel IS NULL THEN '-' ELSE 'relfilenode ' || r.rel END) AS rel,
		       r.resource_manager || '/' || r.record_type AS kind,
		       count(*)::float8, sum(r.record_length)::float8, sum(r.fpi_length)::float8
		FROM (SELECT resource_manager, record_type, record_length, fpi_length,
		             substring(block_ref from 'rel \d+/\d+/(\d+)') AS rel
		      FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)) r
		LEFT JOIN pg_class cl ON cl.relfilenode::text = r.rel
		GROUP BY 1, 2 ORDER BY 4 DESC`, from, to)
	if err != nil {
		fmt.Fprintf(os.Stderr, "  (no WAL split: %v)\n", err)
		return
	}
	defer rows.Close()
	type line struct {
		rel, kind            string
		count, bytes, fpiLen float64
	}
	var lines []line
	byRel := map[string]float64{}
	var total float64
	for rows.Next() {
		var l line
		must(rows.Scan(&l.rel, &l.kind, &l.count, &l.bytes, &l.fpiLen))
		// River's and switchboard's tables live in per-run schemas and
		// partitions: name them by what they are.
		l.rel = relKind(l.rel)
		lines = append(lines, l)
		byRel[l.rel] += l.bytes
		total += l.bytes
	}
	must(rows.Err())
	fmt.Fprintf(os.Stderr, "  WAL per todo by relation (record bytes, of which full-page images), %.0f in all:\n", total/n)
	rels := slices.Collect(maps.Keys(byRel))
	slices.SortFunc(rels, func(a, b string) int { return int(byRel[b] - byRel[a]) })
	for _, rel := range rels {
		if byRel[rel]/n < 10 {
			continue
		}
		fmt.Fprintf(os.Stderr, "    %-30s %6.0f B\n", rel, byRel[rel]/n)
		for _, l := range lines {
			if l.rel == rel && l.bytes/n >= 5 {
				fmt.Fprintf(os.Stderr, "        %-26s %6.0f B  %5.2f records  %6.0f B FPI\n", l.kind, l.bytes/n, l.count/n, l.fpiLen/n)
			}
		}
	}
}

// relKind names a relation of a run by its role: a switchboard partition
// by the table it holds ("todos", "todos_pkey"), River's by its own name.
func relKind(rel string) string {
	if i := strings.Index(rel, "__"); i >= 0 && strings.HasPrefix(rel, "bench_") {
		return rel[i+2:] // bench_<pid>_<n>__todos, __todos_pkey
	}
	return rel
}

// reportTables prints, with -server-cost, the rows written per completed
// todo into each of the deployment's partitions (one per switchboard table).
func reportTables(table string, done int64) {
	if !*pgStats || done == 0 {
		return
	}
	c, err := pgx.Connect(ctx, *dsnFlag)
	must(err)
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, coalesce(seq_tup_read,0), coalesce(idx_tup_fetch,0) FROM pg_stat_user_tables
		WHERE relname LIKE $1 ORDER BY n_tup_ins+n_tup_upd+n_tup_del DESC`, table+"\\_\\_%")
	must(err)
	defer rows.Close()
	for rows.Next() {
		var name string
		var ins, upd, hot, del, seqRead, idxFetch int64
		must(rows.Scan(&name, &ins, &upd, &hot, &del, &seqRead, &idxFetch))
		n := float64(done)
		hotShare := ""
		if upd > 0 {
			hotShare = fmt.Sprintf(" (%.0f%% HOT)", 100*float64(hot)/float64(upd))
		}
		fmt.Fprintf(os.Stderr, "  %-28s inserted %.2f updated %.2f%s deleted %.2f, read %.1f rows by sequential scans and %.1f by index per todo\n",
			strings.TrimPrefix(name, table+"__"), float64(ins)/n, float64(upd)/n, hotShare, float64(del)/n, float64(seqRead)/n, float64(idxFetch)/n)
	}
	must(rows.Err())
}

// runChild runs one child's share of a scenario.
func runChild(j job) result {
	if j.Scenario == "river" {
		return riverChild(j)
	}
	o := j.Options
	if raw := os.Getenv("SWITCHBOARD_BENCH_OPTIONS"); raw != "" && j.Scenario == "lifecycle" {
		must(json.Unmarshal([]byte(raw), &o))
	}
	st, err := postgres.Open(ctx, j.DSN, &o)
	must(err)
	defer st.Close()
	sb, err := switchboard.New(st, &switchboard.Config{Quotas: off})
	must(err)
	defer sb.Close()
	var r result
	switch j.Scenario {
	case "claim":
		r.Done, r.Elapsed = claimLoop(sb, switchboard.Credential(j.Worker), j.Workers, j.Start, j.Duration)
	case "lifecycle":
		r.Created = map[string]int64{}
		time.Sleep(time.Until(j.Start))
		began := cpuTime()
		r.Done, r.Elapsed = work(sb, switchboard.Credential(j.Friend), switchboard.Credential(j.Worker), j.Workers, j.Workers, j.Start, j.Duration, &r)
		r.Inserted = int64(len(r.Created))
		// Drain, untimed, so the server cost covers whole lifecycles.
		must(sb.Work(ctx, switchboard.Credential(j.Worker), "inbox", func(context.Context, switchboard.Todo) ([]byte, error) { return nil, nil },
			&switchboard.WorkOptions{Concurrency: j.Workers, UntilEmpty: true}))
		r.CPU = cpuTime() - began
	}
	r.Stats = st.Stats()
	return r
}

// claimLoop claims with n goroutines until d has passed.
func claimLoop(sb *switchboard.Switchboard, cred switchboard.Credential, n int, start time.Time, d time.Duration) (int64, time.Duration) {
	time.Sleep(time.Until(start))
	deadline := start.Add(d)
	var done atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				_, _, err := sb.Claim(ctx, cred, "inbox", nil)
				if errors.Is(err, switchboard.ErrQueueEmpty) {
					return
				}
				must(err)
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return done.Load(), time.Since(start)
}

// work runs Work with the given concurrency from start for d while
// creators goroutines create, and returns the completions.
// With rec non-nil, it records when each CreateFor returned and how long
// it took.
func work(sb *switchboard.Switchboard, friend, worker switchboard.Credential, concurrency, creators int, start time.Time, d time.Duration, rec *result) (int64, time.Duration) {
	time.Sleep(time.Until(start))
	var mu sync.Mutex
	wctx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var done atomic.Int64
	var wg sync.WaitGroup
	for range creators {
		wg.Go(func() {
			for wctx.Err() == nil {
				began := time.Now()
				t, _, err := sb.CreateFor(wctx, friend, "inbox", switchboard.NewTodo{Kind: "k", Payload: make([]byte, 256)})
				if err != nil && wctx.Err() == nil {
					must(err)
				}
				if err == nil && rec != nil {
					at := time.Now().UnixNano()
					mu.Lock()
					rec.Created[t.ID] = at
					rec.CreateLatency = append(rec.CreateLatency, at-began.UnixNano())
					mu.Unlock()
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

// benchArgs is River's job: the same 256-byte payload as the todos.
type benchArgs struct {
	Payload []byte `json:"payload"`
}

func (benchArgs) Kind() string { return "bench" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	done *atomic.Int64
}

func (w *benchWorker) Work(context.Context, *river.Job[benchArgs]) error {
	w.done.Add(1)
	return nil
}

// riverChild runs River's cycle: a client with j.Workers workers, fed by as
// many goroutines inserting one job at a time, counted at the worker.
func riverChild(j job) result {
	// River's pool sized like the store's (postgres.Options: MaxConns 16,
	// MinConns 4), not pgxpool's default of max(4, cores).
	pcfg, err := pgxpool.ParseConfig(j.DSN)
	must(err)
	pcfg.MaxConns, pcfg.MinConns = 16, 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	must(err)
	defer pool.Close()
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{done: &done})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: j.Schema,
		Logger: quiet,
		// River tuned for throughput: its default cooldown (100 ms
		// between fetches) caps a client at 10 fetches a second.
		FetchCooldown:     river.FetchCooldownMin,
		FetchPollInterval: envDur("RIVER_POLL", time.Second),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: j.Workers}},
		Workers:           workers,
	})
	must(err)
	must(client.Start(ctx))
	time.Sleep(time.Until(j.Start))
	began := cpuTime()
	wctx, stop := context.WithTimeout(ctx, j.Duration)
	defer stop()
	done.Store(0)
	var wg sync.WaitGroup
	var inserted atomic.Int64
	for range j.Workers {
		wg.Go(func() {
			for wctx.Err() == nil {
				if _, err := client.Insert(wctx, benchArgs{Payload: make([]byte, 256)}, nil); err != nil && wctx.Err() == nil {
					must(err)
				} else if err == nil {
					inserted.Add(1)
				}
			}
		})
	}
	<-wctx.Done()
	n := done.Load()
	el := time.Since(j.Start)
	wg.Wait()
	// Drain, untimed, so the server cost covers whole lifecycles: until
	// no job of the schema waits or runs (other children's included).
	for {
		var left int
		must(pool.QueryRow(ctx, `SELECT count(*) FROM `+j.Schema+`.river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled')`).Scan(&left))
		if left == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cpu := cpuTime() - began
	must(client.Stop(context.Background()))
	return result{Done: n, Elapsed: el, Inserted: inserted.Load(), CPU: cpu}
}

func envDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
