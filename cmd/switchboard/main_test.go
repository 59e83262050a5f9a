package main

import (
	"bytes"
	"context"
	"crypto/rand"
	be "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/postgres"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var ctx = context.Background()

// binary builds the command once per test.
func binary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "switchboard")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

// sb runs the built binary and returns stdout (and stderr, when it
// failed) and the exit status.
func sb(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, errs, code := sbStreams(t, bin, args...)
	if code != 0 {
		out += errs
	}
	return out, code
}

// sbStreams runs the built binary and returns stdout, stderr and the exit
// status.
func sbStreams(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errb.String(), 0
}

// fill gives st a desk with three todos in bob-desk/inbox: one done, one
// dead, one ready.
func fill(t *testing.T, st store.Store) {
	t.Helper()
	is, err := switchboardtest.NewIssuer("cli")
	require.NoError(t, err)
	defer is.Close()
	s, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{is.Config()}})
	require.NoError(t, err)
	defer s.Close()
	bob := is.Human("bob")
	_, err = s.Publish(ctx, switchboard.Persona{ID: "bob-desk", Owner: bob, Card: switchboard.PersonaCard(switchboard.CardFields{Name: "Desk", Description: "d", Version: "1", URL: "https://x.example/agents/bob-desk"})})
	require.NoError(t, err)
	verbs := []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbClaim, switchboard.VerbComplete, switchboard.VerbFail}
	_, cred, err := s.Vend(ctx, bob, switchboard.VendRequest{Agent: "bob-desk", Scope: switchboard.Scope{{Queue: "inbox", Verbs: verbs}}})
	require.NoError(t, err)
	for i, title := range []string{"done", "dead", "ready"} {
		_, _, err := s.CreateFor(ctx, cred, "inbox", switchboard.NewTodo{Kind: "k", Title: title, MaxAttempts: 1, Priority: -i})
		require.NoError(t, err)
	}
	_, l, err := s.Claim(ctx, cred, "inbox", nil)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, cred, l, nil))
	_, l, err = s.Claim(ctx, cred, "inbox", nil)
	require.NoError(t, err)
	require.NoError(t, s.Fail(ctx, cred, l, "the printer is on fire"))
}

func queuesOf(t *testing.T, out string) map[string]switchboard.QueueStats {
	var qs []switchboard.QueueStats
	require.NoError(t, json.Unmarshal([]byte(out), &qs), out)
	m := map[string]switchboard.QueueStats{}
	for _, q := range qs {
		m[q.Queue] = q
	}
	return m
}

func TestOnABoltStore(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sb.db")
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	fill(t, st)
	require.NoError(t, st.Close())

	out, code := sb(t, bin, "--db", path, "queues", "--json")
	require.Zero(t, code, out)
	q := queuesOf(t, out)["bob-desk/inbox"]
	require.Equal(t, switchboard.QueueStats{Queue: "bob-desk/inbox", Ready: 1, Done: 1, Dead: 1}, q)
	out, code = sb(t, bin, "--db", path, "queues")
	require.Zero(t, code)
	require.Contains(t, out, "QUEUE")
	require.Regexp(t, `bob-desk/inbox\s+1\s+0\s+0\s+1\s+1\s+0`, out)

	out, code = sb(t, bin, "--db", path, "todos", "bob-desk/inbox", "--state", "dead")
	require.Zero(t, code, out)
	require.Contains(t, out, "the printer is on fire")
	require.Contains(t, out, "1/1")
	var dead []switchboard.Todo
	out, _ = sb(t, bin, "--db", path, "todos", "bob-desk/inbox", "--state", "dead", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &dead))
	require.Len(t, dead, 1)
	out, code = sb(t, bin, "--db", path, "show", dead[0].ID)
	require.Zero(t, code, out)
	require.Contains(t, out, "attempt 1")

	// Redrive works: the dead todo is ready again.
	out, code = sb(t, bin, "--db", path, "redrive", "bob-desk/inbox")
	require.Zero(t, code, out)
	require.Contains(t, out, "1 dead todo(s) re-queued")
	out, _ = sb(t, bin, "--db", path, "queues", "--json")
	require.Equal(t, switchboard.QueueStats{Queue: "bob-desk/inbox", Ready: 2, Done: 1}, queuesOf(t, out)["bob-desk/inbox"])
	_, code = sb(t, bin, "--db", path, "redrive", "bob-desk/inbox", dead[0].ID)
	require.Equal(t, 1, code, "no longer dead: an error, nothing changed")

	out, code = sb(t, bin, "--db", path, "audit", "verify")
	require.Zero(t, code, out)
	require.Contains(t, out, "ok: events")
	// The progress bar (drawn by default on a terminal) ends at every event.
	out, errs, code := sbStreams(t, bin, "--db", path, "audit", "verify", "--progress")
	require.Zero(t, code, errs)
	require.Contains(t, out, "ok: events")
	require.Regexp(t, `verifying \[=+\] 100\.0% (\d+)/(\d+) events\n$`, errs)

	// Signed checkpoints and a rotated key: the CLI signs with the key
	// file and keeps the checkpoint beside it (as examples/host does);
	// after a rotation it verifies with the new key and the old listed.
	oldKey, oldV, err := switchboard.NewLogKey("cli.test/log")
	require.NoError(t, err)
	newKey, newV, err := switchboard.NewLogKey("cli.test/log")
	require.NoError(t, err)
	keyFile := filepath.Join(dir, "log.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(oldKey+"\n"), 0o600))
	require.NoError(t, os.WriteFile(keyFile+".checkpoint", nil, 0o600))
	out, code = sb(t, bin, "--db", path, "--log-key", keyFile, "audit", "checkpoint")
	require.Zero(t, code, out)
	kept, err := os.ReadFile(keyFile + ".checkpoint")
	require.NoError(t, err)
	require.Equal(t, out, string(kept), "the checkpoint is kept beside the key")
	out, code = sb(t, bin, "--db", path, "audit", "verify", "--verifier-key", oldV)
	require.Zero(t, code, out)
	require.NoError(t, os.WriteFile(keyFile, []byte(newKey+"\n"), 0o600))
	out, code = sb(t, bin, "--db", path, "--log-key", keyFile, "audit", "checkpoint")
	require.Equal(t, exitAudit, code, "a new key that does not list the old: %s", out)
	out, code = sb(t, bin, "--db", path, "--log-key", keyFile, "--previous-log-key", oldV, "audit", "checkpoint")
	require.Zero(t, code, out)
	out, code = sb(t, bin, "--db", path, "audit", "verify", "--verifier-key", newV, "--verifier-key", oldV)
	require.Zero(t, code, out)
	out, code = sb(t, bin, "--db", path, "audit", "verify", "--verifier-key", oldV)
	require.Equal(t, exitAudit, code, "signed with the new key now: %s", out)

	backup := filepath.Join(dir, "backup.db")
	out, code = sb(t, bin, "--db", path, "backup", backup)
	require.Zero(t, code, out)
	out, code = sb(t, bin, "--db", backup, "queues", "--json")
	require.Zero(t, code, out)
	require.Equal(t, 2, queuesOf(t, out)["bob-desk/inbox"].Ready, "the backup holds the store")

	// A store a live process holds — and keeps writing — is read through
	// a snapshot, without blocking the writer; a redrive, which would
	// change it, is refused.
	held, err := bolt.Open(path, nil)
	require.NoError(t, err)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = held.Update(ctx, func(tx store.Tx) error { return tx.Put("cli_test", []byte(strconv.Itoa(i)), []byte("x")) })
		}
	}()
	out, errs, code = sbStreams(t, bin, "--db", path, "queues", "--json")
	require.Zero(t, code, errs)
	require.Contains(t, errs, "reading a snapshot")
	require.Equal(t, 2, queuesOf(t, out)["bob-desk/inbox"].Ready)
	out, code = sb(t, bin, "--db", path, "redrive", "bob-desk/inbox")
	require.Equal(t, exitLocked, code, out)
	close(stop)
	<-done
	require.NoError(t, held.Close())

	// A tampered audit event: verify fails with status 3, naming it.
	st, err = bolt.Open(path, nil)
	require.NoError(t, err)
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		var k, v []byte
		if err := tx.Scan("events", nil, nil, func(key, val []byte) bool { k, v = key, bytes.Clone(val); return false }); err != nil {
			return err
		}
		v = bytes.Replace(v, []byte("persona.published"), []byte("persona.publishee"), 1)
		return tx.Put("events", k, v)
	}))
	require.NoError(t, st.Close())
	out, code = sb(t, bin, "--db", path, "audit", "verify")
	require.Equal(t, exitAudit, code, out)

	// Usage errors.
	_, code = sb(t, bin, "queues")
	require.Equal(t, exitUsage, code, "no store named")
	_, code = sb(t, bin, "--db", path, "nonsense")
	require.Equal(t, exitUsage, code)
	out, code = sb(t, bin, "--help")
	require.Zero(t, code)
	require.Contains(t, out, "redrive")
}

func TestOnPostgreSQL(t *testing.T) {
	dsn := os.Getenv("SWITCHBOARD_POSTGRES_DSN")
	if dsn == "" {
		switchboardtest.Skip(t, "no PostgreSQL server: set SWITCHBOARD_POSTGRES_DSN (.ci/postgres start prints one)")
	}
	bin := binary(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	table := "cli_" + hex.EncodeToString(b)
	st, err := postgres.Open(ctx, dsn, &postgres.Options{Table: table})
	require.NoError(t, err)
	defer st.Close()
	fill(t, st)
	out, code := sb(t, bin, "--dsn", dsn, "--table", table, "queues", "--json")
	require.Zero(t, code, out)
	require.Equal(t, switchboard.QueueStats{Queue: "bob-desk/inbox", Ready: 1, Done: 1, Dead: 1}, queuesOf(t, out)["bob-desk/inbox"])
	out, code = sb(t, bin, "--dsn", dsn, "--table", table, "redrive", "bob-desk/inbox")
	require.Zero(t, code, out)
	out, code = sb(t, bin, "--dsn", dsn, "--table", table, "audit", "verify")
	require.Zero(t, code, out)
	require.True(t, strings.HasPrefix(out, "ok: events"), out)
}

// TestMain runs the tests, then names on stderr each test that skipped
// for want of something on this machine, and why (switchboardtest.Skip).
func TestMain(m *testing.M) { switchboardtest.Main(m) }

// One error style on the command line: every error the library names
// (switchboardtest.ErrorCases, each from a real call) is printed with
// "switchboard: " once, as the library words it.
func TestErrorLines(t *testing.T) {
	for _, c := range switchboardtest.ErrorCases(t) {
		line := errorLine(c.Err)
		require.Equal(t, 1, strings.Count(line, "switchboard: "), "%s: %s", c.Name, line)
		require.Equal(t, c.Err.Error(), line, c.Name)
	}
	require.Equal(t, "switchboard: open x.db: no such file", errorLine(errors.New("open x.db: no such file")))
}

// upgrade-records moves a store written at layout 7 to 9, after which its
// todo records are written checksummed; on a file a running host holds it
// refuses (exit 4) and changes nothing.
func TestUpgradeRecords(t *testing.T) {
	bin := binary(t)
	path := filepath.Join(t.TempDir(), "sb.db")
	st, err := bolt.Open(path, nil)
	require.NoError(t, err)
	layout := func() uint64 {
		var v uint64
		require.NoError(t, st.View(ctx, func(tx store.Tx) error {
			b, err := tx.Get("meta", []byte("schema"))
			if err == nil {
				v = be.BigEndian.Uint64(b)
			}
			return err
		}))
		return v
	}
	// A store as the release before wrote it: layout 7.
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		return tx.Put("meta", []byte("schema"), be.BigEndian.AppendUint64(nil, 7))
	}))
	fill(t, st)
	require.Equal(t, uint64(7), layout())

	out, errs, code := sbStreams(t, bin, "--db", path, "upgrade-records")
	require.Equal(t, 4, code, "held by this test: %s %s", out, errs)
	require.Contains(t, errs, "held by another process")
	require.Equal(t, uint64(7), layout())
	require.NoError(t, st.Close())

	out, code = sb(t, bin, "--db", path, "upgrade-records")
	require.Zero(t, code, out)
	require.Contains(t, out, "layout 9")
	st, err = bolt.Open(path, nil)
	require.NoError(t, err)
	defer st.Close()
	require.Equal(t, uint64(9), layout())
	out, code = sb(t, bin, "--db", path, "queues", "--json")
	require.Zero(t, code, out)
	require.Equal(t, switchboard.QueueStats{Queue: "bob-desk/inbox", Ready: 1, Done: 1, Dead: 1}, queuesOf(t, out)["bob-desk/inbox"], "the records written before read as before")
}
