package failpoints_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// armings are the ways each failpoint is armed in the simulated
// reliability tests: run sets, deterministic terms.
var armings = map[string][]string{
	"core/stall-before-abort":     {"return(400)", "1/2*return(3200)"},
	"core/stall-mid-step":         {"return(100)", "3*return(6400)"},
	"engine/output-handler-stall": {"return(400)", "1/4*return(12800)"},
	"core/output-late":            {"return(200)", "2*off->1/3*return(1600)"},
	"core/model-panic":            {"panic", "20*off->panic(the GPU fell off the bus)"},
	"engine/abort-after-add":      {"return", "1/2*return"},
	"engine/client-abandon":       {"return", "1/2*return"},
	"core/kv-load-fails":          {"1/2*return", "3*off->1/3*return"},
}

// realArmings are the same in pingcap's grammar, for the process-wide set.
var realArmings = map[string][]string{
	"core/stall-before-abort":     {"return(400)", "50%return(3200)"},
	"core/stall-mid-step":         {"return(100)", "3*return(6400)"},
	"engine/output-handler-stall": {"return(400)", "25%return(12800)"},
	"core/output-late":            {"return(200)", "2*off->30%return(1600)"},
	"core/model-panic":            {"panic", "20*off->panic"},
	"engine/abort-after-add":      {"return", "50%return"},
	"engine/client-abandon":       {"return", "50%return"},
	"core/kv-load-fails":          {"50%return", "3*off->30%return"},
}

// TestEveryFailpointKeepsTheInvariantsUnderSimulation runs the fixed
// engine's scenarios with each failpoint armed in each way, under several
// strategies: every accepted request ends (its tokens or a clear error), no
// token reaches another incarnation, WaitIdle keeps its meaning. A fault of
// host memory runs kv-offload too, under both of its policies, and must
// fire there.
func TestEveryFailpointKeepsTheInvariantsUnderSimulation(t *testing.T) {
	require.Len(t, armings, len(failpoints.Names()), "every failpoint of the catalogue is tried")
	seeds := uint64(60)
	if testing.Short() {
		seeds = 10
	}
	for _, name := range failpoints.Names() {
		scenarios := []*scenario.Scenario{scenario.AbortReuse, scenario.Swarm}
		policies := []engine.KVLoadFailurePolicy{engine.LoadFailureFail}
		if name == failpoints.CoreKVLoadFails.Name {
			scenarios = append(scenarios, scenario.KVOffload)
			policies = append(policies, engine.LoadFailureRecompute)
		}
		for _, terms := range armings[name] {
			spec := name + "=" + terms
			for _, sc := range scenarios {
				for _, policy := range policies {
					var reached props.SituationSet
					n := seeds
					if sc == scenario.KVOffload {
						n = max(n, 60) // enough that a fault of 3*off->1/3*return fires
					}
					for _, st := range []sim.Strategy{sim.Random(), sim.Chaos(), sim.Starve("output-handler")} {
						for seed := uint64(1); seed <= n; seed++ {
							opts := scenario.Options{Seed: seed, Failpoints: []string{spec},
								Engine: func(c *engine.Config) { c.KVLoadFailurePolicy = policy }}
							prog, out := sc.Program(opts)
							res := sim.Run(sim.Options{Seed: seed, Strategy: st}, prog)
							err := out.Err(res.Err)
							if err != nil && !acceptable(sc, name, err) {
								t.Fatalf("%s with %s (load failure policy %s), %s seed %d: %v\nreplay: simrun run -scenario %s -seed %d -strategy %s -failpoint '%s' -config kv-load-failure-policy=%s",
									sc.Name, spec, policy, st, seed, err, sc.Name, seed, st, spec, policy)
							}
							reached |= out.Checker.Reached()
						}
					}
					if sc == scenario.KVOffload {
						assert.True(t, reached.Has(props.KVLoadFailed), "%s with %s (%s) failed no load", sc.Name, spec, policy)
					}
				}
			}
		}
	}
}

// acceptable says whether a failure is the clear error the fault must give
// rather than a broken invariant: abort-reuse's own checks cannot pass when
// the model dies or the client walks away, but the properties must hold.
func acceptable(sc *scenario.Scenario, point string, err error) bool {
	var v *props.Violation
	return !errors.As(err, &v) && sc == scenario.AbortReuse && point == failpoints.ModelPanic.Name && errors.Is(err, engine.ErrEngineDead)
}

// workload drives an engine on the real runtime from several goroutines:
// requests, reads, aborts, cancels and immediate id reuse.
func workload(t *testing.T, e *engine.AsyncLLM, clients, requests int) {
	t.Helper()
	g := task.NewGroup(task.Real(), "clients")
	errs := make([]error, clients)
	for c := 0; c < clients; c++ {
		g.Go("client", func() {
			for i := 0; i < requests; i++ {
				// Ids from a small pool of the client's own, so that reuse
				// is common, and now and then from a pool all share.
				id := fmt.Sprintf("c%d-%d", c, i%3)
				if i%10 == 0 {
					id = fmt.Sprintf("shared-%d", i%4)
				}
				kind := engine.OutputKind((c + i) % 3)
				max := 1 + (c+i)%8
				if i%9 == 0 {
					max = 200 // long enough to be cut short
				}
				if i%6 == 5 {
					for _, err := range e.Generate(context.Background(), id, "hello there", engine.Params{MaxTokens: max, Output: kind}) {
						if err != nil && !errors.Is(err, engine.ErrDuplicateRequestID) && !errors.Is(err, engine.ErrEngineDead) {
							errs[c] = err
						}
						break // walk away after one output
					}
					continue
				}
				r, err := e.AddRequest(id, "hello there", engine.Params{MaxTokens: max, Output: kind})
				if errors.Is(err, engine.ErrDuplicateRequestID) {
					continue
				}
				if errors.Is(err, engine.ErrEngineDead) {
					return
				}
				if err != nil {
					errs[c] = err
					return
				}
				switch i % 4 {
				case 1:
					e.Abort(id)
				case 2:
					r.Cancel()
				}
				for {
					_, err := r.Next()
					if errors.Is(err, io.EOF) || errors.Is(err, engine.ErrEngineDead) {
						break
					}
					if err != nil {
						errs[c] = err
						return
					}
				}
			}
		})
	}
	g.Wait()
	require.NoError(t, errors.Join(errs...))
}

// TestEveryFailpointOnTheRealRuntime arms each failpoint in the process-wide
// set (as GO_FAILPOINTS would) and runs a concurrent workload on
// goroutines, under -race in make test: the properties hold, the engine
// closes, no goroutine is left.
func TestEveryFailpointOnTheRealRuntime(t *testing.T) {
	require.Len(t, realArmings, len(failpoints.Names()))
	for _, name := range failpoints.Names() {
		for _, terms := range realArmings[name] {
			t.Run(name+"="+terms, func(t *testing.T) {
				defer goleak.VerifyNone(t)
				failpoints.Scoped(t, name, terms)
				c := props.NewChecker(core.ToyModel{})
				c.SetModelLen(core.DefaultMaxModelLen) // the engines run the default
				e, err := engine.New(engine.Config{StepTime: 50_000, Observer: c.Locked()})
				require.NoError(t, err)
				workload(t, e, 8, 12)
				if werr := e.WaitIdle(context.Background()); werr != nil {
					assert.ErrorIs(t, werr, engine.ErrEngineDead)
				}
				require.NoError(t, e.Close())
				c.CheckKV(e)
				require.NoError(t, c.Finish())
			})
		}
	}
}

// TestModelPanicGivesEveryRequestTheEngineDeadError: in flight requests end
// with ErrEngineDead, and later calls fail fast with it.
func TestModelPanicGivesEveryRequestTheEngineDeadError(t *testing.T) {
	defer goleak.VerifyNone(t)
	failpoints.Scoped(t, failpoints.ModelPanic.Name, `3*off->return("injected")`)
	e, err := engine.New(engine.Config{StepTime: 100_000})
	require.NoError(t, err)
	defer e.Close()
	var reqs []*engine.Request
	for i := 0; i < 4; i++ {
		r, err := e.AddRequest(fmt.Sprint("r", i), "hello", engine.Params{MaxTokens: 1000, Output: engine.OutputKind(i % 3)})
		require.NoError(t, err)
		reqs = append(reqs, r)
	}
	for _, r := range reqs {
		var err error
		for err == nil {
			_, err = r.Next()
		}
		assert.ErrorIs(t, err, engine.ErrEngineDead)
		assert.ErrorContains(t, err, "failpoint core/model-panic: injected")
	}
	_, err = e.AddRequest("late", "hello", engine.Params{MaxTokens: 1})
	assert.ErrorIs(t, err, engine.ErrEngineDead)
	assert.False(t, e.HasUnfinishedRequests())
}

// TestLoadWithAbortsCancelsAndReuse is the load test on goroutines: 10,000
// requests from 64 goroutines with random aborts, cancels and immediate id
// reuse end with zero stale tokens and every request ended.
func TestLoadWithAbortsCancelsAndReuse(t *testing.T) {
	defer goleak.VerifyNone(t)
	const clients, total = 64, 10_000
	c := props.NewChecker(core.ToyModel{})
	c.SetModelLen(core.DefaultMaxModelLen) // the engines run the default
	e, err := engine.New(engine.Config{StepTime: 20_000, Observer: c.Locked()})
	require.NoError(t, err)
	workload(t, e, clients, total/clients+1)
	require.NoError(t, e.WaitIdle(context.Background()))
	require.NoError(t, e.Close())
	c.CheckKV(e)
	require.NoError(t, c.Finish())
	s := c.Summary()
	assert.GreaterOrEqual(t, s.Requests, total/2, "most of the 10,000 attempts were accepted")
	assert.Positive(t, s.Reused)
	assert.Positive(t, s.Aborted)
	assert.Equal(t, s.Requests, s.Finished, "every accepted request ended")
	assert.Zero(t, e.Stats().RequestsRunning)
	t.Logf("%d requests accepted (%d reusing an id, %d aborted or cancelled); %d stale frames dropped",
		s.Requests, s.Reused, s.Aborted, e.Stats().StaleFramesDropped)
}
