// Status: the one mapping from a switchboard error to what a host answers —
// an HTTP status and a stable machine-readable code.

package switchboard

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/switchboardhq/switchboard/agentcard"
)

// Status is how a host answers an error from switchboard.
type Status struct {
	// HTTP is the status code: 400 invalid input, 401 unauthenticated or
	// provenance rejected, 403 forbidden, 404 not found (also for what
	// exists but is not the caller's), 409 a conflict or lost lease, 410 a
	// subscription whose events are gone (or an audit event purged), 429 a
	// quota or rate limit, 501 a feature not configured (ErrNoLogKey), 503
	// closed or cancelled, 504 a deadline, 500 anything else — and 204 for
	// ErrQueueEmpty, which is no failure: nothing was ready to claim. Every
	// error caused by the caller's input — a malformed Agent Card
	// (agentcard.ErrInvalid) or a proof that does not verify included — is
	// a 4xx.
	HTTP int
	// Code is a stable snake_case name for the error class, for clients to
	// switch on ("not_found", "lease_lost", "rate_limited"…).
	Code string
	// RetryAt is, for 429, the earliest time a retry can succeed; zero when
	// it depends on someone else. Hosts send it as Retry-After.
	RetryAt time.Time
}

// StatusOf maps err to its Status. A nil error is 200 "ok". Matching is by
// errors.Is, most specific first, so a wrapped error maps like its
// sentinel. Error messages never hold secrets, so hosts may send
// err.Error() along with the code.
func StatusOf(err error) Status {
	if err == nil {
		return Status{HTTP: http.StatusOK, Code: "ok"}
	}
	var re *RetryError
	if errors.As(err, &re) {
		code := "quota_exceeded"
		if errors.Is(err, ErrRateLimited) {
			code = "rate_limited"
		}
		return Status{HTTP: http.StatusTooManyRequests, Code: code, RetryAt: re.RetryAt}
	}
	for _, m := range statusTable {
		if errors.Is(err, m.err) {
			return Status{HTTP: m.http, Code: m.code}
		}
	}
	return Status{HTTP: http.StatusInternalServerError, Code: "internal"}
}

var statusTable = []struct {
	err  error
	http int
	code string
}{
	{ErrCardSignature, http.StatusBadRequest, "card_signature"},
	{agentcard.ErrInvalid, http.StatusBadRequest, "invalid_argument"},
	{ErrProof, http.StatusBadRequest, "proof_invalid"},
	{ErrScopeExceedsRequest, http.StatusBadRequest, "scope_exceeds_request"},
	{ErrInvalidArgument, http.StatusBadRequest, "invalid_argument"},
	{ErrProvenance, http.StatusUnauthorized, "provenance_rejected"},
	{ErrDPoPRequired, http.StatusUnauthorized, "dpop_required"},
	{ErrInvalidDPoPProof, http.StatusUnauthorized, "invalid_dpop_proof"},
	{ErrUseDPoPNonce, http.StatusUnauthorized, "use_dpop_nonce"},
	{ErrUnauthenticated, http.StatusUnauthorized, "unauthenticated"},
	{ErrForbidden, http.StatusForbidden, "forbidden"},
	{ErrNotFound, http.StatusNotFound, "not_found"},
	{ErrLeaseLost, http.StatusConflict, "lease_lost"},
	{ErrInvalidTransition, http.StatusConflict, "invalid_transition"},
	{ErrConflict, http.StatusConflict, "conflict"},
	{ErrQueueEmpty, http.StatusNoContent, "queue_empty"},
	{ErrFellBehind, http.StatusGone, "fell_behind"},
	{ErrEventPurged, http.StatusGone, "event_purged"},
	{ErrNoLogKey, http.StatusNotImplemented, "not_configured"},
	{ErrNoWebhooks, http.StatusNotImplemented, "not_configured"},
	{ErrUnknownKind, http.StatusNotImplemented, "unknown_kind"},
	{ErrWebhookSignature, http.StatusUnauthorized, "bad_signature"},
	{ErrQuotaExceeded, http.StatusTooManyRequests, "quota_exceeded"},
	{ErrRateLimited, http.StatusTooManyRequests, "rate_limited"},
	{ErrClosed, http.StatusServiceUnavailable, "closed"},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, "deadline_exceeded"},
	{context.Canceled, http.StatusServiceUnavailable, "canceled"},
	{ErrUnknownLogKey, http.StatusInternalServerError, "unknown_log_key"},
	{ErrAuditBroken, http.StatusInternalServerError, "audit_broken"},
	{ErrNewerSchema, http.StatusInternalServerError, "newer_schema"},
	{ErrDamaged, http.StatusInternalServerError, "damaged"},
}
