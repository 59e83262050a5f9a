package switchboard_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's Go code is compiled and run: every line of its Go blocks is
// a line of Example_tour (or another Example), which go test runs and
// checks the output of.
func TestReadmeCodeIsCompiled(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	examples, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	have := map[string]bool{}
	for _, l := range strings.Split(string(examples), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	require.Less(t, len(readme), 15_000, "the README stays a guide under 15 KB: detail goes to docs/")
	blocks := strings.Split(string(readme), "```go\n")
	require.Greater(t, len(blocks), 1, "the README has Go code")
	for _, b := range blocks[1:] {
		code := b[:strings.Index(b, "```")]
		for _, l := range strings.Split(code, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				require.True(t, have[l], "README line not in an Example: %s", l)
			}
		}
	}
}
