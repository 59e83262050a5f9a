// Limits and every input check: names, queue names, free text, todo input.

package switchboard

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/internal/text"
)

// Limits bounds the size of inputs. Every limit is in bytes unless it says
// otherwise.
type Limits struct {
	MaxName         int // persona ids, queue names, card names, kinds: 128
	MaxWhy          int // a friend request's reason: 1024
	MaxScopeEntries int // queues in one scope (count): 32
	MaxTitle        int // todo title: 256
	MaxPayload      int // todo payload: 64 KiB
	MaxResult       int // todo result: 64 KiB
	MaxDedupKey     int // todo dedup key: 256
	MaxCard         int // encoded agent card: 256 KiB
	MaxToken        int // encoded ID token: 16 KiB
}

// DefaultLimits returns the limits used for zero fields of Config.Limits.
func DefaultLimits() Limits {
	return Limits{
		MaxName:         128,
		MaxWhy:          1024,
		MaxScopeEntries: 32,
		MaxTitle:        256,
		MaxPayload:      64 << 10,
		MaxResult:       64 << 10,
		MaxDedupKey:     256,
		MaxCard:         agentcard.MaxBytes,
		MaxToken:        16 << 10,
	}
}

// withDefaults fills zero (or negative) fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	def := DefaultLimits()
	for _, p := range []struct {
		v *int
		d int
	}{
		{&l.MaxName, def.MaxName}, {&l.MaxWhy, def.MaxWhy}, {&l.MaxScopeEntries, def.MaxScopeEntries},
		{&l.MaxTitle, def.MaxTitle}, {&l.MaxPayload, def.MaxPayload}, {&l.MaxResult, def.MaxResult},
		{&l.MaxDedupKey, def.MaxDedupKey}, {&l.MaxCard, def.MaxCard}, {&l.MaxToken, def.MaxToken},
	} {
		if *p.v <= 0 {
			*p.v = p.d
		}
	}
	return l
}

// checkName validates an identifier: 1..MaxName bytes of letters, digits
// and . _ - : @, not starting with '_' (reserved).
func (s *Switchboard) checkName(what, v string) error {
	if v == "" {
		return invalid("empty %s", what)
	}
	if len(v) > s.limits.MaxName {
		return invalid("%s is %d bytes, limit %d", what, len(v), s.limits.MaxName)
	}
	if v[0] == '_' {
		return invalid("%s may not start with '_' (reserved)", what)
	}
	for _, r := range v {
		if !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(".-_:@", r))) {
			return invalid("%s contains %q; use letters, digits and . _ - : @", what, r)
		}
	}
	return nil
}

func (s *Switchboard) checkQueueName(q string) error { return s.checkName("queue name", q) }

// checkText refuses invalid UTF-8, control characters (newlines only where
// allowed) and text over max bytes, as ErrInvalidArgument.
func checkText(what, v string, max int, newlines bool) error {
	if err := text.Check(what, v, max, newlines); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}

const maxPriority = 1_000_000

func (s *Switchboard) validateNewTodo(n NewTodo) error {
	if n.Kind == "" {
		return invalid("empty kind")
	}
	if err := checkText("kind", n.Kind, s.limits.MaxName, false); err != nil {
		return err
	}
	if err := checkText("title", n.Title, s.limits.MaxTitle, false); err != nil {
		return err
	}
	if len(n.Payload) > s.limits.MaxPayload {
		return invalid("payload is %d bytes, limit %d", len(n.Payload), s.limits.MaxPayload)
	}
	if err := checkText("dedup key", n.DedupKey, s.limits.MaxDedupKey, false); err != nil {
		return err
	}
	if n.Priority < -maxPriority || n.Priority > maxPriority {
		return invalid("priority %d outside ±%d", n.Priority, maxPriority)
	}
	if n.MaxAttempts < 0 || n.MaxAttempts > 100 {
		return invalid("max attempts %d outside 0..100", n.MaxAttempts)
	}
	if err := n.Trace.validate(); err != nil {
		return err
	}
	return checkTime("not before", n.NotBefore)
}

// clip truncates s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Every time switchboard stores or compares — a todo's NotBefore, a vended
// grant's ExpiresAt, an ID token's iat and exp — lies in [earliestTime,
// latestTime): from 1970 up to (not including) 2200, UTC. A time outside the
// range is refused with ErrInvalidArgument (an ID token's with
// ErrProvenance) rather than stored where it would compare wrongly.
var (
	earliestTime = time.Unix(0, 0).UTC()
	latestTime   = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// checkTime refuses a non-zero time outside [1970, 2200).
func checkTime(field string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if t.Before(earliestTime) || !t.Before(latestTime) {
		return invalid("%s %s is outside the supported range [1970-01-01, 2200-01-01) UTC", field, t.UTC().Format(time.RFC3339))
	}
	return nil
}
