package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExploreOfSeveralScenarios: -scenario takes a list; each scenario's
// walk is reported as a walk of it alone would be, a failure in one does
// not stop the others, the text ends with the scenarios failed and
// passed, and the exit code is the worst.
func TestExploreOfSeveralScenarios(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := simrun(t, "explore", "-scenario", "abort-reuse,prefix-chat", "-legacy", "-config", "async-scheduling=on", "-failpoint", "core/async-output-by-id=return",
		"-delays", "2", "-quiet", "-out", dir)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	assert.Contains(t, out, "prefix-chat seed 1, strategy chaos, legacy engine")
	assert.Contains(t, out, "abort-reuse seed 1, strategy starve:output-handler, legacy engine")
	assert.Contains(t, out, "within 2 departures: FAIL after")
	assert.Contains(t, out, "\nexplore of 2 scenarios: ")
	assert.Regexp(t, `\n  failed: [a-z, -]*abort-reuse`, out)
	assert.Less(t, strings.Index(out, "abort-reuse seed 1"), strings.Index(out, "prefix-chat seed 1"), "in the order given, the failure first")

	// The same alone: the same walk, line for line.
	_, alone, _ := simrun(t, "explore", "-scenario", "abort-reuse", "-legacy", "-config", "async-scheduling=on", "-failpoint", "core/async-output-by-id=return",
		"-delays", "2", "-quiet", "-out", dir)
	first := strings.SplitN(alone, "\n", 2)[0]
	first = first[:strings.Index(first, "FAIL after")] // the tally's time differs
	assert.Contains(t, out, first)

	// -json: an object a walk.
	code, out, errOut = simrun(t, "explore", "-scenario", "abort-reuse,parallel-abort-reuse", "-delays", "1", "-json", "-out", dir)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	dec := json.NewDecoder(strings.NewReader(out))
	var names []string
	for dec.More() {
		var j exploreJSON
		require.NoError(t, dec.Decode(&j))
		assert.True(t, j.Complete, j.Scenario)
		names = append(names, j.Scenario)
	}
	assert.Equal(t, []string{"abort-reuse", "parallel-abort-reuse"}, names)
}

// TestExploreScenariosShareTheBudget: with -for, each scenario walks for
// an equal share of what the ones before it left, and says so.
func TestExploreScenariosShareTheBudget(t *testing.T) {
	code, out, errOut := simrun(t, "explore", "-scenario", "swarm,prefix-chat", "-seeds", "1-1000000", "-delays", "-1", "-for", "400ms", "-quiet")
	require.Equal(t, 0, code, "%s%s", out, errOut)
	assert.Contains(t, out, "swarm seeds 1-1000000")
	assert.Contains(t, out, "its 200ms share of the 400ms budget (-for) ran out")
	assert.Contains(t, out, "NOT complete: swarm (for), prefix-chat (for)")
}

// TestExploreScenariosBadInputIsExitTwo: a shard splits one scenario's
// walk, and an unknown scenario or an empty name in the list is refused.
func TestExploreScenariosBadInputIsExitTwo(t *testing.T) {
	assertRefused(t, []string{"explore", "-quiet"}, []badInput{
		{[]string{"-scenario", "abort-reuse,swarm", "-shard", "1/2"}, "-shard 1/2 splits the walk of one scenario's seed: give -scenario one name, not abort-reuse,swarm"},
		{[]string{"-scenario", "abort-reuse,,swarm"}, `-scenario "abort-reuse,,swarm" names an empty scenario`},
		{[]string{"-scenario", "abort-reuse,nope"}, `unknown scenario "nope"`},
	})
}
