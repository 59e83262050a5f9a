// Look-alike and mixed-script names: the flags an approval carries when the
// requester's names could pass for someone else's (Unicode TS #39).

package switchboard

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/mtibben/confusables"

	"github.com/switchboardhq/switchboard/internal/text"
)

// FlagCode says what an approval's Flag warns of.
type FlagCode string

const (
	// FlagMixedScript: one of the requester's names mixes writing
	// systems (Latin with Cyrillic, say) in a way no single language
	// does — the usual way to imitate a name letter by letter (Unicode
	// TS #39 "highly restrictive" level: Latin may go only with Han and
	// Japanese kana, Bopomofo or Hangul).
	FlagMixedScript FlagCode = "mixed_script"
	// FlagLookalike: one of the requester's names reads like (TS #39
	// confusable skeleton, case ignored) a name the approving human
	// knows — their own account, their agent being asked, or a
	// connection's person or agent — but belongs to someone else.
	FlagLookalike FlagCode = "lookalike"
)

// Flag is a warning an approval carries about how its requester presents
// itself: shown before the human decides, it is about the requester's
// names, not a verdict.
type Flag struct {
	Code  FlagCode `json:"code"`
	Field string   `json:"field"` // which name: "name", "email", "subject" (the requester's, as attested) or "agent" (its card's name)
	Text  string   `json:"text"`  // a sentence for the human, names quoted
}

// knownName is a name the approving human knows, and whose it is.
type knownName struct {
	label string // whose, in the approver's terms: "your own account name"
	value string
	human Human // the human it belongs to (zero for an agent's name)
}

// flagNames checks an approval's names against the names its approver
// knows and returns the flags, in a stable order.
func flagNames(a Approval, known []knownName) []Flag {
	requester := Human{Issuer: a.Human.Issuer, Subject: a.Human.Subject}
	fields := []struct{ field, what, value string }{
		{"name", "name", a.Human.Name},
		{"email", "email", a.Human.Email},
		{"subject", "account name", a.Human.Subject},
		{"agent", "agent's name", a.From.Card.Name},
	}
	var out []Flag
	for _, f := range fields {
		if f.value == "" {
			continue
		}
		if scripts := mixedScripts(f.value); scripts != nil {
			out = append(out, Flag{Code: FlagMixedScript, Field: f.field, Text: fmt.Sprintf(
				"The requester's %s %q mixes writing systems (%s): letters of one can imitate another's.", f.what, f.value, strings.Join(scripts, ", "))})
		}
		sk := skeletons(f.value)
		for _, k := range known {
			if k.value == "" || k.human == requester {
				continue // the requester's own names look like themselves
			}
			if ok := skeletons(k.value); ok[0] != sk[0] && ok[1] != sk[1] {
				continue
			}
			how := "looks like"
			if strings.EqualFold(k.value, f.value) {
				how = "is the same as"
			}
			out = append(out, Flag{Code: FlagLookalike, Field: f.field, Text: fmt.Sprintf(
				"The requester's %s %q %s %s %q, but it is someone else.", f.what, f.value, how, k.label, k.value)})
			break
		}
	}
	return out
}

// skeletons are s in the forms TS #39 compares for confusability, with
// case ignored and, first, everything a reader cannot see told apart
// folded away (see unseen): the skeleton of s, lower-cased (so "ExampIe",
// capital I, reads as "example") and the skeleton of s lower-cased (so
// "BOB" reads as "bob"). Two names that share either read alike.
func skeletons(s string) [2]string {
	s = strings.Map(func(r rune) rune {
		if unseen(r) {
			return -1
		}
		return r
	}, s)
	return [2]string{strings.ToLower(confusables.Skeleton(s)), strings.ToLower(confusables.Skeleton(strings.ToLower(s)))}
}

// unseen reports whether r is a character a reader cannot tell from a
// space, from another run of spaces or from nothing on a page: every
// Unicode white space (a second space, a leading or trailing one, NBSP,
// the ideographic space U+3000 and the other separators), the invisible
// format characters (joiners, marks of direction), variation selectors,
// the other default-ignorable code points — among them the Hangul fillers
// U+115F, U+1160, U+3164 and U+FFA0, letters that render as blanks — and
// the blanks fonts draw as nothing (the Braille pattern U+2800, the Khitan
// filler U+16FE4, the musical null notehead U+1D159). Names are compared with all of them
// left out: "Alice's  bot", " Alice's bot", "Alice's\u3000bot" and
// "Alice's\u3164bot" all read as "Alice's bot" (and as "Alice'sbot",
// which is close enough to warn of).
func unseen(r rune) bool {
	return unicode.IsSpace(r) || unicode.Is(unicode.Zs, r) || unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Variation_Selector, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) ||
		blanks[r]
}

// blanks are characters outside those classes that fonts draw as nothing:
// the blank Braille pattern, the Khitan filler, the musical null notehead.
var blanks = map[rune]bool{'\u2800': true, '\U00016FE4': true, '\U0001D159': true}

// mixedScripts returns the writing systems s mixes, sorted, or nil when it
// is single-script by TS #39's highly restrictive level: one script (Common
// and Inherited characters — digits, punctuation, combining marks — go
// with any), or Latin with the scripts of Japanese (Han, Hiragana,
// Katakana), Chinese (Han, Bopomofo) or Korean (Han, Hangul).
func mixedScripts(s string) []string {
	seen := map[string]bool{}
	for _, r := range s {
		for name, tab := range unicode.Scripts {
			if name == "Common" || name == "Inherited" {
				continue
			}
			if unicode.Is(tab, r) {
				seen[name] = true
				break
			}
		}
	}
	if len(seen) <= 1 {
		return nil
	}
	for _, allowed := range [][]string{
		{"Latin", "Han", "Hiragana", "Katakana"},
		{"Latin", "Han", "Bopomofo"},
		{"Latin", "Han", "Hangul"},
	} {
		ok := true
		for name := range seen {
			ok = ok && slices.Contains(allowed, name)
		}
		if ok {
			return nil
		}
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// knownNames are the names human knows that a requester could imitate:
// their own account name, the persona being asked for and, for each of
// their connections, the person on the other side (name, email, account)
// and that side's agent.
func (t *txn) knownNames(human Human, to string) ([]knownName, error) {
	known := []knownName{{label: "your own account name", value: human.Subject, human: human}}
	if p, err := t.personaHead(to); err == nil {
		known = append(known, knownName{label: "your agent", value: p.Card.Name, human: human})
	} else if !isNotFound(err) {
		return nil, err
	}
	for _, side := range []string{"g", "h"} {
		var ids []string
		if err := t.scanPrefix(tGrantByHuman, side+human.key()+sep, func(k, _ string) (bool, error) {
			ids = append(ids, k[strings.LastIndexByte(k, 0)+1:])
			return len(ids) < maxKnownConnections, nil
		}); err != nil {
			return nil, err
		}
		for _, id := range ids {
			g, e, err := t.grantWithEdge(id)
			if err != nil {
				return nil, err
			}
			other, agent := g.Grantor, g.Target
			if side == "g" {
				other, agent = grantHolderHuman(g.Grant, e), g.Holder
			}
			if other == human {
				continue // their own agents
			}
			known = append(known, knownName{label: "your connection", value: other.Subject, human: other})
			if e != nil && side == "g" {
				known = append(known,
					knownName{label: "your connection", value: e.Provenance.Name, human: other},
					knownName{label: "your connection", value: e.Provenance.Email, human: other})
			}
			if p, err := t.personaHead(agent); err == nil {
				known = append(known, knownName{label: "your connection's agent", value: p.Card.Name, human: other})
			} else if !isNotFound(err) {
				return nil, err
			}
		}
	}
	return known, nil
}

// maxKnownConnections bounds how many connections per side an approval's
// names are checked against.
const maxKnownConnections = 500

// displayAttested is a with every claim in its display form
// (text.Display): the claims are checked as they are read, but a record
// kept from before that check is shown without hiding or reordering text.
func displayAttested(a Attested) Attested {
	a.Issuer, a.Subject, a.Name, a.Email, a.ACR = text.Display(a.Issuer), text.Display(a.Subject), text.Display(a.Name), text.Display(a.Email), text.Display(a.ACR)
	if a.AMR != nil {
		amr := make([]string, len(a.AMR))
		for i, m := range a.AMR {
			amr[i] = text.Display(m)
		}
		a.AMR = amr
	}
	return a
}
