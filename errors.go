// Sentinel and typed errors.

package switchboard

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
)

// Sentinel errors. Every error the library returns wraps at most one of these
// (plus, for store failures, the store's own error), so callers branch with
// errors.Is. Messages never contain credentials or ID tokens.
var (
	// ErrNotFound: the thing does not exist, or exists but is not visible to
	// the caller. The two are deliberately indistinguishable.
	ErrNotFound = errors.New("not found")
	// ErrUnauthenticated: the credential is malformed, unknown, revoked or
	// expired.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: the caller can see the thing but may not do this to it
	// (for example a grant that can claim from a queue but not create in it).
	ErrForbidden = errors.New("forbidden")
	// ErrInvalidTransition: the record is not in a state that allows the
	// operation (approving a denied edge, completing a finished todo).
	ErrInvalidTransition = errors.New("invalid state transition")
	// ErrScopeExceedsRequest: an approval tried to grant more than was
	// requested.
	ErrScopeExceedsRequest = errors.New("scope exceeds request")
	// ErrLeaseLost: the lease presented is not the todo's current lease
	// (stale, foreign or expired). Nothing was changed.
	ErrLeaseLost = errors.New("lease lost")
	// ErrProvenance: the friend request's ID token failed verification
	// (signature, issuer, audience, freshness, nonce, replay, assurance
	// policy). A verified human who does not own the requesting agent is
	// ErrForbidden.
	ErrProvenance = errors.New("provenance rejected")
	// ErrInvalidArgument: an input is empty, too large or malformed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrConflict: the operation clashes with existing state, for example a
	// persona id owned by another human, or a second pending request in the
	// same direction with a different scope.
	ErrConflict = errors.New("conflict")
	// ErrCardSignature: an Agent Card's signatures do not verify against the
	// keys the directory trusts, or a signature is required and there is
	// none. It is agentcard.ErrSignature, re-exported.
	ErrCardSignature = agentcard.ErrSignature
	// ErrQuotaExceeded: a friend request would go over a count limit (live
	// edges of the requesting human, pending requests waiting for the
	// target human): then the error is a *RetryError. RegisterWebhook past
	// WebhookConfig.PerGrant is ErrQuotaExceeded too, not a *RetryError
	// (delete a webhook first).
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrRateLimited: a friend request came too soon (a rate bucket is empty
	// or a cooldown after a deny or withdraw is running). The error is a
	// *RetryError saying when to retry.
	ErrRateLimited = errors.New("rate limited")
	// ErrQueueEmpty: Claim, ClaimN or CompleteAndClaim found no ready todo
	// (StatusOf: 204). With ClaimOptions.Wait they block instead.
	ErrQueueEmpty = errors.New("queue empty")
	// ErrUnknownLogKey: the log's checkpoint is signed by a key that is
	// neither Config.LogKey nor one of Config.PreviousLogKeys — most often
	// a program that made a new log key on its second run instead of
	// keeping the first. From the log's own checks (Checkpoint, CheckLog,
	// VerifyAudit, Reap) errors carrying it are *AuditError and match
	// ErrAuditBroken too: nothing is signed until it is resolved. From
	// OpenCheckpoint (and OpenWitnessedCheckpoint) it wraps ErrProof: the
	// note is signed, but by none of the keys the caller gave.
	ErrUnknownLogKey = auditlog.ErrUnknownKey
	// ErrUnknownKind: a Kinds handler was given a todo of a kind nothing
	// is registered for; the attempt fails (see Kinds for the rule).
	ErrUnknownKind = errors.New("no handler for the todo's kind")
	// ErrDamaged: a stored record does not decode, or its bytes do not
	// match the checksum stored with them (todo records carry a CRC-32C
	// from layout 8 on): they changed underneath the store — a disk
	// flipped a bit, someone wrote the store by hand. The error names the
	// table and the key; nothing is handed out from such a record. Reading
	// it by its id (Get, Cancel, a list of its queue) is this error, for
	// any caller: since who may read a todo is written in the record, a
	// caller who knows the id learns that a damaged record has it. The work
	// that goes through every todo — claims and Work, Reap's lease expiry
	// and retention, a revocation's cancel passes — sets it aside: never
	// handed out, expired, cancelled or purged, reported once to
	// Config.Logger at error level, and no other work waits on it: its
	// entries that drive work (ready, delayed, lease, ended) leave the
	// index the first time a scan meets it, so no later pass meets it
	// again. Restore the record, or the store, from a backup: once the
	// record reads again, Reap puts its entries back and its work goes on.
	// A friend request whose approval todo is damaged is still decided,
	// withdrawn or expired (the edge is the request's record).
	ErrDamaged = errors.New("stored record damaged")
	// ErrClosed is the store's closed error, re-exported so callers need not
	// import package store to match it.
	ErrClosed = store.ErrClosed
	// ErrCommitUnknown is the store's unknown-outcome error, re-exported:
	// the call's context ended, or the connection to the database failed,
	// while its commit was on the way, so what it wrote may or may not
	// have landed. Nothing is retried behind the caller's back. Repeat a
	// CreateFor with the same dedup key to learn which; read the record
	// again (Get) after a queue verb. Errors carrying it also match the
	// context's error when that is what ended the call.
	ErrCommitUnknown = store.ErrCommitUnknown
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// cardErr adds ErrInvalidArgument to an agentcard error that wraps
// agentcard.ErrInvalid, so callers of this package match one sentinel, and
// reads it without its "switchboard: " (the caller wraps it again).
func cardErr(err error) error {
	if errors.Is(err, agentcard.ErrInvalid) && !errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, inner(err))
	}
	return inner(err)
}

// wrapErr prefixes err with the package and the operation; nil stays nil.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("switchboard: %s: %w", op, err)
}

func notFound(what string) error { return fmt.Errorf("%w: %s", ErrNotFound, what) }

// notFoundNamed is ErrNotFound naming what the caller asked for by the name
// it gave ("not found: queue \"refunds\""): the same words for a name that
// does not exist and for one the caller may not see, so the name tells the
// caller nothing it did not say.
func notFoundNamed(what, name string) error {
	return fmt.Errorf("%w: %s %q", ErrNotFound, what, name)
}

// inner is err, an error of a switchboard call (a witness client's, a
// directory's) that this package wraps again, reading without its own
// "switchboard: " prefix: a message carries it once. It unwraps to err.
func inner(err error) error { return innerError{err} }

type innerError struct{ err error }

func (e innerError) Error() string { return strings.TrimPrefix(e.err.Error(), "switchboard: ") }
func (e innerError) Unwrap() error { return e.err }

// named turns a not-found error into notFoundNamed(what, name), and leaves
// any other error (a store failure) as it is.
func named(err error, what, name string) error {
	if errors.Is(err, ErrNotFound) {
		return notFoundNamed(what, name)
	}
	return err
}

// RetryError is a refusal that may succeed later: it wraps ErrQuotaExceeded
// or ErrRateLimited and says which limit was hit and when a retry can
// succeed. Match it with errors.As:
//
//	var re *switchboard.RetryError
//	if errors.As(err, &re) { wait until re.RetryAt }
type RetryError struct {
	Err     error     // ErrQuotaExceeded or ErrRateLimited
	Limit   string    // the limit hit, in words
	RetryAt time.Time // the earliest time a retry can succeed; zero if it depends on someone else (an edge must end)
}

func (e *RetryError) Error() string {
	if e.RetryAt.IsZero() {
		return fmt.Sprintf("%v: %s", e.Err, e.Limit)
	}
	return fmt.Sprintf("%v: %s; retry at %s", e.Err, e.Limit, e.RetryAt.UTC().Format(time.RFC3339))
}

// Unwrap returns ErrQuotaExceeded or ErrRateLimited.
func (e *RetryError) Unwrap() error { return e.Err }

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
