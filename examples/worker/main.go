// Command worker drains a queue the way a production worker does, on the
// embedded bbolt store: several workers block in Claim until work arrives,
// heartbeat long work so their lease does not lapse, fail work they cannot
// do (here: dead-lettered after its last attempt, then redriven), complete
// the rest, and stop gracefully when their context ends.
//
//	go run ./examples/worker
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

const todos = 12

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "switchboard-worker")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := bolt.Open(filepath.Join(dir, "switchboard.db"), nil)
	if err != nil {
		return err
	}
	defer st.Close()
	iss, err := switchboardtest.NewIssuer("switchboard-worker")
	if err != nil {
		return err
	}
	defer iss.Close()
	sb, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
	if err != nil {
		return err
	}
	bob := iss.Human("bob")
	if _, err := sb.Publish(ctx, switchboard.Persona{ID: "bob-desk", Owner: bob, Card: switchboard.PersonaCard(switchboard.CardFields{
		Name: "Bob's desk", Description: "Pays invoices", Version: "1.0.0",
		URL: "https://hub.example/agents/bob-desk",
	})}); err != nil {
		return err
	}
	all := []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbClaim, switchboard.VerbHeartbeat,
		switchboard.VerbComplete, switchboard.VerbFail, switchboard.VerbRedrive, switchboard.VerbGet, switchboard.VerbList}
	_, cred, err := sb.Vend(ctx, bob, switchboard.VendRequest{Agent: "bob-desk",
		Scope: switchboard.Scope{{Queue: "invoices", Verbs: all}}})
	if err != nil {
		return err
	}

	// Three workers wait for work before any exists.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var done atomic.Int32
	finished := make(chan struct{})
	var wg sync.WaitGroup
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(wctx, sb, cred, fmt.Sprintf("w%d", i), func() {
				if done.Add(1) == todos {
					close(finished)
				}
			})
		}()
	}

	// Work arrives: ordinary invoices, one slow one, one the workers reject.
	for i := range todos {
		kind := "invoice.pay"
		switch i {
		case 3:
			kind = "invoice.slow"
		case 7:
			kind = "invoice.broken"
		}
		n := switchboard.NewTodo{Kind: kind, Title: fmt.Sprintf("invoice %d", i), DedupKey: fmt.Sprintf("inv-%d", i)}
		if kind == "invoice.broken" {
			n.MaxAttempts = 1 // dead-letter on its first failure, so this demo need not wait for a backoff
		}
		if _, _, err := sb.CreateFor(ctx, cred, "invoices", n); err != nil {
			return err
		}
	}

	// The rejected invoice is dead; a human fixes the cause and redrives it.
	deadline := time.After(30 * time.Second)
	for {
		dead, err := sb.List(ctx, cred, "invoices", &switchboard.ListOptions{State: switchboard.TodoDead})
		if err != nil {
			return err
		}
		if len(dead) == 1 {
			fmt.Printf("dead-lettered: %s (%s)\n", dead[0].Title, dead[0].Error)
			fixed.Store(true)
			if err := sb.Redrive(ctx, cred, dead[0].ID); err != nil {
				return err
			}
			fmt.Println("redriven after the fix")
			break
		}
		select {
		case <-deadline:
			return errors.New("the broken invoice never reached the dead-letter state")
		case <-time.After(20 * time.Millisecond):
		}
	}

	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		return errors.New("the queue was not drained")
	}
	stop() // graceful: blocked claims return, in-flight work has finished
	wg.Wait()
	fmt.Printf("all %d invoices done; workers stopped\n", todos)
	return nil
}

// fixed says the cause of the broken invoice was fixed.
var fixed atomic.Bool

// work is one worker: claim (blocking), do, complete or fail, until ctx ends.
func work(ctx context.Context, sb *switchboard.Switchboard, cred switchboard.Credential, name string, onDone func()) {
	for {
		td, lease, err := sb.Claim(ctx, cred, "invoices", &switchboard.ClaimOptions{Wait: true, Lease: 2 * time.Second})
		if err != nil {
			if ctx.Err() == nil {
				log.Printf("%s: claim: %v", name, err)
			}
			return
		}
		switch td.Kind {
		case "invoice.broken":
			if !fixed.Load() {
				if err := sb.Fail(ctx, cred, lease, "payee account unknown"); err != nil {
					log.Printf("%s: fail: %v", name, err)
				}
				continue
			}
		case "invoice.slow":
			// Longer than the 2 s lease: heartbeat while working.
			if lease, err = slow(ctx, sb, cred, lease); err != nil {
				log.Printf("%s: %s: %v", name, td.Title, err)
				continue
			}
		}
		if err := sb.Complete(ctx, cred, lease, []byte(`{"paid":true}`)); err != nil {
			// ErrLeaseLost: someone else owns it now; their result counts.
			log.Printf("%s: complete: %v", name, err)
			continue
		}
		fmt.Printf("%s completed %s (attempt %d)\n", name, td.Title, lease.Attempt)
		onDone()
	}
}

// slow does three seconds of work, extending the lease every 500 ms.
func slow(ctx context.Context, sb *switchboard.Switchboard, cred switchboard.Credential, l switchboard.Lease) (switchboard.Lease, error) {
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		var err error
		if l, err = sb.Heartbeat(ctx, cred, l, 2*time.Second); err != nil {
			return l, err
		}
	}
	return l, nil
}
