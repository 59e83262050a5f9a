// Trust policies: what a reader of cards does with their signatures.

package agentcard

import (
	"fmt"

	jose "github.com/go-jose/go-jose/v4"
)

// Policy says what a directory does with Agent Card signatures.
type Policy int

const (
	// SignaturesOff accepts cards without looking at their signatures.
	SignaturesOff Policy = iota
	// SignaturesIfPresent accepts an unsigned card, but a card that
	// carries signatures must have one that verifies.
	SignaturesIfPresent
	// SignaturesRequired accepts only cards with a signature that
	// verifies.
	SignaturesRequired
)

// Trust is a directory's signature policy and the keys it trusts.
type Trust struct {
	// Policy says whether signatures are ignored, checked when present, or
	// required. The zero value is SignaturesOff.
	Policy Policy
	// Keys are the public keys signatures are checked against, found by the
	// protected header's kid.
	Keys *jose.JSONWebKeySet
	// Algorithms allowed; default DefaultAlgorithms. "none" and HMAC are
	// always refused.
	Algorithms []string
}

// Validate checks the trust configuration itself: a known policy, trusted
// keys whenever signatures are looked at, and no algorithm that is never
// allowed. Errors wrap ErrInvalid.
func (tr Trust) Validate() error { return wrap("card trust", tr.validate()) }

func (tr Trust) validate() error {
	if tr.Policy < SignaturesOff || tr.Policy > SignaturesRequired {
		return invalid("unknown Policy %d", tr.Policy)
	}
	if tr.Policy != SignaturesOff && tr.Keys == nil {
		return invalid("a signature policy needs trusted keys")
	}
	_, err := allowedAlgorithms(tr.Algorithms)
	return err
}

// Check applies the policy to c: nil if c is acceptable, else an error
// wrapping ErrSignature (or ErrInvalid for a malformed configuration).
func (tr Trust) Check(c Card) error { return wrap("check card", tr.check(c)) }

func (tr Trust) check(c Card) error {
	switch tr.Policy {
	case SignaturesOff:
		return nil
	case SignaturesIfPresent:
		if len(c.Signatures) == 0 {
			return nil
		}
	case SignaturesRequired:
		if len(c.Signatures) == 0 {
			return fmt.Errorf("%w: the card is not signed", ErrSignature)
		}
	default:
		return invalid("unknown Policy %d", tr.Policy)
	}
	_, err := verify(c, tr.Keys, tr.Algorithms)
	return err
}
