package auditlog

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// ErrKey is wrapped by the errors of NewKey and ParseKeys: a log name a
// signed note cannot carry, a key that is not an Ed25519 note key, a key
// the log rotated from that has another name.
var ErrKey = errors.New("invalid log key")

// NewKey generates an Ed25519 key pair for signing a log's checkpoints, in
// golang.org/x/mod/sumdb/note's text forms. name is the log's origin,
// conventionally a host name and path ("example.com/audit"): not empty,
// valid UTF-8, without a space or a '+'. Keep signerKey secret; publish
// verifierKey.
func NewKey(name string) (signerKey, verifierKey string, err error) {
	if name == "" || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsSpace) || strings.Contains(name, "+") {
		return "", "", fmt.Errorf("%w: the log's name %q is empty or has a space or a '+'", ErrKey, name)
	}
	signerKey, verifierKey, err = note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", "", fmt.Errorf("%w: %w", ErrKey, err)
	}
	return signerKey, verifierKey, nil
}

// Keys are a log's signing key and the keys its checkpoints are checked
// with: its own first, then the public keys it rotated from.
type Keys struct {
	Signer      note.Signer
	Verifiers   []note.Verifier // Verifiers[0] checks Signer's signatures
	VerifierKey string          // Signer's public key in note's text form, to publish
}

// ParseKeys reads a log's signing key (NewKey's signerKey) and the public
// keys of the keys it rotated from, each of which must carry the log's
// name: a rotation changes the key, never the log. Errors wrap ErrKey.
func ParseKeys(signerKey string, previous ...string) (Keys, error) {
	signer, err := note.NewSigner(signerKey)
	if err != nil {
		return Keys{}, fmt.Errorf("%w: %v", ErrKey, err)
	}
	// PRIVATE+KEY+<name>+<hash>+<base64(1 || ed25519 seed)>
	parts := strings.SplitN(signerKey, "+", 5) // a name holds no '+'; the key's base64 may
	raw, err := base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return Keys{}, fmt.Errorf("%w: not an Ed25519 note key", ErrKey)
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(signer.Name(), pub)
	if err != nil {
		return Keys{}, fmt.Errorf("%w: %v", ErrKey, err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil || v.KeyHash() != signer.KeyHash() {
		return Keys{}, fmt.Errorf("%w: its public key does not match", ErrKey)
	}
	k := Keys{Signer: signer, Verifiers: []note.Verifier{v}, VerifierKey: vkey}
	for i, p := range previous {
		v, err := note.NewVerifier(p)
		if err != nil {
			return Keys{}, fmt.Errorf("%w: previous key %d: %v", ErrKey, i, err)
		}
		if v.Name() != signer.Name() {
			return Keys{}, fmt.Errorf("%w: previous key %d is named %q, not the log's origin %q: a rotated key keeps the log's name", ErrKey, i, v.Name(), signer.Name())
		}
		for j, w := range k.Verifiers {
			if w.KeyHash() == v.KeyHash() {
				if j == 0 {
					return Keys{}, fmt.Errorf("%w: previous key %d is the signing key's own: list only the keys it replaced", ErrKey, i)
				}
				return Keys{}, fmt.Errorf("%w: previous key %d is listed twice", ErrKey, i)
			}
		}
		k.Verifiers = append(k.Verifiers, v)
	}
	return k, nil
}
