// Witnesses: the checkpoint's cosigners (C2SP tlog-witness and
// tlog-cosignature), asked at each checkpoint, and the check that a
// checkpoint carries enough of their cosignatures.

package switchboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/internal/cosig"
	"github.com/switchboardhq/switchboard/store"
)

// Witness is one witness's add-checkpoint endpoint (C2SP tlog-witness):
// package witness's Client calls one over HTTP, and its Server is one. It
// is package auditlog's.
type Witness = auditlog.Witness

// WitnessConfig is one witness the Switchboard asks to cosign its
// checkpoints (Config.Witnesses).
type WitnessConfig struct {
	// Witness is how to ask it: a *witness.Client ({URL: its
	// add-checkpoint endpoint}) over HTTP, or a *witness.Server in this
	// process.
	Witness Witness
	// Key is the witness's public key in signed-note form
	// (name+hash+base64 of 0x04 and the Ed25519 key, C2SP
	// tlog-cosignature): a cosignature that does not verify with it is
	// not stored, and other lines of the witness's answer are ignored.
	Key string
	// Timeout bounds each call to the witness, and the wait for the one
	// under way to end (one request at a time per witness; a Checkpoint
	// asks every witness at once, so a witness that never answers costs
	// one Timeout per checkpoint and holds nothing else up). The proofs
	// the calls carry are read from the store within the Checkpoint's
	// context, not this. 0 means 10 seconds.
	Timeout time.Duration
}

// defaultWitnessTimeout is WitnessConfig.Timeout's default.
const defaultWitnessTimeout = 10 * time.Second

// WitnessConflict is the error of a witness whose last cosigned
// checkpoint for the log has another size than the one the caller proved
// from: Size is the witness's (C2SP tlog-witness's 409 Conflict). Fork
// marks the other 409 the protocol defines — a checkpoint of the size the
// witness last cosigned, with another root — and makes the error match
// ErrWitnessRefused. It is package auditlog's.
type WitnessConflict = auditlog.WitnessConflict

var (
	// ErrWitnessRefused: a witness refused to cosign because the
	// checkpoint is not consistent with the last one it cosigned for the
	// log — the log showed it a different history, or a shorter one
	// (C2SP tlog-witness's 422, or 409 for another root at the same
	// size). Checkpoint's error is then an *AuditError wrapping both it
	// and ErrAuditBroken, and the checkpoint is neither stored nor kept.
	ErrWitnessRefused = auditlog.ErrWitnessRefused
	// ErrWitnessForbidden: a witness does not witness this log or does
	// not trust the key that signed the checkpoint (C2SP tlog-witness's
	// 404 and 403) — after a key rotation, give every witness the new
	// key before the log signs with it. The checkpoint stands.
	ErrWitnessForbidden = auditlog.ErrWitnessForbidden
	// ErrWitness is wrapped by Checkpoint's error when a witness could
	// not be asked in time or answered nonsense; the checkpoint itself
	// stands.
	ErrWitness = auditlog.ErrWitness
)

type witness struct {
	cfg WitnessConfig
	v   *cosig.Verifier
	sem chan struct{} // one request at a time per witness
}

func newWitnesses(cs []WitnessConfig) ([]witness, error) {
	out := make([]witness, len(cs))
	names := map[string]bool{}
	for i, c := range cs {
		if c.Witness == nil {
			return nil, invalid("Config.Witnesses[%d]: no Witness", i)
		}
		if c.Timeout < 0 {
			return nil, invalid("Config.Witnesses[%d].Timeout is negative", i)
		}
		if c.Timeout == 0 {
			c.Timeout = defaultWitnessTimeout
		}
		v, err := cosig.NewVerifier(c.Key)
		if err != nil {
			return nil, invalid("Config.Witnesses[%d].Key: %v", i, err)
		}
		if names[v.Name()] {
			return nil, invalid("Config.Witnesses[%d]: a second witness named %q", i, v.Name())
		}
		names[v.Name()] = true
		out[i] = witness{cfg: c, v: v, sem: make(chan struct{}, 1)}
	}
	return out, nil
}

// witnessKey is the tMeta key of the size a witness last cosigned.
func witnessKey(name string) string { return "witness\x00" + name }

// witnessSizes reads the size each configured witness last cosigned (0:
// none recorded).
func (s *Switchboard) witnessSizes(t *txn) ([]uint64, error) {
	out := make([]uint64, len(s.witnesses))
	for i := range s.witnesses {
		name := s.witnesses[i].v.Name()
		b, err := t.tx.Get(tMeta, []byte(witnessKey(name)))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(b) != 8 {
			return nil, fmt.Errorf("witness %s: stored size is %d bytes", name, len(b))
		}
		out[i] = keySeq(b)
	}
	return out, nil
}

// errWitnessAhead is askWitness's when a witness has cosigned a larger
// tree than the checkpoint it is asked about, and the log holds that tree:
// another signer got there first, and the checkpoint is signed again.
var errWitnessAhead = errors.New("a witness has cosigned a newer checkpoint of this log")

// cosignature is what one witness returned: its name and its cosignature
// lines, each verified with its key.
type cosignature struct {
	name  string
	lines [][]byte
}

// askWitnesses has each witness that has not cosigned cp yet cosign it,
// all at once, each from the size olds gives for it (the last it
// cosigned, as stored). A witness that refuses — the log is not
// consistent with what it saw — is an *AuditError wrapping
// ErrWitnessRefused, returned alone; the others' troubles are joined.
func (s *Switchboard) askWitnesses(ctx context.Context, cp Checkpoint, olds []uint64) ([]cosignature, error) {
	logNote, err := s.logOnly(cp.Note)
	if err != nil {
		return nil, err
	}
	text, _, _ := strings.Cut(string(logNote), "\n\n")
	text += "\n"
	type answer struct {
		c   cosignature
		err error
	}
	answers := make([]answer, len(s.witnesses))
	var wg sync.WaitGroup
	for i := range s.witnesses {
		w := &s.witnesses[i]
		if has, err := auditlog.HasCosignature(cp.Note, w.v); err != nil || has {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := s.askWitness(ctx, w, cp, logNote, olds[i])
			if err != nil {
				answers[i].err = err
				return
			}
			lines, err := witnessLines(body, text, w.v)
			if err != nil {
				answers[i].err = fmt.Errorf("%w: %s: %v", ErrWitness, w.v.Name(), err)
				return
			}
			answers[i].c = cosignature{name: w.v.Name(), lines: lines}
		}()
	}
	wg.Wait()
	var out []cosignature
	var problems []error
	for i, a := range answers {
		switch {
		case errors.Is(a.err, ErrAuditBroken), errors.Is(a.err, errWitnessAhead):
			return nil, a.err
		case errors.Is(a.err, ErrWitnessForbidden) || errors.Is(a.err, ErrWitness):
			problems = append(problems, a.err)
		case a.err != nil:
			problems = append(problems, fmt.Errorf("%w: %s: %w", ErrWitness, s.witnesses[i].v.Name(), inner(a.err)))
		case a.c.name != "":
			out = append(out, a.c)
		}
	}
	return out, errors.Join(problems...)
}

// witnessLines returns the lines of a witness's answer that are its
// cosignatures of text (C2SP tlog-witness: one or more signature lines;
// lines of other keys are ignored). None is an error.
func witnessLines(body []byte, text string, v *cosig.Verifier) ([][]byte, error) {
	var lines [][]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i+1], body[i+1:]
		} else {
			body = nil
		}
		sig, err := parseSigLine(line)
		if err != nil {
			return nil, errors.New("its answer is not signature lines")
		}
		if sig.Name != v.Name() || sig.Hash != v.KeyHash() {
			continue
		}
		if _, err := note.Open(append([]byte(text+"\n"), line...), note.VerifierList(v)); err != nil {
			return nil, fmt.Errorf("its cosignature does not verify: %v", err)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return nil, errors.New("its answer holds no cosignature of its key")
	}
	return lines, nil
}

// askWitness sends cp to w with a proof from old, the size w last
// cosigned as stored, and once more from the size w says it has if that
// differs — one request at a time per witness. w's Timeout bounds the wait
// for the request before and each call to the witness; the proofs are the
// store's work, bounded by ctx alone (a slow store is not a witness that
// does not answer).
func (s *Switchboard) askWitness(ctx context.Context, w *witness, cp Checkpoint, logNote []byte, old uint64) ([]byte, error) {
	wait, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	select {
	case w.sem <- struct{}{}:
		cancel()
		defer func() { <-w.sem }()
	case <-wait.Done():
		cancel()
		return nil, fmt.Errorf("%w: %s: another request to it is under way: %w", ErrWitness, w.v.Name(), wait.Err())
	}
	name := w.v.Name()
	for try := 0; ; try++ {
		if old > cp.Size {
			// The witness has cosigned a larger tree. Another signer's
			// (a concurrent Checkpoint, another process) if the log holds
			// it: this checkpoint is merely behind, and is signed again.
			// A log shorter than what a witness cosigned was rolled back.
			var size uint64
			if err := s.view(ctx, func(t *txn) error {
				st, err := t.lg.State()
				if err == nil {
					size = st.Size
				}
				return err
			}); err != nil {
				return nil, err
			}
			if size >= old {
				return nil, errWitnessAhead
			}
			return nil, &AuditError{Seq: size + 1, Err: ErrWitnessRefused, Reason: fmt.Sprintf("witness %s has cosigned a checkpoint of %d events for this log, which now holds %d: the log was rolled back", name, old, size)}
		}
		var proof []tlog.Hash
		if old > 0 && old < cp.Size {
			p, err := s.ProveConsistency(ctx, old, cp.Size)
			if errors.Is(err, ErrEventPurged) {
				return nil, &AuditError{Seq: old + 1, Err: ErrWitnessRefused, Reason: fmt.Sprintf("witness %s last cosigned a checkpoint of %d events, and the log can no longer prove the one of %d extends it: retention purged past it, which it does only while a witness is out of Config.Witnesses (put back after that, its operator must reset what it holds for this log) — else the store was written", name, old, cp.Size)}
			}
			if err != nil {
				return nil, err
			}
			proof = p.Hashes
		}
		call, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
		body, err := w.cfg.Witness.AddCheckpoint(call, old, proof, logNote)
		cancel()
		var conflict *WitnessConflict
		switch {
		case err == nil:
			return body, nil
		case errors.As(err, &conflict) && (conflict.Fork || conflict.Size == old):
			return nil, &AuditError{Seq: 1, Err: ErrWitnessRefused, Reason: fmt.Sprintf("witness %s refused the checkpoint of %d events: it cosigned another root for the log of %d events: a fork", name, cp.Size, conflict.Size)}
		case errors.As(err, &conflict) && try == 0:
			old = conflict.Size
		case errors.As(err, &conflict):
			return nil, fmt.Errorf("%w: %s: its size changed again, to %d", ErrWitness, name, conflict.Size)
		case errors.Is(err, ErrWitnessRefused):
			return nil, &AuditError{Seq: min(old, cp.Size) + 1, Err: ErrWitnessRefused, Reason: fmt.Sprintf("witness %s refused the checkpoint of %d events as not extending the one of %d it cosigned: %v", name, cp.Size, old, inner(err))}
		case errors.Is(err, ErrWitnessForbidden):
			return nil, fmt.Errorf("witness %s: %w", name, inner(err))
		default:
			return nil, err
		}
	}
}

// logOnly is signed without the cosignatures: the note as the log signed
// it.
func (s *Switchboard) logOnly(signed []byte) ([]byte, error) {
	n, err := note.Open(signed, note.VerifierList(s.logVerifiers...))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProof, err)
	}
	n.UnverifiedSigs = nil
	n.Sigs = slices.DeleteFunc(n.Sigs, func(sig note.Signature) bool { return sig.Name != s.logSigner.Name() })
	text, _, _ := strings.Cut(string(signed), "\n\n")
	out := []byte(text + "\n\n")
	for _, sig := range n.Sigs {
		out = fmt.Appendf(out, "— %s %s\n", sig.Name, sig.Base64)
	}
	return out, nil
}

// parseSigLine reads one signed-note signature line.
func parseSigLine(line []byte) (note.Signature, error) {
	s, ok := strings.CutPrefix(string(line), "— ")
	s, nl := strings.CutSuffix(s, "\n")
	name, b64, sp := strings.Cut(s, " ")
	if !ok || !nl || !sp || strings.ContainsAny(b64, " \n") {
		return note.Signature{}, errors.New("not one signature line")
	}
	_, err := note.Open([]byte("x\n\n— "+name+" "+b64+"\n"), note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) || len(unverified.Note.UnverifiedSigs) != 1 {
		return note.Signature{}, errors.New("not one signature line")
	}
	return unverified.Note.UnverifiedSigs[0], nil
}

// OpenWitnessedCheckpoint is OpenCheckpoint that also requires at least
// quorum valid cosignatures from distinct witnesses among witnessKeys
// (C2SP tlog-cosignature keys, as WitnessConfig.Key) — proof that that many
// witnesses checked the checkpoint extends everything they had cosigned
// for this log before. It returns the checkpoint and the names of the
// witnesses whose cosignatures verified.
func OpenWitnessedCheckpoint(signed []byte, verifierKey string, witnessKeys []string, quorum int) (Checkpoint, []string, error) {
	fail := func(err error) (Checkpoint, []string, error) {
		return Checkpoint{}, nil, fmt.Errorf("switchboard: open checkpoint: %w", err)
	}
	cp, err := OpenCheckpoint(signed, verifierKey)
	if err != nil {
		return Checkpoint{}, nil, err
	}
	names, err := auditlog.Cosigners(signed, witnessKeys, quorum)
	if errors.Is(err, auditlog.ErrQuorum) {
		return fail(invalid("%v", err))
	}
	if err != nil {
		return fail(err)
	}
	return cp, names, nil
}
