package scenario

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// FoundingStepTime is the model latency of the founding test's RunnerStub.
const FoundingStepTime = 200 * time.Microsecond

// AbortReuse is the founding race report's test, "async_llm test_abort and
// test_multi_abort leave other requests healthy", ported line by line:
//
//	abort-a  (Delta, MaxTokens 100000), survivor (Delta, 8),
//	abort-b  (FinalOnly, 100000), on a model of 200µs a step;
//	partial := get_output(abort-a);         CHECK_FALSE(partial.finished)
//	abort({abort-a, abort-b})
//	final_a, final_b: finished, reason "abort"
//	CHECK(Drain(survivor) == 8);            CHECK_FALSE(has_unfinished_requests())
//	reused := add_request(abort-a, MaxTokens 3, Delta)
//	CHECK(Drain(reused) == 3)
//
// On the legacy engine a starved output handler lets a frame of the old
// abort-a land in the new collector: Drain returns 4 or more.
//
// Its default strategy, starve:output-handler, is the one that finds the
// race most often; the figures for every strategy are in docs/TRIAGE.md
// (step 2): only it and chaos open the race's window.
var AbortReuse = &Scenario{
	Name:            "abort-reuse",
	Summary:         "the founding race: reuse an aborted request id at once (ported C++ test)",
	DefaultStrategy: "starve:output-handler",
	Run:             abortReuse,
	Targets:         props.SetOf(props.StaleFrameAfterReuse),
}

// AbortReuseWaitIdle is the founding test with the report's first
// candidate fix: an honest precondition. Before reusing the id it waits for
// the core to be quiescent (WaitIdle) instead of inferring it from frontend
// state. It passes even on the legacy engine, which shows the race is one of
// id reuse before the core confirmed the abort.
var AbortReuseWaitIdle = &Scenario{
	Name:            "abort-reuse-wait-idle",
	Summary:         "the founding test, waiting for the core (WaitIdle) before reusing the id",
	DefaultStrategy: "starve:output-handler",
	Run:             func(x *Run) error { return abortReuseTest(x, true) },
}

func init() {
	Register(AbortReuse)
	Register(AbortReuseWaitIdle)
}

func abortReuse(x *Run) error { return abortReuseTest(x, false) }

func abortReuseTest(x *Run, waitIdle bool) error {
	cfg := engine.Config{StepTime: FoundingStepTime}
	e, err := x.NewEngine(cfg)
	if err != nil {
		return err
	}
	long := engine.Params{MaxTokens: 100000, Output: engine.Delta}
	// A model length shorter than the requests (-config max-model-len)
	// may end them first: the long ones before their abort, the others
	// short of their tokens.
	room := x.room(cfg, "hello")
	aborted, early := abortEnds(room, long.MaxTokens)
	a, err := e.AddRequest("abort-a", "hello", long)
	if err != nil {
		return err
	}
	survivor, err := e.AddRequest("survivor", "hello", engine.Params{MaxTokens: 8, Output: engine.Delta})
	if err != nil {
		return err
	}
	b, err := e.AddRequest("abort-b", "hello", engine.Params{MaxTokens: 100000, Output: engine.FinalOnly})
	if err != nil {
		return err
	}

	partial, err := a.Next()
	if err != nil {
		return err
	}
	if partial.Finished && !early(partial.FinishReason) {
		return fmt.Errorf("CHECK_FALSE(partial.finished) failed: abort-a finished on its own (%s)", partial.FinishReason)
	}
	e.Abort("abort-a", "abort-b")
	for _, r := range []*engine.Request{a, b} {
		if r == a && partial.Finished {
			continue // the model length ended it before the abort
		}
		final, err := r.Next()
		if err != nil {
			return fmt.Errorf("get_output(%s) after abort: %w", r.ID(), err)
		}
		if !final.Finished || !aborted(final.FinishReason) {
			return fmt.Errorf("CHECK(final.finish_reason == \"abort\") failed for %s: finished=%v reason=%q", r.ID(), final.Finished, final.FinishReason)
		}
	}
	got, _, err := x.drain(survivor)
	if err != nil {
		return err
	}
	if n := min(8, room); len(got) != n {
		return fmt.Errorf("CHECK(Drain(engine, survivor) == %d) failed: %d", n, len(got))
	}
	if e.HasUnfinishedRequests() {
		return fmt.Errorf("CHECK_FALSE(engine.has_unfinished_requests()) failed")
	}
	if waitIdle {
		if err := e.WaitIdle(context.Background()); err != nil {
			return fmt.Errorf("WaitIdle: %w", err)
		}
	}

	reused, err := e.AddRequest("abort-a", "hello", engine.Params{MaxTokens: 3, Output: engine.Delta})
	if err != nil {
		return fmt.Errorf("reusing abort-a: %w", err)
	}
	got, _, err = x.drain(reused)
	if err != nil {
		return err
	}
	if w := want("hello", min(3, room)); !slices.Equal(got, w) {
		return fmt.Errorf("CHECK(Drain(engine, reused) == %d) failed: %d tokens %v, want %v", len(w), len(got), got, w)
	}
	return nil
}
