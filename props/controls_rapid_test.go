package props_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// controlModel is what a trainer can know of the engine it controls, one
// call after another: whether it paused it, what of the executor sleeps,
// whether a weight update is open, the weight version, and the requests
// it added that must wait (they run once nothing holds the engine).
type controlModel struct {
	requests engineModel
	paused   bool
	asleep   core.SleepTags
	updating bool
	version  string
	pending  []*handle
	n        int
}

// runnable: nothing holds the engine back.
func (m *controlModel) runnable() bool { return !m.paused && m.asleep == 0 && !m.updating }

// settle reads every request that waited to its end once the engine runs,
// so that no request is running when the next call comes: a call that
// waits for running requests (a wait pause during an update) would wait
// for ever for a caller that makes one call at a time.
func (m *controlModel) settle(t *rapid.T) {
	if !m.runnable() {
		return
	}
	for _, h := range m.pending {
		for !h.closed {
			m.requests.next(t, h)
		}
	}
	m.pending = m.pending[:0]
}

// want fails t unless err is what the model expects of call.
func want(t *rapid.T, call string, err, expected error) {
	t.Helper()
	if (expected == nil) != (err == nil) || expected != nil && !errors.Is(err, expected) {
		t.Fatalf("%s returned %v, want %v", call, err, expected)
	}
}

func (m *controlModel) add(t *rapid.T) {
	m.n++
	prompt := rapid.SampledFrom([]string{"hello", "the quick brown fox"}).Draw(t, "prompt")
	p := engine.Params{MaxTokens: rapid.IntRange(1, 6).Draw(t, "max"), Output: engine.OutputKind(rapid.IntRange(0, 2).Draw(t, "kind"))}
	id := "r" + strconv.Itoa(m.n)
	r, err := m.requests.e.AddRequest(id, prompt, p)
	if err != nil {
		t.Fatalf("AddRequest(%q): %v", id, err)
	}
	h := &handle{r: r, id: id, prompt: prompt, params: p}
	m.requests.handles = append(m.requests.handles, h)
	m.pending = append(m.pending, h)
}

// aborts marks the requests that wait as aborted: a pause or sleep of
// mode abort ends them.
func (m *controlModel) aborts(mode engine.PauseMode) {
	if mode != engine.PauseAbort {
		return
	}
	for _, h := range m.pending {
		h.aborted = true
	}
}

func (m *controlModel) pause(t *rapid.T) {
	o := engine.PauseOptions{Mode: engine.PauseMode(rapid.IntRange(0, 2).Draw(t, "mode")), KeepCache: rapid.Bool().Draw(t, "keep-cache")}
	want(t, fmt.Sprintf("PauseGeneration(%+v)", o), m.requests.e.PauseGeneration(context.Background(), o), nil)
	m.aborts(o.Mode)
	m.paused = true
}

func (m *controlModel) resume(t *rapid.T) {
	var expected error
	if m.asleep != 0 {
		expected = engine.ErrAsleep
	} else {
		m.paused = false
	}
	want(t, "ResumeGeneration", m.requests.e.ResumeGeneration(context.Background()), expected)
}

func (m *controlModel) sleep(t *rapid.T) {
	o := engine.SleepOptions{Level: rapid.IntRange(0, 2).Draw(t, "level"), Mode: engine.PauseMode(rapid.IntRange(0, 2).Draw(t, "mode"))}
	want(t, fmt.Sprintf("Sleep(%+v)", o), m.requests.e.Sleep(context.Background(), o), nil)
	m.aborts(o.Mode)
	m.paused = true
	if o.Level >= 1 && m.asleep == 0 {
		m.asleep = core.SleepAll
	}
}

func (m *controlModel) wake(t *rapid.T) {
	all := []string{engine.WakeWeights, engine.WakeKVCache, engine.WakeScheduling}
	tags := rapid.SliceOfNDistinct(rapid.SampledFrom(all), 0, len(all), rapid.ID[string]).Draw(t, "tags")
	woken := core.SleepAll
	if len(tags) > 0 {
		woken = 0
		for _, tag := range tags {
			woken |= map[string]core.SleepTags{engine.WakeWeights: core.SleepWeights, engine.WakeKVCache: core.SleepKVCache}[tag]
		}
	}
	want(t, fmt.Sprintf("WakeUp(%v)", tags), m.requests.e.WakeUp(context.Background(), tags...), nil)
	m.asleep &^= woken
	if m.asleep == 0 {
		m.paused = false
	}
}

// weightsRefusal is the refusal a weight update's call meets whatever
// the update's state: the weights asleep.
func (m *controlModel) weightsRefusal() error {
	if m.asleep&core.SleepWeights != 0 {
		return engine.ErrAsleep
	}
	return nil
}

func (m *controlModel) start(t *rapid.T) {
	expected := m.weightsRefusal()
	if m.updating {
		expected = engine.ErrWeightUpdateActive
	}
	want(t, "StartWeightUpdate", m.requests.e.StartWeightUpdate(context.Background()), expected)
	if expected == nil {
		m.updating = true
	}
}

func (m *controlModel) update(t *rapid.T) {
	expected := m.weightsRefusal()
	if !m.updating {
		expected = engine.ErrNoWeightUpdate
	}
	want(t, "UpdateWeights", m.requests.e.UpdateWeights(context.Background()), expected)
}

func (m *controlModel) finish(t *rapid.T) {
	version := rapid.SampledFrom([]string{"", "v1", "v2"}).Draw(t, "version")
	expected := m.weightsRefusal()
	if !m.updating {
		expected = engine.ErrNoWeightUpdate
	}
	want(t, fmt.Sprintf("FinishWeightUpdate(%q)", version), m.requests.e.FinishWeightUpdate(context.Background(), version), expected)
	if expected == nil {
		m.updating = false
		if version != "" {
			m.version = version
		}
	}
}

func (m *controlModel) setVersion(t *rapid.T) {
	m.version = rapid.SampledFrom([]string{"v3", "v4"}).Draw(t, "version")
	m.requests.e.UpdateWeightVersion(m.version)
}

// check is the invariant after every call: what the engine says of itself
// is the model's, and whatever waited runs once nothing holds it.
func (m *controlModel) check(t *rapid.T) {
	e, ctx := m.requests.e, context.Background()
	if paused, err := e.IsPaused(ctx); err != nil || paused != m.paused {
		t.Fatalf("IsPaused returned %t, %v; the model says %t", paused, err, m.paused)
	}
	if sleeping, err := e.IsSleeping(ctx); err != nil || sleeping != (m.paused || m.asleep != 0) {
		t.Fatalf("IsSleeping returned %t, %v; the model says paused %t, asleep %s", sleeping, err, m.paused, m.asleep)
	}
	if v := e.WeightVersion(); v != m.version {
		t.Fatalf("WeightVersion returned %q; the model says %q", v, m.version)
	}
	m.settle(t)
}

// TestControlCallsAgainstAModel is a rapid state machine over a trainer's
// calls — pauses, resumes, sleeps, wake-ups by tag, weight updates and
// versions — with requests added between them, under the simulator with
// rapid drawing the schedule too. Every call returns what a model of the
// engine's control state expects (its refusals included), IsPaused,
// IsSleeping and WeightVersion agree with the model after every call,
// every request ends (with the model's tokens, or aborted by a pause of
// mode abort) once nothing holds the engine, and the checker finds every
// property held: no step while paused, asleep or in an update among them.
// It draws async scheduling and up to three draft tokens a step.
func TestControlCallsAgainstAModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		async := rapid.Bool().Draw(t, "async")
		spec := rapid.IntRange(0, 3).Draw(t, "spec-tokens") // a reset's stale steps carry drafts
		res := sim.Run(sim.Options{Chooser: props.RapidChooser(t, "schedule"), Strategy: sim.Chaos(), HangAfter: hangAfter}, func(rt task.Runtime) error {
			c := props.NewChecker(core.ToyModel{})
			c.SetModelLen(core.DefaultMaxModelLen)
			e, err := engine.New(engine.Config{Runtime: rt, Observer: c.Observe, StepTime: 200 * 1000, AsyncScheduling: async, EnablePrefixCaching: true, BlockSize: 4, NumSpeculativeTokens: spec})
			if err != nil {
				return err
			}
			m := &controlModel{requests: engineModel{e: e}, version: engine.DefaultWeightVersion}
			t.Repeat(map[string]func(*rapid.T){
				"add":        m.add,
				"pause":      m.pause,
				"resume":     m.resume,
				"sleep":      m.sleep,
				"wake":       m.wake,
				"start":      m.start,
				"update":     m.update,
				"finish":     m.finish,
				"setVersion": m.setVersion,
				"":           m.check,
			})
			// Let go of everything that holds the engine: every request
			// that waited must then end.
			if m.updating {
				m.asleep &^= core.SleepWeights
				want(t, "WakeUp(weights)", e.WakeUp(context.Background(), engine.WakeWeights), nil)
				want(t, "FinishWeightUpdate", e.FinishWeightUpdate(context.Background(), ""), nil)
				m.updating = false
			}
			want(t, "WakeUp()", e.WakeUp(context.Background()), nil)
			m.paused, m.asleep = false, 0
			m.check(t)
			e.Close()
			c.CheckKV(e)
			return c.Finish()
		})
		if res.Err != nil {
			t.Fatalf("%v", res.Err)
		}
	})
}
