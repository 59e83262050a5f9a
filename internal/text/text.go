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
