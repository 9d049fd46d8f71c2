package engine

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/llmdst/llmdst/core"
)

// AddLoRA loads adapter lora, vLLM's add_lora. With lora.LoadInplace its
// new weights replace the ones loaded (vLLM's load_inplace, for a trainer
// that updates its adapter between rollouts): every request of it samples
// with them from the core's next step on, those running going on from the
// KV the old weights computed (vLLM's policy switch in the middle of a
// request), and the prefix cache keeps the blocks of each revision apart,
// where vLLM keys them by the adapter alone, so that a request admitted
// after the load never starts from KV of the old weights (vLLM's RFC
// #48297 leaves that to a reset of the prefix cache). Without
// LoadInplace nothing a request sees changes: adapters load when a step
// first needs them.
//
// It fails with an error that is ErrInvalidRequest when LoRA is off or
// the adapter is named wrongly, with one that is ErrAsleep while the
// executor's weights sleep, with ErrClosed or the engine-dead error when
// the engine is, and with ctx's error when ctx is done first (the load
// may still be taken).
func (e *AsyncLLM) AddLoRA(ctx context.Context, lora LoRARequest) error {
	if err := e.validateLoRA(&lora); err != nil {
		return err
	}
	_, r, err := e.call(ctx, core.Input{Kind: core.InputLoadLoRA, LoRA: int32(lora.ID), LoadInplace: lora.LoadInplace})
	switch {
	case err != nil:
		return err
	case errors.Is(r.Err, core.ErrWeightsAsleep):
		return fmt.Errorf("engine: AddLoRA(%q) refused: %w: %w", lora.Name, ErrAsleep, r.Err)
	case r.Err != nil:
		return fmt.Errorf("engine: AddLoRA(%q) refused: %w", lora.Name, r.Err)
	}
	return nil
}

// validateLoRA checks an adapter a request or AddLoRA names; every error
// wraps ErrInvalidRequest.
func (e *AsyncLLM) validateLoRA(l *LoRARequest) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
	}
	switch {
	case l.ID < 1 || l.ID > math.MaxInt32:
		// vLLM's LoRARequest: "id must be > 0".
		return bad("LoRA adapter %q has id %d: ids run from 1 to %d", l.Name, l.ID, math.MaxInt32)
	case l.Name == "":
		return bad("LoRA adapter %d has no name", l.ID)
	case !e.cfg.EnableLoRA:
		// vLLM's input processor: "Got lora_request … but LoRA is not
		// enabled!"
		return bad("LoRA adapter %q (id %d) asked for, but LoRA is not enabled: set Config.EnableLoRA", l.Name, l.ID)
	}
	return nil
}
