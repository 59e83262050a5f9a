// Skips that say why without -v.

package switchboardtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	skipsMu sync.Mutex
	skips   []string
)

// Skip skips t, saying why — something the test needs is missing from
// this machine (a server, a browser, a runtime) — and has Main repeat the
// reason on stderr after the run, so that `go test` without -v does not
// pass a suite that skipped off as an unqualified "ok".
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	skipsMu.Lock()
	skips = append(skips, t.Name()+": "+reason)
	skipsMu.Unlock()
	t.Skip(reason)
}

// Main runs a package's tests (call it from TestMain) and then reports
// the tests Skip skipped, grouped by reason — "store/postgres: 28 tests
// skipped: no PostgreSQL server: …" — on stderr, and also on the
// terminal (/dev/tty) when there is one: go test shows a passing
// package's stderr only with -v or in a package's own directory, and a
// newcomer running the README's `go test ./...` should not read a suite
// that skipped off as an unqualified "ok".
func Main(m *testing.M) {
	code := m.Run()
	skipsMu.Lock()
	defer skipsMu.Unlock()
	if len(skips) == 0 {
		os.Exit(code)
	}
	var order []string
	count := map[string]int{}
	for _, s := range skips {
		_, reason, _ := strings.Cut(s, ": ")
		if count[reason] == 0 {
			order = append(order, reason)
		}
		count[reason]++
	}
	where := "tests"
	if wd, err := os.Getwd(); err == nil {
		where = filepath.Base(filepath.Dir(wd)) + "/" + filepath.Base(wd)
	}
	var b strings.Builder
	for _, r := range order {
		fmt.Fprintf(&b, "%s: %d test(s) skipped: %s\n", where, count[r], r)
	}
	fmt.Fprint(os.Stderr, b.String())
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		_, _ = tty.WriteString(b.String())
		_ = tty.Close()
	}
	os.Exit(code)
}
