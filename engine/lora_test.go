package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// wantLoRA is the tokens adapter lora gives prompt, IgnoreEOS.
func wantLoRA(prompt string, lora, n int) []int {
	m := core.ToyModel{}
	return core.TokensFor(m, core.LoRAKey(m.Prepare(core.Tokenizer{}.Encode(prompt)), lora), n)
}

// TestALoRARequestIsRefusedWhenItCannotRun: an adapter asked for with
// LoRA off, or named wrongly, is refused before anything is registered,
// with what was wrong; the id stays free.
func TestALoRARequestIsRefusedWhenItCannotRun(t *testing.T) {
	off := newEngine(t, task.Real(), engine.Config{})
	_, err := off.AddRequest("a", "hello", engine.Params{MaxTokens: 2, LoRA: &engine.LoRARequest{Name: "sql", ID: 1}})
	assert.ErrorIs(t, err, engine.ErrInvalidRequest)
	assert.EqualError(t, err, `engine: invalid request: LoRA adapter "sql" (id 1) asked for, but LoRA is not enabled: set Config.EnableLoRA`)

	on := newEngine(t, task.Real(), engine.Config{EnableLoRA: true})
	for _, c := range []struct {
		lora engine.LoRARequest
		want string
	}{
		{engine.LoRARequest{Name: "sql", ID: 0}, `LoRA adapter "sql" has id 0: ids run from 1 to 2147483647`},
		{engine.LoRARequest{Name: "sql", ID: -3}, `LoRA adapter "sql" has id -3: ids run from 1 to 2147483647`},
		{engine.LoRARequest{Name: "sql", ID: 1 << 31}, `LoRA adapter "sql" has id 2147483648: ids run from 1 to 2147483647`},
		{engine.LoRARequest{ID: 2}, "LoRA adapter 2 has no name"},
		{engine.LoRARequest{Name: "sql", ID: 2, LoadInplace: true}, `LoRA adapter "sql" of a request says LoadInplace, which is AddLoRA's: a request that carried it would reload the adapter at every step`},
	} {
		_, err := on.AddRequest("a", "hello", engine.Params{MaxTokens: 2, LoRA: &c.lora})
		assert.ErrorIs(t, err, engine.ErrInvalidRequest)
		assert.EqualError(t, err, "engine: invalid request: "+c.want)
	}
	r := add(t, on, "a", "hello", engine.Params{MaxTokens: 3, IgnoreEOS: true, LoRA: &engine.LoRARequest{Name: "sql", ID: 7}})
	assert.Equal(t, wantLoRA("hello", 7, 3), tokensOf(engine.Cumulative, drain(t, r)), "the id was never taken, and the adapter's tokens came")
}

// TestAdaptersShareTheEngine: under the simulator, requests of four
// adapters and of the base model, over one prompt with prefix caching and
// one or two LoRA slots, each get their own adapter's tokens; a checker
// finds every property held, no step over more adapters than the slots
// among them, and the runs hold requests back for a slot.
func TestAdaptersShareTheEngine(t *testing.T) {
	waited := 0
	const seeds = 12
	for seed := uint64(1); seed <= seeds; seed++ {
		cfg := engine.Config{EnableLoRA: true, MaxLoRAs: 1 + int(seed%2), EnablePrefixCaching: true, BlockSize: 4}
		c, err := checkedRun(t, seed, nil, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			g := task.NewGroup(rt, "clients")
			for i := range 10 {
				lora := i % 5 // 0: the base model
				g.Go("client-"+strconv.Itoa(i), func() {
					rt.Sleep(time.Duration(i/3) * time.Millisecond)
					p := engine.Params{MaxTokens: 3 + i%4, IgnoreEOS: true, Output: engine.Delta}
					if lora != 0 {
						p.LoRA = &engine.LoRARequest{Name: fmt.Sprintf("adapter-%d", lora), ID: lora}
					}
					r := add(t, e, strconv.Itoa(i), pauseLong, p)
					assert.Equal(t, wantLoRA(pauseLong, lora, p.MaxTokens), tokensOf(engine.Delta, drain(t, r)), "seed %d request %d (adapter %d)", seed, i, lora)
				})
			}
			g.Wait()
		})
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
		if c.Reached().Has(props.LoRAWaitedForASlot) {
			waited++
		}
	}
	assert.Equal(t, seeds, waited, "five adapters' requests at once, one or two slots: some wait in every run")
}

// TestAdaptersOnTheRealRuntime: on goroutines, clients of five adapters
// and the base model stream over one prompt into two LoRA slots, with
// prefix caching and either scheduler: every request gets its adapter's
// tokens, and the checker (newEngine's) finds every property held, under
// the race detector too, while a scraper reads the stats and an operator
// pins adapter 1, lists the adapters loaded and removes it again.
func TestAdaptersOnTheRealRuntime(t *testing.T) {
	for _, async := range []bool{false, true} {
		e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime, AsyncScheduling: async, EnableLoRA: true, MaxLoRAs: 2, EnablePrefixCaching: true, BlockSize: 4})
		var wg sync.WaitGroup
		var stop atomic.Bool
		var scraper sync.WaitGroup
		polls, pins := 0, 0
		scraper.Go(func() { // beside the clients: the snapshots race nothing
			for !stop.Load() {
				var b strings.Builder
				assert.NoError(t, e.Stats().WritePrometheus(&b))
				assert.Contains(t, b.String(), `vllm:lora_requests_info{max_lora="2",`)
				polls++
			}
		})
		scraper.Go(func() { // an operator pins adapter 1 and removes it, over and over
			ctx := context.Background()
			for !stop.Load() {
				if err := e.AddLoRA(ctx, engine.LoRARequest{Name: "adapter-1", ID: 1}); !assert.NoError(t, err) {
					return
				}
				pinned, err := e.PinLoRA(ctx, 1)
				if !errors.Is(err, core.ErrLoRAPinSlot) && !errors.Is(err, core.ErrLoRANotLoaded) && !assert.NoError(t, err) {
					return
				}
				loaded, err := e.ListLoRAs(ctx)
				assert.NoError(t, err)
				assert.LessOrEqual(t, len(loaded), 2, "MaxCPULoRAs is MaxLoRAs")
				if pinned {
					pins++
					assert.Contains(t, loaded, 1, "a pinned adapter stays loaded")
				}
				removed, err := e.RemoveLoRA(ctx, 1)
				assert.NoError(t, err)
				assert.True(t, removed || !pinned, "a pinned adapter is found by its removal")
			}
		})
		for c := range 12 {
			wg.Go(func() {
				for k := range 20 {
					lora := (c + k) % 6
					p := engine.Params{MaxTokens: 1 + k%5, IgnoreEOS: true, Output: engine.Delta}
					if lora != 0 {
						p.LoRA = &engine.LoRARequest{Name: fmt.Sprintf("adapter-%d", lora), ID: lora}
					}
					r := add(t, e, fmt.Sprintf("c%d-%d", c, k), pauseLong, p)
					assert.Equal(t, wantLoRA(pauseLong, lora, p.MaxTokens), tokensOf(engine.Delta, drain(t, r)), "async=%v client %d request %d (adapter %d)", async, c, k, lora)
				}
			})
		}
		wg.Wait()
		stop.Store(true)
		scraper.Wait()
		t.Logf("async=%v: %d scrapes, %d pins", async, polls, pins)
		require.NoError(t, e.Close())
	}
}

// TestLoRAAdaptersInTheStats: with one slot, a request of adapter "sql"
// running and one of "chat" waiting for the slot, the stats and
// vllm:lora_requests_info say so, at the engine clock's time; once both
// ended they list none. With LoRA off the metric is absent, as vLLM's.
func TestLoRAAdaptersInTheStats(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		e := newEngine(t, rt, engine.Config{EnableLoRA: true})
		defer e.Close()
		sql := add(t, e, "a", "hello", engine.Params{MaxTokens: 20, IgnoreEOS: true, LoRA: &engine.LoRARequest{Name: "sql", ID: 1}})
		chat := add(t, e, "b", "hello", engine.Params{MaxTokens: 2, IgnoreEOS: true, LoRA: &engine.LoRARequest{Name: "chat", ID: 2}})
		rt.Sleep(5 * core.DefaultStepTime)
		st := e.Stats()
		assert.Equal(t, 1, st.MaxLoRAs)
		assert.Equal(t, []engine.LoRAAdapterStats{{Name: "sql", ID: 1, Running: 1}, {Name: "chat", ID: 2, Waiting: 1}}, st.LoRAAdapters)
		var b strings.Builder
		require.NoError(t, st.WritePrometheus(&b))
		at := strconv.FormatFloat(float64(rt.Now().UnixNano())/1e9, 'g', -1, 64)
		assert.Contains(t, b.String(), `vllm:lora_requests_info{max_lora="1",running_lora_adapters="sql",waiting_lora_adapters="chat"} `+at+"\n")
		drain(t, sql)
		drain(t, chat)
		require.NoError(t, e.WaitIdle(context.Background()))
		st = e.Stats()
		assert.Empty(t, st.LoRAAdapters)
		b.Reset()
		require.NoError(t, st.WritePrometheus(&b))
		assert.Contains(t, b.String(), `vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} `)
		return nil
	})
	require.NoError(t, res.Err)

	off := newEngine(t, task.Real(), engine.Config{})
	var b strings.Builder
	require.NoError(t, off.Stats().WritePrometheus(&b))
	assert.NotContains(t, b.String(), "lora")
}

// wantRev is the tokens adapter lora gives prompt at revision rev of its
// weights, IgnoreEOS.
func wantRev(prompt string, lora int, rev uint64, n int) []int {
	m := core.ToyModel{}
	return core.TokensFor(m, core.RevisionKey(core.LoRAKey(m.Prepare(core.Tokenizer{}.Encode(prompt)), lora), rev), n)
}

// TestAddLoRAReloadsInPlace: under the simulator, a trainer loads its
// adapter's new weights in place while a request of it streams: that
// request's tokens are the old weights' up to some point and the new
// weights' after it, a request added after the load has the new weights'
// from its first token, a load without LoadInplace changes nothing, and
// the checker (newEngine's), following the revisions, finds every
// property held.
func TestAddLoRAReloadsInPlace(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		res := sim.Run(sim.Options{Seed: seed}, func(rt task.Runtime) error {
			e := newEngine(t, rt, engine.Config{EnableLoRA: true, EnablePrefixCaching: true, BlockSize: 4, AsyncScheduling: seed%2 == 0})
			defer e.Close()
			ctx := context.Background()
			policy := engine.LoRARequest{Name: "policy", ID: 3}
			p := engine.Params{MaxTokens: 12, IgnoreEOS: true, Output: engine.Delta, LoRA: &policy}
			before := add(t, e, "before", pauseLong, p)
			rt.Sleep(4 * core.DefaultStepTime)
			require.NoError(t, e.AddLoRA(ctx, policy), "a load without LoadInplace")
			reload := policy
			reload.LoadInplace = true
			require.NoError(t, e.AddLoRA(ctx, reload))
			after := add(t, e, "after", pauseLong, p)

			got := tokensOf(engine.Delta, drain(t, before))
			old, fresh := wantRev(pauseLong, 3, 0, 12), wantRev(pauseLong, 3, 1, 12)
			k := 0
			for k < len(got) && got[k] == old[k] {
				k++
			}
			assert.Positive(t, k, "seed %d: the first tokens are the old weights'", seed)
			assert.Less(t, k, 12, "seed %d: the last are the new weights'", seed)
			assert.Equal(t, fresh[k:], got[k:], "seed %d: from token %d on, the new weights'", seed, k)
			assert.Equal(t, fresh, tokensOf(engine.Delta, drain(t, after)), "seed %d: a request after the load", seed)
			return nil
		})
		require.NoError(t, res.Err, "seed %d", seed)
	}
}

// TestAddLoRARefusesWhatItCannotDo: a load with LoRA off, of an adapter
// named wrongly, while the weights sleep, or after Close, fails with what
// was wrong.
func TestAddLoRARefusesWhatItCannotDo(t *testing.T) {
	ctx := context.Background()
	off := newEngine(t, task.Real(), engine.Config{})
	err := off.AddLoRA(ctx, engine.LoRARequest{Name: "policy", ID: 1, LoadInplace: true})
	assert.ErrorIs(t, err, engine.ErrInvalidRequest)
	assert.ErrorContains(t, err, "LoRA is not enabled")

	e := newEngine(t, task.Real(), engine.Config{EnableLoRA: true})
	assert.ErrorContains(t, e.AddLoRA(ctx, engine.LoRARequest{Name: "policy"}), "ids run from 1 to 2147483647")
	assert.ErrorContains(t, e.AddLoRA(ctx, engine.LoRARequest{ID: 1}), "LoRA adapter 1 has no name")
	require.NoError(t, e.Sleep(ctx, engine.SleepOptions{Level: 1}))
	err = e.AddLoRA(ctx, engine.LoRARequest{Name: "policy", ID: 1, LoadInplace: true})
	assert.ErrorIs(t, err, engine.ErrAsleep)
	assert.ErrorIs(t, err, core.ErrWeightsAsleep)
	assert.ErrorContains(t, err, `AddLoRA("policy") refused`)
	require.NoError(t, e.WakeUp(ctx, engine.WakeWeights))
	require.NoError(t, e.AddLoRA(ctx, engine.LoRARequest{Name: "policy", ID: 1, LoadInplace: true}), "between the staged wake-up's halves")
	require.NoError(t, e.WakeUp(ctx))
	require.NoError(t, e.Close())
	assert.ErrorIs(t, e.AddLoRA(ctx, engine.LoRARequest{Name: "policy", ID: 1}), engine.ErrClosed)
}

// TestReloadsOnTheRealRuntime: on goroutines, a trainer loads adapters'
// new weights in place, over and over, while clients of three adapters
// stream into two slots with prefix caching: every load succeeds, every
// request ends, and the checker (newEngine's), following the revisions,
// finds every token its revision's, under the race detector too.
func TestReloadsOnTheRealRuntime(t *testing.T) {
	for _, async := range []bool{false, true} {
		e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime, AsyncScheduling: async, EnableLoRA: true, MaxLoRAs: 2, EnablePrefixCaching: true, BlockSize: 4})
		ctx := context.Background()
		var clients, trainer sync.WaitGroup
		var stop atomic.Bool
		reloads := 0
		trainer.Go(func() {
			for i := 0; !stop.Load(); i++ {
				id := 1 + i%3
				assert.NoError(t, e.AddLoRA(ctx, engine.LoRARequest{Name: fmt.Sprintf("adapter-%d", id), ID: id, LoadInplace: true}))
				reloads++
			}
		})
		for c := range 8 {
			clients.Go(func() {
				for k := range 15 {
					id := 1 + (c+k)%3
					r := add(t, e, fmt.Sprintf("c%d-%d", c, k), pauseLong, engine.Params{MaxTokens: 1 + k%6, IgnoreEOS: true, Output: engine.Delta,
						LoRA: &engine.LoRARequest{Name: fmt.Sprintf("adapter-%d", id), ID: id}})
					assert.Len(t, tokensOf(engine.Delta, drain(t, r)), 1+k%6)
				}
			})
		}
		clients.Wait()
		stop.Store(true)
		trainer.Wait()
		t.Logf("async=%v: %d reloads", async, reloads)
		require.NoError(t, e.Close())
	}
}

// TestAPinnedAdapterNeverWaits: under the simulator, with two slots and
// adapter 9 pinned, requests of adapters 1 to 3 share the one slot left
// and wait for it in every run, while adapter 9's requests never wait;
// every request gets its adapter's tokens and the checker, which counts
// the pinned slot among each step's, finds every property held. With
// core/lora-pin-ignores-slots, vLLM's, the scheduler gives the pinned
// slot away and the checker catches a step over the slots.
func TestAPinnedAdapterNeverWaits(t *testing.T) {
	run := func(seed uint64, faults string) (*props.Checker, error) {
		cfg := engine.Config{EnableLoRA: true, MaxLoRAs: 2, MaxCPULoRAs: 3, EnablePrefixCaching: true, BlockSize: 4}
		if faults != "" {
			cfg.Faults = rttest.Armed(t, faults)
		}
		return checkedRun(t, seed, nil, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			ctx := context.Background()
			hot := engine.LoRARequest{Name: "hot", ID: 9}
			require.NoError(t, e.AddLoRA(ctx, hot))
			pinned, err := e.PinLoRA(ctx, 9)
			require.NoError(t, err)
			require.True(t, pinned)
			g := task.NewGroup(rt, "clients")
			for i := range 12 {
				lora := []int{1, 2, 3, 9}[i%4]
				g.Go("client-"+strconv.Itoa(i), func() {
					rt.Sleep(time.Duration(i/4) * time.Millisecond)
					p := engine.Params{MaxTokens: 3 + i%4, IgnoreEOS: true, Output: engine.Delta, LoRA: &engine.LoRARequest{Name: fmt.Sprintf("adapter-%d", lora), ID: lora}}
					r, err := e.AddRequest(strconv.Itoa(i), pauseLong, p)
					if err != nil {
						return
					}
					outs, err := readAll(r)
					if err != nil {
						return // the engine died
					}
					assert.Equal(t, wantLoRA(pauseLong, lora, p.MaxTokens), tokensOf(engine.Delta, outs), "seed %d request %d (adapter %d)", seed, i, lora)
				})
			}
			g.Wait()
			loaded, err := e.ListLoRAs(ctx)
			if err == nil {
				assert.Contains(t, loaded, 9, "a pinned adapter stays loaded")
				assert.LessOrEqual(t, len(loaded), 3)
			}
		})
	}
	for seed := uint64(1); seed <= 8; seed++ {
		c, err := run(seed, "")
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
		require.True(t, c.Reached().Has(props.LoRAWaitedForASlot), "seed %d: adapters 1 to 3 wait for the one slot left", seed)
	}
	caught := 0
	for seed := uint64(1); seed <= 8; seed++ {
		c, err := run(seed, "core/lora-pin-ignores-slots=return")
		require.NoError(t, err, "seed %d", seed)
		var v *props.Violation
		if errors.As(c.Finish(), &v) && v.Property == props.LoRASlotsSuffice {
			caught++
		}
	}
	assert.Positive(t, caught, "the pinned slot given away is a step over the slots")
}

// TestLoRACallsRefuseWhatTheyCannotDo: PinLoRA, RemoveLoRA and ListLoRAs
// with LoRA off, an id out of range, a pin of an adapter not loaded or
// with no slot to spare, and a closed engine, each refused with what was
// wrong; a removal of an adapter not loaded says so.
func TestLoRACallsRefuseWhatTheyCannotDo(t *testing.T) {
	ctx := context.Background()
	off := newEngine(t, task.Real(), engine.Config{})
	_, err := off.PinLoRA(ctx, 1)
	assert.ErrorIs(t, err, engine.ErrInvalidRequest)
	assert.ErrorContains(t, err, "PinLoRA: LoRA is not enabled")
	_, err = off.ListLoRAs(ctx)
	assert.ErrorContains(t, err, "ListLoRAs: LoRA is not enabled")

	one := newEngine(t, task.Real(), engine.Config{EnableLoRA: true})
	_, err = one.RemoveLoRA(ctx, 0)
	assert.EqualError(t, err, "engine: invalid request: RemoveLoRA(0): LoRA adapter ids run from 1 to 2147483647")
	_, err = one.PinLoRA(ctx, 4)
	assert.ErrorIs(t, err, engine.ErrInvalidRequest)
	assert.ErrorIs(t, err, core.ErrLoRANotLoaded)
	require.NoError(t, one.AddLoRA(ctx, engine.LoRARequest{Name: "sql", ID: 4}))
	pinned, err := one.PinLoRA(ctx, 4)
	assert.False(t, pinned)
	assert.ErrorIs(t, err, core.ErrLoRAPinSlot, "one slot: a pin would leave none to the others")
	loaded, err := one.ListLoRAs(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int{4}, loaded)
	removed, err := one.RemoveLoRA(ctx, 4)
	require.NoError(t, err)
	assert.True(t, removed)
	removed, err = one.RemoveLoRA(ctx, 4)
	require.NoError(t, err)
	assert.False(t, removed, "not loaded any more")
	loaded, err = one.ListLoRAs(ctx)
	require.NoError(t, err)
	assert.Empty(t, loaded)
	require.NoError(t, one.Close())
	_, err = one.ListLoRAs(ctx)
	assert.ErrorIs(t, err, engine.ErrClosed)
}
