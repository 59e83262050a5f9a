package switchboard_test

// The crash test: a child process (this test binary, re-executed) writes
// through the bolt store — creates with dedup keys from 16 concurrent
// callers (so group commit batches them), claims, completes and fails —
// and reports each call on stdout only after it returned. The parent
// SIGKILLs it at a random moment, reopens the file, runs bbolt's
// consistency check and verifies that every acknowledged write is there,
// that dedup still holds and that the audit chain is whole. CI runs a few
// rounds; -crash.rounds runs more.
//
// Nothing here is timed from the child's start: under -race on a busy
// machine the child may take seconds before its first write. Each round
// waits for the first acknowledged write, then kills after a random delay
// or a random number of further acknowledgements, so every round tests a
// crash in the middle of real traffic however slow the machine is.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var crashRounds = flag.Int("crash.rounds", 4, "SIGKILL rounds of TestCrashRecovery")

const crashEnv = "SWITCHBOARD_CRASH_CHILD" // "path|credential|log" in the child

func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes; skipped with -short")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	owner := sb.Human{Issuer: "https://id.example.com", Subject: "owner"}
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	s, err := sb.New(st, nil)
	require.NoError(t, err)
	_, err = s.Publish(ctx, sb.Persona{ID: "desk", Owner: owner, Card: sb.PersonaCard(sb.CardFields{Name: "Desk", Description: "d", Version: "1", URL: "https://x.example/agents/desk"}), Discoverable: true})
	require.NoError(t, err)
	all := []sb.Verb{sb.VerbCreateFor, sb.VerbList, sb.VerbGet, sb.VerbClaim, sb.VerbComplete, sb.VerbFail}
	_, cred, err := s.Vend(ctx, owner, sb.VendRequest{Agent: "desk", Scope: sb.Scope{{Queue: "inbox", Verbs: all}}})
	require.NoError(t, err)
	require.NoError(t, st.Close())

	created := map[string]string{}     // dedup key → todo id, as acknowledged
	completed := map[string]bool{}     // todo ids acknowledged completed
	edges := map[string]sb.EdgeState{} // edge id → the furthest acknowledged state
	for round := 0; round < *crashRounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		// Odd rounds give the child a tiny write-ahead log, so that kills
		// land while checkpoints run and while the log moves between its
		// segments, not only between checkpoints.
		logSize := "default"
		if round%2 == 1 {
			logSize = "tiny"
		}
		cmd.Env = append(os.Environ(), crashEnv+"="+path+"|"+string(cred)+"|"+logSize)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		acks := killAfterAcks(t, cmd, out, round)
		for _, a := range acks {
			f := strings.Fields(a)
			switch {
			case len(f) == 3 && f[0] == "create":
				if id, ok := created[f[1]]; ok {
					require.Equal(t, id, f[2], "round %d: dedup key %s acknowledged for two todos", round, f[1])
				}
				created[f[1]] = f[2]
			case len(f) == 2 && f[0] == "complete":
				completed[f[1]] = true
			case len(f) == 2 && f[0] == "request":
				if edges[f[1]] == "" {
					edges[f[1]] = sb.EdgePending
				}
			case len(f) == 2 && f[0] == "approve":
				if edges[f[1]] != sb.EdgeRevoked {
					edges[f[1]] = sb.EdgeApproved
				}
			case len(f) == 2 && f[0] == "revoke":
				edges[f[1]] = sb.EdgeRevoked
			}
		}

		// bbolt's own consistency check on the file the kill left.
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
		require.NoError(t, err)
		require.NoError(t, db.View(func(tx *bbolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}), "round %d", round)
		require.NoError(t, db.Close())

		st, err := bolt.Open(path, nil)
		require.NoError(t, err)
		s, err := sb.New(st, nil)
		require.NoError(t, err)
		for key, id := range created {
			td, err := s.Get(ctx, cred, id)
			require.NoError(t, err, "round %d: acknowledged todo %s lost", round, id)
			require.Equal(t, key, td.DedupKey)
			if completed[id] {
				require.Equal(t, sb.TodoDone, td.State, "round %d: acknowledged completion of %s lost", round, id)
			}
		}
		for id, want := range edges {
			e, err := s.Edge(ctx, owner, id)
			require.NoError(t, err, "round %d: acknowledged edge %s lost", round, id)
			switch want {
			case sb.EdgeRevoked:
				require.Equal(t, sb.EdgeRevoked, e.State, "round %d: acknowledged revocation lost", round)
			case sb.EdgeApproved:
				require.Contains(t, []sb.EdgeState{sb.EdgeApproved, sb.EdgeRevoked}, e.State, "round %d: acknowledged approval lost", round)
				require.NotEmpty(t, e.GrantID, "round %d: an approved edge without its grant", round)
			}
		}
		rep, err := s.VerifyAudit(ctx)
		require.NoError(t, err, "round %d: audit chain", round)
		require.Positive(t, rep.Events)
		require.NoError(t, st.Close())
		t.Logf("round %d: %d acknowledged calls; %d keys, %d completions, %d edges so far", round, len(acks), len(created), len(completed), len(edges))
	}
	require.NotEmpty(t, created, "the child acknowledged no create: the test tested nothing")
	require.NotEmpty(t, edges, "the child acknowledged no friend request: the test tested nothing")

	// Dedup still holds after every crash: each acknowledged key returns
	// its todo and creates nothing.
	st, err = bolt.Open(path, nil)
	require.NoError(t, err)
	defer st.Close()
	s, err = sb.New(st, nil)
	require.NoError(t, err)
	for key, id := range created {
		td, made, err := s.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", DedupKey: key})
		require.NoError(t, err)
		require.False(t, made, key)
		require.Equal(t, id, td.ID)
	}
}

// crashStartDeadline bounds the wait for a child's first acknowledged
// write: generous, because a child built with -race on a loaded 2-core
// machine can take many seconds to start, but finite, so a child that never
// writes fails the test clearly instead of hanging it.
const crashStartDeadline = 2 * time.Minute

// killAfterAcks reads the child's acknowledgements, waits for its first
// acknowledged create and friend request, then SIGKILLs the child either after a random delay or after a
// random number of further acknowledgements, and returns every
// acknowledgement the child wrote before it died.
func killAfterAcks(t *testing.T, cmd *exec.Cmd, out io.Reader, round int) []string {
	t.Helper()
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var acks []string
	kill := func() {
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		for l := range lines { // what the child wrote before it died
			acks = append(acks, l)
		}
		_ = cmd.Wait()
	}
	// Wait until the child has acknowledged a create and a friend request,
	// the two kinds of write every round checks.
	start := time.After(crashStartDeadline)
	var sawCreate, sawRequest bool
	for !sawCreate || !sawRequest {
		select {
		case l, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				t.Fatalf("round %d: the child exited (%v) before acknowledging a create and a request", round, err)
			}
			acks = append(acks, l)
			sawCreate = sawCreate || strings.HasPrefix(l, "create ")
			sawRequest = sawRequest || strings.HasPrefix(l, "request ")
		case <-start:
			kill()
			t.Fatalf("round %d: within %v of starting the child acknowledged no create (%v) or no friend request (%v)", round, crashStartDeadline, sawCreate, sawRequest)
		}
	}
	if rand.IntN(2) == 0 {
		// Kill after a random delay.
		timer := time.NewTimer(time.Duration(rand.IntN(400)) * time.Millisecond)
		defer timer.Stop()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("round %d: the child exited on its own", round)
				}
				acks = append(acks, l)
				continue
			case <-timer.C:
			}
			break
		}
	} else {
		// Kill after a random number of further acknowledgements.
		more := rand.IntN(2000)
		deadline := time.After(crashStartDeadline)
		for n := 0; n < more; n++ {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("round %d: the child exited on its own", round)
				}
				acks = append(acks, l)
				continue
			case <-deadline:
			}
			break
		}
	}
	kill()
	return acks
}

// TestCrashChild is the child process of TestCrashRecovery.
func TestCrashChild(t *testing.T) {
	env := os.Getenv(crashEnv)
	if env == "" {
		t.Skip("runs only as the child process TestCrashRecovery starts")
	}
	f := strings.Split(env, "|")
	path, cred := f[0], f[1]
	var opts *bolt.Options
	if f[2] == "tiny" {
		opts = &bolt.Options{CheckpointBytes: 8 << 10, LogSegmentSize: 32 << 10}
	}
	st, err := bolt.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	is, err := switchboardtest.NewIssuer("crash")
	if err != nil {
		t.Fatal(err)
	}
	off := sb.Quotas{LiveEdgesPerRequester: -1, RequesterBurst: -1, TargetBurst: -1, PendingPerTarget: -1, Cooldown: -1}
	s, err := sb.New(st, &sb.Config{Issuers: []sb.Issuer{is.Config()}, Quotas: off})
	if err != nil {
		t.Fatal(err)
	}
	owner := sb.Human{Issuer: "https://id.example.com", Subject: "owner"}
	c := sb.Credential(cred)
	var mu sync.Mutex
	ack := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	// Friend requests, approvals and revocations beside the queue traffic.
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bg := context.Background()
			for n := 0; ; n++ {
				sub := fmt.Sprintf("r%d-%d-%d", os.Getpid(), w, n)
				if _, err := s.Publish(bg, sb.Persona{ID: sub, Owner: is.Human(sub), Card: sb.PersonaCard(sb.CardFields{Name: "R", Description: "r", Version: "1", URL: "https://r.example/" + sub})}); err != nil {
					continue
				}
				_, pickup := sb.NewPickup()
				req := sb.FriendRequest{From: sub, To: "desk", Scope: sb.Scope{{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor}}}, Why: "crash test", Pickup: pickup}
				req.IDToken = is.RequestToken(sub, req, time.Now())
				e, _, err := s.Request(bg, req)
				if err != nil {
					continue
				}
				ack("request %s", e.ID)
				g, err := s.Approve(bg, owner, e.ID, nil)
				if err != nil {
					continue
				}
				ack("approve %s", e.ID)
				if n%2 == 0 && s.Revoke(bg, owner, g.ID) == nil {
					ack("revoke %s", e.ID)
				}
			}
		}()
	}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key := fmt.Sprintf("k%d", rand.IntN(5000))
				td, _, err := s.CreateFor(context.Background(), c, "inbox", sb.NewTodo{Kind: "k", DedupKey: key})
				if err == nil {
					ack("create %s %s", key, td.ID)
				}
				if w%4 != 0 {
					continue
				}
				got, l, err := s.Claim(context.Background(), c, "inbox", nil)
				if err != nil {
					continue
				}
				if rand.IntN(4) == 0 {
					_ = s.Fail(context.Background(), c, l, "flaky")
				} else if s.Complete(context.Background(), c, l, []byte(`{"ok":true}`)) == nil {
					ack("complete %s", got.ID)
				}
			}
		}()
	}
	wg.Wait()
}
