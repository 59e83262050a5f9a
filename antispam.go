// Anti-spam: quotas, token buckets, cooldowns, blocks, and sanitizing text
// from outside.

package switchboard

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Quotas bound friend requests, so that no one can flood a human with
// approvals. They are kept in the store: every Switchboard on the same store
// shares them, and a restart resets nothing. A request refused for any
// reason consumes nothing. Zero fields take the values of DefaultQuotas; a
// negative field turns that limit off.
type Quotas struct {
	// LiveEdgesPerRequester bounds the pending and approved edges a human's
	// agents hold as requesters. Default 16.
	LiveEdgesPerRequester int
	// RequesterBurst and RequesterRefill are a token bucket per requesting
	// human: at most RequesterBurst requests at once, then one more per
	// RequesterRefill. Default 10, and one per 6 minutes (about 10 an hour).
	RequesterBurst  int
	RequesterRefill time.Duration // one more request per this much time
	// TargetBurst and TargetRefill are a token bucket per target human
	// (requests they receive, from anyone). Default 20, and one per 3
	// minutes (about 20 an hour).
	TargetBurst  int
	TargetRefill time.Duration // one more request per this much time
	// PendingPerTarget bounds the pending requests waiting in one human's
	// approvals queue. Default 32.
	PendingPerTarget int
	// Cooldown is how long, after a deny or a withdraw, the same requesting
	// human may not ask the same persona again. Default 7 days.
	Cooldown time.Duration
}

// The quota defaults, one place per setting.
const (
	defaultLiveEdgesPerRequester = 16
	defaultRequesterBurst        = 10
	defaultRequesterRefill       = 6 * time.Minute
	defaultTargetBurst           = 20
	defaultTargetRefill          = 3 * time.Minute
	defaultPendingPerTarget      = 32
	defaultCooldown              = 7 * 24 * time.Hour
)

// DefaultQuotas returns the quotas used for zero fields of Config.Quotas.
func DefaultQuotas() Quotas {
	return Quotas{
		LiveEdgesPerRequester: defaultLiveEdgesPerRequester,
		RequesterBurst:        defaultRequesterBurst,
		RequesterRefill:       defaultRequesterRefill,
		TargetBurst:           defaultTargetBurst,
		TargetRefill:          defaultTargetRefill,
		PendingPerTarget:      defaultPendingPerTarget,
		Cooldown:              defaultCooldown,
	}
}

func (q Quotas) withDefaults() Quotas {
	def := DefaultQuotas()
	orInt(&q.LiveEdgesPerRequester, def.LiveEdgesPerRequester)
	orInt(&q.RequesterBurst, def.RequesterBurst)
	orDuration(&q.RequesterRefill, def.RequesterRefill)
	orInt(&q.TargetBurst, def.TargetBurst)
	orDuration(&q.TargetRefill, def.TargetRefill)
	orInt(&q.PendingPerTarget, def.PendingPerTarget)
	orDuration(&q.Cooldown, def.Cooldown)
	return q
}

// bucket is a token bucket's stored state.
type bucket struct {
	Tokens float64   `json:"tokens"`
	At     time.Time `json:"at,omitzero"`
}

// take removes one token from the bucket key in table, refilling one per
// every up to burst since its last use, or returns when one will be there.
func (t *txn) take(key string, burst int, every time.Duration, limit string) error {
	if burst < 0 || every < 0 {
		return nil
	}
	var b bucket
	if err := t.get(tBuckets, key, &b, "bucket"); err != nil {
		if !isNotFound(err) {
			return err
		}
		b = bucket{Tokens: float64(burst), At: t.now}
	}
	if el := t.now.Sub(b.At); el > 0 {
		b.Tokens = math.Min(float64(burst), b.Tokens+float64(el)/float64(every))
	}
	b.At = t.now
	if b.Tokens < 1 {
		wait := time.Duration(math.Ceil((1 - b.Tokens) * float64(every)))
		return &RetryError{Err: ErrRateLimited, Limit: limit, RetryAt: t.now.Add(wait)}
	}
	b.Tokens--
	return t.put(tBuckets, key, b)
}

// checkBlocked returns ErrNotFound, worded exactly like an unknown target,
// if to's human blocked requester.
func (t *txn) checkBlocked(requester Human, to *personaHead) error {
	if blocked, err := t.lookup(tBlocks, to.Owner.key()+sep+requester.key()); err != nil {
		return err
	} else if blocked != "" {
		return notFound("persona")
	}
	return nil
}

// admit applies the quotas to a new request from requester (already
// verified) to persona to and returns the first limit hit, as a
// *RetryError. On success it has consumed one token of each bucket; the
// caller's transaction commits or discards that with the rest.
func (s *Switchboard) admit(t *txn, requester Human, to *personaHead) error {
	q := s.quotas
	if q.Cooldown >= 0 {
		until, err := t.lookup(tCooldown, requester.key()+sep+to.ID)
		if err != nil {
			return err
		}
		if until != "" && timeKey(t.now) < until {
			return &RetryError{Err: ErrRateLimited, Limit: "cooldown after a denied or withdrawn request to " + to.ID, RetryAt: fromTimeKey(until)}
		}
	}
	if q.LiveEdgesPerRequester >= 0 {
		n, soonest, err := t.liveEdges(tEdgeByReq, requester)
		if err != nil {
			return err
		}
		if n >= q.LiveEdgesPerRequester {
			return &RetryError{Err: ErrQuotaExceeded, Limit: fmt.Sprintf("%d live friend requests and friendships per requesting human", q.LiveEdgesPerRequester), RetryAt: soonest}
		}
	}
	if q.PendingPerTarget >= 0 {
		n, soonest, err := t.liveEdges(tEdgeByTarget, to.Owner)
		if err != nil {
			return err
		}
		if n >= q.PendingPerTarget {
			return &RetryError{Err: ErrQuotaExceeded, Limit: fmt.Sprintf("%d pending requests per target human", q.PendingPerTarget), RetryAt: soonest}
		}
	}
	if err := t.take("req"+sep+requester.key(), q.RequesterBurst, q.RequesterRefill, "requests per requesting human"); err != nil {
		return err
	}
	return t.take("tgt"+sep+to.Owner.key(), q.TargetBurst, q.TargetRefill, "requests per target human")
}

// cooldown starts the cooldown after a deny or withdraw of e.
func (t *txn) cooldown(e *edgeRec, d time.Duration) error {
	if d < 0 {
		return nil
	}
	return t.putRaw(tCooldown, e.Requester.key()+sep+e.To, timeKey(t.now.Add(d)))
}

// blockRec is a stored block.
type blockRec struct {
	Blocked Human     `json:"blocked"`
	At      time.Time `json:"at,omitzero"`
}

// Block stops requester's friend requests to every persona of human. A
// blocked requester's requests fail exactly as requests to an unknown target
// do — ErrNotFound, same message, nothing stored — so they learn nothing.
// Block also denies requester's pending requests to human's personas (they
// see an ordinary deny) and leaves approved grants alone: revoke those with
// Revoke. Blocking twice is a no-op.
func (s *Switchboard) Block(ctx context.Context, human, requester Human) error {
	if err := s.checkBlock(human, requester); err != nil {
		return fmt.Errorf("switchboard: block: %w", err)
	}
	err := s.update(ctx, func(t *txn) error {
		key := human.key() + sep + requester.key()
		if v, err := t.lookup(tBlocks, key); err != nil || v != "" {
			return err
		}
		if err := t.put(tBlocks, key, blockRec{Blocked: requester, At: t.now}); err != nil {
			return err
		}
		var pending []string
		err := t.scanPrefix(tEdgeByTarget, human.key()+sep, func(k, _ string) (bool, error) {
			pending = append(pending, k[len(human.key())+1:])
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, id := range pending {
			var e edgeRec
			if err := t.get(tEdges, id, &e, "edge"); err != nil {
				return err
			}
			if e.Requester != requester || e.State != EdgePending {
				continue
			}
			if err := t.decide(&e, EdgeDenied, humanActor(human), EventEdgeDenied); err != nil {
				return err
			}
			if err := t.putEdge(&e); err != nil {
				return err
			}
		}
		return t.emit(Event{Type: EventHumanBlocked, Actor: humanActor(human), Detail: humanActor(requester)})
	})
	if err != nil {
		return fmt.Errorf("switchboard: block: %w", err)
	}
	return nil
}

// Unblock lifts human's block of requester. Unblocking someone not blocked
// is a no-op. A cooldown from an earlier deny still runs.
func (s *Switchboard) Unblock(ctx context.Context, human, requester Human) error {
	if err := s.checkBlock(human, requester); err != nil {
		return fmt.Errorf("switchboard: unblock: %w", err)
	}
	err := s.update(ctx, func(t *txn) error {
		key := human.key() + sep + requester.key()
		if v, err := t.lookup(tBlocks, key); err != nil || v == "" {
			return err
		}
		if err := t.del(tBlocks, key); err != nil {
			return err
		}
		return t.emit(Event{Type: EventHumanUnblocked, Actor: humanActor(human), Detail: humanActor(requester)})
	})
	if err != nil {
		return fmt.Errorf("switchboard: unblock: %w", err)
	}
	return nil
}

// Blocked lists the humans human has blocked, in key order.
func (s *Switchboard) Blocked(ctx context.Context, human Human) ([]Human, error) {
	if err := human.validate(); err != nil {
		return nil, fmt.Errorf("switchboard: blocked: %w", err)
	}
	var out []Human
	err := s.view(ctx, func(t *txn) error {
		return t.scanPrefix(tBlocks, human.key()+sep, func(_, v string) (bool, error) {
			var b blockRec
			if err := json.Unmarshal([]byte(v), &b); err != nil {
				return false, fmt.Errorf("switchboard: decode block: %w", err)
			}
			out = append(out, b.Blocked)
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: blocked: %w", err)
	}
	return out, nil
}

func (s *Switchboard) checkBlock(human, requester Human) error {
	if err := human.validate(); err != nil {
		return err
	}
	if err := requester.validate(); err != nil {
		return err
	}
	if human == requester {
		return invalid("a human cannot block themselves")
	}
	return nil
}

// sanitize makes text from outside (an identity provider's claims, which
// text.CheckIdentity has let through) tidy to show: control and format
// characters are dropped — all but the joiners a script needs — runs of
// spaces collapse, and the result is clipped to n bytes. Invalid UTF-8
// becomes U+FFFD.
func sanitize(v string, n int) string {
	var b strings.Builder
	space := false
	for _, r := range v {
		switch {
		case r == utf8.RuneError:
			b.WriteRune(r)
			space = false
		case unicode.IsSpace(r):
			if !space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = true
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) && r != '\u200c' && r != '\u200d':
			// Gone; the joiners stay: a claim reaches here only after
			// text.CheckIdentity allowed them where a script needs them.
		default:
			b.WriteRune(r)
			space = false
		}
	}
	return clip(strings.TrimRight(b.String(), " "), n)
}
