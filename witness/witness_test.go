package witness_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/torchwood"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
)

var ctx = context.Background()

// logWriter is a Switchboard whose audit log a test grows.
type logWriter struct {
	t   *testing.T
	sb  *switchboard.Switchboard
	kit *switchboardtest.Kit
}

func (l *logWriter) grow(n int) {
	l.t.Helper()
	for i := range n {
		l.kit.Publish("alice", "bot-"+strings.Repeat("x", i%3)+string(rune('a'+i%26)))
	}
}

func newLog(t *testing.T, logKey string, witnesses ...switchboard.WitnessConfig) *logWriter {
	t.Helper()
	k := switchboardtest.NewKit(t, &switchboard.Config{LogKey: logKey, Witnesses: witnesses})
	return &logWriter{t: t, sb: k.SB, kit: k}
}

// refusals records the witness's reports.
type refusals struct {
	mu   sync.Mutex
	msgs []string
}

func (r *refusals) Enabled(context.Context, slog.Level) bool { return true }
func (r *refusals) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec.Level >= slog.LevelError {
		r.msgs = append(r.msgs, rec.Message)
	}
	return nil
}
func (r *refusals) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *refusals) WithGroup(string) slog.Handler      { return r }
func (r *refusals) count() int                         { r.mu.Lock(); defer r.mu.Unlock(); return len(r.msgs) }

func newWitness(t *testing.T, logKeys ...string) (*witness.Server, string, ed25519.PrivateKey, *refusals) {
	t.Helper()
	priv, vkey, err := witness.NewKey("witness.example/w1")
	require.NoError(t, err)
	origin := ""
	if len(logKeys) > 0 {
		v, err := note.NewVerifier(logKeys[0])
		require.NoError(t, err)
		origin = v.Name()
	}
	rec := &refusals{}
	w, err := witness.NewServer(witness.Config{Name: "witness.example/w1", Key: priv, Store: memory.New(),
		Logs: []witness.Log{{Origin: origin, Keys: logKeys}}, Logger: slog.New(rec)})
	require.NoError(t, err)
	require.Equal(t, vkey, w.VerifierKey())
	return w, vkey, priv, rec
}

// A witness cosigns a log's checkpoints as the log grows — the first
// as it is, each later one after a consistency proof from the last — and
// the cosignatures, stored with the checkpoint, satisfy a 1-of-1 quorum.
// Its cosignatures are C2SP tlog-cosignature/v1: torchwood's verifier
// (written by the spec's author) accepts them, and switchboard accepts
// torchwood's.
func TestWitnessCosignsAGrowingLog(t *testing.T) {
	skey, vkey, err := switchboard.NewLogKey("log.example/audit")
	require.NoError(t, err)
	w, wkey, priv, rec := newWitness(t, vkey)
	l := newLog(t, skey, switchboard.WitnessConfig{Witness: w, Key: wkey})
	l.grow(3)
	cp1, err := l.sb.Checkpoint(ctx)
	require.NoError(t, err)
	_, names, err := switchboard.OpenWitnessedCheckpoint(cp1.Note, vkey, []string{wkey}, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"witness.example/w1"}, names)
	for range 3 {
		l.grow(5)
		cp, err := l.sb.Checkpoint(ctx)
		require.NoError(t, err)
		_, _, err = switchboard.OpenWitnessedCheckpoint(cp.Note, vkey, []string{wkey}, 1)
		require.NoError(t, err, "size %d", cp.Size)
	}
	again, err := l.sb.Checkpoint(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(again.Note), "— witness.example/w1 "), "cosigned once per checkpoint")
	assert.Zero(t, rec.count())

	// Interop: torchwood's verifier, for the same key.
	tw, err := torchwood.NewCosignatureSigner("witness.example/w1", priv)
	require.NoError(t, err)
	n, err := note.Open(again.Note, note.VerifierList(tw.Verifier()))
	require.NoError(t, err, "torchwood verifies the witness's cosignature")
	require.Len(t, n.Sigs, 1)
	// And the other way: a cosignature torchwood makes satisfies ours.
	logOnly, _, _ := bytes.Cut(again.Note, []byte("\n— witness"))
	twNote, err := note.Sign(&note.Note{Text: n.Text}, tw)
	require.NoError(t, err)
	_, sigs, _ := bytes.Cut(twNote, []byte("\n\n"))
	_, names, err = switchboard.OpenWitnessedCheckpoint(append(append(logOnly, '\n'), sigs...), vkey, []string{wkey}, 1)
	require.NoError(t, err, "switchboard verifies torchwood's cosignature")
	assert.Equal(t, []string{"witness.example/w1"}, names)
	_, _, err = switchboard.OpenWitnessedCheckpoint(logOnly, vkey, []string{wkey}, 1)
	require.ErrorIs(t, err, switchboard.ErrProof, "without the cosignature the quorum fails")
}

// Two logs under one key and origin — the same log showing two histories
// — meet one witness: the second is refused with a consistency proof that
// does not lead from what the witness cosigned, its Checkpoint reports
// ErrAuditBroken, and the witness reports the fork.
func TestWitnessRefusesAFork(t *testing.T) {
	skey, vkey, err := switchboard.NewLogKey("log.example/audit")
	require.NoError(t, err)
	w, wkey, _, rec := newWitness(t, vkey)
	honest := newLog(t, skey, switchboard.WitnessConfig{Witness: w, Key: wkey})
	honest.grow(8)
	_, err = honest.sb.Checkpoint(ctx)
	require.NoError(t, err)

	fork := newLog(t, skey, switchboard.WitnessConfig{Witness: w, Key: wkey})
	fork.grow(12)
	_, err = fork.sb.Checkpoint(ctx)
	require.ErrorIs(t, err, switchboard.ErrAuditBroken)
	require.ErrorContains(t, err, "refused")
	assert.Equal(t, 1, rec.count(), "the witness reports the fork")

	// A log that rolls back — shows the witness fewer events than it
	// cosigned — is refused by the Switchboard itself.
	small := newLog(t, skey, switchboard.WitnessConfig{Witness: w, Key: wkey})
	small.grow(1)
	_, err = small.sb.Checkpoint(ctx)
	require.ErrorIs(t, err, switchboard.ErrAuditBroken)
}

// Over HTTP (C2SP tlog-witness add-checkpoint): the Client and Server
// speak the protocol's status codes — 200 with the cosignature, 409 with
// the witness's size, 422 for an inconsistent proof, 404 for an unknown
// log, 403 for a bad signature, 400 for a malformed body.
func TestWitnessOverHTTP(t *testing.T) {
	skey, vkey, err := switchboard.NewLogKey("log.example/audit")
	require.NoError(t, err)
	w, wkey, _, _ := newWitness(t, vkey)
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	client := &witness.Client{URL: srv.URL + "/add-checkpoint"}
	l := newLog(t, skey, switchboard.WitnessConfig{Witness: client, Key: wkey})
	l.grow(4)
	cp1, err := l.sb.Checkpoint(ctx)
	require.NoError(t, err)
	_, _, err = switchboard.OpenWitnessedCheckpoint(cp1.Note, vkey, []string{wkey}, 1)
	require.NoError(t, err)
	l.grow(4)
	cp2, err := l.sb.Checkpoint(ctx)
	require.NoError(t, err)
	_, _, err = switchboard.OpenWitnessedCheckpoint(cp2.Note, vkey, []string{wkey}, 1)
	require.NoError(t, err)

	logOnly, _, _ := bytes.Cut(cp2.Note, []byte("\n— witness"))
	logOnly = append(logOnly, '\n')
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL+"/add-checkpoint", "text/plain", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("old 0\n\n" + string(logOnly))
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, "8\n", body, "the witness's size")
	_, err = client.AddCheckpoint(ctx, 0, nil, logOnly)
	var conflict *switchboard.WitnessConflict
	require.ErrorAs(t, err, &conflict)
	assert.Equal(t, uint64(8), conflict.Size)

	other, _, err := switchboard.NewLogKey("other.example/audit")
	require.NoError(t, err)
	o := newLog(t, other)
	o.grow(2)
	ocp, err := o.sb.Checkpoint(ctx)
	require.NoError(t, err)
	code, _ = post("old 0\n\n" + string(ocp.Note))
	assert.Equal(t, http.StatusNotFound, code, "a log this witness does not witness")

	impostor, _, err := switchboard.NewLogKey("log.example/audit") // same origin, another key
	require.NoError(t, err)
	i := newLog(t, impostor)
	i.grow(2)
	icp, err := i.sb.Checkpoint(ctx)
	require.NoError(t, err)
	code, _ = post("old 8\n\n" + string(icp.Note))
	assert.Equal(t, http.StatusForbidden, code, "signed by another key")

	code, _ = post("old x\n\n" + string(logOnly))
	assert.Equal(t, http.StatusBadRequest, code)
	code, _ = post("old 9\n\n" + string(logOnly))
	assert.Equal(t, http.StatusBadRequest, code, "an old size past the checkpoint")
	code, body = post("old 4\n\n" + string(logOnly))
	assert.Equal(t, http.StatusConflict, code, "an old size the witness does not hold")
	assert.Equal(t, "8\n", body)

	// The same log showing another history: a proof from the witness's
	// size in that history does not lead from what it cosigned.
	fork := newLog(t, skey)
	fork.grow(12)
	fcp, err := fork.sb.Checkpoint(ctx)
	require.NoError(t, err)
	p, err := fork.sb.ProveConsistency(ctx, cp2.Size, fcp.Size)
	require.NoError(t, err)
	_, err = client.AddCheckpoint(ctx, cp2.Size, p.Hashes, fcp.Note)
	require.ErrorIs(t, err, switchboard.ErrWitnessRefused, "422: the fork is refused")
}

// BenchmarkWitnessRoundTrip measures one add-checkpoint round trip over
// loopback HTTP — the request, the witness's signature check, its
// consistency check and durable record, its cosignature — for a log
// growing by one event per checkpoint, and reports the p99.
func BenchmarkWitnessRoundTrip(b *testing.B) {
	skey, vkey, err := switchboard.NewLogKey("log.example/audit")
	if err != nil {
		b.Fatal(err)
	}
	priv, _, err := witness.NewKey("witness.example/w1")
	if err != nil {
		b.Fatal(err)
	}
	w, err := witness.NewServer(witness.Config{Name: "witness.example/w1", Key: priv, Store: memory.New(),
		Logs: []witness.Log{{Origin: "log.example/audit", Keys: []string{vkey}}}})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(w)
	defer srv.Close()
	client := &witness.Client{URL: srv.URL + "/add-checkpoint"}
	k := switchboardtest.NewKit(b, &switchboard.Config{LogKey: skey})
	var old uint64
	durations := make([]time.Duration, 0, b.N)
	for i := range b.N {
		b.StopTimer()
		k.Publish("alice", fmt.Sprintf("bot-%d", i))
		cp, err := k.SB.Checkpoint(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var proof []tlog.Hash
		if old > 0 {
			p, err := k.SB.ProveConsistency(ctx, old, cp.Size)
			if err != nil {
				b.Fatal(err)
			}
			proof = p.Hashes
		}
		b.StartTimer()
		start := time.Now()
		if _, err := client.AddCheckpoint(ctx, old, proof, cp.Note); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
		old = cp.Size
	}
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)*99/100].Microseconds())/1000, "p99-ms")
}
