// Verb and Scope: the scope algebra (Normalize, Intersect, Subset, Equal), the
// grantable verbs and scope validation.

package switchboard

import (
	"fmt"
	"slices"
	"strings"
)

// Verb is one right over a queue.
type Verb string

// The verbs a scope can hold. Friend grants may hold only the grantable ones
// (see Verb.Grantable); a human's Vend to their own agent may hold all.
const (
	VerbCreateFor Verb = "create_for" // add todos to the queue
	VerbList      Verb = "list"       // list todos
	VerbGet       Verb = "get"        // read one todo
	VerbClaim     Verb = "claim"      // lease the next ready todo
	VerbHeartbeat Verb = "heartbeat"  // extend a lease
	VerbComplete  Verb = "complete"   // finish a leased todo
	VerbFail      Verb = "fail"       // give up on a leased todo, to be retried
	VerbRelease   Verb = "release"    // hand a leased todo back unfinished
	VerbCancel    Verb = "cancel"     // cancel a queued todo (queue owner only)
	VerbRedrive   Verb = "redrive"    // re-queue a dead todo (queue owner only)
)

// GrantableVerbs returns the verbs a friend grant may carry: create_for,
// list and get (its own todos), the drain verbs (claim, heartbeat,
// complete, fail, release) and webhook — every verb but the queue owner's
// cancel and redrive. Each call returns a new slice; changing it changes
// no rule.
func GrantableVerbs() []Verb {
	return []Verb{VerbCreateFor, VerbList, VerbGet, VerbClaim, VerbHeartbeat, VerbComplete, VerbFail, VerbRelease, VerbWebhook}
}

// Grantable reports whether a friend grant may carry v (see GrantableVerbs).
func (v Verb) Grantable() bool {
	switch v {
	case VerbCreateFor, VerbList, VerbGet, VerbClaim, VerbHeartbeat, VerbComplete, VerbFail, VerbRelease, VerbWebhook:
		return true
	}
	return false
}

// known reports whether v is one of the verbs a scope can hold.
func (v Verb) known() bool { return v.Grantable() || v == VerbCancel || v == VerbRedrive }

// verbList names every verb a scope can hold.
func verbList() string { return verbNames(append(GrantableVerbs(), VerbCancel, VerbRedrive)) }

// verbNames is vs as "a, b and c".
func verbNames(vs []Verb) string {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = string(v)
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// ApprovalsQueue is the reserved name of a human's approvals queue, where
// friend requests to any of their personas land. It is never grantable to a
// friend; a human may Vend their own agent list and get on it so the agent
// can show pending approvals — but approving is a human act no credential
// can perform.
const ApprovalsQueue = "_approvals"

// Describe says in plain words what v lets the holder do in a queue, as
// Scope.Describe lists it after the queue's name. The drain verbs say that
// they reach every todo of the queue, whoever sent it: a grant holding
// claim takes any todo, not only its own. DescribeIn names the queue.
func (v Verb) Describe() string { return v.describe("") }

// DescribeIn is Describe as a sentence that names the queue: `see and
// work on every todo in "inbox", whoever sent it`.
func (v Verb) DescribeIn(queue string) string { return v.describe(fmt.Sprintf("%q", queue)) }

func (v Verb) describe(q string) string {
	in, of, every := "", "", "the queue"
	if q != "" {
		in, of, every = " in "+q, " of "+q, q
	}
	switch v {
	case VerbCreateFor:
		return "create todos" + in
	case VerbList:
		return "list the todos it created or claimed" + in
	case VerbGet:
		return "read the todos it created or claimed" + in
	case VerbClaim:
		return "see and work on every todo in " + every + ", whoever sent it"
	case VerbHeartbeat:
		return "keep working on the todos" + of + " it claimed, whoever sent them"
	case VerbComplete:
		return "finish the todos" + of + " it claimed, whoever sent them, with its result"
	case VerbFail:
		return "fail the todos" + of + " it claimed, whoever sent them, to be retried"
	case VerbRelease:
		return "hand back the todos" + of + " it claimed, whoever sent them"
	case VerbCancel:
		return "cancel any queued todo" + in
	case VerbRedrive:
		return "re-queue any dead todo" + in
	case VerbWebhook:
		return "be told, by webhook, how the todos it created" + in + " end"
	}
	return string(v)
}

// Risk is how much a verb exposes of the queue it is granted on.
type Risk int

const (
	// RiskLow: the holder reaches only what it sends itself (create
	// todos, read and hear about its own).
	RiskLow Risk = iota
	// RiskHigh: the holder reaches every todo of the queue, whoever sent
	// it — the drain verbs (claim and the lease verbs that finish what
	// claim took) and the owner's cancel and redrive. A consent screen
	// should not pre-select them.
	RiskHigh
)

// String is "low" or "high".
func (r Risk) String() string {
	if r == RiskHigh {
		return "high"
	}
	return "low"
}

// Risk is v's risk level (see Risk).
func (v Verb) Risk() Risk {
	switch v {
	case VerbClaim, VerbHeartbeat, VerbComplete, VerbFail, VerbRelease, VerbCancel, VerbRedrive:
		return RiskHigh
	}
	return RiskLow
}

// ScopeEntry grants verbs over one queue.
type ScopeEntry struct {
	Queue string `json:"queue"` // a queue name of the target persona, or ApprovalsQueue
	Verbs []Verb `json:"verbs"` // what the holder may do there
}

// Scope is a set of (queue, verbs) entries. A normalized scope (see
// Normalize) has its entries sorted by queue, one entry per queue, verbs
// sorted and unique, and no entry without verbs. The nil Scope is empty.
type Scope []ScopeEntry

func (s Scope) clone() Scope {
	if s == nil {
		return nil
	}
	out := make(Scope, len(s))
	for i, e := range s {
		out[i] = ScopeEntry{Queue: e.Queue, Verbs: slices.Clone(e.Verbs)}
	}
	return out
}

// Normalize returns s in normal form: entries for one queue merged, verbs
// sorted and deduplicated, empty entries dropped. It does not validate names
// or verbs: Request, Approve and Vend do, refusing a bad one with
// ErrInvalidArgument.
func Normalize(s Scope) Scope {
	byQueue := map[string][]Verb{}
	for _, e := range s {
		byQueue[e.Queue] = append(byQueue[e.Queue], e.Verbs...)
	}
	out := make(Scope, 0, len(byQueue))
	for q, vs := range byQueue {
		slices.Sort(vs)
		vs = slices.Compact(vs)
		if len(vs) == 0 {
			continue
		}
		out = append(out, ScopeEntry{Queue: q, Verbs: vs})
	}
	slices.SortFunc(out, func(a, b ScopeEntry) int { return strings.Compare(a.Queue, b.Queue) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// Allows reports whether s holds verb v on queue q.
func (s Scope) Allows(q string, v Verb) bool {
	for _, e := range s {
		if e.Queue == q && slices.Contains(e.Verbs, v) {
			return true
		}
	}
	return false
}

// Has reports whether s names queue q with any verb.
func (s Scope) Has(q string) bool {
	for _, e := range s {
		if e.Queue == q && len(e.Verbs) > 0 {
			return true
		}
	}
	return false
}

// Intersect returns the normalized scope of the (queue, verb) pairs held by
// both s and o.
func Intersect(s, o Scope) Scope {
	var out Scope
	for _, e := range Normalize(s) {
		var vs []Verb
		for _, v := range e.Verbs {
			if o.Allows(e.Queue, v) {
				vs = append(vs, v)
			}
		}
		if len(vs) > 0 {
			out = append(out, ScopeEntry{Queue: e.Queue, Verbs: vs})
		}
	}
	return out
}

// Subset reports whether every (queue, verb) pair of s is held by o.
func Subset(s, o Scope) bool {
	for _, e := range s {
		for _, v := range e.Verbs {
			if !o.Allows(e.Queue, v) {
				return false
			}
		}
	}
	return true
}

// Equal reports whether s and o hold the same (queue, verb) pairs.
func Equal(s, o Scope) bool { return Subset(s, o) && Subset(o, s) }

// Describe renders s in plain words, one line per queue.
func (s Scope) Describe() []string {
	var out []string
	for _, e := range Normalize(s) {
		words := make([]string, len(e.Verbs))
		for i, v := range e.Verbs {
			words[i] = v.Describe()
		}
		out = append(out, fmt.Sprintf("queue %q: %s", e.Queue, strings.Join(words, "; ")))
	}
	return out
}

// validateScope normalizes s and checks its names, verbs and size. friend
// restricts it to GrantableVerbs and non-reserved queues.
func (s *Switchboard) validateScope(sc Scope, friend bool) (Scope, error) {
	n := Normalize(sc)
	if len(n) == 0 {
		return nil, invalid("empty scope")
	}
	if len(n) > s.limits.MaxScopeEntries {
		return nil, invalid("scope has %d queues, limit %d", len(n), s.limits.MaxScopeEntries)
	}
	for _, e := range n {
		if e.Queue == ApprovalsQueue && !friend {
			for _, v := range e.Verbs {
				if v != VerbList && v != VerbGet {
					return nil, invalid("verb %q on %s: only list and get are allowed there", v, ApprovalsQueue)
				}
			}
			continue
		}
		if err := s.checkQueueName(e.Queue); err != nil {
			return nil, err
		}
		for _, v := range e.Verbs {
			if !v.known() {
				return nil, invalid("%q is not a verb: the verbs are %s, in lower case", clip(string(v), 64), verbList())
			}
			if friend && !v.Grantable() {
				return nil, invalid("verb %q is the queue owner's: a friend grant may hold only %s", v, verbNames(GrantableVerbs()))
			}
		}
	}
	return n, nil
}
