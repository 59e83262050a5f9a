package witness_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
)

// litewitness builds the reference C2SP witness (filippo.io/torchwood
// v0.6.1's cmd/litewitness, and cmd/witnessctl to configure it) from the
// module cache, and returns the directory of the two binaries.
func litewitness(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds litewitness; skipped with -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		switchboardtest.Skip(t, "no go command to build litewitness")
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	dl := exec.Command(goBin, "mod", "download", "-json", "filippo.io/torchwood@v0.6.1")
	dl.Dir, dl.Env = t.TempDir(), env
	out, err := dl.Output()
	var m struct{ Dir, Error string }
	if err != nil || json.Unmarshal(out, &m) != nil || m.Dir == "" {
		switchboardtest.Skip(t, "cannot download filippo.io/torchwood@v0.6.1 (litewitness): %v %s", err, m.Error)
	}
	bin := t.TempDir()
	b := exec.Command(goBin, "build", "-o", bin+string(filepath.Separator), "./cmd/litewitness", "./cmd/witnessctl")
	b.Dir, b.Env = m.Dir, env
	if out, err := b.CombinedOutput(); err != nil {
		switchboardtest.Skip(t, "cannot build litewitness: %v\n%s", err, out)
	}
	return bin
}

// startLitewitness runs litewitness named name, with key priv (served by
// an ssh-agent in this process, as litewitness takes its key), witnessing
// the log of verifier key logVKey; it returns its add-checkpoint URL and
// its database.
func startLitewitness(t *testing.T, bin, name string, priv ed25519.PrivateKey, origin, logVKey string) (string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "lw") // short: a unix socket's path is short
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	keyring := agent.NewKeyring()
	require.NoError(t, keyring.Add(agent.AddedKey{PrivateKey: priv}))
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _ = agent.ServeAgent(keyring, c) }()
		}
	}()
	db := filepath.Join(dir, "litewitness.db")
	for _, args := range [][]string{
		{"add-log", "-db", db, "-origin", origin},
		{"add-key", "-db", db, "-origin", origin, "-key", logVKey},
	} {
		out, err := exec.Command(filepath.Join(bin, "witnessctl"), args...).CombinedOutput()
		require.NoError(t, err, "witnessctl %v: %s", args, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	sshPub, err := ssh.NewPublicKey(priv.Public())
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(bin, "litewitness"), "-db", db, "-name", name, "-ssh-agent", sock,
		"-key", ssh.FingerprintSHA256(sshPub), "-listen", addr)
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("litewitness:\n%s", stderr.String())
		}
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "litewitness did not listen: %s", &stderr)
	return "http://" + addr + "/add-checkpoint", db
}

// litewitness, the reference C2SP witness, cosigns a Switchboard's log
// through witness.Client: the first checkpoint, a grown one with its
// consistency proof, one after the Switchboard forgot the size the
// witness holds (409, asked again from it); the cosignatures satisfy a
// 1-of-1 quorum. The same log showing it another history is refused (its
// 422), Checkpoint's error matches ErrAuditBroken and ErrWitnessRefused,
// and the refused checkpoint is not stored. A log it does not know is
// ErrWitnessForbidden (litewitness answers 403 where the spec says 404),
// and that checkpoint stands.
func TestLitewitnessCosignsOurLog(t *testing.T) {
	bin := litewitness(t)
	skey, vkey, err := switchboard.NewLogKey("log.example/audit")
	require.NoError(t, err)
	priv, wkey, err := witness.NewKey("witness.example/litewitness")
	require.NoError(t, err)
	url, _ := startLitewitness(t, bin, "witness.example/litewitness", priv, "log.example/audit", vkey)
	wc := switchboard.WitnessConfig{Witness: &witness.Client{URL: url}, Key: wkey}

	honest := newLog(t, skey, wc)
	honest.grow(3)
	cp, err := honest.sb.Checkpoint(ctx)
	require.NoError(t, err)
	_, names, err := switchboard.OpenWitnessedCheckpoint(cp.Note, vkey, []string{wkey}, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"witness.example/litewitness"}, names)
	honest.grow(5)
	cp, err = honest.sb.Checkpoint(ctx)
	require.NoError(t, err)
	_, _, err = switchboard.OpenWitnessedCheckpoint(cp.Note, vkey, []string{wkey}, 1)
	require.NoError(t, err, "cosigned after a consistency proof from the last")

	require.NoError(t, honest.kit.Store.Update(ctx, func(tx store.Tx) error {
		return tx.Delete("meta", []byte("witness\x00witness.example/litewitness"))
	}))
	honest.grow(2)
	cp, err = honest.sb.Checkpoint(ctx)
	require.NoError(t, err, "409 with the witness's size, then a proof from it")
	_, _, err = switchboard.OpenWitnessedCheckpoint(cp.Note, vkey, []string{wkey}, 1)
	require.NoError(t, err)

	fork := newLog(t, skey, wc)
	fork.grow(20)
	_, err = fork.sb.Checkpoint(ctx)
	require.ErrorIs(t, err, switchboard.ErrAuditBroken)
	require.ErrorIs(t, err, switchboard.ErrWitnessRefused)
	var stored []byte
	require.NoError(t, fork.kit.Store.View(ctx, func(tx store.Tx) error {
		stored, _ = tx.Get("meta", []byte("checkpoint"))
		return nil
	}))
	require.Nil(t, stored, "a checkpoint the witness refused is not stored")

	other, _, err := switchboard.NewLogKey("other.example/audit")
	require.NoError(t, err)
	stranger := newLog(t, other, wc)
	stranger.grow(2)
	cp, err = stranger.sb.Checkpoint(ctx)
	require.ErrorIs(t, err, switchboard.ErrWitnessForbidden)
	require.NotErrorIs(t, err, switchboard.ErrAuditBroken)
	require.NotEmpty(t, cp.Note, "the checkpoint stands")
}
