// Package auditlog is switchboard's verifiable log: a Merkle tree of
// entries (RFC 6962 / 9162, in golang.org/x/mod/sumdb/tlog's forms) kept in
// a store of package store's contract, and everything a verifier, a
// witness and a host's outside copy need to check it.
//
// The log in a store: Layout names its tables, and Layout.In gives its
// part in one of the caller's transactions (Tx): its State, entries
// appended as the tree's next leaves (Append) and read back by seq (Entry,
// Entries, Strays, PendingRows: package switchboard reads the log's
// tables only through these, but for its one-time upgrade of a store
// older than the tree), the tree's stored hashes (ReadHashes, a
// tlog.HashReader), retention (Purge), and, on a store
// whose writers run concurrently, entries committed pending (AddPending)
// for the Sequencer to add after commit, under a lease, keeping a Cache of
// the tree's frontier.
//
// Checking it: the stored tree against every checkpoint it must still
// hold, before a signature (Tx.Check, whose damage is an AuditError
// wrapping ErrAuditBroken), checkpoints (C2SP tlog-checkpoint, signed
// notes of golang.org/x/mod/sumdb/note: Sign, Open), inclusion and consistency
// proofs (CheckInclusion, CheckConsistency), the check that a stored tree
// still holds a checkpoint (Extends), the witness contract (C2SP
// tlog-witness: Witness, Cosigners) and the asking of witnesses at each
// checkpoint (Witnesses.Ask, each from the size Tx.WitnessSizes recorded
// it last cosigned), the place a host keeps its last
// checkpoint outside its store (File), the log's keys and their rotation
// (NewKey, ParseKeys), and the mark of what one process saw (Mark).
//
// It knows nothing of friends or todos: an entry is bytes, and what an
// entry means is its user's business (package switchboard's events, whose
// leaf is EventLeaf). A third party checks a log with this package, or
// with x/mod's note and tlog alone. Package switchboard re-exports the
// checking types under its own names (switchboard.Checkpoint is
// Checkpoint).
package auditlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

var (
	// ErrProof is wrapped by the errors of the proof and checkpoint
	// checks: a checkpoint whose signature or text is wrong, a proof that
	// does not lead to the checkpoint's root.
	ErrProof = errors.New("audit proof does not verify")
	// ErrUnknownKey is wrapped beside ErrProof when a checkpoint is
	// signed, but by none of the keys given: most often a log whose key
	// was replaced instead of kept (or rotated, the old key listed).
	ErrUnknownKey = errors.New("checkpoint signed by an unknown key")
)

// Checkpoint is a signed statement of a log's state: its size and the
// root hash of its Merkle tree, in the C2SP tlog-checkpoint format as a
// signed note (Ed25519). Whoever keeps one can later check, with the
// log's public key alone, that an entry is in the log (CheckInclusion)
// and that the log has only been appended to since (CheckConsistency).
type Checkpoint struct {
	Origin string    `json:"origin"` // the log's name: the signing key's name
	Size   uint64    `json:"size"`   // how many entries the tree holds
	Root   tlog.Hash `json:"root"`   // the tree's root hash (RFC 6962 / 9162)
	// Note is the signed note itself — the text "<origin>\n<size>\n<root
	// in base64>\n", a blank line and the signature lines. Keep these
	// bytes: Open turns them back into a Checkpoint.
	Note []byte `json:"note"`
}

// Text is the checkpoint's note text: "<origin>\n<size>\n<root in
// base64>\n", what a log key signs.
func Text(origin string, size uint64, root tlog.Hash) string {
	return origin + "\n" + strconv.FormatUint(size, 10) + "\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"
}

// Sign signs the checkpoint of size entries with root as signer's log
// (its name is the origin).
func Sign(signer note.Signer, size uint64, root tlog.Hash) (Checkpoint, error) {
	msg, err := note.Sign(&note.Note{Text: Text(signer.Name(), size, root)}, signer)
	if err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Origin: signer.Name(), Size: size, Root: root, Note: msg}, nil
}

// Open checks signed with any of vs — the log's key first, then keys it
// rotated from — and parses its text strictly: three lines, the origin
// being vs[0]'s name, a decimal size without sign or leading zeros, a
// root of exactly 32 bytes in standard base64. It returns the checkpoint
// and the signatures that verified (cosignatures of keys not in vs are
// ignored; a key given twice counts once). A note signed by none of vs
// wraps ErrUnknownKey and ErrProof; any other failure wraps ErrProof. vs
// must not be empty.
func Open(signed []byte, vs ...note.Verifier) (Checkpoint, []note.Signature, error) {
	if len(vs) == 0 {
		return Checkpoint{}, nil, fmt.Errorf("%w: no key to check the signature with", ErrProof)
	}
	// A key given twice is one key (note would call the pair ambiguous).
	unique := vs[:1:1]
	for _, v := range vs[1:] {
		if !slices.ContainsFunc(unique, func(u note.Verifier) bool { return u.Name() == v.Name() && u.KeyHash() == v.KeyHash() }) {
			unique = append(unique, v)
		}
	}
	n, err := note.Open(signed, note.VerifierList(unique...))
	var unknown *note.UnverifiedNoteError
	if errors.As(err, &unknown) {
		// Signed, but by none of the keys given: say so, not "invalid".
		return Checkpoint{}, nil, fmt.Errorf("%w: %w (none of the %d given): %w", ErrProof, ErrUnknownKey, len(vs), err)
	}
	if err != nil {
		return Checkpoint{}, nil, fmt.Errorf("%w: signature: %w", ErrProof, err)
	}
	cp, err := parse(signed, n.Text, vs[0].Name())
	return cp, n.Sigs, err
}

// Unverified reads a checkpoint's text without checking any signature:
// for a host that holds no key and only compares sizes and roots with a
// log it checks itself. Never trust what it returns as signed.
func Unverified(signed []byte) (Checkpoint, error) {
	i := bytes.Index(signed, []byte("\n\n"))
	if i < 0 {
		return Checkpoint{}, fmt.Errorf("%w: not a signed note", ErrProof)
	}
	return parse(signed, string(signed[:i+1]), "")
}

func parse(signed []byte, text, origin string) (Checkpoint, error) {
	lines := strings.Split(text, "\n")
	if len(lines) != 4 || lines[3] != "" {
		return Checkpoint{}, fmt.Errorf("%w: a checkpoint is three lines", ErrProof)
	}
	if origin != "" && lines[0] != origin {
		return Checkpoint{}, fmt.Errorf("%w: origin %q is not the key's name %q", ErrProof, lines[0], origin)
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("%w: size %q", ErrProof, lines[1])
	}
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("%w: root hash %q", ErrProof, lines[2])
	}
	cp := Checkpoint{Origin: lines[0], Size: size, Note: bytes.Clone(signed)}
	copy(cp.Root[:], root)
	return cp, nil
}

// EmptyRoot is the root of the empty tree: SHA-256 of nothing (RFC 6962).
var EmptyRoot = tlog.Hash(sha256.Sum256(nil))

// TreeHash is tlog.TreeHash, with EmptyRoot for size 0.
func TreeHash(size uint64, r tlog.HashReader) (tlog.Hash, error) {
	if size == 0 {
		return EmptyRoot, nil
	}
	if size > math.MaxInt64 {
		return tlog.Hash{}, fmt.Errorf("a tree of %d entries: too many for tlog", size)
	}
	return tlog.TreeHash(int64(size), r)
}
