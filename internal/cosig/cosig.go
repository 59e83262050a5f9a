// Package cosig is C2SP tlog-cosignature/v1: a witness's timestamped
// Ed25519 signature over a checkpoint, as a signed-note signature line
// (algorithm byte 0x04). The root package verifies cosignatures with it and
// package witness makes them, so the format is written once.
package cosig

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// alg is the signed-note algorithm byte of cosignature/v1.
const alg = 0x04

// message is what a cosignature/v1 signs: the header, the time and the
// checkpoint's text.
func message(t uint64, checkpoint []byte) []byte {
	return fmt.Appendf(nil, "cosignature/v1\ntime %d\n%s", t, checkpoint)
}

func keyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write([]byte{alg})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// ValidName reports whether name can name a witness key: non-empty UTF-8
// without spaces or '+'.
func ValidName(name string) bool {
	return name != "" && utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsSpace) < 0 && !strings.Contains(name, "+")
}

// Signer makes cosignatures with a witness's key.
type Signer struct {
	name string
	key  ed25519.PrivateKey
	hash uint32
	now  func() uint64
}

// NewSigner returns the signer of witness name with key; now gives the
// time a cosignature states (Unix seconds).
func NewSigner(name string, key ed25519.PrivateKey, now func() uint64) (*Signer, error) {
	if !ValidName(name) {
		return nil, errors.New("invalid witness name")
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("not an Ed25519 private key")
	}
	pub := key.Public().(ed25519.PublicKey)
	return &Signer{name: name, key: key, hash: keyHash(name, pub), now: now}, nil
}

// Name is the witness's name.
func (s *Signer) Name() string { return s.name }

// VerifierKey is the witness's public key in signed-note vkey form:
// name+hash+base64(0x04 || public key).
func (s *Signer) VerifierKey() string {
	pub := s.key.Public().(ed25519.PublicKey)
	return fmt.Sprintf("%s+%08x+%s", s.name, s.hash, base64.StdEncoding.EncodeToString(append([]byte{alg}, pub...)))
}

// Cosign returns the signature line ("— name base64\n") of a cosignature
// over checkpoint, the text of a checkpoint note (three lines, each ending
// in a newline).
func (s *Signer) Cosign(checkpoint []byte) []byte {
	t := s.now()
	sig := ed25519.Sign(s.key, message(t, checkpoint))
	raw := binary.BigEndian.AppendUint32(nil, s.hash)
	raw = binary.BigEndian.AppendUint64(raw, t)
	raw = append(raw, sig...)
	return fmt.Appendf(nil, "— %s %s\n", s.name, base64.StdEncoding.EncodeToString(raw))
}

// Verifier checks cosignatures of one witness. It is a note.Verifier, so
// note.Open counts a note's cosignatures with the log's own signature.
type Verifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
}

var _ note.Verifier = (*Verifier)(nil)

// NewVerifier parses a witness's public key in vkey form.
func NewVerifier(vkey string) (*Verifier, error) {
	parts := strings.SplitN(vkey, "+", 3) // a name holds no "+"; the base64 may
	if len(parts) != 3 || !ValidName(parts[0]) || len(parts[1]) != 8 {
		return nil, errors.New("malformed witness key: want name+hash+base64")
	}
	h, err := strconv.ParseUint(parts[1], 16, 32)
	if err != nil {
		return nil, errors.New("malformed witness key hash")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != alg {
		return nil, errors.New("not a cosignature/v1 Ed25519 witness key")
	}
	pub := ed25519.PublicKey(bytes.Clone(raw[1:]))
	if keyHash(parts[0], pub) != uint32(h) {
		return nil, errors.New("witness key hash does not match its key")
	}
	return &Verifier{name: parts[0], hash: uint32(h), pub: pub}, nil
}

// Name is the witness's name.
func (v *Verifier) Name() string { return v.name }

// KeyHash is the key's hash, as signature lines name it.
func (v *Verifier) KeyHash() uint32 { return v.hash }

// Verify checks sig (the time, then the Ed25519 signature: the signature
// line's bytes after the key hash) over msg (the checkpoint's text).
func (v *Verifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	return ed25519.Verify(v.pub, message(t, msg), sig[8:])
}
