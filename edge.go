// Friend edges: Request, Approve, Deny, Withdraw, Edge, Approvals, and the
// persistence of edges with their indexes.

package switchboard

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchboardhq/switchboard/internal/text"
	"github.com/switchboardhq/switchboard/store"
)

// EdgeState is the state of a friend edge.
type EdgeState string

// Edge states: pending → approved | denied | withdrawn | expired;
// approved → revoked | replaced (a later approval in the same direction took
// its place).
const (
	// EdgePending: Request made it; it grants nothing and waits, as a todo
	// in the target human's approvals queue, until that human approves or
	// denies it, the requesting human withdraws it, or it expires after
	// Config.PendingTTL (Reap, or the next look at it).
	EdgePending EdgeState = "pending"
	// EdgeApproved: the target human approved it, minting its grant (see
	// Edge.GrantID). It stays approved until either human revokes the
	// grant, the grant expires or is never collected (Reap), or a later
	// approval in the same direction replaces it.
	EdgeApproved EdgeState = "approved"
	// EdgeDenied: the target human said no. Terminal; the requester may
	// ask again after Quotas.Cooldown.
	EdgeDenied EdgeState = "denied"
	// EdgeWithdrawn: the requesting human took it back while pending.
	// Terminal, with the same cooldown as a denial.
	EdgeWithdrawn EdgeState = "withdrawn"
	// EdgeExpired: nobody decided within Config.PendingTTL. Terminal.
	EdgeExpired EdgeState = "expired"
	// EdgeRevoked: its grant was revoked (by either human, or on expiry).
	// Terminal: a new request starts a new edge.
	EdgeRevoked EdgeState = "revoked"
	// EdgeReplaced: a later approval in the same direction (a changed
	// scope) took its place; its grant was revoked with it (its credential
	// fails), but the todos it queued stay and are handed out like any
	// other while the grant that replaced it is live — revoking that one,
	// or its expiry, takes them too. Terminal.
	EdgeReplaced EdgeState = "replaced"
)

// Edge is a friend request and, once approved, the relationship it created —
// in one direction only: From may hand To work; To gains nothing over From.
type Edge struct {
	ID           string     `json:"id"`                  // the edge's id
	From         string     `json:"from"`                // requesting agent
	To           string     `json:"to"`                  // target persona
	Requester    Human      `json:"requester"`           // the verified human behind From
	Requested    Scope      `json:"requested"`           // normalized
	Granted      Scope      `json:"granted,omitempty"`   // the scope approved (requested ∩ narrowed); empty until approved
	Why          string     `json:"why"`                 // the requester's reason, shown to the approver
	State        EdgeState  `json:"state"`               // where the edge is in its life
	Provenance   Provenance `json:"provenance"`          // what was verified about the requester
	ApprovalTodo string     `json:"approval_todo"`       // the todo in the target human's approvals queue
	GrantID      string     `json:"grant,omitempty"`     // the grant the approval minted, once approved
	CreatedAt    time.Time  `json:"created_at,omitzero"` // when it was requested
	UpdatedAt    time.Time  `json:"updated_at,omitzero"` // when its state last changed
	ExpiresAt    time.Time  `json:"expires_at,omitzero"` // when a pending request lapses
	// KeyThumbprint is the RFC 7638 thumbprint of the key the request was
	// bound to (FriendRequest.Key); empty for a bearer request.
	KeyThumbprint string `json:"jkt,omitempty"`
}

// edgeRec is the stored form: it also knows the target's human, which the
// public Edge does not reveal to the requester.
type edgeRec struct {
	Edge
	Target Human  `json:"target_human"`
	Pickup string `json:"pickup"` // the pickup verifier (a hash; the secret is never seen)
}

// FriendRequest is agent From asking persona To for Scope over To's queues.
type FriendRequest struct {
	From  string `json:"from"`  // the requesting agent; a persona published here
	To    string `json:"to"`    // the target persona; must resolve in the directory
	Scope Scope  `json:"scope"` // what From asks for: grantable verbs on To's queues
	Why   string `json:"why"`   // shown to To's human; at most Limits.MaxWhy bytes
	// Pickup is the pickup verifier (see NewPickup): the hash of a secret
	// the requesting agent keeps and presents to Collect its credential
	// after approval. Required; covered by RequestNonce.
	Pickup string `json:"pickup"`
	// IDToken is an OIDC ID token of From's owner from an allow-listed
	// issuer, whose nonce is RequestNonce of this request. It is verified,
	// hashed against replay and then discarded.
	IDToken string `json:"id_token"`
	// Key, if set, is the requesting agent's public key as a JWK (EC P-256
	// or Ed25519, no private part): the grant an approval mints is bound
	// to it, so its credential is usable — and collectable — only with a
	// DPoP proof signed by that key (see Prove). Covered by RequestNonce
	// through its thumbprint. A persona with RequireProof accepts only
	// requests with a key.
	Key json.RawMessage `json:"key,omitempty"`
}

// Approval is the legible summary an approval todo carries: who asks, why,
// and for what, in words a human can decide on.
type Approval struct {
	EdgeID    string    `json:"edge"`                // the friend edge to approve or deny
	From      Listing   `json:"from"`                // the requesting agent's id and card
	To        string    `json:"to"`                  // your persona being asked
	Human     Attested  `json:"human"`               // the requesting human, as the issuer attested
	Why       string    `json:"why"`                 // the requester's reason
	Scope     Scope     `json:"scope"`               // the scope requested, normalized
	ScopeText []string  `json:"scope_text"`          // the scope in plain words, one line per queue
	ExpiresAt time.Time `json:"expires_at,omitzero"` // when the request lapses (not the grant: see ApproveOptions)
	// Flags warn of requester names that mix writing systems or read
	// like a name the approver knows; Approvals computes them as it
	// lists (they are not stored: connections change).
	Flags []Flag `json:"flags,omitempty"`
}

// Lookalikes returns flags for the approval's names that read like one of
// names — names of owner a host knows its human would recognise and the
// library does not, such as the approving human's own verified name and
// email from their sign-in (owner is then that human, and label "your
// own name") — unless the requester is owner. Append them to Flags to
// show them.
func (a Approval) Lookalikes(owner Human, label string, names ...string) []Flag {
	var known []knownName
	for _, n := range names {
		known = append(known, knownName{label: label, value: n, human: owner})
	}
	var out []Flag
	for _, f := range flagNames(a, known) {
		if f.Code == FlagLookalike {
			out = append(out, f)
		}
	}
	return out
}

// Attested is a human as an identity provider vouched for them.
type Attested struct {
	Issuer  string   `json:"iss"`             // the identity provider (iss)
	Subject string   `json:"sub"`             // the human's subject at it (sub)
	Name    string   `json:"name,omitempty"`  // the name it attested
	Email   string   `json:"email,omitempty"` // the email it attested
	AMR     []string `json:"amr,omitempty"`   // how the human signed in
	ACR     string   `json:"acr,omitempty"`   // the assurance class of the sign-in
}

// Text renders the approval as plain text a host can show as is.
func (a Approval) Text() string {
	// Every outside string in its display form: what a kept record holds
	// from before the claims were checked cannot reorder or hide a line.
	human, why, to, from := displayAttested(a.Human), text.Display(a.Why), text.Display(a.To), text.Display(a.From.ID)
	var b strings.Builder
	who := human.Name
	if who == "" {
		who = human.Subject
	}
	fmt.Fprintf(&b, "Friend request for %s\n", to)
	fmt.Fprintf(&b, "Who:   agent %q (%s), acting for %s", a.From.Card.Name, from, who)
	if human.Email != "" {
		fmt.Fprintf(&b, " <%s>", human.Email)
	}
	fmt.Fprintf(&b, "\n       verified by %s (subject %s)\n", human.Issuer, human.Subject)
	if len(human.AMR) > 0 || human.ACR != "" {
		b.WriteString("       signed in with")
		if len(human.AMR) > 0 {
			fmt.Fprintf(&b, " amr %s", strings.Join(human.AMR, ", "))
		}
		if human.ACR != "" {
			fmt.Fprintf(&b, " acr %s", human.ACR)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Why:   %s\n", why)
	b.WriteString("Scope:\n")
	for _, l := range a.ScopeText {
		fmt.Fprintf(&b, "  - %s\n", l)
	}
	fmt.Fprintf(&b, "Decide by: %s (the request lapses then; how long a grant lasts is the approver's choice)\n", a.ExpiresAt.UTC().Format(time.RFC3339))
	return b.String()
}

// Request sends a friend request from agent r.From to persona r.To. It
// verifies r.IDToken (allow-listed issuer, signature, audience, expiry,
// freshness, nonce bound to this request, not seen before), checks that the
// verified human owns r.From and that r.To resolves in the directory, and
// then, in one transaction, records a pending edge and puts an approval todo
// in the target human's approvals queue. The pending edge grants nothing.
//
// created says whether this call made the edge. Re-sending the identical
// request (same from, to, scope, why, pickup verifier and key) while it is
// pending is an
// idempotent retry: the pending edge is returned with created false and
// nothing new is stored (a new token sent with the retry is spent, so it
// cannot carry anything else). A pending request in the same direction with
// a different scope, why, pickup or key is ErrConflict, naming the pending
// edge (its requesting human may Withdraw it). Any other use of a token already
// spent is ErrProvenance: one token proves one request.
//
// Errors: ErrInvalidArgument for malformed input, or for a target with
// RequireProof and a request without Key; ErrProvenance for a token that
// fails any check (hosts answer 401); ErrForbidden when the token is valid
// but its human does not own r.From (403); ErrNotFound for a target the
// directory does not resolve; ErrConflict as above; ErrQuotaExceeded and
// ErrRateLimited (each a *RetryError saying when to try again) for the
// anti-spam limits (Config.Quotas). A failed request stores nothing.
func (s *Switchboard) Request(ctx context.Context, r FriendRequest) (edge Edge, created bool, err error) {
	fail := func(err error) (Edge, bool, error) { return Edge{}, false, fmt.Errorf("switchboard: request: %w", err) }
	if err := s.checkName("from", r.From); err != nil {
		return fail(err)
	}
	if err := s.checkName("to", r.To); err != nil {
		return fail(err)
	}
	if r.From == r.To {
		return fail(invalid("an agent cannot befriend itself"))
	}
	if err := checkText("why", r.Why, s.limits.MaxWhy, false); err != nil {
		return fail(err)
	}
	if strings.TrimSpace(r.Why) == "" {
		return fail(invalid("empty why"))
	}
	if err := checkPickupVerifier(r.Pickup); err != nil {
		return fail(err)
	}
	sc, err := s.validateScope(r.Scope, true)
	if err != nil {
		return fail(err)
	}
	var jkt string
	if len(r.Key) > 0 {
		if jkt, err = keyThumbprint(r.Key); err != nil {
			return fail(err)
		}
	}
	prov, err := s.oidc.verify(ctx, r.IDToken, tokenUse{nonce: RequestNonce(r), bind: s.cfg.Binding == BindNonce}, s.limits.MaxToken)
	if err != nil {
		return fail(err)
	}
	// The target is resolved after the token is verified, so an unknown, an
	// undiscoverable and a blocking target cost the requester the same. When
	// the store's own directory is configured, the transaction's
	// discoverable check below is that resolution: no extra read.
	if !s.localDir {
		if _, err := s.resolve(ctx, r.To); err != nil {
			return fail(named(err, "persona", r.To))
		}
	}
	var out Edge
	err = s.update(ctx, func(t *txn) error {
		created = false // fn may run more than once
		from, err := t.persona(r.From)
		if err != nil {
			return named(err, "persona", r.From)
		}
		if from.Owner != prov.Human() {
			return fmt.Errorf("%w: the verified human does not own agent %q", ErrForbidden, r.From)
		}
		// Unknown, undiscoverable or blocking: one answer, naming the
		// target the requester gave.
		to, err := t.discoverableHead(r.To)
		if err != nil {
			return named(err, "persona", r.To)
		}
		if err := t.checkBlocked(prov.Human(), to); err != nil {
			return named(err, "persona", r.To)
		}
		if to.RequireProof && jkt == "" {
			return invalid("persona %s accepts only requests bound to a key: send the agent's public key (FriendRequest.Key)", to.ID)
		}
		if id, err := t.lookup(tEdgePending, r.From+sep+r.To); err != nil {
			return err
		} else if id != "" {
			var old edgeRec
			if err := t.get(tEdges, id, &old, "edge"); err != nil {
				return err
			}
			switch {
			case !t.now.Before(old.ExpiresAt):
				// Lapsed but not yet reaped: expire it here and go on.
				if err := t.expireEdge(old.ID); err != nil {
					return err
				}
			case Equal(old.Requested, sc) && old.Why == r.Why && old.Pickup == r.Pickup && old.KeyThumbprint == jkt:
				// A retry. The same token again is the same proof; a
				// new one is spent here so it proves nothing else.
				if old.Provenance.TokenHash != prov.TokenHash {
					if err := t.checkReplay(prov); err != nil {
						return err
					}
				}
				out = old.Edge
				return nil
			default:
				return fmt.Errorf("%w: a different request from %s to %s is already pending (%s); withdraw it first", ErrConflict, r.From, r.To, old.ID)
			}
		}
		if err := t.checkReplay(prov); err != nil {
			return err
		}
		if err := s.admit(t, prov.Human(), to); err != nil {
			return err
		}
		e := edgeRec{
			Edge: Edge{
				ID: newID("edge"), From: r.From, To: r.To, Requester: prov.Human(),
				Requested: sc, Why: r.Why, State: EdgePending, Provenance: prov,
				CreatedAt: t.now, UpdatedAt: t.now, ExpiresAt: t.now.Add(s.cfg.PendingTTL),
				KeyThumbprint: jkt,
			},
			Target: to.Owner, Pickup: r.Pickup,
		}
		ap := Approval{
			EdgeID: e.ID, From: Listing{ID: from.ID, Card: from.Card}, To: to.ID,
			Human: Attested{Issuer: prov.Issuer, Subject: prov.Subject, Name: prov.Name, Email: prov.Email, AMR: prov.AMR, ACR: prov.ACR},
			Why:   r.Why, Scope: sc, ScopeText: sc.Describe(), ExpiresAt: e.ExpiresAt,
		}
		td, err := t.insertTodo(todoRec{Todo: Todo{
			Queue: ApprovalsQueue, Kind: KindFriendRequest,
			Title:  clip(fmt.Sprintf("Friend request: %s → %s", from.Card.Name, to.Card.Name), s.limits.MaxTitle),
			Origin: Origin{Agent: from.ID, Edge: e.ID, Human: prov.Human()}, Approval: &ap,
		}, QueueKey: approvalsKey(to.Owner)}, agentActor(from.ID), false)
		if err != nil {
			return err
		}
		e.ApprovalTodo = td.ID
		if err := t.putEdge(&e); err != nil {
			return err
		}
		if err := t.putRaw(tEdgePending, r.From+sep+r.To, e.ID); err != nil {
			return err
		}
		out, created = e.Edge, true
		return t.emit(Event{Type: EventEdgeRequested, Actor: agentActor(from.ID), Persona: from.ID, Edge: e.ID, Todo: td.ID, Queue: td.address()})
	})
	if err != nil {
		return fail(err)
	}
	return out, created, nil
}

// KindFriendRequest is the kind of an approval todo.
const KindFriendRequest = "switchboard.friend_request"

// pendingEdge loads edge id for a human decision: it must exist and be
// visible to human through side (the target for Approve and Deny, the
// requester for Withdraw), and be pending and unexpired.
func (t *txn) pendingEdge(id string, human Human, asTarget bool) (*edgeRec, error) {
	var e edgeRec
	if err := t.get(tEdges, id, &e, "edge"); err != nil {
		return nil, err
	}
	if (asTarget && e.Target != human) || (!asTarget && e.Requester != human) {
		return nil, notFound("edge")
	}
	if e.State != EdgePending {
		return nil, fmt.Errorf("%w: edge is %s", ErrInvalidTransition, e.State)
	}
	if !t.now.Before(e.ExpiresAt) {
		return nil, fmt.Errorf("%w: request expired", ErrInvalidTransition)
	}
	return &e, nil
}

// decide moves a pending edge to state and resolves its approval todo.
func (t *txn) decide(e *edgeRec, state EdgeState, actor string, typ EventType) error {
	e.State, e.UpdatedAt = state, t.now
	if err := t.del(tEdgePending, e.From+sep+e.To); err != nil {
		return err
	}
	td, err := t.todo(e.ApprovalTodo)
	if t.setAside(err, e.ApprovalTodo) {
		// The edge is the record of the request; its approval todo only
		// shows it in the inbox. A damaged one stays as it is (set aside,
		// reported), and the request is decided, expired or withdrawn
		// all the same: one bad record holds no edge, and no Reap.
		return t.emit(Event{Type: typ, Actor: actor, Persona: e.To, Edge: e.ID, Todo: e.ApprovalTodo})
	}
	if err != nil {
		return err
	}
	end, how := TodoDone, AttemptCompleted
	if state == EdgeWithdrawn || state == EdgeExpired {
		end, how = TodoCancelled, AttemptCancelled
	}
	td.Result = []byte(state)
	if err := t.endTodo(td, end, how, actor, string(state)); err != nil {
		return err
	}
	return t.emit(Event{Type: typ, Actor: actor, Persona: e.To, Edge: e.ID, Todo: td.ID})
}

// Approve is the vend: the target persona's human approves a pending friend
// request, optionally narrowing its scope. narrowed == nil grants the scope
// as requested; otherwise the grant's scope is requested ∩ narrowed, and a
// narrowed scope holding anything not requested is ErrScopeExceedsRequest
// and changes nothing. An empty, non-nil narrowed (Scope{}) would grant
// nothing and is ErrInvalidArgument: to refuse, Deny.
//
// In one transaction Approve marks the edge approved, completes the approval
// todo, replaces any earlier approved grant in the same direction, and mints
// the grant. Approve returns the grant only: its credential does not exist
// yet. The requesting agent creates it by calling Collect with the edge id
// and its pickup secret, once, within Config.PickupWindow — so no plaintext
// credential ever waits in a host. Only the target's human may approve:
// anyone else gets ErrNotFound. An edge no longer pending (approved,
// denied, withdrawn, or past its expiry) is ErrInvalidTransition.
func (s *Switchboard) Approve(ctx context.Context, approver Human, edgeID string, narrowed Scope) (Grant, error) {
	return s.ApproveWith(ctx, approver, edgeID, ApproveOptions{Scope: narrowed})
}

// ApproveOptions are what an approver decides beyond yes: the scope, as
// Approve's narrowed, and how long the grant lasts.
type ApproveOptions struct {
	// Scope narrows the grant as Approve's narrowed does; nil grants the
	// scope as requested.
	Scope Scope
	// ExpiresAt ends the grant, at that instant: from then on its
	// credential fails as a revoked one does, no claim hands out the todos
	// it queued (the claim that meets one cancels it, saying "grant
	// expired"), its webhooks hear nothing more and Connections no longer
	// lists it — whether or not Reap has run since; Reap records the
	// expiry and cancels the rest. Todos claimed before it finish. Zero:
	// the grant lasts until revoked. It must lie in the future (and
	// before 2200): otherwise ErrInvalidArgument.
	ExpiresAt time.Time
}

// ApproveWith is Approve with the approver's choices in full: the scope
// and the grant's lifetime (see ApproveOptions).
func (s *Switchboard) ApproveWith(ctx context.Context, approver Human, edgeID string, o ApproveOptions) (Grant, error) {
	narrowed := o.Scope
	fail := func(err error) (Grant, error) {
		return Grant{}, fmt.Errorf("switchboard: approve: %w", err)
	}
	if err := approver.validate(); err != nil {
		return fail(err)
	}
	if err := checkTime("expiry", o.ExpiresAt); err != nil {
		return fail(err)
	}
	var nar Scope
	if narrowed != nil {
		var err error
		if nar, err = s.validateScope(narrowed, true); err != nil {
			return fail(err)
		}
	}
	var g Grant
	err := s.update(ctx, func(t *txn) error {
		e, err := t.pendingEdge(edgeID, approver, true)
		if err != nil {
			return err
		}
		if e.KeyThumbprint == "" {
			// A request sent before its target required proofs.
			to, err := t.persona(e.To)
			if err != nil {
				return err
			}
			if to.RequireProof {
				return fmt.Errorf("%w: %s accepts only grants bound to a key and this request carries none: deny it", ErrConflict, e.To)
			}
		}
		if !o.ExpiresAt.IsZero() && !o.ExpiresAt.After(t.now) {
			return invalid("the grant would end at %s, which is not in the future", o.ExpiresAt.UTC().Format(time.RFC3339))
		}
		granted := e.Requested
		if narrowed != nil {
			if !Subset(nar, e.Requested) {
				return fmt.Errorf("%w: the approval names %s; the request only %s", ErrScopeExceedsRequest, strings.Join(nar.Describe(), "; "), strings.Join(e.Requested.Describe(), "; "))
			}
			granted = Intersect(e.Requested, nar)
		}
		var replaced *grantRec
		if old, err := t.lookup(tEdgeLive, e.From+sep+e.To); err != nil {
			return err
		} else if old != "" {
			if replaced, err = t.replaceEdge(old, humanActor(approver)); err != nil {
				return err
			}
		}
		g, _, err = t.mint(Grant{Holder: e.From, Target: e.To, Grantor: approver, Scope: granted, EdgeID: e.ID,
			CollectBy: t.now.Add(s.cfg.PickupWindow), KeyThumbprint: e.KeyThumbprint, ExpiresAt: o.ExpiresAt.UTC()}, e.Requester, false)
		if err != nil {
			return err
		}
		if replaced != nil {
			if err := t.linkReplacement(replaced, g.ID); err != nil {
				return err
			}
		}
		e.Granted, e.GrantID = granted, g.ID
		if err := t.decide(e, EdgeApproved, humanActor(approver), EventEdgeApproved); err != nil {
			return err
		}
		if err := t.putEdge(e); err != nil {
			return err
		}
		return t.putRaw(tEdgeLive, e.From+sep+e.To, e.ID)
	})
	if err != nil {
		return fail(err)
	}
	return g, nil
}

// replaceEdge retires the approved edge id because a new approval in the same
// direction supersedes it. Its grant is revoked; its queued todos stay, as
// they came from a party still trusted, and are handed out while the grant
// that replaces it is live (see originLive, linkReplacement). A grant past
// its expiry was no longer trusted: it is revoked as expired, its queued
// todos cancelled, and nil returned.
func (t *txn) replaceEdge(id, actor string) (*grantRec, error) {
	var e edgeRec
	if err := t.get(tEdges, id, &e, "edge"); err != nil {
		return nil, err
	}
	var g grantRec
	if err := t.get(tGrants, e.GrantID, &g, "grant"); err != nil {
		return nil, err
	}
	if !g.live(t.now) {
		return nil, t.revokeGrant(&g, &e, systemActor, "expired", true)
	}
	return &g, t.revokeGrant(&g, &e, actor, "replaced", false)
}

// linkReplacement records that grant next replaced old (revoked by
// replaceEdge in this transaction), both ways.
func (t *txn) linkReplacement(old *grantRec, next string) error {
	old.ReplacedBy = next
	if err := t.put(tGrants, old.ID, old); err != nil {
		return err
	}
	var g grantRec
	if err := t.get(tGrants, next, &g, "grant"); err != nil {
		return err
	}
	g.Replaces = old.ID
	return t.put(tGrants, next, &g)
}

// Deny refuses a pending friend request. Only the target's human may deny;
// anyone else gets ErrNotFound. An edge no longer pending is
// ErrInvalidTransition.
func (s *Switchboard) Deny(ctx context.Context, human Human, edgeID string) error {
	return s.settle(ctx, "deny", human, edgeID, true, EdgeDenied, EventEdgeDenied)
}

// Withdraw takes back a pending friend request. Only the requesting human
// may withdraw; anyone else gets ErrNotFound. An edge no longer pending is
// ErrInvalidTransition.
func (s *Switchboard) Withdraw(ctx context.Context, human Human, edgeID string) error {
	return s.settle(ctx, "withdraw", human, edgeID, false, EdgeWithdrawn, EventEdgeWithdrawn)
}

func (s *Switchboard) settle(ctx context.Context, op string, human Human, edgeID string, asTarget bool, state EdgeState, typ EventType) error {
	if err := human.validate(); err != nil {
		return fmt.Errorf("switchboard: %s: %w", op, err)
	}
	err := s.update(ctx, func(t *txn) error {
		e, err := t.pendingEdge(edgeID, human, asTarget)
		if err != nil {
			return err
		}
		if err := t.decide(e, state, humanActor(human), typ); err != nil {
			return err
		}
		if err := t.cooldown(e, s.quotas.Cooldown); err != nil {
			return err
		}
		return t.putEdge(e)
	})
	if err != nil {
		return fmt.Errorf("switchboard: %s: %w", op, err)
	}
	return nil
}

// Edge returns an edge to a human on either side of it; to anyone else it
// is ErrNotFound. A pending request past its expiry reads as expired even
// before Reap has recorded it.
func (s *Switchboard) Edge(ctx context.Context, human Human, edgeID string) (Edge, error) {
	var out Edge
	err := s.view(ctx, func(t *txn) error {
		var e edgeRec
		if err := t.get(tEdges, edgeID, &e, "edge"); err != nil {
			return err
		}
		if e.Requester != human && e.Target != human {
			return notFound("edge")
		}
		out = e.Edge
		if out.State == EdgePending && !t.now.Before(out.ExpiresAt) {
			// Lapsed; Reap (or the next request) will record it.
			out.State = EdgeExpired
		}
		return nil
	})
	if err != nil {
		return Edge{}, fmt.Errorf("switchboard: edge: %w", err)
	}
	return out, nil
}

// EdgeEvent returns the audit event that recorded edge edgeID's transition
// typ — EventEdgeRequested, EventEdgeApproved, EventEdgeDenied,
// EventEdgeWithdrawn, EventEdgeExpired, EventEdgeReplaced or
// EventEdgeRevoked — to a human on either side of the edge. Its Seq is
// what ProveEvent takes: after Approve, EdgeEvent(ctx, approver, edge.ID,
// EventEdgeApproved) and ProveEvent(ctx, ev.Seq, cp.Size) give a third
// party the proof that the decision is in the log (docs/audit-log.md).
//
// An event enters the log just after its commit (on PostgreSQL the
// sequencer adds it, usually within milliseconds); EdgeEvent waits for
// that, until ctx ends. An edge that never made the transition, or that
// the human is not party to, is ErrNotFound; an event retention has
// purged is ErrEventPurged. Transitions logged by an earlier release (or
// sequenced by a process of one) are not indexed: EdgeEvent finds them by
// reading the log from its start, which takes a while on a long log.
func (s *Switchboard) EdgeEvent(ctx context.Context, human Human, edgeID string, typ EventType) (Event, error) {
	if !edgeTransition(typ) {
		return Event{}, fmt.Errorf("switchboard: edge event: %w", invalid("%q is not an edge transition", typ))
	}
	wait := time.Millisecond
	for {
		var seq uint64
		var happened, pending bool
		err := s.view(ctx, func(t *txn) error {
			var e edgeRec
			if err := t.get(tEdges, edgeID, &e, "edge"); err != nil {
				return err
			}
			if e.Requester != human && e.Target != human {
				return notFound("edge")
			}
			happened = transitionMade(e.State, typ)
			b, err := t.tx.Get(tEdgeEvents, []byte(edgeID+sep+string(typ)))
			switch {
			case err == nil && len(b) == 8:
				seq = binary.BigEndian.Uint64(b)
				return nil
			case err == nil:
				return fmt.Errorf("%w: edge_events %q: %d bytes", ErrDamaged, edgeID+sep+string(typ), len(b))
			case !errors.Is(err, store.ErrNotFound):
				return err
			}
			if !happened {
				return nil
			}
			// Made but not indexed: still waiting to be sequenced, or
			// logged before the index existed. One snapshot answers.
			return t.lg.PendingRows(func(_, _ []byte) bool { pending = true; return false })
		})
		if err != nil {
			return Event{}, fmt.Errorf("switchboard: edge event: %w", err)
		}
		switch {
		case seq > 0:
			return s.eventAt(ctx, seq)
		case !happened:
			return Event{}, fmt.Errorf("switchboard: edge event: %w: edge %s has no %s", ErrNotFound, edgeID, typ)
		case !pending:
			return s.scanForEdgeEvent(ctx, edgeID, typ)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return Event{}, fmt.Errorf("switchboard: edge event: waiting for %s of edge %s to enter the log: %w", typ, edgeID, ctx.Err())
		case <-timer.C:
		}
		wait = min(2*wait, s.cfg.PollInterval)
	}
}

// edgeTransition reports whether typ is an edge's transition.
func edgeTransition(typ EventType) bool {
	switch typ {
	case EventEdgeRequested, EventEdgeApproved, EventEdgeDenied, EventEdgeWithdrawn,
		EventEdgeExpired, EventEdgeReplaced, EventEdgeRevoked:
		return true
	}
	return false
}

// transitionMade reports whether an edge now in state has made transition
// typ (and so logged it).
func transitionMade(state EdgeState, typ EventType) bool {
	switch typ {
	case EventEdgeRequested:
		return true
	case EventEdgeApproved:
		return state == EdgeApproved || state == EdgeRevoked || state == EdgeReplaced
	case EventEdgeDenied:
		return state == EdgeDenied
	case EventEdgeWithdrawn:
		return state == EdgeWithdrawn
	case EventEdgeExpired:
		return state == EdgeExpired
	case EventEdgeReplaced:
		return state == EdgeReplaced
	case EventEdgeRevoked:
		return state == EdgeRevoked
	}
	return false
}

// eventAt reads the event at seq from the log.
func (s *Switchboard) eventAt(ctx context.Context, seq uint64) (Event, error) {
	evs, err := s.Events(ctx, seq-1, 1)
	if err != nil {
		return Event{}, fmt.Errorf("switchboard: edge event: %w", inner(err))
	}
	if len(evs) == 0 || evs[0].Seq != seq {
		return Event{}, fmt.Errorf("switchboard: edge event: %w: event %d", ErrEventPurged, seq)
	}
	return evs[0], nil
}

// scanForEdgeEvent finds an edge's transition logged before edge_events
// indexed it, by reading the whole log.
func (s *Switchboard) scanForEdgeEvent(ctx context.Context, edgeID string, typ EventType) (Event, error) {
	var after uint64
	for {
		evs, err := s.Events(ctx, after, 1000)
		if err != nil {
			return Event{}, fmt.Errorf("switchboard: edge event: %w", inner(err))
		}
		for _, e := range evs {
			if e.Edge == edgeID && e.Type == typ {
				return e, nil
			}
		}
		if len(evs) == 0 {
			return Event{}, fmt.Errorf("switchboard: edge event: %w: %s of edge %s is not in the log (retention may have purged it)", ErrEventPurged, typ, edgeID)
		}
		after = evs[len(evs)-1].Seq
	}
}

// Approvals lists the friend requests waiting in human's approvals queue,
// oldest first. Each todo's Approval holds the who / why / scope summary,
// and Flags warning of names that mix writing systems or read like a name
// the human knows (their own, their agent's, a connection's): see Flag.
// A host that knows more names the human would recognise (their own
// verified name, say) checks them too with Approval.Lookalikes.
func (s *Switchboard) Approvals(ctx context.Context, human Human) ([]Todo, error) {
	if err := human.validate(); err != nil {
		return nil, fmt.Errorf("switchboard: approvals: %w", err)
	}
	var out []Todo
	err := s.view(ctx, func(t *txn) error {
		all, err := t.listQueued(approvalsKey(human))
		if err != nil {
			return err
		}
		known := map[string][]knownName{} // by persona asked for
		for _, td := range all {
			// A lapsed request the reaper has not expired yet is not shown.
			if td.Approval != nil && !t.now.Before(td.Approval.ExpiresAt) {
				continue
			}
			if a := td.Approval; a != nil {
				k, ok := known[a.To]
				if !ok {
					if k, err = t.knownNames(human, a.To); err != nil {
						return err
					}
					known[a.To] = k
				}
				a.Human = displayAttested(a.Human)
				a.Flags = flagNames(*a, k)
			}
			out = append(out, td)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: approvals: %w", err)
	}
	return out, nil
}

// putEdge writes an edge and keeps the anti-spam indexes in step with its
// state: every edge write goes through here.
func (t *txn) putEdge(e *edgeRec) error {
	if err := t.put(tEdges, e.ID, e); err != nil {
		return err
	}
	rk, tk := e.Requester.key()+sep+e.ID, e.Target.key()+sep+e.ID
	switch e.State {
	case EdgePending:
		if err := t.putRaw(tEdgeByReq, rk, timeKey(e.ExpiresAt)); err != nil {
			return err
		}
		return t.putRaw(tEdgeByTarget, tk, timeKey(e.ExpiresAt))
	case EdgeApproved:
		if err := t.putRaw(tEdgeByReq, rk, ""); err != nil {
			return err
		}
		return t.del(tEdgeByTarget, tk)
	default:
		if err := t.del(tEdgeByReq, rk); err != nil {
			return err
		}
		return t.del(tEdgeByTarget, tk)
	}
}

// expireEdge moves a pending edge past its expiry to expired, cancelling its
// approval todo.
func (t *txn) expireEdge(id string) error {
	var e edgeRec
	if err := t.get(tEdges, id, &e, "edge"); err != nil {
		return err
	}
	if e.State != EdgePending {
		return nil
	}
	if err := t.decide(&e, EdgeExpired, systemActor, EventEdgeExpired); err != nil {
		return err
	}
	return t.putEdge(&e)
}

// liveEdges counts the edges in index table under prefix h, expiring pending
// ones whose time has passed (so correctness never waits for the reaper).
// It also returns the earliest expiry among the pending ones still live.
func (t *txn) liveEdges(table string, h Human) (n int, soonest time.Time, err error) {
	var lapsed []string
	now := timeKey(t.now)
	err = t.scanPrefix(table, h.key()+sep, func(k, exp string) (bool, error) {
		if exp != "" && exp <= now {
			lapsed = append(lapsed, k[len(h.key())+1:])
			return true, nil
		}
		n++
		if exp != "" {
			if at := fromTimeKey(exp); soonest.IsZero() || at.Before(soonest) {
				soonest = at
			}
		}
		return true, nil
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	for _, id := range lapsed {
		if err := t.expireEdge(id); err != nil {
			return 0, time.Time{}, err
		}
	}
	return n, soonest, nil
}
