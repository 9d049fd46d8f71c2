package props

import (
	"pgregory.net/rapid"

	"github.com/llmdst/llmdst/sim"
)

// rapidChooser answers a strategy's or a workload's draws from a rapid
// test case, so that rapid's shrinker minimises the schedule and the
// workload together: every draw shrinks towards 0, the calm answer.
type rapidChooser struct {
	t     *rapid.T
	label string
	gens  map[int]*rapid.Generator[int]
}

var (
	_ sim.Chooser    = (*rapidChooser)(nil)
	_ sim.Repanicker = (*rapidChooser)(nil)
)

// RapidChooser returns a chooser drawing from t. Its draws are labelled
// label in rapid's output. A panic in a simulated task — rapid ends an
// exhausted or rejected draw by panicking — is raised again in the
// goroutine that called sim.Run, where rapid expects it.
func RapidChooser(t *rapid.T, label string) sim.Chooser {
	return &rapidChooser{t: t, label: label, gens: map[int]*rapid.Generator[int]{}}
}

func (c *rapidChooser) Intn(n int) int {
	if n <= 1 {
		return 0
	}
	g, ok := c.gens[n]
	if !ok {
		g = rapid.IntRange(0, n-1)
		c.gens[n] = g
	}
	return g.Draw(c.t, c.label)
}

// Repanic implements sim.Repanicker.
func (c *rapidChooser) Repanic() bool { return true }
