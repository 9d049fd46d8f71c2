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
// LoadInplace nothing a request sees changes: the adapter is loaded into
// the executor's cache (Config.MaxCPULoRAs), putting out the least
// recently used adapter not pinned when it is full, as a step loads the
// adapters its batch needs.
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
	switch {
	case l.ID < 1 || l.ID > math.MaxInt32:
		// vLLM's LoRARequest: "id must be > 0".
		return invalid("LoRA adapter %q has id %d: ids run from 1 to %d", l.Name, l.ID, math.MaxInt32)
	case l.Name == "":
		return invalid("LoRA adapter %d has no name", l.ID)
	case !e.cfg.EnableLoRA:
		// vLLM's input processor: "Got lora_request … but LoRA is not
		// enabled!"
		return invalid("LoRA adapter %q (id %d) asked for, but LoRA is not enabled: set Config.EnableLoRA", l.Name, l.ID)
	}
	return nil
}

// PinLoRA pins adapter id, vLLM's pin_lora: it stays loaded and holds an
// executor slot of its own until RemoveLoRA, so that its requests never
// wait for one, whatever the other adapters' requests ask. It returns true
// when the adapter is pinned (again, if it was).
//
// It fails with an error that is ErrInvalidRequest when LoRA is off, the
// id is out of range, the adapter is not loaded (core.ErrLoRANotLoaded:
// AddLoRA, or a request of it, loads it, and loads of others may unload
// it before the pin arrives) or no slot is free for it
// (core.ErrLoRAPinSlot): the running requests of other adapters use
// them, or the pin would take the last slot pins may leave, which the
// other adapters' requests would then wait for for ever; vLLM pins such
// an adapter and its worker dies at the next step that needs the slot.
// It fails with ErrClosed or the engine-dead error when the engine is,
// and with ctx's error when ctx is done first (the pin may still be
// taken).
func (e *AsyncLLM) PinLoRA(ctx context.Context, id int) (bool, error) {
	r, err := e.loraCall(ctx, "PinLoRA", core.InputPinLoRA, id)
	return r.Done, err
}

// RemoveLoRA unloads adapter id, vLLM's remove_lora, and unpins it; a
// request of it loads it again at its next step, with its latest weights.
// It returns whether the adapter was loaded. It fails with an error that
// is ErrInvalidRequest when LoRA is off or the id is out of range, with
// ErrClosed or the engine-dead error when the engine is, and with ctx's
// error when ctx is done first (the removal may still be taken).
func (e *AsyncLLM) RemoveLoRA(ctx context.Context, id int) (bool, error) {
	r, err := e.loraCall(ctx, "RemoveLoRA", core.InputRemoveLoRA, id)
	return r.Done, err
}

// ListLoRAs returns the adapters loaded, by id in increasing order, vLLM's
// list_loras: at most Config.MaxCPULoRAs, the pinned among them. It fails
// with an error that is ErrInvalidRequest when LoRA is off, with ErrClosed
// or the engine-dead error when the engine is, and with ctx's error when
// ctx is done first.
func (e *AsyncLLM) ListLoRAs(ctx context.Context) ([]int, error) {
	r, err := e.loraCall(ctx, "ListLoRAs", core.InputListLoRAs, 0)
	return r.LoRAs, err
}

// loraCall makes call, a LoRA call of kind about adapter id (none for
// InputListLoRAs), and returns the core's reply; a refusal is an error
// that is ErrInvalidRequest.
func (e *AsyncLLM) loraCall(ctx context.Context, call string, kind core.InputKind, id int) (core.Reply, error) {
	switch {
	case !e.cfg.EnableLoRA:
		return core.Reply{}, invalid("%s: LoRA is not enabled: set Config.EnableLoRA", call)
	case kind != core.InputListLoRAs && (id < 1 || id > math.MaxInt32):
		return core.Reply{}, invalid("%s(%d): LoRA adapter ids run from 1 to %d", call, id, math.MaxInt32)
	}
	_, r, err := e.call(ctx, core.Input{Kind: kind, LoRA: int32(id)})
	switch {
	case err != nil:
		return core.Reply{}, err
	case r.Err != nil:
		return r, invalid("%s(%d) refused: %w", call, id, r.Err)
	}
	return r, nil
}
