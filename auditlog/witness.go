package auditlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/internal/cosig"
)

// Witness is one witness's add-checkpoint endpoint (C2SP tlog-witness):
// package witness's Client calls one over HTTP, and its Server is one.
type Witness interface {
	// AddCheckpoint asks the witness to cosign checkpoint (a signed note
	// of the log's, without cosignatures), proving with proof (a
	// consistency proof, tlog.ProveTree's form) that it extends the
	// checkpoint of oldSize entries the witness last cosigned for this
	// log (0: none). It returns the witness's cosignature lines. A
	// witness whose last size for the log is not oldSize answers an
	// error matching *WitnessConflict with its size; one that finds the
	// checkpoint inconsistent with what it cosigned (a fork, a rollback)
	// answers an error wrapping ErrWitnessRefused.
	AddCheckpoint(ctx context.Context, oldSize uint64, proof []tlog.Hash, checkpoint []byte) ([]byte, error)
}

// WitnessConflict is the error of a witness whose last cosigned
// checkpoint for the log has another size than the one the caller proved
// from: Size is the witness's (C2SP tlog-witness's 409 Conflict). Fork
// marks the other 409 the protocol defines — a checkpoint of the size the
// witness last cosigned, with another root — and makes the error match
// ErrWitnessRefused; a client that only sees the status tells it by Size
// being the size it sent.
type WitnessConflict struct {
	Size uint64
	Fork bool
}

func (e *WitnessConflict) Error() string {
	if e.Fork {
		return "the last checkpoint cosigned for this log has the same " + strconv.FormatUint(e.Size, 10) + " events and another root: a fork"
	}
	return "the last checkpoint cosigned for this log has " + strconv.FormatUint(e.Size, 10) + " events"
}

// Unwrap returns ErrWitnessRefused for a fork, else nil.
func (e *WitnessConflict) Unwrap() error {
	if e.Fork {
		return ErrWitnessRefused
	}
	return nil
}

var (
	// ErrWitnessRefused: a witness refused to cosign because the
	// checkpoint is not consistent with the last one it cosigned for the
	// log — the log showed it a different history, or a shorter one
	// (C2SP tlog-witness's 422, or 409 for another root at the same
	// size).
	ErrWitnessRefused = errors.New("witness refused the checkpoint")
	// ErrWitnessForbidden: a witness does not witness this log or does
	// not trust the key that signed the checkpoint (C2SP tlog-witness's
	// 404 and 403) — after a key rotation, give every witness the new
	// key before the log signs with it.
	ErrWitnessForbidden = errors.New("witness does not accept this log or its key")
	// ErrWitness: a witness could not be asked in time or answered
	// nonsense.
	ErrWitness = errors.New("witness unavailable")
	// ErrQuorum is wrapped by Cosigners' error when a key is malformed
	// or the quorum cannot be met by the keys given.
	ErrQuorum = errors.New("witness quorum")
)

// Cosigners returns the names of the witnesses among witnessKeys (C2SP
// tlog-cosignature keys) whose cosignature on signed verifies, each name
// once, and an error wrapping ErrProof when fewer than quorum do. A
// cosignature line that does not verify counts for nothing — it does not
// spoil the others, so a line added in transit cannot make a witnessed
// checkpoint unverifiable. A quorum outside 1..len(witnessKeys), or a
// malformed key, wraps ErrQuorum. It checks cosignatures only: open signed
// with the log's key (Open) as well.
func Cosigners(signed []byte, witnessKeys []string, quorum int) ([]string, error) {
	if quorum < 1 || quorum > len(witnessKeys) {
		return nil, fmt.Errorf("%w: %d of %d witnesses", ErrQuorum, quorum, len(witnessKeys))
	}
	var names []string
	for i, k := range witnessKeys {
		v, err := cosig.NewVerifier(k)
		if err != nil {
			return nil, fmt.Errorf("%w: witness key %d: %v", ErrQuorum, i, err)
		}
		if slices.Contains(names, v.Name()) {
			continue
		}
		if ok, err := HasCosignature(signed, v); ok && err == nil {
			names = append(names, v.Name())
		}
	}
	if len(names) < quorum {
		return names, fmt.Errorf("%w: %d of the %d witness cosignatures required", ErrProof, len(names), quorum)
	}
	return names, nil
}

// HasCosignature reports whether signed carries a valid signature of v. A
// line that names v's key but does not verify is an error (note's), as is
// a note that does not parse.
func HasCosignature(signed []byte, v note.Verifier) (bool, error) {
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
