// Package text holds the checks on free text from outside that both the
// root package and agentcard apply, so each rule is written once. Errors are
// plain; callers wrap them with their own sentinel.
package text

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Check refuses v if it is over max bytes, not valid UTF-8, or holds a
// control or format character (a newline only where newlines allows it).
// what names the field in the error.
func Check(what, v string, max int, newlines bool) error {
	if len(v) > max {
		return fmt.Errorf("%s is %d bytes, limit %d", what, len(v), max)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for _, r := range v {
		if r == '\n' && newlines {
			continue
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("%s contains control character %U", what, r)
		}
	}
	return nil
}

// CheckIdentity refuses v, a claim an identity provider attests about a
// human (a subject, a name, an email), if it is over max bytes, not valid
// UTF-8, or holds a control character or a format character — bidi
// overrides and isolates, zero-width spaces, soft hyphens, tags: anything
// that reorders or hides text, so that what a person reads is what was
// attested. With joiners, a zero-width joiner or non-joiner (U+200D,
// U+200C) is allowed between two non-ASCII letters, marks or symbols —
// where Persian, Indic scripts and emoji sequences need it — and nowhere
// else ("bo\u200db" would read as "bob"). what names the claim in the
// error.
func CheckIdentity(what, v string, max int, joiners bool) error {
	if len(v) > max {
		return fmt.Errorf("%s is %d bytes, limit %d", what, len(v), max)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for i, r := range v {
		if hidden(v, i, r, joiners) {
			return fmt.Errorf("%s contains control or format character %U", what, r)
		}
	}
	return nil
}

// hidden reports whether r, at byte i of v, is a control or format
// character — with joiners, one that is not a joiner between two joinable
// runes.
func hidden(v string, i int, r rune, joiners bool) bool {
	if r < 0x7f && r >= 0x20 {
		return false // printable ASCII: the common case, decided at once
	}
	if r == utf8.RuneError {
		return true
	}
	if !unicode.IsControl(r) && !unicode.Is(unicode.Cf, r) {
		return false
	}
	if !joiners || (r != '\u200c' && r != '\u200d') {
		return true
	}
	before, _ := utf8.DecodeLastRuneInString(v[:i])
	after, _ := utf8.DecodeRuneInString(v[i+utf8.RuneLen(r):])
	return i == 0 || i+utf8.RuneLen(r) == len(v) || !joinable(before) || !joinable(after)
}

// joinable reports whether a joiner may stand next to r.
func joinable(r rune) bool {
	return r > unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsSymbol(r))
}

// Display is v with every control and format character — but the joiners
// CheckIdentity allows — written as its escape (\u202e), so that text that
// could not be refused (a record kept from before a rule) is shown without
// reordering or hiding what follows it. Invalid UTF-8 shows as \ufffd.
func Display(v string) string {
	clean := true
	for i, r := range v {
		if hidden(v, i, r, true) {
			clean = false
			break
		}
	}
	if clean {
		return v
	}
	var b []byte
	for i, r := range v {
		if hidden(v, i, r, true) {
			b = fmt.Appendf(b, "\\u%04x", r)
			continue
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}
