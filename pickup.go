// Credential pickup: the requesting agent collects its friend grant's
// credential itself, once, with a secret only it holds — in the spirit of
// PKCE. Approval mints the grant; the credential is created by the one
// Collect call that hands it to its holder, so no plaintext credential ever
// waits anywhere.

package switchboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

const pickupPrefix = "sbp_"

// NewPickup returns a fresh pickup secret and its verifier for a friend
// request. The requesting agent keeps secret (it is as sensitive as a
// credential) and sends verifier as FriendRequest.Pickup; after approval it
// passes secret to Collect.
func NewPickup() (secret, verifier string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("switchboard: crypto/rand failed: " + err.Error())
	}
	secret = pickupPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, PickupVerifier(secret)
}

// PickupVerifier returns the verifier of a pickup secret: the base64url
// (unpadded) SHA-256 of the secret.
func PickupVerifier(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// checkPickupVerifier refuses anything but a verifier PickupVerifier could
// have returned: 43 characters of canonical base64url for 32 bytes.
func checkPickupVerifier(v string) error {
	if v == "" {
		return invalid("a pickup verifier is required (see NewPickup)")
	}
	if len(v) != 43 {
		return invalid("pickup verifier is not a base64url SHA-256")
	}
	if _, err := canonicalSegment(v); err != nil {
		return invalid("pickup verifier is not a base64url SHA-256")
	}
	return nil
}

// errNothingToCollect is every refusal of Collect, worded the same, so it
// does not reveal whether the edge exists or what went wrong.
func errNothingToCollect() error {
	return notFound("nothing to collect for this edge and secret")
}

// Collect hands the requesting agent the credential of its approved friend
// request: edgeID is the id Request returned and secret the pickup secret
// whose verifier the request carried. It succeeds exactly once, within
// Config.PickupWindow of the approval, while the grant is live. A wrong
// secret, an unknown, pending, denied or revoked edge, a second collection
// and a lapsed window are all ErrNotFound with the same words; a malformed
// secret is ErrInvalidArgument. The credential is created by this call and
// stored only as a hash. A grant not collected within the window is revoked
// by the next Reap, with its edge.
func (s *Switchboard) Collect(ctx context.Context, edgeID, secret string) (Grant, Credential, error) {
	fail := func(err error) (Grant, Credential, error) {
		return Grant{}, "", fmt.Errorf("switchboard: collect: %w", err)
	}
	if !strings.HasPrefix(secret, pickupPrefix) || len(secret) != len(pickupPrefix)+43 {
		return fail(invalid("malformed pickup secret"))
	}
	if err := s.checkName("edge id", edgeID); err != nil {
		return fail(err)
	}
	var g Grant
	var cred Credential
	err := s.update(ctx, func(t *txn) error {
		var e edgeRec
		if err := t.get(tEdges, edgeID, &e, "edge"); errors.Is(err, ErrNotFound) {
			return errNothingToCollect()
		} else if err != nil {
			return err
		}
		ok := subtle.ConstantTimeCompare([]byte(e.Pickup), []byte(PickupVerifier(secret))) == 1
		if !ok || e.State != EdgeApproved || e.GrantID == "" {
			return errNothingToCollect()
		}
		var r grantRec
		if err := t.get(tGrants, e.GrantID, &r, "grant"); err != nil {
			return err
		}
		if !r.live(t.now) || !r.CollectedAt.IsZero() || !t.now.Before(r.CollectBy) {
			return errNothingToCollect()
		}
		if err := t.del(tGrantExp, timeKey(r.CollectBy)+r.ID); err != nil {
			return err
		}
		c, hash := newCredential()
		r.CredHash, r.CollectedAt, r.CollectBy = hash, t.now, time.Time{}
		if err := t.put(tGrants, r.ID, r); err != nil {
			return err
		}
		if err := t.putRaw(tCredIndex, string(hash), r.ID); err != nil {
			return err
		}
		g, cred = r.Grant, c
		return t.emit(Event{Type: EventGrantCollected, Actor: agentActor(r.Holder), Persona: r.Holder, Edge: e.ID, Grant: r.ID})
	})
	if err != nil {
		return fail(err)
	}
	return g, cred, nil
}
