package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/llmdst/llmdst/core"
)

// The refusals of a weight update's calls.
var (
	// ErrWeightUpdateActive: StartWeightUpdate while an update is open.
	ErrWeightUpdateActive = core.ErrWeightUpdateActive
	// ErrNoWeightUpdate: UpdateWeights or FinishWeightUpdate with no
	// update open.
	ErrNoWeightUpdate = core.ErrNoWeightUpdate
)

// DefaultWeightVersion is the weight version of an engine no update has
// named, vLLM's.
const DefaultWeightVersion = "default"

// StartWeightUpdate opens a weight update, vLLM's start_weight_update,
// as an RL trainer does to send the engine new weights: UpdateWeights
// writes them a batch at a time, FinishWeightUpdate closes it. From the
// start to the finish the core runs no step — requests keep coming and
// wait, those running are frozen where they are — so that no forward pass
// reads weights half replaced. vLLM holds nothing back and leaves it to
// the trainer to pause first; here no resume or wake-up in between lifts
// the hold (a trainer's pause before it stays its own, for its own
// resume). It returns once the core took it: every step after it runs on
// the weights the finish leaves. The KV cache computed with the old
// weights stays: ResetPrefixCache, or a pause that clears the cache,
// drops it.
//
// What waits for running requests to end waits for the finish: a
// PauseGeneration or Sleep of mode PauseWait, and WaitIdle, called in the
// middle of an update with requests running, return after it. A trainer
// that calls one between its own start and finish waits for ever: it
// pauses before the start, or with PauseKeep, which takes effect at once.
//
// It fails with ErrWeightUpdateActive when an update is open, with an
// error that is ErrAsleep when the executor's weights sleep
// (WakeUp(WakeWeights) first: vLLM's worker writes into released memory
// and dies, its #57853), with ErrClosed or the engine-dead error when the
// engine is, and with ctx's error when ctx is done first (the call may
// still be taken).
func (e *AsyncLLM) StartWeightUpdate(ctx context.Context) error {
	return e.weightCall(ctx, core.InputStartWeightUpdate)
}

// UpdateWeights writes a batch of the new weights into the update open,
// vLLM's update_weights. It fails as StartWeightUpdate does, and with
// ErrNoWeightUpdate when none is open.
func (e *AsyncLLM) UpdateWeights(ctx context.Context) error {
	return e.weightCall(ctx, core.InputUpdateWeights)
}

// FinishWeightUpdate closes the update open, vLLM's finish_weight_update,
// and lifts its hold: the core schedules again, unless a pause or a sleep
// holds it too. A version other than "" then becomes the
// engine's weight version (WeightVersion), as vLLM commits it only after
// the finish succeeded. It fails as UpdateWeights does, and then neither
// the hold nor the version changes.
func (e *AsyncLLM) FinishWeightUpdate(ctx context.Context, version string) error {
	if err := e.weightCall(ctx, core.InputFinishWeightUpdate); err != nil {
		return err
	}
	if version != "" {
		e.UpdateWeightVersion(version)
	}
	return nil
}

// UpdateWeightVersion sets the weight version without updating weights,
// vLLM's update_weight_version.
func (e *AsyncLLM) UpdateWeightVersion(version string) { e.version.Store(&version) }

// WeightVersion returns the version the last FinishWeightUpdate or
// UpdateWeightVersion named, vLLM's get_weight_version;
// DefaultWeightVersion before either. It is a label for the trainer's
// books: a request that ran through an update has tokens of both
// weights, and no output carries a version (as in vLLM).
func (e *AsyncLLM) WeightVersion() string {
	if v := e.version.Load(); v != nil {
		return *v
	}
	return DefaultWeightVersion
}

// weightCall makes a weight update's call and names the core's refusal.
func (e *AsyncLLM) weightCall(ctx context.Context, kind core.InputKind) error {
	call, p, err := e.callOn(ctx, core.Input{Kind: kind}, e.ranks())
	r := p.r
	mended := kind == core.InputStartWeightUpdate && r.Err != nil && e.mendsSplit(p)
	if err == nil {
		e.split(call, p, mended)
	}
	if mended {
		// Some cores started the update and another refused it: the
		// caller, told it failed, would never finish it, and those
		// cores would hold their requests for ever. Finish it there, with
		// no batch written, so that every core is as it was.
		e.callOn(context.WithoutCancel(ctx), core.Input{Kind: core.InputFinishWeightUpdate}, p.took)
	}
	switch {
	case err != nil:
		return err
	case errors.Is(r.Err, core.ErrWeightsAsleep):
		return fmt.Errorf("engine: %s refused: %w: %w", weightCallNames[kind], ErrAsleep, r.Err)
	case r.Err != nil:
		return fmt.Errorf("engine: %s refused: %w", weightCallNames[kind], r.Err)
	}
	return nil
}

var weightCallNames = map[core.InputKind]string{
	core.InputStartWeightUpdate:  "StartWeightUpdate",
	core.InputUpdateWeights:      "UpdateWeights",
	core.InputFinishWeightUpdate: "FinishWeightUpdate",
}
