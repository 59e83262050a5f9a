// Grants and credentials: minting, Authenticate, the authorize gate, Vend and
// Revoke.

package switchboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/switchboardhq/switchboard/store"
)

// GrantState is the state of a grant.
type GrantState string

// Grant states. An expired grant is reported as revoked.
const (
	GrantActive  GrantState = "active"
	GrantRevoked GrantState = "revoked"
)

// Grant is a vended endpoint: it lets its holder agent use Scope over the
// queues of Target (and, for a Vend, the grantor's approvals queue). A
// friend grant comes from an approved edge (EdgeID); a Vend has none.
type Grant struct {
	ID           string        `json:"id"`                   // the grant's id
	Holder       string        `json:"holder"`               // the agent that presents the credential
	Target       string        `json:"target"`               // the persona whose queues the scope names
	Grantor      Human         `json:"grantor"`              // the human who approved or vended it
	Scope        Scope         `json:"scope"`                // normalized
	EdgeID       string        `json:"edge,omitempty"`       // the friend edge, if any
	State        GrantState    `json:"state"`                // active or revoked (an expiry reads as revoked once Reap records it; see ExpiresAt)
	ExpiresAt    time.Time     `json:"expires_at,omitzero"`  // zero: never
	DefaultLease time.Duration `json:"default_lease"`        // zero: Config.DefaultLease
	CreatedAt    time.Time     `json:"created_at,omitzero"`  // when it was minted
	RevokedAt    time.Time     `json:"revoked_at,omitzero"`  // zero while active
	RevokedBy    string        `json:"revoked_by,omitempty"` // the actor who revoked it, or "system" on expiry
	// CollectBy is, for a friend grant whose credential the requesting
	// agent has not collected yet, the deadline for Collect; zero otherwise.
	CollectBy time.Time `json:"collect_by,omitzero"`
	// CollectedAt is when the requesting agent collected the credential of
	// a friend grant; zero before, and for vended grants.
	CollectedAt time.Time `json:"collected_at,omitzero"`
	// KeyThumbprint is, for a grant bound to a key, the key's RFC 7638
	// thumbprint: every call under the grant needs a DPoP proof signed by
	// it (see Prove). Empty for a bearer grant.
	KeyThumbprint string `json:"jkt,omitempty"`
}

// grantRec is the stored form: the grant plus its credential hash, and,
// for a grant a later approval in the same direction replaced, the grant
// that replaced it (and the other way round).
type grantRec struct {
	Grant
	CredHash   []byte `json:"cred_hash"`
	ReplacedBy string `json:"replaced_by,omitempty"`
	Replaces   string `json:"replaces,omitempty"`
}

// replaced reports whether revoked grant r was replaced by a later
// approval in the same direction (its edge e, nil for a vended grant):
// ReplacedBy names the grant that did, or, for a grant replaced before
// the records carried it, its edge says so.
func (r *grantRec) replaced(e *edgeRec) bool {
	return r.ReplacedBy != "" || (e != nil && e.State == EdgeReplaced)
}

func (r grantRec) clone() grantRec {
	r.Scope = r.Scope.clone()
	r.CredHash = bytes.Clone(r.CredHash)
	return r
}

// live is the one rule for whether a grant holds at now: active, not past
// its ExpiresAt, and — for a friend grant whose credential was not
// collected yet — not past its CollectBy. Each of those counts as
// revocation at its instant, whether or not Reap has recorded it yet.
// Every entry point goes through it (authenticate for a caller's
// credential, originLive for the work a grant queued, webhooks,
// Connections).
func (g *Grant) live(now time.Time) bool {
	return g.State == GrantActive && (g.ExpiresAt.IsZero() || now.Before(g.ExpiresAt)) &&
		(g.CollectBy.IsZero() || now.Before(g.CollectBy))
}

// maxReplacements bounds how many replacements originLive follows.
const maxReplacements = 64

// originLive reports whether the work grant id queued may still be handed
// out at t.now: the grant is live, or a later approval in the same
// direction replaced it and the grant that replaced it is (following each
// replacement) — a replacement keeps the queued todos, as they came from a
// party still trusted. A grant revoked, expired or gone, or replaced by
// one that since was, is not.
func (t *txn) originLive(id string) (bool, error) {
	for range maxReplacements {
		g, err := viewHot[grantRec](t, tGrants, id, "grant")
		if isNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if g.live(t.now) {
			return true, nil
		}
		if g.State != GrantRevoked || g.ReplacedBy == "" {
			return false, nil
		}
		id = g.ReplacedBy
	}
	return false, nil
}

// Credential is the secret an agent presents to act under a grant. It is
// returned once — by Vend, or for a friend grant by Collect to the requesting
// agent — and stored only as a SHA-256 hash.
// Its String method redacts it so that a stray %v in a log prints nothing
// secret; use string(c) to hand it to its holder.
type Credential string

const credPrefix = "sbg_"

// String returns a redacted form.
func (c Credential) String() string {
	if c == "" {
		return ""
	}
	return credPrefix + "[redacted]"
}

// GoString returns a redacted form.
func (c Credential) GoString() string { return `switchboard.Credential("` + c.String() + `")` }

func newCredential() (Credential, []byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("switchboard: crypto/rand failed: " + err.Error())
	}
	c := Credential(credPrefix + base64.RawURLEncoding.EncodeToString(b[:]))
	h := c.hash()
	return c, h[:]
}

// hash is what the store keeps of a credential (grant records, the
// credential index) and what a process remembers it by (hotCache).
func (c Credential) hash() [sha256.Size]byte { return sha256.Sum256([]byte(c)) }

// mint creates an active grant inside t and, if withCredential, its
// credential (a friend grant gets its credential at Collect). holder is
// the human behind g's holder (see Connections).
func (t *txn) mint(g Grant, holder Human, withCredential bool) (Grant, Credential, error) {
	var cred Credential
	var hash []byte
	if withCredential {
		cred, hash = newCredential()
	}
	g.ID = newID("grant")
	g.State = GrantActive
	g.CreatedAt = t.now
	if err := t.put(tGrants, g.ID, grantRec{Grant: g, CredHash: hash}); err != nil {
		return Grant{}, "", err
	}
	if err := t.indexGrant(g, holder); err != nil {
		return Grant{}, "", err
	}
	if withCredential {
		if err := t.putRaw(tCredIndex, string(hash), g.ID); err != nil {
			return Grant{}, "", err
		}
	}
	for _, due := range []time.Time{g.ExpiresAt, g.CollectBy} {
		// Reap revokes a grant when it expires, and a friend grant whose
		// credential was not collected in time.
		if !due.IsZero() {
			if err := t.putRaw(tGrantExp, timeKey(due)+g.ID, ""); err != nil {
				return Grant{}, "", err
			}
		}
	}
	err := t.emit(Event{Type: EventGrantMinted, Actor: humanActor(g.Grantor), Persona: g.Holder, Edge: g.EdgeID, Grant: g.ID})
	return g, cred, err
}

// authenticate resolves what a call presents to its live grant: the one
// place every agent-facing call checks a credential. A grant bound to a
// key accepts only a Proven by that key (see Prove). The grant returned is
// the hot cache's own (viewHot): read it, never change it, and clone what
// a caller is handed.
func (t *txn) authenticate(a Auth) (*grantRec, error) {
	if a == nil {
		return nil, fmt.Errorf("%w: no credential", ErrUnauthenticated)
	}
	c, jkt := a.presentation()
	g, err := t.grantOf(c)
	if err != nil {
		return nil, err
	}
	if g.KeyThumbprint != "" && g.KeyThumbprint != jkt {
		if jkt == "" {
			return nil, fmt.Errorf("%w: the grant is bound to a key; present a proof of it (Prove)", ErrDPoPRequired)
		}
		return nil, proofErr("it is signed by another key than the grant is bound to")
	}
	return g, nil
}

// grantOf resolves a credential to its live grant, whatever key the grant
// is bound to.
func (t *txn) grantOf(c Credential) (*grantRec, error) {
	s := string(c)
	if !strings.HasPrefix(s, credPrefix) || len(s) != len(credPrefix)+43 {
		return nil, fmt.Errorf("%w: malformed credential", ErrUnauthenticated)
	}
	h := c.hash()
	if id := t.hot.credGrant(string(h[:])); id != "" {
		// The grant it named last time: its record decides. Anything
		// else (the grant gone, changed, revoked) goes the long way,
		// so every refusal is the lookup's.
		g, err := viewHot[grantRec](t, tGrants, id, "grant")
		if err == nil && subtle.ConstantTimeCompare(g.CredHash, h[:]) == 1 && g.live(t.now) {
			return g, nil
		}
		t.hot.setCredGrant(string(h[:]), "")
	}
	id, err := t.lookup(tCredIndex, string(h[:]))
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("%w: unknown or revoked credential", ErrUnauthenticated)
	}
	g, err := viewHot[grantRec](t, tGrants, id, "grant") // read only: see authenticate
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(g.CredHash, h[:]) != 1 || !g.live(t.now) {
		return nil, fmt.Errorf("%w: unknown or revoked credential", ErrUnauthenticated)
	}
	t.hot.setCredGrant(string(h[:]), id)
	return g, nil
}

// authorize is the one gate for every queue verb: the credential must be live,
// the queue must be in the grant's scope (else ErrNotFound — exactly as for a
// queue that does not exist), and the verb must be granted on it.
func (s *Switchboard) authorize(t *txn, c Auth, queue string, v Verb) (*grantRec, string, error) {
	g, err := t.authenticate(c)
	if err != nil {
		return nil, "", err
	}
	if queue != ApprovalsQueue {
		if err := s.checkQueueName(queue); err != nil {
			return nil, "", err
		}
	}
	if !g.Scope.Has(queue) {
		return nil, "", notFoundNamed("queue", queue)
	}
	if !g.Scope.Allows(queue, v) {
		return nil, "", fmt.Errorf("%w: grant does not allow %s on this queue", ErrForbidden, v)
	}
	return g, queueKey(&g.Grant, queue), nil
}

// queueKey is the store-wide address of a queue named by a grant: a
// persona's queue, or the grantor's approvals queue.
func queueKey(g *Grant, queue string) string {
	if queue == ApprovalsQueue {
		return approvalsKey(g.Grantor)
	}
	return "p:" + g.Target + "/" + queue
}

func approvalsKey(h Human) string { return "h:" + h.key() + "/" + ApprovalsQueue }

// Authenticate returns the live grant a credential stands for, or
// ErrUnauthenticated (ErrDPoPRequired for a bare credential whose grant is
// bound to a key).
func (s *Switchboard) Authenticate(ctx context.Context, c Auth) (Grant, error) {
	var g Grant
	err := s.view(ctx, func(t *txn) error {
		r, err := t.authenticate(c)
		if err != nil {
			return err
		}
		g = r.Grant
		g.Scope = g.Scope.clone() // the caller's own: r is shared (authenticate)
		return nil
	})
	if err != nil {
		return Grant{}, fmt.Errorf("switchboard: authenticate: %w", err)
	}
	return g, nil
}

// VendRequest describes a grant a human gives one of their own agents.
type VendRequest struct {
	// Agent is the persona that will hold the credential. It must be owned
	// by the vending human.
	Agent string `json:"agent"`
	// Target is the persona whose queues Scope names. Empty means Agent. It
	// must be owned by the vending human.
	Target string `json:"target,omitempty"`
	// Scope may hold any verb, and list/get on ApprovalsQueue.
	Scope Scope `json:"scope"`
	// ExpiresAt ends the grant; zero means it lasts until revoked. A
	// non-zero time must lie in [1970, 2200) UTC.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// DefaultLease is the lease length for claims that name none; zero means
	// Config.DefaultLease. In JSON, a Go duration string ("5m0s"); a
	// number of nanoseconds is read too.
	DefaultLease time.Duration `json:"default_lease,omitempty"`
	// Key, if set, binds the grant to the agent's public key (a JWK, as
	// FriendRequest.Key): every call needs a DPoP proof by it. Required
	// when Target has RequireProof.
	Key json.RawMessage `json:"key,omitempty"`
}

// Vend lets human grant one of their own agents a scope over their own
// queues, so the agent can drain them. It returns the grant and its
// credential, which is shown only this once. Errors: ErrNotFound naming the
// persona, for an Agent or Target that does not exist or is not human's
// (the two read the same); ErrInvalidArgument for a malformed scope, a
// DefaultLease outside [0, Config.MaxLease], an ExpiresAt in the past, or
// a Target with RequireProof and no Key.
func (s *Switchboard) Vend(ctx context.Context, human Human, r VendRequest) (Grant, Credential, error) {
	if err := human.validate(); err != nil {
		return Grant{}, "", fmt.Errorf("switchboard: vend: %w", err)
	}
	if r.Agent == "" {
		return Grant{}, "", fmt.Errorf("switchboard: vend: %w", invalid("VendRequest.Agent is empty: name the persona that will hold the grant"))
	}
	if r.Target == "" {
		r.Target = r.Agent
	}
	sc, err := s.validateScope(r.Scope, false)
	if err != nil {
		return Grant{}, "", fmt.Errorf("switchboard: vend: %w", err)
	}
	if r.DefaultLease < 0 || r.DefaultLease > s.cfg.MaxLease {
		return Grant{}, "", fmt.Errorf("switchboard: vend: %w", invalid("default lease %s outside [0, %s] (0: the configured default)", r.DefaultLease, s.cfg.MaxLease))
	}
	if err := checkTime("expiry", r.ExpiresAt); err != nil {
		return Grant{}, "", fmt.Errorf("switchboard: vend: %w", err)
	}
	var jkt string
	if len(r.Key) > 0 {
		if jkt, err = keyThumbprint(r.Key); err != nil {
			return Grant{}, "", fmt.Errorf("switchboard: vend: %w", err)
		}
	}
	var g Grant
	var cred Credential
	err = s.update(ctx, func(t *txn) error {
		if !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(t.now) {
			return invalid("expiry in the past")
		}
		for _, id := range []string{r.Agent, r.Target} {
			p, err := t.persona(id)
			if isNotFound(err) || err == nil && p.Owner != human {
				return notFoundNamed("persona", id) // not yours looks like not there
			}
			if err != nil {
				return err
			}
			if id == r.Target && p.RequireProof && jkt == "" {
				return invalid("persona %s accepts only grants bound to a key: set VendRequest.Key", id)
			}
		}
		var err error
		g, cred, err = t.mint(Grant{
			Holder: r.Agent, Target: r.Target, Grantor: human, Scope: sc,
			ExpiresAt: r.ExpiresAt.UTC(), DefaultLease: r.DefaultLease, KeyThumbprint: jkt,
		}, human, true)
		return err
	})
	if err != nil {
		return Grant{}, "", fmt.Errorf("switchboard: vend: %w", err)
	}
	return g, cred, nil
}

// Revoke kills a grant at once: its credential fails from the next call on.
// The grantor may revoke any grant; for a friend grant the requesting human
// may revoke it too (either side of the edge). In the same transaction the
// edge becomes revoked and todos that came through the grant and are not yet
// claimed are cancelled; claimed ones finish or fail normally. Revoking a
// grant that is already revoked or expired succeeds and changes nothing
// (but finishes cancelling its queued todos, see below). A grant the human
// may not revoke is ErrNotFound.
//
// A nil error means the revocation committed; an error means it did not,
// unless it wraps ErrCommitUnknown. A grant with many queued todos has them
// marked cancelled in passes after the revocation commits; if a pass fails
// (the store failing over), Revoke still returns nil — the revocation holds
// and no claim takes those todos — logs a warning, and revoking the grant
// again finishes the passes.
func (s *Switchboard) Revoke(ctx context.Context, human Human, grantID string) error {
	if err := human.validate(); err != nil {
		return fmt.Errorf("switchboard: revoke: %w", err)
	}
	err := s.update(ctx, func(t *txn) error {
		g, e, err := t.grantWithEdge(grantID)
		if err != nil {
			return err
		}
		if g.Grantor != human && (e == nil || e.Requester != human) {
			return notFound("grant")
		}
		if g.State == GrantRevoked && !g.replaced(e) {
			// Already revoked (not replaced, whose queued todos stay):
			// cancel what an earlier Revoke's pass may have left queued
			// (it failed after the revocation committed), in the name
			// of who revoked it. Nothing else changes.
			return t.cancelWorkOf(g, g.RevokedBy)
		}
		if g.State != GrantActive {
			return nil
		}
		return t.revokeGrant(g, e, humanActor(human), "revoked", true)
	})
	if err != nil {
		return fmt.Errorf("switchboard: revoke: %w", err)
	}
	// The revocation has committed, and holds: from here no claim takes a
	// todo of the grant (claimOne cancels one instead), and update has
	// marked its queued todos cancelled (see updateWith).
	return nil
}

// cancelRevoked runs cancelQueued for each grant a transaction revoked.
func (s *Switchboard) cancelRevoked(ctx context.Context, revoked []revokedGrant) error {
	for _, r := range revoked {
		if err := s.cancelQueued(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// grantWithEdge loads a grant and, for a friend grant, its edge (else nil).
func (t *txn) grantWithEdge(id string) (*grantRec, *edgeRec, error) {
	var g grantRec
	if err := t.get(tGrants, id, &g, "grant"); err != nil {
		return nil, nil, err
	}
	if g.EdgeID == "" {
		return &g, nil, nil
	}
	var e edgeRec
	if err := t.get(tEdges, g.EdgeID, &e, "edge"); err != nil {
		return nil, nil, err
	}
	return &g, &e, nil
}

// revokeGrant revokes g (and its edge e, if any) inside t. cancelQueued
// cancels the grant's todos that are not yet claimed.
func (t *txn) revokeGrant(g *grantRec, e *edgeRec, actor, why string, cancelQueued bool) error {
	g.State, g.RevokedAt, g.RevokedBy = GrantRevoked, t.now, actor
	if len(g.CredHash) > 0 { // a friend grant not yet collected has none
		if err := t.del(tCredIndex, string(g.CredHash)); err != nil {
			return err
		}
	}
	if !g.CollectBy.IsZero() {
		if err := t.del(tGrantExp, timeKey(g.CollectBy)+g.ID); err != nil {
			return err
		}
	}
	if !g.ExpiresAt.IsZero() {
		if err := t.del(tGrantExp, timeKey(g.ExpiresAt)+g.ID); err != nil {
			return err
		}
	}
	if err := t.put(tGrants, g.ID, g); err != nil {
		return err
	}
	if err := t.unindexGrant(g.Grant, grantHolderHuman(g.Grant, e)); err != nil {
		return err
	}
	if err := t.dropWebhooksOf(g.ID, actor); err != nil {
		return err
	}
	if err := t.emit(Event{Type: EventGrantRevoked, Actor: actor, Persona: g.Holder, Edge: g.EdgeID, Grant: g.ID, Detail: why}); err != nil {
		return err
	}
	if e != nil && e.State == EdgeApproved {
		typ := EventEdgeRevoked
		e.State = EdgeRevoked
		if why == "replaced" {
			e.State, typ = EdgeReplaced, EventEdgeReplaced
		}
		e.UpdatedAt = t.now
		if err := t.putEdge(e); err != nil {
			return err
		}
		if err := t.del(tEdgeLive, e.From+sep+e.To); err != nil {
			return err
		}
		if err := t.emit(Event{Type: typ, Actor: actor, Persona: e.From, Edge: e.ID, Grant: g.ID}); err != nil {
			return err
		}
	}
	if cancelQueued {
		return t.cancelWorkOf(g, actor)
	}
	return nil
}

// cancelWorkOf has the queued todos of revoked grant g cancelled once the
// transaction commits (see cancelQueued), with those of the grants g
// replaced: their work was trusted only while g was live, so it goes with
// g's. Revoke, a first time or again, and expiry all go through it.
func (t *txn) cancelWorkOf(g *grantRec, actor string) error {
	t.revoked = append(t.revoked, revokedGrant{g.ID, actor})
	id := g.Replaces
	for i := 0; id != "" && i < maxReplacements; i++ {
		t.revoked = append(t.revoked, revokedGrant{id, actor})
		prev, err := viewHot[grantRec](t, tGrants, id, "grant")
		if isNotFound(err) {
			break
		}
		if err != nil {
			return err
		}
		id = prev.Replaces
	}
	return nil
}

// revokedGrant is a grant a transaction revoked whose queued todos are to
// be cancelled after it commits (see cancelQueued).
type revokedGrant struct{ id, actor string }

// cancelBatch bounds the todos one cancelling transaction reads.
const cancelBatch = 256

// cancelQueued cancels the todos grant id created that are still queued,
// in transactions of at most cancelBatch todos, walking the grant's index
// with a cursor: a grant that created a million todos is revoked in a
// small transaction, not one that reads them all. Meanwhile no claim takes
// such a todo (claimIn cancels a queued todo whose creating grant is no
// longer active instead), so revocation is as if every queued todo was
// cancelled when it committed. On a store whose writers run concurrently a
// CreateFor that read the grant before the revocation and commits after a
// pass has read the index conflicts with the pass (serializable isolation
// aborts one of them), so the last pass sees every todo.
func (s *Switchboard) cancelQueued(ctx context.Context, r revokedGrant) error {
	from := idxKey(idxGrant, r.id, "")
	end := prefixEnd(from)
	for {
		var next []byte
		err := s.update(ctx, func(t *txn) error {
			next = nil
			var ids []string
			var last []byte
			if err := t.tx.Scan(tIdx, []byte(from), end, func(k, v []byte) bool {
				ids, last = append(ids, string(v)), k
				return len(ids) < cancelBatch
			}); err != nil {
				return err
			}
			if p, ok := t.tx.(store.Prefetcher); ok && len(ids) > 0 {
				keys := make([][]byte, len(ids))
				for i, id := range ids {
					keys[i] = []byte(id)
				}
				if err := p.Prefetch(tTodos, keys); err != nil {
					return err
				}
			}
			for _, id := range ids {
				td, err := t.todo(id)
				if isNotFound(err) || t.setAside(err, id) {
					continue // purged, or damaged: set aside
				}
				if err != nil {
					return err
				}
				if td.State == TodoQueued {
					if err := t.endTodo(td, TodoCancelled, AttemptRevoked, r.actor, "grant revoked"); err != nil {
						return err
					}
				}
			}
			if len(ids) == cancelBatch {
				next = append(last, 0)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("cancel the queued todos of grant %s: %w", r.id, err)
		}
		if next == nil {
			return nil
		}
		from = string(next)
	}
}
