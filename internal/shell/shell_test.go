package shell

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJoinIsSplitBackIntoTheSameWords: plain words stay as they are, the
// rest are quoted, and sh reads every one back unchanged.
func TestJoinIsSplitBackIntoTheSameWords(t *testing.T) {
	argv := []string{"simrun", "-strategy", "starve:output-handler:51.2ms", "-config", "step-time=200µs", "", "it's", "a b", "$HOME", `"q"`, "*", "x;y"}
	assert.Equal(t, `simrun -strategy starve:output-handler:51.2ms -config step-time=200µs '' 'it'\''s' 'a b' '$HOME' '"q"' '*' 'x;y'`, Join(argv))
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	script := `for a in "$@"; do printf '[%s]\n' "$a"; done`
	got, err := exec.Command(sh, "-c", "set -- "+Join(argv)+"; "+script).Output()
	require.NoError(t, err)
	want := ""
	for _, a := range argv {
		want += "[" + a + "]\n"
	}
	assert.Equal(t, want, string(got))
}
