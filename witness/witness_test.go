package witness_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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
	"github.com/switchboardhq/switchboard/internal/cosig"
	"github.com/switchboardhq/switchboard/store"
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

// memTree is a Merkle tree in memory (tlog's stored hashes), for
// checkpoints and proofs of any shape.
type memTree struct{ hashes map[int64]tlog.Hash }

func (m *memTree) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		h, ok := m.hashes[x]
		if !ok {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = h
	}
	return out, nil
}

// newMemTree is a tree of n leaves, leaf i being prefix+i.
func newMemTree(t *testing.T, prefix string, n int) *memTree {
	t.Helper()
	m := &memTree{hashes: map[int64]tlog.Hash{}}
	for i := range n {
		hs, err := tlog.StoredHashes(int64(i), []byte(fmt.Sprintf("%s%d", prefix, i)), m)
		require.NoError(t, err)
		for j, h := range hs {
			m.hashes[tlog.StoredHashIndex(0, int64(i))+int64(j)] = h
		}
	}
	return m
}

func (m *memTree) root(t *testing.T, n int) tlog.Hash {
	t.Helper()
	if n == 0 {
		return tlog.Hash(sha256.Sum256(nil))
	}
	h, err := tlog.TreeHash(int64(n), m)
	require.NoError(t, err)
	return h
}

func (m *memTree) proof(t *testing.T, n, old int) []tlog.Hash {
	t.Helper()
	p, err := tlog.ProveTree(int64(n), int64(old), m)
	require.NoError(t, err)
	return p
}

// signedCheckpoint is a checkpoint note of origin, size and root, with
// extension lines ext, signed by each of signers.
func signedCheckpoint(t *testing.T, origin string, size int, root tlog.Hash, ext []string, signers ...note.Signer) []byte {
	t.Helper()
	text := fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(root[:]))
	for _, e := range ext {
		text += e + "\n"
	}
	b, err := note.Sign(&note.Note{Text: text}, signers...)
	require.NoError(t, err)
	return b
}

func addCheckpointBody(old int, proof []tlog.Hash, signed []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "old %d\n", old)
	for _, h := range proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(signed)
	return b.String()
}

// The Server as C2SP tlog-witness says, one request after another on one
// log, each with the status, content type and body the spec requires —
// including a checkpoint with extension lines (C2SP tlog-checkpoint, which
// litewitness cosigns too), another signature beside the log's, a fork at
// the size cosigned last (409, the empty tree's included), and the limits
// ServeHTTP documents (63 proof lines, MaxRequest bytes, POST only).
func TestServerSpeaksC2SP(t *testing.T) {
	skey, vkey, err := note.GenerateKey(nil, "log.example/c2sp")
	require.NoError(t, err)
	signer, err := note.NewSigner(skey)
	require.NoError(t, err)
	okey, _, err := note.GenerateKey(nil, "log.example/c2sp") // the same origin, a key the witness does not hold
	require.NoError(t, err)
	other, err := note.NewSigner(okey)
	require.NoError(t, err)
	ukey, _, err := note.GenerateKey(nil, "unknown.example/log")
	require.NoError(t, err)
	unknown, err := note.NewSigner(ukey)
	require.NoError(t, err)
	w, wkey, _, rec := newWitness(t, vkey)
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)

	tree, forked := newMemTree(t, "a", 20), newMemTree(t, "b", 20)
	cp := func(n int, ext ...string) []byte {
		return signedCheckpoint(t, "log.example/c2sp", n, tree.root(t, n), ext, signer)
	}
	steps := []struct {
		name        string
		method      string
		body        string
		status      int
		contentType string
		respBody    string // exact, when set
		refusals    int    // the witness's reports so far
	}{
		{name: "the empty tree, first", body: addCheckpointBody(0, nil, cp(0)), status: 200, contentType: "text/x.tlog.cosignature"},
		{name: "the empty tree with another root: a fork at the size cosigned", body: addCheckpointBody(0, nil,
			signedCheckpoint(t, "log.example/c2sp", 0, tlog.Hash{1}, nil, signer)), status: 409, contentType: "text/x.tlog.size", respBody: "0\n", refusals: 1},
		{name: "from the empty tree, no proof", body: addCheckpointBody(0, nil, cp(5)), status: 200, refusals: 1},
		{name: "old 0 again", body: addCheckpointBody(0, nil, cp(5)), status: 409, contentType: "text/x.tlog.size", respBody: "5\n", refusals: 1},
		{name: "the same checkpoint again", body: addCheckpointBody(5, nil, cp(5)), status: 200, refusals: 1},
		{name: "another root at the size cosigned", body: addCheckpointBody(5, nil,
			signedCheckpoint(t, "log.example/c2sp", 5, forked.root(t, 5), nil, signer)), status: 409, respBody: "5\n", refusals: 2},
		{name: "a proof that does not lead from it", body: addCheckpointBody(5, forked.proof(t, 9, 5),
			signedCheckpoint(t, "log.example/c2sp", 9, forked.root(t, 9), nil, signer)), status: 422, refusals: 3},
		{name: "extension lines", body: addCheckpointBody(5, tree.proof(t, 9, 5), cp(9, "ext one", "— not a signature")), status: 200, refusals: 3},
		{name: "a second signature by a key the witness does not know", body: addCheckpointBody(9, tree.proof(t, 12, 9),
			signedCheckpoint(t, "log.example/c2sp", 12, tree.root(t, 12), nil, signer, unknown)), status: 200, refusals: 3},
		{name: "only a key the witness does not hold", body: addCheckpointBody(12, tree.proof(t, 14, 12),
			signedCheckpoint(t, "log.example/c2sp", 14, tree.root(t, 14), nil, other)), status: 403, refusals: 3},
		{name: "a log it does not witness", body: addCheckpointBody(0, nil, signedCheckpoint(t, "unknown.example/log", 3, tree.root(t, 3), nil, unknown)), status: 404, refusals: 3},
		{name: "old past the checkpoint", body: addCheckpointBody(13, nil, cp(12)), status: 400, refusals: 3},
		{name: "old not the size cosigned", body: addCheckpointBody(9, tree.proof(t, 14, 9), cp(14)), status: 409, respBody: "12\n", refusals: 3},
		{name: "64 proof lines", body: addCheckpointBody(12, make([]tlog.Hash, 64), cp(14)), status: 400, refusals: 3},
		{name: "malformed", body: "old twelve\n\n" + string(cp(14)), status: 400, refusals: 3},
		{name: "too large", body: addCheckpointBody(12, nil, cp(14)) + strings.Repeat("x", witness.MaxRequest), status: 413, refusals: 3},
		{name: "GET", method: http.MethodGet, status: 405, refusals: 3},
		{name: "then on from 12", body: addCheckpointBody(12, tree.proof(t, 20, 12), cp(20)), status: 200, refusals: 3},
	}
	for _, s := range steps {
		method := s.method
		if method == "" {
			method = http.MethodPost
		}
		req, err := http.NewRequest(method, srv.URL+"/add-checkpoint", strings.NewReader(s.body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, s.status, resp.StatusCode, "%s: %s", s.name, body)
		if s.contentType != "" {
			assert.Equal(t, s.contentType, resp.Header.Get("Content-Type"), s.name)
		}
		if s.respBody != "" {
			assert.Equal(t, s.respBody, string(body), s.name)
		}
		if s.status == 200 {
			_, text, _ := strings.Cut(s.body, "\n\n")
			text, _, _ = strings.Cut(text, "\n\n")
			v, err := cosig.NewVerifier(wkey)
			require.NoError(t, err)
			_, err = note.Open(append([]byte(text+"\n\n"), body...), note.VerifierList(v))
			require.NoError(t, err, "%s: the answer is the witness's cosignature of the checkpoint's text, extension lines included", s.name)
		}
		assert.Equal(t, s.refusals, rec.count(), "%s: the witness reports each fork it refuses", s.name)
	}
}

// scripted is a witness over HTTP whose answer a test chooses: answer
// gets the request's old size and the real witness behind it, and writes
// the response.
func scripted(t *testing.T, real *witness.Server, answer func(w http.ResponseWriter, r *http.Request, old uint64, body []byte, real http.Handler)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		var old uint64
		_, err = fmt.Sscanf(string(body), "old %d\n", &old)
		require.NoError(t, err)
		r.Body = io.NopCloser(bytes.NewReader(body))
		answer(w, r, old, body, real)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Checkpoint hears every answer C2SP tlog-witness defines as its doc says:
// cosignatures are kept when they verify with the witness's key (several
// lines allowed, lines of other keys ignored); a 409 with another size is
// asked again from that size; a 409 at the size sent (a fork) and a 422
// are an *AuditError matching ErrWitnessRefused, and the checkpoint is
// neither stored nor kept; 403 and 404 match ErrWitnessForbidden and the
// checkpoint stands; a 400, a 500 or an answer that is not its cosignature
// match ErrWitness and the checkpoint stands.
func TestCheckpointHearsEveryAnswer(t *testing.T) {
	otherPriv, _, err := witness.NewKey("witness.example/other")
	require.NoError(t, err)
	stranger, err := torchwood.NewCosignatureSigner("witness.example/other", otherPriv)
	require.NoError(t, err)
	forward := func(w http.ResponseWriter, r *http.Request, _ uint64, _ []byte, real http.Handler) {
		real.ServeHTTP(w, r)
	}
	status := func(code int, body string) func(http.ResponseWriter, *http.Request, uint64, []byte, http.Handler) {
		return func(w http.ResponseWriter, _ *http.Request, _ uint64, _ []byte, _ http.Handler) {
			w.WriteHeader(code)
			_, _ = io.WriteString(w, body)
		}
	}
	cases := []struct {
		name      string
		answer    func(http.ResponseWriter, *http.Request, uint64, []byte, http.Handler)
		is        []error // what the error matches (none: nil)
		not       []error
		stands    bool // stored and kept
		cosigned  int  // the witness's cosignature lines stored
		strangers int  // other keys' lines stored
		// forget: the witness cosigned before, and the log forgot the size
		// it cosigned (it sends old 0 and is answered 409 with the size).
		forget bool
	}{
		{name: "200", answer: forward, stands: true, cosigned: 1},
		{name: "200 with its line and another key's", answer: func(w http.ResponseWriter, r *http.Request, _ uint64, body []byte, real http.Handler) {
			rw := httptest.NewRecorder()
			real.ServeHTTP(rw, r)
			_, signed, _ := bytes.Cut(body, []byte("\n\n"))
			text, _, _ := bytes.Cut(signed, []byte("\n\n"))
			n, err := note.Sign(&note.Note{Text: string(text) + "\n"}, stranger)
			require.NoError(t, err)
			_, line, _ := bytes.Cut(n, []byte("\n\n"))
			_, _ = w.Write(append(line, rw.Body.Bytes()...))
		}, stands: true, cosigned: 1},
		{name: "409 with another size, then 200", answer: forward, forget: true, stands: true, cosigned: 1},
		{name: "409 at the size sent: a fork", answer: status(409, "0\n"), is: []error{switchboard.ErrAuditBroken, switchboard.ErrWitnessRefused}},
		{name: "422", answer: status(422, "bad proof"), is: []error{switchboard.ErrAuditBroken, switchboard.ErrWitnessRefused}},
		{name: "403", answer: status(403, "no key"), is: []error{switchboard.ErrWitnessForbidden}, not: []error{switchboard.ErrAuditBroken, switchboard.ErrWitness}, stands: true},
		{name: "404", answer: status(404, "unknown log"), is: []error{switchboard.ErrWitnessForbidden}, not: []error{switchboard.ErrAuditBroken, switchboard.ErrWitness}, stands: true},
		{name: "400", answer: status(400, "bad"), is: []error{switchboard.ErrWitness}, not: []error{switchboard.ErrAuditBroken}, stands: true},
		{name: "500", answer: status(500, "oops"), is: []error{switchboard.ErrWitness}, not: []error{switchboard.ErrAuditBroken}, stands: true},
		{name: "200 with another key's line only", answer: func(w http.ResponseWriter, r *http.Request, _ uint64, body []byte, _ http.Handler) {
			_, signed, _ := bytes.Cut(body, []byte("\n\n"))
			text, _, _ := bytes.Cut(signed, []byte("\n\n"))
			n, err := note.Sign(&note.Note{Text: string(text) + "\n"}, stranger)
			require.NoError(t, err)
			_, line, _ := bytes.Cut(n, []byte("\n\n"))
			_, _ = w.Write(line)
		}, is: []error{switchboard.ErrWitness}, not: []error{switchboard.ErrAuditBroken}, stands: true},
		{name: "200 with nonsense", answer: status(200, "hello\n"), is: []error{switchboard.ErrWitness}, stands: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			skey, vkey, err := switchboard.NewLogKey("log.example/audit")
			require.NoError(t, err)
			real, wkey, _, _ := newWitness(t, vkey)
			url := scripted(t, real, c.answer)
			kept := switchboard.CheckpointFile(filepath.Join(t.TempDir(), "kept"))
			k := switchboardtest.NewKit(t, &switchboard.Config{LogKey: skey, Checkpoints: kept,
				Witnesses: []switchboard.WitnessConfig{{Witness: &witness.Client{URL: url}, Key: wkey}}})
			k.Publish("alice", "alice-bot")
			if c.forget {
				_, err := k.SB.Checkpoint(ctx)
				require.NoError(t, err)
				require.NoError(t, k.Store.Update(ctx, func(tx store.Tx) error { return tx.Delete("meta", []byte("witness\x00witness.example/w1")) }))
				k.Publish("alice", "alice-bot2")
			}
			cp, err := k.SB.Checkpoint(ctx)
			for _, target := range c.is {
				require.ErrorIs(t, err, target)
			}
			for _, target := range c.not {
				require.NotErrorIs(t, err, target)
			}
			if len(c.is) == 0 {
				require.NoError(t, err)
			}
			var stored []byte
			require.NoError(t, k.Store.View(ctx, func(tx store.Tx) error {
				stored, _ = tx.Get("meta", []byte("checkpoint"))
				stored = bytes.Clone(stored)
				return nil
			}))
			keptNote, err := kept.Load(ctx)
			require.NoError(t, err)
			if !c.stands {
				assert.Nil(t, stored, "a refused checkpoint is not stored")
				assert.Nil(t, keptNote, "nor kept")
				return
			}
			require.NotNil(t, stored)
			assert.Equal(t, stored, cp.Note)
			assert.Equal(t, stored, keptNote)
			assert.Equal(t, c.cosigned, strings.Count(string(stored), "— witness.example/w1 "))
			assert.Equal(t, c.strangers, strings.Count(string(stored), "— witness.example/other "))
		})
	}
}
