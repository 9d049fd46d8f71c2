package scenario_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

// onCores runs a scenario's seeds on n data-parallel cores.
func onCores(n int) func(uint64) scenario.Options {
	return func(seed uint64) scenario.Options {
		return scenario.Options{Seed: seed, Engine: func(c *engine.Config) { c.DataParallelSize = n }}
	}
}

// TestDataParallelControlCallsKeepTheCoresAlike: on two cores, the
// controllers of control-mix and weight-sync race one another's calls to
// both cores, and every request still ends with the model's tokens. A
// resume overtakes a sleep on one core and not on the other (chaos seed
// 380 of control-mix, 126 of weight-sync), one core's weights sleep, and
// the next weight update starts on the other core alone: refused, its
// caller never finishes it there, and that core's requests wait for ever
// but that the engine finishes it on the cores that started it.
func TestDataParallelControlCallsKeepTheCoresAlike(t *testing.T) {
	for _, s := range []*scenario.Scenario{scenario.ControlMix, scenario.WeightSync} {
		counts, first := sweepFailures(t, s, "chaos", pauseSeeds(), onCores(2))
		assert.Empty(t, counts, "%s: failures by property, first seeds %v (simrun run -scenario %s -seed N -config data-parallel-size=2)", s.Name, first, s.Name)
	}
}

// TestDataParallelControlMixCatchesSplitCalls plants vLLM's data-parallel
// client, engine/dp-calls-split: calls sent core by core with nothing
// ordering two callers' and no split outcome mended. control-mix on two
// cores catches it by a request that never ends, or by the trainer's
// weight update refused as already active, where the last one, refused by
// a sleeping core, stayed open on the other (0.6% of the first 4,000
// seeds under chaos; weight-sync 0.3%).
func TestDataParallelControlMixCatchesSplitCalls(t *testing.T) {
	counts, first := sweepFailures(t, scenario.ControlMix, "chaos", 2000, func(seed uint64) scenario.Options {
		o := onCores(2)(seed)
		o.Failpoints = []string{"engine/dp-calls-split=return"}
		return o
	})
	assert.Positive(t, counts[props.EndsExactlyOnce], "%v", counts)
	for p, n := range counts {
		assert.Contains(t, []string{props.EndsExactlyOnce, ""}, p, "%d failure(s) of another kind, first seed %d", n, first[p])
	}
}

// TestDataParallelAbortReuseCatchesAMisroutedAbort plants
// engine/dp-abort-misrouted: an abort goes where the load balancer would
// send a new request, not to the core that holds the request. Nothing the
// callers see changes (the request ends for them at once, the core that
// holds it runs it on for nobody), so abort-reaches-its-core alone
// catches it, in every seed of abort-reuse on two cores.
func TestDataParallelAbortReuseCatchesAMisroutedAbort(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.AbortReuse, scenario.AbortReuse.DefaultStrategy, func(seed uint64) scenario.Options {
		o := onCores(2)(seed)
		o.Failpoints = []string{"engine/dp-abort-misrouted=return"}
		return o
	}, props.AbortReachesItsCore)
	assert.Equal(t, int(pauseSeeds()), n)
}

// TestDataParallelLegacyEngineStillRacesReuse: the founding race needs no
// single core: on two, the legacy engine's reuse of an aborted id still
// gets a token of the incarnation before it (91.8% of the first 10,000
// seeds under chaos, against 83.3% on one core).
func TestDataParallelLegacyEngineStillRacesReuse(t *testing.T) {
	counts, first := sweepFailures(t, scenario.AbortReuse, "chaos", 300, func(seed uint64) scenario.Options {
		o := onCores(2)(seed)
		o.Legacy = true
		return o
	})
	assert.Positive(t, counts[props.NoStaleDelivery], "the legacy engine on two cores: %v, first seeds %v", counts, first)
}

// TestTheStoryTellsACallSplit: control-mix's seed 1 on two cores under
// chaos has a call that took effect on one core alone, and the story says
// which and what became of it.
func TestTheStoryTellsACallSplit(t *testing.T) {
	prog, out := scenario.ControlMix.Program(onCores(2)(1))
	res := sim.Run(sim.Options{Seed: 1, Strategy: sim.Chaos(), Trace: true}, prog)
	require.NoError(t, out.Err(res.Err))
	var b strings.Builder
	require.NoError(t, scenario.WriteStory(&b, res.Trace))
	assert.Regexp(t, `(sleep|reset of the prefix cache|start of a weight update|LoRA load) \d+ took effect on 1 core\(s\) and not on the others: (brought back into step|left so)`, b.String())
}

// TestTheStoryTellsWhichCoreARequestWentTo: on several cores each add
// names the core the load balancer chose (abort-reuse's three requests
// spread over two, the reused id on the other core); on one, none does.
func TestTheStoryTellsWhichCoreARequestWentTo(t *testing.T) {
	story := func(o scenario.Options) string {
		prog, out := scenario.AbortReuse.Program(o)
		res := sim.Run(sim.Options{Seed: o.Seed, Strategy: sim.Random(), Trace: true}, prog)
		require.NoError(t, out.Err(res.Err))
		var b strings.Builder
		require.NoError(t, scenario.WriteStory(&b, res.Trace))
		return b.String()
	}
	two := story(onCores(2)(7))
	assert.Contains(t, two, "adds abort-a#1 (internal id abort-a-00000001) on core 0")
	assert.Contains(t, two, "adds survivor#2 (internal id survivor-00000002) on core 1")
	assert.Regexp(t, `adds abort-a#4 \(internal id abort-a-00000004\) on core \d`, two)
	one := story(scenario.Options{Seed: 7})
	assert.Contains(t, one, "adds abort-a#1 (internal id abort-a-00000001)\n")
	assert.NotContains(t, one, " on core ")
}
