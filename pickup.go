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

	"github.com/switchboardhq/switchboard/store"
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
//
// A request bound to a key (FriendRequest.Key) is collected only with
// CollectWithProof; here it is ErrDPoPRequired.
func (s *Switchboard) Collect(ctx context.Context, edgeID, secret string) (Grant, Credential, error) {
	return s.collect(ctx, edgeID, secret, nil)
}

// CollectWithProof is Collect for a friend request bound to a key: p must
// be a DPoP proof (see Prove) signed by that key whose ath is the hash of
// the pickup secret, so an intercepted secret is useless without the key.
// A proof that does not verify is ErrInvalidDPoPProof; one by another key
// than the request's is ErrNotFound, like every refusal of Collect. The
// proof is spent (good for one request) before the collection is tried.
func (s *Switchboard) CollectWithProof(ctx context.Context, edgeID, secret string, p Proof) (Grant, Credential, error) {
	return s.collect(ctx, edgeID, secret, &p)
}

func (s *Switchboard) collect(ctx context.Context, edgeID, secret string, p *Proof) (Grant, Credential, error) {
	fail := func(err error) (Grant, Credential, error) {
		return Grant{}, "", fmt.Errorf("switchboard: collect: %w", err)
	}
	if !strings.HasPrefix(secret, pickupPrefix) || len(secret) != len(pickupPrefix)+43 {
		return fail(invalid("malformed pickup secret"))
	}
	if err := s.checkName("edge id", edgeID); err != nil {
		return fail(err)
	}
	var jkt string
	if p != nil {
		chk, err := s.checkProof(*p, secret, s.now())
		if err != nil {
			return fail(err)
		}
		// Spent in its own transaction (under WithTx too), with the
		// edge's key checked, so the proof is good for one try whatever
		// the try — and the application's transaction — does.
		err = s.update(store.OwnTx(ctx), func(t *txn) error {
			var e edgeRec
			if err := t.get(tEdges, edgeID, &e, "edge"); errors.Is(err, ErrNotFound) {
				return errNothingToCollect()
			} else if err != nil {
				return err
			}
			if e.KeyThumbprint != "" && e.KeyThumbprint != chk.jkt {
				return errNothingToCollect() // as for every other refusal
			}
			return t.spendProof(s, chk)
		})
		if err != nil {
			return fail(err)
		}
		jkt = chk.jkt
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
		if e.KeyThumbprint != "" && e.KeyThumbprint != jkt {
			return fmt.Errorf("%w: the request is bound to a key; collect with a proof of it (CollectWithProof)", ErrDPoPRequired)
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
