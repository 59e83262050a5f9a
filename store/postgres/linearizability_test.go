package postgres_test

// A linearizability check of the queue on PostgreSQL: child processes run
// concurrent CreateFor (with repeating dedup keys), Claim and Complete
// calls while the parent revokes the creating grant and cuts database
// connections at random moments (so some calls end with their outcome
// unknown); every call is recorded with its invocation and response times,
// and the merged history is checked with porcupine against a sequential
// model of the queue. CI runs a small history; -lin.ops and -lin.rounds
// make a long one:
//
//	go test ./store/postgres -run TestLinearizable -lin.rounds=20 -lin.ops=60

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
)

var (
	linRounds = flag.Int("lin.rounds", 2, "histories TestLinearizable records and checks")
	linOps    = flag.Int("lin.ops", 25, "calls per client in each history of TestLinearizable")
	linProcs  = flag.Int("lin.procs", 3, "processes (two clients each) in each history of TestLinearizable")
)

// linInput and linOutput are one recorded call.
type linInput struct {
	Op    string `json:"op"` // create | claim | complete | revoke
	Key   string `json:"key,omitempty"`
	Token string `json:"token,omitempty"`
}

type linOutput struct {
	Key     string `json:"key,omitempty"`   // the todo's dedup key (create, claim)
	Token   string `json:"token,omitempty"` // the lease (claim)
	Created bool   `json:"created,omitempty"`
	Empty   bool   `json:"empty,omitempty"`   // claim: nothing claimed
	Lost    bool   `json:"lost,omitempty"`    // complete: ErrLeaseLost
	Refused bool   `json:"refused,omitempty"` // create: ErrUnauthenticated (revoked)
	Unknown bool   `json:"unknown,omitempty"` // ErrCommitUnknown: it may or may not have happened
	Failed  bool   `json:"failed,omitempty"`  // any other error: it did not happen
	Err     string `json:"err,omitempty"`     // the error of an unknown or failed call
}

// failed records err, which no case of the call expected: the store's
// promise is that only an error wrapping ErrCommitUnknown leaves a call's
// outcome open — any other means nothing of it was committed.
func (o *linOutput) failed(err error) {
	if errors.Is(err, switchboard.ErrCommitUnknown) {
		o.Unknown = true
	} else {
		o.Failed = true
	}
	o.Err = err.Error()
}

type linOp struct {
	Client int       `json:"client"`
	In     linInput  `json:"in"`
	Out    linOutput `json:"out"`
	Call   int64     `json:"call"`
	Return int64     `json:"return"`
}

// runHistory is a child's part: clients goroutines, each making ops calls,
// a random pause of up to pace (3ms if zero) before each.
func runHistory(ctx context.Context, sb *switchboard.Switchboard, friend, worker switchboard.Credential, first, clients, ops int, pace time.Duration) []linOp {
	if pace <= 0 {
		pace = 3 * time.Millisecond
	}
	var mu sync.Mutex
	var out []linOp
	var wg sync.WaitGroup
	for c := range clients {
		client := first + c
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(client), uint64(time.Now().UnixNano())))
			var held *switchboard.Lease
			var heldKey string
			for range ops {
				time.Sleep(rand.N(pace)) // spread the calls
				var op linOp
				op.Client = client
				op.Call = time.Now().UnixNano()
				switch r := rng.IntN(10); {
				case held != nil && r < 4:
					op.In = linInput{Op: "complete", Key: heldKey, Token: held.Token}
					err := sb.Complete(ctx, worker, *held, nil)
					switch {
					case err == nil:
					case errors.Is(err, switchboard.ErrLeaseLost):
						op.Out.Lost = true
					default:
						op.Out.failed(err)
					}
					held = nil
				case r < 6:
					op.In = linInput{Op: "create", Key: fmt.Sprintf("k%d", rng.IntN(3*ops))}
					td, created, err := sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "lin", DedupKey: op.In.Key})
					switch {
					case err == nil:
						op.Out.Key, op.Out.Created = td.DedupKey, created
					case errors.Is(err, switchboard.ErrUnauthenticated):
						op.Out.Refused = true
					default:
						op.Out.failed(err)
					}
				default:
					op.In = linInput{Op: "claim"}
					td, l, err := sb.Claim(ctx, worker, "inbox", nil)
					switch {
					case err == nil:
						op.Out.Key, op.Out.Token = td.DedupKey, l.Token
						held, heldKey = &l, td.DedupKey
					case errors.Is(err, switchboard.ErrQueueEmpty):
						op.Out.Empty = true
					default:
						op.Out.failed(err)
					}
				}
				op.Return = time.Now().UnixNano()
				mu.Lock()
				out = append(out, op)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// The model's state: each todo (by dedup key) as q (queued), l<token>
// (leased), d (done) or c (cancelled), and whether the grant is revoked —
// encoded as one sorted string, so states compare with ==.
type linState struct {
	todos   map[string]string
	revoked bool
}

func (s linState) String() string {
	keys := make([]string, 0, len(s.todos))
	for k := range s.todos {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%t|", s.revoked)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s;", k, s.todos[k])
	}
	return b.String()
}

func parseLinState(v any) linState {
	s := linState{todos: map[string]string{}}
	str := v.(string)
	head, rest, _ := strings.Cut(str, "|")
	s.revoked = head == "true"
	for _, kv := range strings.Split(rest, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			s.todos[k] = v
		}
	}
	return s
}

func (s linState) with(key, v string) string {
	t := linState{todos: map[string]string{}, revoked: s.revoked}
	for k, x := range s.todos {
		t.todos[k] = x
	}
	t.todos[key] = v
	return t.String()
}

func (s linState) revoke() string {
	t := linState{todos: map[string]string{}, revoked: true}
	for k, x := range s.todos {
		if x == "q" {
			x = "c" // revocation cancels what nobody claimed
		}
		t.todos[k] = x
	}
	return t.String()
}

// queueModel is the sequential specification: CreateFor deduplicates by
// key and is refused after revocation; Claim leases a queued todo (which
// one is the store's choice) and answers empty exactly when no todo is
// queued — other claims running at the same time excuse nothing: the
// worker's grant may take every todo of the queue, so an empty answer is
// legal only at an instant where the model holds none queued; Complete
// succeeds exactly with the todo's current lease; Revoke cancels the
// queued todos of the grant. A call whose outcome is unknown may or may
// not have taken effect; one that failed otherwise had none.
var queueModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{linState{todos: map[string]string{}}.String()} },
	Step: func(state, input, output any) []any {
		s := parseLinState(state)
		in, out := input.(linInput), output.(linOutput)
		cur := s.String()
		if out.Failed {
			return []any{cur} // the store committed none of it
		}
		switch in.Op {
		case "create":
			_, exists := s.todos[in.Key]
			switch {
			case out.Unknown:
				if !exists && !s.revoked {
					return []any{cur, s.with(in.Key, "q")}
				}
				return []any{cur}
			case out.Refused:
				if s.revoked {
					return []any{cur}
				}
			case out.Created:
				if !exists && !s.revoked && out.Key == in.Key {
					return []any{s.with(in.Key, "q")}
				}
			default:
				if exists && out.Key == in.Key {
					return []any{cur}
				}
			}
			return nil
		case "claim":
			switch {
			case out.Unknown:
				next := []any{cur}
				for k, v := range s.todos {
					if v == "q" {
						next = append(next, s.with(k, "l?"))
					}
				}
				return next
			case out.Empty:
				for _, v := range s.todos {
					if v == "q" {
						return nil // work was ready: "empty" is false
					}
				}
				return []any{cur}
			case s.todos[out.Key] == "q":
				return []any{s.with(out.Key, "l"+out.Token)}
			}
			return nil
		case "complete":
			leased := s.todos[in.Key] == "l"+in.Token
			switch {
			case out.Unknown && leased:
				return []any{cur, s.with(in.Key, "d")}
			case out.Unknown, out.Lost && !leased:
				return []any{cur}
			case !out.Lost && leased:
				return []any{s.with(in.Key, "d")}
			}
			return nil
		case "revoke":
			if out.Unknown {
				return []any{cur, s.revoke()}
			}
			return []any{s.revoke()}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string { return fmt.Sprintf("%+v -> %+v", input, output) },
}

// TestLinearizable records concurrent histories from three processes
// (-lin.procs; two clients each) while the parent revokes the creating
// grant partway through and terminates random database connections, and
// checks each with porcupine against the exact model.
func TestLinearizable(t *testing.T) {
	for round := range *linRounds {
		// A subtest per history, so that each one's processes and
		// connections are gone before the next begins.
		t.Run(fmt.Sprint("history", round), func(t *testing.T) { linearizableRound(t, round) })
	}
}

// linearizableRound records and checks one history.
func linearizableRound(t *testing.T, round int) {
	d := newDeployment(t, switchboard.Quotas{}, time.Second)
	d.cfg.ApplicationName = "switchboard-lin"
	grant, friend, worker := d.friend()
	var procs []*proc
	for range *linProcs {
		procs = append(procs, d.start())
	}
	for i, p := range procs {
		p.send(command{Op: "history", Cred: string(friend), Worker: string(worker), Workers: 2, N: *linOps, First: 1 + 2*i})
	}
	ctx, stopCuts := context.WithCancel(context.Background())
	cuts := make(chan int, 1)
	go func() { cuts <- cutConnections(ctx, t, d.cfg.DSN) }()

	// The parent revokes the grant partway through: once the
	// clients created todos — as many as a client makes calls, so
	// that claims meet a queue holding work for a while — and
	// claimed one (a lease in the todo index, or an ended entry
	// besides the approval's).
	want := *linOps + rand.IntN(*linOps/2+1)
	require.Eventually(t, func() bool {
		n, ended, leased := 0, 0, 0
		require.NoError(t, d.st.View(context.Background(), func(tx store.Tx) error {
			if err := tx.Scan("todo_index", []byte("e"), []byte("m"), func(k, _ []byte) bool {
				switch k[0] {
				case 'e':
					ended++
				case 'l':
					leased++
				}
				return ended < 2 && leased < 1
			}); err != nil {
				return err
			}
			return tx.Scan("todos", nil, nil, func(_, _ []byte) bool { n++; return n < want })
		}))
		return n >= want && (ended >= 2 || leased >= 1)
	}, time.Minute, time.Millisecond, "the clients create or claim nothing")
	rev := linOp{Client: 0, In: linInput{Op: "revoke"}, Call: time.Now().UnixNano()}
	if err := d.sb.Revoke(context.Background(), d.bob, grant.ID); err != nil {
		rev.Out.failed(err)
	}
	rev.Return = time.Now().UnixNano()

	history := []linOp{rev}
	for i, p := range procs {
		a := p.recv()
		require.Empty(t, a.Err, "process %d", i)
		history = append(history, a.History...)
	}
	stopCuts()
	n := <-cuts
	var ops []porcupine.Operation
	unknown, claimed := 0, 0
	kinds := map[string]int{}
	for _, o := range history {
		kinds[fmt.Sprintf("%s %+v", o.In.Op, linOutput{Created: o.Out.Created, Empty: o.Out.Empty, Lost: o.Out.Lost, Refused: o.Out.Refused, Unknown: o.Out.Unknown, Failed: o.Out.Failed})]++
		ret := o.Return
		if o.Out.Unknown {
			unknown++
			ret = 1 << 62 // it may take effect at any time after its call
		}
		if o.In.Op == "claim" && o.Out.Key != "" {
			claimed++
		}
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: o.In, Output: o.Out, Call: o.Call, Return: ret})
	}
	res, info := porcupine.CheckOperationsVerbose(queueModel.ToModel(), ops, 2*time.Minute)
	if res != porcupine.Ok {
		if dir := os.Getenv("LIN_DUMP"); dir != "" {
			b, _ := json.MarshalIndent(history, "", " ")
			_ = os.WriteFile(fmt.Sprintf("%s/history-%d.json", dir, round), b, 0o644)
		}
		path := fmt.Sprintf("%s/linearizability-%d.html", t.TempDir(), round)
		_ = porcupine.VisualizePath(queueModel.ToModel(), info, path)
		t.Fatalf("round %d: history of %d calls is %s (visualization: %s)", round, len(ops), res, path)
	}
	t.Logf("round %d: %d calls linearizable (%d claims, %d with unknown outcome, %d connections cut): %v", round, len(ops), claimed, unknown, n, kinds)
	require.Positive(t, claimed, "the history claimed nothing: it tested little")
}

// cutConnections terminates a random busy connection of the test's
// processes every few tens of milliseconds until ctx ends or it has cut
// maxCuts (each cut may leave calls with unknown outcomes, and every
// unknown claim multiplies the orders the checker must try), and returns
// how many it cut.
func cutConnections(ctx context.Context, t *testing.T, dsn string) int {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Errorf("cut connections: %v", err)
		return 0
	}
	defer conn.Close(context.Background())
	const maxCuts = 6
	n := 0
	for ctx.Err() == nil && n < maxCuts {
		time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
		var cut bool
		err := conn.QueryRow(context.Background(), `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM
			(SELECT pid FROM pg_stat_activity WHERE application_name = 'switchboard-lin' AND state <> 'idle' ORDER BY random() LIMIT 1) x`).Scan(&cut)
		if err == nil && cut {
			n++
		}
	}
	return n
}

// linHistory serves the child's "history" command.
func linHistory(ctx context.Context, sb *switchboard.Switchboard, c command) answer {
	h := runHistory(ctx, sb, switchboard.Credential(c.Cred), switchboard.Credential(c.Worker), c.First, c.Workers, c.N, c.Pace)
	return answer{History: h}
}
