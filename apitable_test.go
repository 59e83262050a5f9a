package switchboard_test

import (
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
)

// The README's "API at a glance" and docs/reference.md's list every method
// of *Switchboard by who calls it: a method added without a place in both
// fails here.
func TestAPITablesListEveryMethod(t *testing.T) {
	typ := reflect.TypeFor[*switchboard.Switchboard]()
	for _, doc := range []string{"README.md", "docs/reference.md"} {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		section := regexp.MustCompile("(?s)## API at a glance\n.*?\n## ").Find(b)
		require.NotNil(t, section, "%s has an API at a glance section", doc)
		for i := range typ.NumMethod() {
			name := typ.Method(i).Name
			assert.Regexp(t, "`"+name+"[`(]", string(section), "%s's API table lacks %s", doc, name)
		}
	}
}
