// Witnesses: the checkpoint's cosigners (C2SP tlog-witness and
// tlog-cosignature), asked at each checkpoint, and the check that a
// checkpoint carries enough of their cosignatures.

package switchboard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
)

// Witness is one witness's add-checkpoint endpoint (C2SP tlog-witness):
// package witness's Client calls one over HTTP, and its Server is one. It
// is package auditlog's.
type Witness = auditlog.Witness

// WitnessConfig is one witness the Switchboard asks to cosign its
// checkpoints (Config.Witnesses): its Witness, its Key (C2SP
// tlog-cosignature, signed-note form), and the Timeout of each call to
// it. It is package auditlog's; a Checkpoint asks every witness at once.
type WitnessConfig = auditlog.WitnessConfig

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

// logProver is what asking witnesses needs of the log
// (auditlog.Prover): its size, and consistency proofs (ErrEventPurged read
// as auditlog.ErrHashGone: retention purged what one needs).
type logProver struct{ s *Switchboard }

func (p logProver) Size(ctx context.Context) (uint64, error) {
	var size uint64
	err := p.s.view(ctx, func(t *txn) error {
		st, err := t.lg.State()
		if err == nil {
			size = st.Size
		}
		return err
	})
	return size, err
}

func (p logProver) ProveTree(ctx context.Context, oldSize, newSize uint64) ([]tlog.Hash, error) {
	pr, err := p.s.ProveConsistency(ctx, oldSize, newSize)
	if errors.Is(err, ErrEventPurged) {
		return nil, fmt.Errorf("%w: %w", auditlog.ErrHashGone, err)
	}
	return pr.Hashes, err
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
