package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// docs/audit-log.md: "On a live host's file the CLI reads a snapshot" and
// checks it against the checkpoint the host keeps beside its log key. The
// host keeps signing while the CLI runs: the CLI reads the kept checkpoint
// before it takes the snapshot, so a newer one the host kept meanwhile
// never makes the snapshot look cut short (found from outside: 8 of 8 runs
// said "cut short", exit 3).
func TestCLIOnALiveHostThatKeepsSigning(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sb.db")
	keyFile := filepath.Join(dir, "log.key")
	skey, _, err := switchboard.NewLogKey("cli.test/log")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyFile, []byte(skey+"\n"), 0o600))

	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	defer st.Close()
	is, err := switchboardtest.NewIssuer("cli")
	require.NoError(t, err)
	defer is.Close()
	host, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{is.Config()}, LogKey: skey,
		Checkpoints: switchboard.CheckpointFile(keyFile + ".checkpoint")})
	require.NoError(t, err)
	defer host.Close()
	bob := is.Human("bob")
	_, err = host.Publish(ctx, switchboard.Persona{ID: "bob-desk", Owner: bob, Card: switchboard.PersonaCard(switchboard.CardFields{Name: "Desk", Description: "d", Version: "1", URL: "https://x.example/agents/bob-desk"})})
	require.NoError(t, err)
	_, cred, err := host.Vend(ctx, bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}})
	require.NoError(t, err)
	_, err = host.Checkpoint(ctx)
	require.NoError(t, err)

	// The live host: work arrives, and its Reap signs and keeps a checkpoint.
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			_, _, _ = host.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k"})
			_, _ = host.Checkpoint(ctx)
		}
	}()
	bad := 0
	var last string
	for range 8 {
		out, code := sb(t, bin, "--db", path, "--log-key", keyFile, "audit", "checkpoint")
		if code == exitAudit {
			bad++
			last = out
		}
	}
	stop.Store(true)
	<-done
	require.NoError(t, host.CheckLog(ctx), "the host's log is sound")
	t.Logf("%d of 8 CLI runs reported a broken log; last: %s", bad, strings.TrimSpace(last))
	require.Zero(t, bad)
}
