// Package witness is a transparency-log witness for switchboard's audit
// log (C2SP tlog-witness, with C2SP tlog-cosignature/v1 cosignatures): a
// Server that cosigns a log's checkpoint only after checking a
// consistency proof from the last checkpoint it cosigned for that log —
// so a log cannot show it two histories, or roll back, without being
// refused — and a Client, the auditlog.Witness that asks one over HTTP.
//
// Two hosts whose humans friend each other each have an interest in the
// other's record of their approvals: each can run a Server for the other
// (examples/host does, with -witness-for) and name the other's in
// switchboard.Config.Witnesses.
//
// It speaks package auditlog's types (switchboard re-exports them under
// the same names: switchboard.Witness is auditlog.Witness,
// switchboard.WitnessConflict is auditlog.WitnessConflict), and imports
// nothing of package switchboard.
package witness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/internal/cosig"
	"github.com/switchboardhq/switchboard/store"
)

// Errors a Server's AddCheckpoint returns (besides *auditlog.WitnessConflict
// and errors wrapping auditlog.ErrWitnessRefused), matched with
// errors.Is. ErrUnknownLog and ErrBadSignature also match
// auditlog.ErrWitnessForbidden, as the Client's errors for 404 and 403
// do.
var (
	ErrUnknownLog   = fmt.Errorf("%w: unknown log", auditlog.ErrWitnessForbidden)                           // 404: no log of that origin is witnessed here
	ErrBadSignature = fmt.Errorf("%w: the checkpoint's signature is invalid", auditlog.ErrWitnessForbidden) // 403: no signature by a key of the log verifies
	ErrBadRequest   = errors.New("malformed request")                                                       // 400
)

// Log is a log a Server witnesses: its origin (the first line of its
// checkpoints, the name of its key) and its public keys (signed-note
// verifier keys, as switchboard.Switchboard.LogVerifierKey gives them; a
// rotated log lists the new and the old).
type Log struct {
	Origin string
	Keys   []string
}

// Config configures NewServer.
type Config struct {
	// Name is the witness's name, as its cosignatures and its public key
	// carry it (no spaces, no '+'): conventionally a host name and path.
	Name string
	// Key is the witness's Ed25519 private key (NewKey makes one).
	Key ed25519.PrivateKey
	// Logs are the logs it witnesses.
	Logs []Log
	// Store keeps, per log, the last checkpoint cosigned, durably before
	// the cosignature is returned. Its table "witness_logs" is the
	// witness's own: a switchboard store can hold it beside its own.
	Store store.Store
	// Now is the clock cosignatures are timestamped with; nil: time.Now.
	Now func() time.Time
	// Logger receives a report of every refusal — a checkpoint
	// inconsistent with the last one cosigned: a fork or a rewrite; nil:
	// slog.Default().
	Logger *slog.Logger
}

// table is the Store table a Server keeps its state in: origin → the last
// checkpoint it cosigned (the log's signed note).
const table = "witness_logs"

// Server is a witness. Its AddCheckpoint makes it an auditlog.Witness
// in the same process; ServeHTTP serves it as C2SP tlog-witness's
// add-checkpoint endpoint.
type Server struct {
	cfg    Config
	signer *cosig.Signer
	logs   map[string]note.Verifiers
}

// NewKey returns a new witness private key, and the public key in
// signed-note form for the logs that name this witness
// (switchboard.WitnessConfig.Key).
func NewKey(name string) (ed25519.PrivateKey, string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("switchboard: witness: new key: %w", err)
	}
	s, err := cosig.NewSigner(name, priv, func() uint64 { return 0 })
	if err != nil {
		return nil, "", fmt.Errorf("switchboard: witness: new key: %w", err)
	}
	return priv, s.VerifierKey(), nil
}

// NewServer returns a witness.
func NewServer(c Config) (*Server, error) {
	if c.Store == nil {
		return nil, errors.New("switchboard: witness: Config.Store is required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	signer, err := cosig.NewSigner(c.Name, c.Key, func() uint64 { return uint64(c.Now().Unix()) })
	if err != nil {
		return nil, fmt.Errorf("switchboard: witness: %w", err)
	}
	s := &Server{cfg: c, signer: signer, logs: map[string]note.Verifiers{}}
	for _, l := range c.Logs {
		var vs []note.Verifier
		for _, k := range l.Keys {
			v, err := note.NewVerifier(k)
			if err != nil {
				return nil, fmt.Errorf("switchboard: witness: log %s: key: %w", l.Origin, err)
			}
			if v.Name() != l.Origin {
				return nil, fmt.Errorf("switchboard: witness: log %s: its key is named %q", l.Origin, v.Name())
			}
			vs = append(vs, v)
		}
		if len(vs) == 0 {
			return nil, fmt.Errorf("switchboard: witness: log %s: no key", l.Origin)
		}
		s.logs[l.Origin] = note.VerifierList(vs...)
	}
	return s, nil
}

// VerifierKey is the witness's public key, for the logs that name it.
func (s *Server) VerifierKey() string { return s.signer.VerifierKey() }

// checkpoint is a parsed checkpoint note.
type checkpoint struct {
	origin string
	size   uint64
	root   tlog.Hash
	text   string
}

// parseCheckpoint reads a checkpoint's text (C2SP tlog-checkpoint): the
// origin, the size, the root hash, then any extension lines — each
// non-empty — which the cosignature covers like the rest.
func parseCheckpoint(text string) (checkpoint, error) {
	lines := strings.Split(text, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		return checkpoint{}, errors.New("a checkpoint is at least three lines, each ending in a newline")
	}
	for _, ext := range lines[3 : len(lines)-1] {
		if ext == "" {
			return checkpoint{}, errors.New("an extension line is empty")
		}
	}
	if lines[0] == "" {
		return checkpoint{}, errors.New("the origin is empty")
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return checkpoint{}, fmt.Errorf("size %q", lines[1])
	}
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return checkpoint{}, fmt.Errorf("root %q", lines[2])
	}
	c := checkpoint{origin: lines[0], size: size, text: text}
	copy(c.root[:], root)
	return c, nil
}

// AddCheckpoint is auditlog.Witness's: it checks that signed (the log's
// signed note, which may carry extension lines and other signatures) is
// signed by a key of the log and extends, by proof, the last checkpoint
// cosigned for that log — which must have oldSize events — records it,
// and returns its cosignature line. Another root at the size cosigned
// last (the empty tree's included) is a *auditlog.WitnessConflict with
// Fork set, matching auditlog.ErrWitnessRefused (409); a proof that does
// not lead from the last one wraps auditlog.ErrWitnessRefused (422).
// Both are reported to Config.Logger.
func (s *Server) AddCheckpoint(ctx context.Context, oldSize uint64, proof []tlog.Hash, signed []byte) ([]byte, error) {
	line, err := s.addCheckpoint(ctx, oldSize, proof, signed)
	if err != nil {
		return nil, fmt.Errorf("switchboard: witness: add checkpoint: %w", err)
	}
	return line, nil
}

func (s *Server) addCheckpoint(ctx context.Context, oldSize uint64, proof []tlog.Hash, signed []byte) ([]byte, error) {
	text, _, ok := strings.Cut(string(signed), "\n\n")
	if !ok {
		return nil, fmt.Errorf("%w: not a signed note", ErrBadRequest)
	}
	origin, _, _ := strings.Cut(text, "\n")
	vs, known := s.logs[origin]
	if !known {
		return nil, fmt.Errorf("%w: %q", ErrUnknownLog, origin)
	}
	n, err := note.Open(signed, vs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	cp, err := parseCheckpoint(n.Text)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if oldSize > cp.size {
		return nil, fmt.Errorf("%w: old size %d is past the checkpoint's %d", ErrBadRequest, oldSize, cp.size)
	}
	err = s.cfg.Store.Update(ctx, func(tx store.Tx) error {
		var last checkpoint
		seen := false
		if b, err := tx.Get(table, []byte(origin)); err == nil {
			seen = true
			ln, err := note.Open(b, vs)
			if err != nil {
				return fmt.Errorf("the stored checkpoint of %s: %w", origin, err)
			}
			if last, err = parseCheckpoint(ln.Text); err != nil {
				return fmt.Errorf("the stored checkpoint of %s: %w", origin, err)
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if oldSize != last.size {
			return &auditlog.WitnessConflict{Size: last.size}
		}
		switch {
		case !seen:
			// The first checkpoint of this log: nothing to extend.
		case cp.size == last.size:
			if cp.root != last.root {
				s.refuse(origin, fmt.Errorf("a checkpoint of %d events with another root than the one cosigned: a fork", cp.size))
				return &auditlog.WitnessConflict{Size: last.size, Fork: true}
			}
		case oldSize == 0:
			// Cosigned before at size 0 only: any tree extends the empty one.
		default:
			if err := tlog.CheckTree(proof, int64(cp.size), cp.root, int64(last.size), last.root); err != nil {
				return s.refuse(origin, fmt.Errorf("the checkpoint of %d events does not extend the one of %d cosigned before: %v", cp.size, last.size, err))
			}
		}
		return tx.Put(table, []byte(origin), signed)
	})
	if err != nil {
		return nil, err
	}
	return s.signer.Cosign([]byte(n.Text)), nil
}

func (s *Server) refuse(origin string, err error) error {
	s.cfg.Logger.LogAttrs(context.Background(), slog.LevelError, "witness: refused a checkpoint: the log is not consistent with what it showed before",
		slog.String("origin", origin), slog.String("error", err.Error()))
	return fmt.Errorf("%w: %v", auditlog.ErrWitnessRefused, err)
}

// MaxRequest is the largest add-checkpoint request body ServeHTTP reads
// (and the largest answer the Client reads): a checkpoint, its signatures
// and a proof of at most 63 hashes fit many times over.
const MaxRequest = 64 << 10

// ServeHTTP serves C2SP tlog-witness's add-checkpoint: a POST (to any
// path; mount it at <prefix>/add-checkpoint) whose body is "old <size>",
// the consistency proof's hashes in base64 a line each (at most 63), an
// empty line and the checkpoint note — at most MaxRequest bytes (413
// beyond). It answers 200 with the cosignature line
// (text/x.tlog.cosignature); 409 with the size it last cosigned
// (text/x.tlog.size) when that is not the old size, or when it is the
// checkpoint's size with another root (a fork); 422 for a proof that does
// not lead from what it cosigned; 404 for a log it does not witness; 403
// when no signature by a key of the log verifies; 400 for a malformed
// request or an old size past the checkpoint's; 405 to any method but
// POST.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequest))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	old, proof, signed, err := parseRequest(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	line, err := s.AddCheckpoint(r.Context(), old, proof, signed)
	var conflict *auditlog.WitnessConflict
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "text/x.tlog.cosignature")
		_, _ = w.Write(line)
	case errors.As(err, &conflict):
		w.Header().Set("Content-Type", "text/x.tlog.size")
		w.WriteHeader(http.StatusConflict)
		_, _ = fmt.Fprintf(w, "%d\n", conflict.Size)
	case errors.Is(err, auditlog.ErrWitnessRefused):
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
	case errors.Is(err, ErrUnknownLog):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.Is(err, ErrBadSignature):
		http.Error(w, err.Error(), http.StatusForbidden)
	case errors.Is(err, ErrBadRequest):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, "switchboard: witness: internal error", http.StatusInternalServerError)
	}
}

func parseRequest(body []byte) (uint64, []tlog.Hash, []byte, error) {
	head, signed, ok := bytes.Cut(body, []byte("\n\n"))
	if !ok {
		return 0, nil, nil, errors.New("switchboard: witness: want old size, proof, an empty line and the checkpoint")
	}
	sc := bufio.NewScanner(bytes.NewReader(head))
	if !sc.Scan() {
		return 0, nil, nil, errors.New("switchboard: witness: no old size")
	}
	f := strings.Fields(sc.Text())
	if len(f) != 2 || f[0] != "old" {
		return 0, nil, nil, errors.New("switchboard: witness: the first line is old <size>")
	}
	old, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || strconv.FormatUint(old, 10) != f[1] {
		return 0, nil, nil, errors.New("switchboard: witness: old size is not a decimal number")
	}
	var proof []tlog.Hash
	for sc.Scan() {
		b, err := base64.StdEncoding.Strict().DecodeString(sc.Text())
		if err != nil || len(b) != tlog.HashSize {
			return 0, nil, nil, errors.New("switchboard: witness: a proof line is not a base64 hash")
		}
		var h tlog.Hash
		copy(h[:], b)
		proof = append(proof, h)
		if len(proof) > 63 {
			return 0, nil, nil, errors.New("switchboard: witness: proof too long")
		}
	}
	return old, proof, signed, nil
}

// Client asks a witness over HTTP (C2SP tlog-witness): an auditlog.Witness.
// Its errors follow the protocol's statuses: 409 is a
// *auditlog.WitnessConflict with the witness's size; 422 wraps
// auditlog.ErrWitnessRefused; 403 and 404 wrap
// auditlog.ErrWitnessForbidden; anything else (a timeout, 400, 5xx) is
// an error the Switchboard files under auditlog.ErrWitness. A 200
// answer is returned whole: one or more signature lines, of which the
// Switchboard keeps those its WitnessConfig.Key verifies.
type Client struct {
	// URL is the witness's add-checkpoint endpoint.
	URL string
	// HTTP is the client it is asked with; nil: http.DefaultClient.
	HTTP *http.Client
	// Timeout bounds each request, whatever HTTP's own timeout; 0 means
	// 10 seconds.
	Timeout time.Duration
}

var _ auditlog.Witness = (*Client)(nil)

// AddCheckpoint is auditlog.Witness's, over HTTP.
func (c *Client) AddCheckpoint(ctx context.Context, oldSize uint64, proof []tlog.Hash, signed []byte) ([]byte, error) {
	line, err := c.addCheckpoint(ctx, oldSize, proof, signed)
	if err != nil {
		return nil, fmt.Errorf("switchboard: witness: add checkpoint: %w", err)
	}
	return line, nil
}

func (c *Client) addCheckpoint(ctx context.Context, oldSize uint64, proof []tlog.Hash, signed []byte) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", oldSize)
	for _, h := range proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(signed)
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, &b)
	if err != nil {
		return nil, err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxRequest))
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body, nil
	case http.StatusConflict:
		size, err := strconv.ParseUint(strings.TrimSpace(string(body)), 10, 64)
		if err != nil {
			return nil, errors.New("409 without a size")
		}
		return nil, &auditlog.WitnessConflict{Size: size}
	case http.StatusUnprocessableEntity:
		return nil, fmt.Errorf("%w: 422: %s", auditlog.ErrWitnessRefused, clip(body))
	case http.StatusForbidden:
		return nil, fmt.Errorf("%w: 403: no signature on the checkpoint verifies with the keys it holds for the log (after a key rotation, give it the new key first): %s", auditlog.ErrWitnessForbidden, clip(body))
	case http.StatusNotFound:
		return nil, fmt.Errorf("%w: 404: it does not witness this log: %s", auditlog.ErrWitnessForbidden, clip(body))
	}
	return nil, fmt.Errorf("%s: %s", resp.Status, clip(body))
}

// clip is a witness's answer for an error message: trimmed and bounded.
func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
