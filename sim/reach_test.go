package sim_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// tellers is the lost update of the package example; with probes, each
// teller says so when the other wrote between its read and its write: the
// race's window.
func tellers(probes bool) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		balance := 100
		g := task.NewGroup(rt, "tellers")
		for _, name := range []string{"deposit", "withdraw"} {
			g.Go(name, func() {
				b := balance
				rt.Yield("teller.after-read")
				if probes && balance != b {
					task.Reach(rt, "teller.raced")
				}
				if probes {
					task.Reach(rt, "teller.wrote")
				}
				if name == "deposit" {
					balance = b + 10
				} else {
					balance = b - 10
				}
			})
		}
		g.Wait()
		if balance != 100 {
			return fmt.Errorf("balance %d, want 100", balance)
		}
		return nil
	}
}

// TestReachSaysWhichSeedsOpenedTheWindow: a seed fails exactly when it
// reached the window; the probes change nothing of the run (the same trace
// hash without them); a replay reaches what the run reached.
func TestReachSaysWhichSeedsOpenedTheWindow(t *testing.T) {
	failed, raced := 0, 0
	for seed := uint64(0); seed < 200; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, tellers(true))
		bare := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, tellers(false))
		require.Equal(t, bare.TraceHash, res.TraceHash, "seed %d: a probe changed the run", seed)
		assert.Empty(t, bare.Reached)
		in := assert.ObjectsAreEqual([]string{"teller.wrote", "teller.raced"}, res.Reached)
		if !in {
			assert.Equal(t, []string{"teller.wrote"}, res.Reached, "seed %d: each name once, in the order first reached", seed)
		}
		assert.Equal(t, in, res.Err != nil, "seed %d: reached %v, failed %v", seed, res.Reached, res.Err)
		if res.Err != nil {
			failed++
		}
		if in {
			raced++
			again := sim.Run(sim.Options{Strategy: sim.Replay(res.Schedule)}, tellers(true))
			assert.Equal(t, res.Reached, again.Reached, "seed %d: the replay", seed)
		}
	}
	assert.Positive(t, raced)
	assert.Less(t, raced, 200, "Random opens the window on some seeds, not all")
	assert.Equal(t, failed, raced)
}

func TestReachOnTheRealRuntimeDoesNothing(t *testing.T) {
	rt := task.Real()
	g := task.NewGroup(rt, "probes")
	for range 4 {
		g.Go("probe", func() { task.Reach(rt, "anything") })
	}
	assert.NotPanics(t, g.Wait)
}

// TestReachIsInTheTraceAndOutOfTheHash: a traced run records each name
// once, attributed to the task that reached it, in every trace format;
// the trace hash is the same traced and untraced, with probes and without.
func TestReachIsInTheTraceAndOutOfTheHash(t *testing.T) {
	var seed uint64
	for sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, tellers(true)).Err == nil {
		seed++
	}
	res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random(), Trace: true}, tellers(true))
	bare := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, tellers(false))
	assert.Equal(t, bare.TraceHash, res.TraceHash)
	require.Equal(t, []string{"teller.wrote", "teller.raced"}, res.Reached)
	var reached []string
	for _, e := range res.Trace.Events {
		if e.Kind == sim.EvReach {
			reached = append(reached, e.Text)
			assert.Contains(t, []string{"deposit", "withdraw"}, res.Trace.Tasks[e.Task])
			assert.Equal(t, "reaches "+e.Text, res.Trace.Describe(e))
		}
	}
	assert.Equal(t, res.Reached, reached, "once each, in order")

	var text, jsonl, perfetto strings.Builder
	require.NoError(t, res.Trace.WriteText(&text))
	require.NoError(t, res.Trace.WriteJSONL(&jsonl))
	require.NoError(t, res.Trace.WritePerfetto(&perfetto))
	assert.Contains(t, text.String(), "reaches teller.raced")
	assert.Contains(t, jsonl.String(), `"kind":"reach"`)
	assert.Contains(t, jsonl.String(), `"detail":"teller.raced"`)
	assert.Contains(t, perfetto.String(), `"name":"reaches teller.raced"`)
	assert.Contains(t, perfetto.String(), `"cat":"reach"`)
}
