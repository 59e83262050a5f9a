// Package agentcard is the A2A Agent Card model (A2A v1.0,
// specification/a2a.proto): reading cards ([Parse], v1.0 and v0.3), checking
// them ([Card.Validate]), signing them ([Sign]) and verifying their
// signatures ([Verify], [Trust]) the way the official A2A SDKs do (A2A v1.0
// §8.4: a detached JWS over the card's RFC 8785 canonical form).
//
// It imports nothing from switchboard and can be used on its own by any Go
// program that reads, serves or signs Agent Cards. switchboard uses it for
// discovery: personas announce themselves with cards, and remote directories
// read and verify other origins' cards.
//
// Errors wrap [ErrInvalid] (a card or argument that is malformed) or
// [ErrSignature] (signatures that do not verify), matched with errors.Is.
package agentcard

import (
	"errors"
	"fmt"

	"github.com/switchboardhq/switchboard/internal/text"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalid: the card, or an argument such as a signing key or an
	// algorithm list, is malformed, too large or missing required fields.
	ErrInvalid = errors.New("invalid agent card")
	// ErrSignature: a card's signatures do not verify against the trusted
	// keys, or a signature is required and there is none.
	ErrSignature = errors.New("agent card signature rejected")
)

// wrap is err as this package's exported calls return it: "switchboard: "
// once, then the verb; nil stays nil. Inside the package errors are
// unprefixed, so a call that calls another does not say it twice.
func wrap(verb string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("switchboard: %s: %w", verb, err)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func checkText(what, v string, max int, newlines bool) error {
	if err := text.Check(what, v, max, newlines); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// DefaultAlgorithms returns the signature algorithms accepted when a caller
// names none: RS256, ES256 and EdDSA. Each call returns a new slice.
func DefaultAlgorithms() []string { return []string{"RS256", "ES256", "EdDSA"} }
