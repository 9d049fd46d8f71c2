package scenario

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// Scenario is a named workload.
type Scenario struct {
	// Name is what simrun's -scenario takes.
	Name string
	// Summary is one line for simrun list.
	Summary string
	// DefaultStrategy is the strategy that finds most on this scenario, as
	// sim.ParseStrategy reads it; measured, see the scenario's doc.
	DefaultStrategy string
	// Run drives the engine; it returns an error when a check of its own
	// fails. The checker's properties are checked around it.
	Run func(x *Run) error
	// Targets are the situations the scenario exists to reach (the race
	// windows its properties are about): simrun counts the seeds that
	// reached each, and says so when a sweep reached one in none of its
	// seeds, since its passing seeds then say nothing of that race.
	Targets props.SituationSet
}

// Options configure a scenario's runs.
type Options struct {
	// Legacy runs the engine with LegacyIDRouting: the pre-fix engine.
	Legacy bool
	// Seed seeds the workload's draws (stream sim.StreamWorkload); the
	// schedule's draws have a stream of their own.
	Seed uint64
	// Source, if set, replaces the seeded workload source (rapid draws).
	// Seed still seeds the side streams (swarm's configuration: priority,
	// prefix caching, async scheduling, chat, pausing...) and the faults'
	// draws, so a caller drawing the workload from Source draws Seed too.
	Source sim.Chooser
	// Engine, if set, adjusts every engine configuration the scenario makes.
	// A scenario may call it more than once for one engine, to learn what
	// it will run (swarm draws priorities only for the priority policy), so
	// it must do nothing but set fields.
	Engine func(*engine.Config)
	// Failpoints arms failpoints for every run, as "name=terms" specs
	// (failpoints.NewSet); their probabilities draw from the seed's fault
	// stream. GO_FAILPOINTS adds its specs to them.
	Failpoints []string
	// Stats reads each engine's counters as the run closes it
	// (Outcome.Stats): what simrun run -metrics prints. Off, a run reads
	// none.
	Stats bool
}

// Run is what a scenario's Run gets: the runtime, the options, the
// workload's random source and the checker.
type Run struct {
	RT      task.Runtime
	Opts    Options
	Rand    sim.Chooser
	Checker *props.Checker
	// Faults are the run's armed failpoints, given to every engine.
	Faults  *failpoints.Set
	engines []*engine.AsyncLLM
}

// NewEngine starts an engine on the run's runtime, wired to the checker and
// the trace, with the run's routing. The run closes it at the end.
func (x *Run) NewEngine(cfg engine.Config) (*engine.AsyncLLM, error) {
	cfg = x.engineConfig(cfg)
	x.Checker.SetEngine(cfg)
	checker := x.Checker
	rt := x.RT
	tracing, hashing := sim.Tracing(rt), sim.Hashing(rt)
	cfg.Observer = func(ev engine.Event) {
		before := checker.Reached()
		checker.ObserveEvent(&ev) // a method call, so that ev stays on the stack
		switch {
		case tracing:
			sim.Note(rt, annotate(ev))
		case hashing:
			sim.NoteHash(rt, ev.Kind.String(), fingerprint(ev))
		}
		if now := checker.Reached(); now != before {
			// After the note: the trace, the timeline and the story
			// show each situation after the event that reached it.
			(now &^ before).Reach(rt)
		}
	}
	e, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	x.engines = append(x.engines, e)
	return e, nil
}

// engineConfig is the configuration NewEngine starts an engine of cfg
// with: on the run's runtime, with its routing and failpoints, adjusted by
// the options.
func (x *Run) engineConfig(cfg engine.Config) engine.Config {
	cfg.Runtime = x.RT
	cfg.LegacyIDRouting = x.Opts.Legacy
	if cfg.Faults == nil {
		cfg.Faults = x.Faults
	}
	if x.Opts.Engine != nil {
		x.Opts.Engine(&cfg)
	}
	return cfg
}

// Failed reports whether the checker has seen a violation, so that a
// scenario can stop early.
func (x *Run) Failed() bool { return x.Checker.Err() != nil }

// Outcome is what the last run of a program found.
type Outcome struct {
	// Checker is the checker of the last run.
	Checker *props.Checker
	// ScenarioErr is the error the scenario's Run returned.
	ScenarioErr error
	// Stats are the counters of the engines the run made, in the order it
	// made them, each read once it closed, with Options.Stats (else nil).
	// Read then, they take no step of the run: its trace hash is the same
	// with them or without.
	Stats []engine.Stats
}

// Err joins a run's error with the checker's violations, the violation
// first: it names the property. A run that ended early — a deadlock, a
// step limit, a panic — also gets the end-of-run check, so that a request
// that was accepted and never ended is named as such. A run the harness
// cut short is the exception — a replay that left its schedule, or the
// step limit — since what it left unfinished says nothing of the code: its
// requests are not checked for an end, and the cut comes first.
func (o *Outcome) Err(runErr error) error {
	if o.Checker == nil {
		return runErr
	}
	var diverged *sim.ScheduleMismatchError
	var limited *sim.StepLimitError
	cut := errors.As(runErr, &diverged) || errors.As(runErr, &limited)
	if runErr != nil && !cut && o.Checker.Err() == nil && !errors.Is(runErr, o.ScenarioErr) {
		o.Checker.Finish()
		var dl *sim.DeadlockError
		if errors.As(runErr, &dl) {
			for _, v := range o.Checker.Violations() {
				v.AtDeadlock = true // what a deadlock left: its failure mode says so
			}
		}
	}
	v := o.Checker.Err()
	switch {
	case v == nil:
		return runErr
	case runErr == nil || errors.Is(runErr, v):
		return v
	case cut:
		return errors.Join(runErr, v)
	}
	return errors.Join(v, runErr)
}

// faults builds a run's failpoint set: the options' specs and
// GO_FAILPOINTS', drawing from the seed's fault stream. Each run gets a set
// of its own, so that counts start afresh and a run never depends on
// another.
func (o Options) faults() (*failpoints.Set, error) {
	env, err := failpoints.EnvSpecs()
	if err != nil {
		return nil, err
	}
	specs := append(append([]string(nil), o.Failpoints...), env...)
	return failpoints.NewSet(sim.NewPCGChooser(o.Seed, sim.StreamFaults), specs...)
}

// faultsWith builds the run's failpoint set with specs armed too, for a
// scenario that draws faults of its own.
func (x *Run) faultsWith(specs ...string) (*failpoints.Set, error) {
	o := x.Opts
	o.Failpoints = append(slices.Clone(o.Failpoints), specs...)
	return o.faults()
}

// CheckFailpoints reports the first failpoint spec a run would refuse, so
// that a caller can say so before running anything.
func (o Options) CheckFailpoints() error {
	_, err := o.faults()
	return err
}

// Program returns the function sim.Run runs for these options, and the
// outcome it fills in.
func (s *Scenario) Program(opts Options) (func(rt task.Runtime) error, *Outcome) {
	out := &Outcome{}
	prog := func(rt task.Runtime) error {
		src := opts.Source
		if src == nil {
			src = sim.NewPCGChooser(opts.Seed, sim.StreamWorkload)
		}
		x := &Run{RT: rt, Opts: opts, Rand: src, Checker: props.NewChecker(core.ToyModel{})}
		faults, err := opts.faults()
		if err != nil {
			return err
		}
		x.Faults = faults
		x.Checker.Where = func() (string, string) {
			t, p, _ := sim.Where(rt)
			return t, p
		}
		out.Checker, out.ScenarioErr, out.Stats = x.Checker, nil, nil
		err = s.Run(x)
		for _, e := range x.engines {
			e.Close()
			x.Checker.CheckKV(e)
			if opts.Stats {
				out.Stats = append(out.Stats, e.Stats())
			}
		}
		if errors.Is(err, errStopped) {
			err = nil // the violation says it all
		}
		out.ScenarioErr = err
		if cerr := x.Checker.Finish(); cerr != nil {
			if err != nil {
				return errors.Join(cerr, err)
			}
			return cerr
		}
		return err
	}
	return prog, out
}

var registry = map[string]*Scenario{}

// Register adds a scenario; it panics on a duplicate name, a broken
// invariant of the registry.
func Register(s *Scenario) {
	if _, dup := registry[s.Name]; dup {
		panic("scenario: duplicate scenario name " + s.Name)
	}
	if _, err := sim.ParseStrategy(s.DefaultStrategy); err != nil {
		panic(fmt.Sprintf("scenario %s: bad default strategy: %v", s.Name, err))
	}
	registry[s.Name] = s
}

// Lookup returns the scenario named name.
func Lookup(name string) (*Scenario, error) {
	if s, ok := registry[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("scenario: unknown scenario %q: want one of %s", name, strings.Join(Names(), ", "))
}

// Names returns the registered names, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// All returns the registered scenarios, sorted by name.
func All() []*Scenario {
	var all []*Scenario
	for _, n := range Names() {
		all = append(all, registry[n])
	}
	return all
}

// note is an engine event in a simulated trace.
type note struct{ ev engine.Event }

// frameNote is a frame event: it also draws a flow arrow.
type frameNote struct{ note }

func annotate(ev engine.Event) sim.Annotation {
	switch ev.Kind {
	case core.EventFrameEmitted, core.EventFrameDelivered, core.EventFrameDropped:
		return frameNote{note{ev}}
	}
	return note{ev}
}

func (n note) Kind() string        { return n.ev.Kind.String() }
func (n note) Fingerprint() uint64 { return fingerprint(n.ev) }
func (n note) String() string      { return n.ev.String() }
func (f frameNote) Flow() (uint64, bool) {
	return f.ev.Frame, f.ev.Kind == core.EventFrameEmitted
}

// fingerprint folds an event's content into a word for the trace hash.
func fingerprint(ev engine.Event) uint64 {
	h := uint64(ev.Kind)
	mix := func(x uint64) { h = (h ^ x) * 0x100000001b3 }
	mix(ev.Incarnation)
	mix(ev.Collector)
	mix(ev.Frame)
	mix(uint64(ev.Position))
	mix(uint64(len(ev.Tokens)))
	for _, t := range ev.Tokens[:min(len(ev.Tokens), 4)] {
		mix(uint64(t))
	}
	if ev.Finished {
		mix(1)
	}
	mix(uint64(len(ev.Reason)))
	mix(uint64(ev.Held))
	if ev.Index != 0 || ev.CollectorIndex != 0 { // sequences of N > 1 only: other hashes stay as they were
		mix(uint64(ev.Index))
		mix(uint64(ev.CollectorIndex))
	}
	if ev.LoRA != 0 { // LoRA runs only
		mix(uint64(ev.LoRA))
	}
	if ev.Engine != 0 { // data-parallel runs only
		mix(uint64(ev.Engine))
	}
	return h
}

// errStopped ends a scenario early once the checker saw a violation: the
// violation is the run's error.
var errStopped = errors.New("scenario: stopped after a property violation")

// drain reads r to its end and returns the tokens it received, the last
// output and the first error other than io.EOF. It stops early, with
// errStopped, once the checker has seen a violation.
func (x *Run) drain(r *engine.Request) (tokens []int, last engine.Output, err error) {
	last, err = x.readAll(r, func(out engine.Output) { tokens = append(tokens, out.TokenIDs...) })
	return tokens, last, err
}

// readAll reads r to its end, handing each output to take, and returns
// the last output and the first error other than io.EOF. It stops early,
// with errStopped, once the checker has seen a violation.
func (x *Run) readAll(r *engine.Request, take func(engine.Output)) (last engine.Output, err error) {
	for {
		if x.Failed() {
			return last, errStopped
		}
		out, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return last, nil
			}
			return last, err
		}
		take(out)
		last = out
	}
}

// room is how many tokens a request of prompt may generate on an engine of
// cfg before the model length the run's settings give it
// (-config max-model-len) ends it.
func (x *Run) room(cfg engine.Config, prompt string) int {
	modelLen := core.Config{MaxModelLen: x.engineConfig(cfg).MaxModelLen}.WithDefaults().MaxModelLen // as the checker takes it
	return modelLen - len(core.Tokenizer{}.Encode(prompt))
}

// abortEnds says what a scenario takes for the ends of a request of
// maxTokens that it aborts, with room tokens before the model length:
// early, an end before the abort, is only "length", and only when the room
// is less than the request; aborted, an end by the abort, is "abort" or an
// early one.
func abortEnds(room, maxTokens int) (aborted, early func(engine.FinishReason) bool) {
	early = func(r engine.FinishReason) bool { return r == engine.FinishLength && room < maxTokens }
	aborted = func(r engine.FinishReason) bool { return r == engine.FinishAbort || early(r) }
	return aborted, early
}

// want returns the model's first n tokens for prompt.
func want(prompt string, n int) []int {
	return core.Tokens(core.ToyModel{}, core.Tokenizer{}.Encode(prompt), n)
}
