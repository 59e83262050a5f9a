// Witnesses: the checkpoint's cosigners (C2SP tlog-witness and
// tlog-cosignature), asked at each checkpoint, and the check that a
// checkpoint carries enough of their cosignatures.

package switchboard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/internal/cosig"
	"github.com/switchboardhq/switchboard/store"
)

// Witness is one witness's add-checkpoint endpoint (C2SP tlog-witness):
// package witness's Client calls one over HTTP, and its Server is one.
type Witness interface {
	// AddCheckpoint asks the witness to cosign checkpoint (a signed note
	// of the log's, without cosignatures), proving with proof (a
	// consistency proof, tlog.ProveTree's form) that it extends the
	// checkpoint of oldSize events the witness last cosigned for this log
	// (0: none). It returns the witness's cosignature lines. A witness
	// whose last size for the log is not oldSize answers an error
	// matching *WitnessConflict with its size; one that finds the
	// checkpoint inconsistent with what it cosigned (a fork, a rollback)
	// answers an error wrapping ErrWitnessRefused.
	AddCheckpoint(ctx context.Context, oldSize uint64, proof []tlog.Hash, checkpoint []byte) ([]byte, error)
}

// WitnessConfig is one witness the Switchboard asks to cosign its
// checkpoints (Config.Witnesses).
type WitnessConfig struct {
	Witness Witness
	// Key is the witness's public key in signed-note form
	// (name+hash+base64 of 0x04 and the Ed25519 key, C2SP
	// tlog-cosignature): a cosignature that does not verify with it is
	// not stored.
	Key string
}

// WitnessConflict is the error of a witness whose last cosigned
// checkpoint for the log has another size than the one the caller proved
// from: Size is the witness's (C2SP tlog-witness's 409 Conflict).
type WitnessConflict struct{ Size uint64 }

func (e *WitnessConflict) Error() string {
	return "the last checkpoint cosigned for this log has " + strconv.FormatUint(e.Size, 10) + " events"
}

var (
	// ErrWitnessRefused: a witness refused to cosign because the
	// checkpoint is not consistent with the last one it cosigned for the
	// log — the log showed it a different history, or a shorter one.
	ErrWitnessRefused = errors.New("witness refused the checkpoint")
	// ErrWitness is wrapped by Checkpoint's error when a witness could
	// not be asked or answered nonsense; the checkpoint itself stands.
	ErrWitness = errors.New("witness unavailable")
)

type witness struct {
	cfg WitnessConfig
	v   *cosig.Verifier
	mu  sync.Mutex // one request at a time per witness
}

func newWitnesses(cs []WitnessConfig) ([]witness, error) {
	out := make([]witness, len(cs))
	names := map[string]bool{}
	for i, c := range cs {
		if c.Witness == nil {
			return nil, invalid("Config.Witnesses[%d]: no Witness", i)
		}
		v, err := cosig.NewVerifier(c.Key)
		if err != nil {
			return nil, invalid("Config.Witnesses[%d].Key: %v", i, err)
		}
		if names[v.Name()] {
			return nil, invalid("Config.Witnesses[%d]: a second witness named %q", i, v.Name())
		}
		names[v.Name()] = true
		out[i] = witness{cfg: c, v: v}
	}
	return out, nil
}

// witnessKey is the tMeta key of the size a witness last cosigned.
func witnessKey(name string) string { return "witness\x00" + name }

// askWitnesses has each witness that has not cosigned cp yet cosign it,
// with a consistency proof from the last checkpoint it cosigned, and
// stores the cosignatures with the stored checkpoint. A witness that
// refuses — the log is not consistent with what it saw — is an
// *AuditError; one that fails otherwise is ErrWitness.
func (s *Switchboard) askWitnesses(ctx context.Context, cp Checkpoint) (Checkpoint, error) {
	logNote, err := s.logOnly(cp.Note)
	if err != nil {
		return cp, err
	}
	text, _, _ := strings.Cut(string(logNote), "\n\n")
	text += "\n"
	var problems []error
	for i := range s.witnesses {
		w := &s.witnesses[i]
		if has, err := hasCosignature(cp.Note, w.v); err != nil || has {
			continue
		}
		line, err := s.askWitness(ctx, w, cp, logNote)
		if err != nil {
			if errors.Is(err, ErrAuditBroken) {
				return cp, err
			}
			problems = append(problems, fmt.Errorf("%w: %s: %w", ErrWitness, w.v.Name(), inner(err)))
			continue
		}
		sig, err := parseSigLine(line)
		if err != nil || sig.Name != w.v.Name() || sig.Hash != w.v.KeyHash() {
			problems = append(problems, fmt.Errorf("%w: %s: its answer is not its cosignature", ErrWitness, w.v.Name()))
			continue
		}
		if _, err := note.Open(append([]byte(text+"\n"), line...), note.VerifierList(w.v)); err != nil {
			problems = append(problems, fmt.Errorf("%w: %s: its cosignature does not verify: %v", ErrWitness, w.v.Name(), err))
			continue
		}
		err = s.update(ctx, func(t *txn) error {
			b, err := t.tx.Get(tMeta, []byte(checkpointKey))
			if err != nil {
				return err
			}
			stored, _, err := openCheckpointWith(b, s.logVerifiers)
			if err != nil {
				return err
			}
			if stored.Size == cp.Size && stored.Root == cp.Root && !bytesContains(b, line) {
				b = append(b, line...)
				if err := t.tx.Put(tMeta, []byte(checkpointKey), b); err != nil {
					return err
				}
				cp.Note = b
			}
			return t.tx.Put(tMeta, []byte(witnessKey(w.v.Name())), be64b(cp.Size))
		})
		if err != nil {
			return cp, err
		}
	}
	return cp, errors.Join(problems...)
}

// askWitness sends cp to w with a proof from the size w last cosigned,
// and once more from the size w says it has if that differs.
func (s *Switchboard) askWitness(ctx context.Context, w *witness, cp Checkpoint, logNote []byte) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var old uint64
	err := s.view(ctx, func(t *txn) error {
		b, err := t.tx.Get(tMeta, []byte(witnessKey(w.v.Name())))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(b) != 8 {
			return fmt.Errorf("witness %s: stored size is %d bytes", w.v.Name(), len(b))
		}
		old = keySeq(b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		if old > cp.Size {
			return nil, &AuditError{Seq: cp.Size + 1, Reason: fmt.Sprintf("witness %s has cosigned a checkpoint of %d events for this log, which now signs %d: the log was rolled back", w.v.Name(), old, cp.Size)}
		}
		var proof []tlog.Hash
		if old > 0 && old < cp.Size {
			p, err := s.ProveConsistency(ctx, old, cp.Size)
			if err != nil {
				return nil, err
			}
			proof = p.Hashes
		}
		line, err := w.cfg.Witness.AddCheckpoint(ctx, old, proof, logNote)
		var conflict *WitnessConflict
		switch {
		case err == nil:
			return line, nil
		case errors.As(err, &conflict) && try == 0 && conflict.Size != old:
			old = conflict.Size
		case errors.Is(err, ErrWitnessRefused):
			return nil, &AuditError{Seq: min(old, cp.Size) + 1, Reason: fmt.Sprintf("witness %s refused the checkpoint of %d events: %v", w.v.Name(), cp.Size, err)}
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

// hasCosignature reports whether signed carries a valid cosignature of v.
func hasCosignature(signed []byte, v *cosig.Verifier) (bool, error) {
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unverified) {
			return false, nil
		}
		return false, err
	}
	return len(n.Sigs) > 0, nil
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

func bytesContains(b, sub []byte) bool { return strings.Contains(string(b), string(sub)) }

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
	if quorum < 1 || quorum > len(witnessKeys) {
		return fail(invalid("quorum %d of %d witnesses", quorum, len(witnessKeys)))
	}
	var names []string
	for i, k := range witnessKeys {
		v, err := cosig.NewVerifier(k)
		if err != nil {
			return fail(invalid("witness key %d: %v", i, err))
		}
		if slices.Contains(names, v.Name()) {
			continue
		}
		ok, err := hasCosignature(signed, v)
		if err != nil {
			return fail(fmt.Errorf("%w: cosignature of %s: %v", ErrProof, v.Name(), err))
		}
		if ok {
			names = append(names, v.Name())
		}
	}
	if len(names) < quorum {
		return fail(fmt.Errorf("%w: %d of the %d witness cosignatures required", ErrProof, len(names), quorum))
	}
	return cp, names, nil
}
