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

// scheduleChooser answers from a schedule drawn whole, before the run.
type scheduleChooser struct {
	answers []int
	next    int
}

var (
	_ sim.Chooser    = (*scheduleChooser)(nil)
	_ sim.Repanicker = (*scheduleChooser)(nil)
)

// RapidSchedule returns a chooser whose answers are drawn from t up front,
// n of them, labelled label; answers past the n-th are 0, the calm answer.
// rapid shrinks the answers towards 0 as it does any draw.
//
// Because its draws do not depend on what the program does, one rapid test
// case drives any program with the same answers: a fail file rapid wrote
// for the legacy engine replays, whole and valid, against the fixed engine.
// That is what makes a counterexample found once a regression test for
// good. RapidChooser, which draws as the program asks, shrinks better but
// cannot do that: another program asks for other draws.
func RapidSchedule(t *rapid.T, label string, n int) sim.Chooser {
	raw := rapid.SliceOfN(rapid.IntRange(0, 1<<16-1), n, n).Draw(t, label)
	return &scheduleChooser{answers: raw}
}

func (c *scheduleChooser) Intn(n int) int {
	if c.next >= len(c.answers) || n <= 1 {
		return 0
	}
	v := c.answers[c.next]
	c.next++
	return v % n
}

// Repanic implements sim.Repanicker.
func (c *scheduleChooser) Repanic() bool { return true }
