package core_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// loraReq is a request of adapter lora.
func loraReq(id string, lora int, prompt []int, maxTokens int) *core.Request {
	r := req(id, prompt, core.SamplingParams{MaxTokens: maxTokens})
	r.LoRA = lora
	return r
}

// adapters returns the distinct adapters so's batch uses.
func adapters(so *core.SchedulerOutput) []int {
	var ls []int
	for _, sc := range so.Scheduled {
		if l := sc.Req.LoRA; l != 0 && !slices.Contains(ls, l) {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestALoRARequestWaitsForASlot: with one LoRA slot taken by a running
// request of adapter 1, a waiting request of adapter 2 is held back, told
// once, while the requests behind it — of adapter 1 and of the base model
// — are admitted; it keeps its place and runs once the slot frees. No
// step's batch uses more than one adapter, and every request samples its
// own adapter's tokens. With core/lora-limit-forgets-running the adapter
// of the running request is not counted, and adapter 2 joins it.
func TestALoRARequestWaitsForASlot(t *testing.T) {
	for _, bug := range []bool{false, true} {
		cfg := core.Config{MaxLoRAs: 1}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreLoRALimitForgetsRunning.Name+"=return")
		}
		s := newSched(cfg)
		a := loraReq("a", 1, seq(1, 4), 6)
		require.NoError(t, s.AddRequest(a))
		stepChecked(t, s)
		b, c, d := loraReq("b", 2, seq(20, 4), 3), loraReq("c", 1, seq(40, 4), 2), loraReq("d", 0, seq(60, 4), 2)
		for _, r := range []*core.Request{b, c, d} {
			require.NoError(t, s.AddRequest(r))
		}
		so := stepChecked(t, s)
		if bug {
			assert.Positive(t, scheduledTokens(so, b), "the bug admits adapter 2 beside the running adapter 1")
			assert.Equal(t, []int{1, 2}, adapters(so))
			continue
		}
		assert.Equal(t, -1, scheduledTokens(so, b), "adapter 2 waits: the one slot is adapter 1's")
		assert.Equal(t, []*core.Request{b}, so.LoRAWaiting)
		assert.Equal(t, []int{1}, so.LoRAs)
		assert.Positive(t, scheduledTokens(so, c), "adapter 1's request behind it runs in the taken slot")
		assert.Positive(t, scheduledTokens(so, d), "the base model's request needs no slot")
		so = stepChecked(t, s)
		assert.Empty(t, so.LoRAWaiting, "a request held back is told once a wait")
		got := map[string][]int{}
		for steps := 0; s.HasRequests(); steps++ {
			require.Less(t, steps, 100)
			so := s.Schedule()
			assert.LessOrEqual(t, len(adapters(so)), 1, "a step's batch uses at most MaxLoRAs adapters")
			for _, f := range s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{})) {
				got[f.InternalID] = append(got[f.InternalID], f.NewTokens...)
			}
		}
		assert.Equal(t, sampled(b, 3), got["b"], "b ran once adapter 1's requests ended")
		assert.Equal(t, sampled(a, 6)[3:], got["a"])
	}
}

// TestEachAdapterHasItsOwnTokensAndCache: the same prompt gives each
// adapter, and the base model, tokens of its own (core.LoRAKey), and with
// prefix caching a request finds only its own adapter's blocks. With
// core/prefix-cache-ignores-lora adapter 2 takes adapter 1's blocks and
// samples garbage from KV its weights never wrote.
func TestEachAdapterHasItsOwnTokensAndCache(t *testing.T) {
	for _, bug := range []bool{false, true} {
		cfg := core.Config{MaxLoRAs: 2, BlockSize: 4, EnablePrefixCaching: true}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CorePrefixCacheIgnoresLoRA.Name+"=return")
		}
		s := newSched(cfg)
		prompt := seq(1, 9)
		tokens := map[string][]int{}
		cached := map[string]int{}
		for _, r := range []*core.Request{loraReq("a", 1, prompt, 4), loraReq("b", 2, prompt, 4), loraReq("c", 1, prompt, 4), loraReq("d", 0, prompt, 4)} {
			require.NoError(t, s.AddRequest(r))
			for s.HasRequests() {
				so := stepChecked(t, s)
				for _, sc := range so.Scheduled {
					cached[sc.Req.InternalID] += sc.Cached
				}
			}
			tokens[r.InternalID] = r.Output
			if !bug || r.InternalID == "a" || r.InternalID == "c" {
				assert.Equal(t, sampled(r, 4), r.Output, "%s samples its adapter's tokens", r.InternalID)
			}
		}
		if bug {
			assert.Equal(t, 8, cached["b"], "the bug gives adapter 2 adapter 1's blocks")
			assert.Equal(t, 8, cached["d"], "and the base model too")
			assert.NotEqual(t, sampled(loraReq("d", 0, prompt, 4), 4), tokens["d"])
			assert.NotEqual(t, sampled(loraReq("b", 2, prompt, 4), 4), tokens["b"], "and it samples from KV adapter 1 wrote")
			continue
		}
		assert.NotEqual(t, tokens["a"], tokens["b"], "two adapters, two answers")
		assert.NotEqual(t, tokens["a"], tokens["d"], "an adapter's answer is not the base model's")
		assert.Equal(t, tokens["a"], tokens["c"])
		assert.Equal(t, map[string]int{"a": 0, "b": 0, "c": 8, "d": 0}, cached, "only adapter 1's second request finds its blocks")
	}
}

// TestTheExecutorCountsTheBatchsAdapters: the core tells each step's
// adapters and each request held back for a slot, once; a batch of more
// adapters than the slots is the model's death, with vLLM's worker's
// words; a request with an adapter is refused while LoRA is off.
func TestTheExecutorCountsTheBatchsAdapters(t *testing.T) {
	feed := func(rt task.Runtime, c *core.EngineCore) {
		for i, l := range []int{1, 2, 1} {
			c.Send(core.Input{Kind: core.InputAdd, Req: loraIncarnation(i+1, l)})
		}
		rt.Go("stopper", func() {
			rt.Sleep(time.Second) // every request ends well before
			c.Send(core.Input{Kind: core.InputShutdown})
		})
	}
	for _, bug := range []bool{false, true} {
		var steps, waits []core.Event
		cfg := core.Config{MaxLoRAs: 1, Observer: func(ev core.Event) {
			switch ev.Kind {
			case core.EventStep:
				steps = append(steps, ev)
			case core.EventLoRAWait:
				waits = append(waits, ev)
			}
		}}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreLoRALimitForgetsRunning.Name+"=return")
		}
		outs := drive(t, cfg, feed)
		require.NotEmpty(t, steps)
		if bug {
			assert.Equal(t, 2, steps[len(steps)-1].LoRA, "the last step's batch asked for both adapters")
			assert.ErrorContains(t, outs[len(outs)-1].Dead, "Number of requested LoRAs (2) is greater than the number of GPU LoRA slots (1)")
			continue
		}
		for _, ev := range steps {
			assert.Equal(t, 1, ev.LoRA, "step %d", ev.Step)
		}
		require.Len(t, waits, 1, "adapter 2 is held back once")
		assert.Equal(t, 2, waits[0].LoRA)
		assert.Equal(t, 1, waits[0].Held)
		assert.Nil(t, outs[len(outs)-1].Dead)
	}

	var rejected []core.Event
	outs := drive(t, core.Config{Observer: func(ev core.Event) {
		if ev.Kind == core.EventCoreReject {
			rejected = append(rejected, ev)
		}
	}}, func(rt task.Runtime, c *core.EngineCore) {
		c.Send(core.Input{Kind: core.InputAdd, Req: loraIncarnation(1, 3)})
		c.Send(core.Input{Kind: core.InputShutdown})
	})
	require.Len(t, rejected, 1)
	assert.ErrorContains(t, rejected[0].Err, "asks for LoRA adapter 3, but LoRA is off")
	fs := frames(outs)
	require.Len(t, fs, 1)
	assert.Equal(t, core.FinishError, fs[0].Reason)
}

// loraIncarnation is incarnation n of a request of adapter lora.
func loraIncarnation(n, lora int) *core.Request {
	r := loraReq(string(rune('a'+n-1)), lora, seq(10*n, 4), 3)
	r.Incarnation = uint64(n)
	return r
}

// TestAReloadedAdapterSamplesItsNewWeights: adapter 1's weights loaded in
// place while a request of it runs: it samples its next tokens with the
// new weights, over the KV it computed; a request of it admitted after the
// load, with the same prompt, finds none of the old weights' blocks and
// samples the new weights' tokens from its first; a third finds the
// second's blocks. With core/lora-reload-keeps-prefix-cache (vLLM's keys,
// by the adapter alone) the second takes the old weights' blocks and
// samples garbage.
func TestAReloadedAdapterSamplesItsNewWeights(t *testing.T) {
	for _, bug := range []bool{false, true} {
		cfg := core.Config{MaxLoRAs: 1, BlockSize: 4, EnablePrefixCaching: true}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreLoRAReloadKeepsPrefixCache.Name+"=return")
		}
		s := newSched(cfg)
		prompt := seq(1, 9)
		key := core.LoRAKey(core.ToyModel{}.Prepare(prompt), 1)
		a := loraReq("a", 1, prompt, 6)
		require.NoError(t, s.AddRequest(a))
		for range 3 {
			stepChecked(t, s)
		}
		assert.Equal(t, uint64(1), s.ReloadLoRA(1))
		drainAll(t, s)
		assert.Equal(t, append(core.TokensFor(core.ToyModel{}, key, 3), core.TokensFor(core.ToyModel{}, core.RevisionKey(key, 1), 6)[3:]...), a.Output,
			"three tokens of the old weights, three of the new")

		b := loraReq("b", 1, prompt, 4)
		require.NoError(t, s.AddRequest(b))
		cached := stepChecked(t, s).Scheduled[0].Cached // the output is the scheduler's until its next step
		drainAll(t, s)
		if bug {
			assert.Equal(t, 8, cached, "the bug gives b the old weights' blocks")
			assert.NotEqual(t, core.TokensFor(core.ToyModel{}, core.RevisionKey(key, 1), 4), b.Output, "and b samples from them")
			continue
		}
		assert.Zero(t, cached, "the old weights' blocks are not the new weights'")
		assert.Equal(t, core.TokensFor(core.ToyModel{}, core.RevisionKey(key, 1), 4), b.Output)

		c := loraReq("c", 1, prompt, 4)
		require.NoError(t, s.AddRequest(c))
		cached = stepChecked(t, s).Scheduled[0].Cached
		drainAll(t, s)
		assert.Equal(t, 8, cached, "the new weights' blocks serve a request of them")
		assert.Equal(t, b.Output, c.Output)
	}
}

// TestAPinnedAdapterHoldsItsSlot: with two slots and adapter 3 pinned, a
// request of adapter 1 runs, one of adapter 2 waits (the other slot is
// the pin's, though no request of adapter 3 runs), and one of adapter 3
// runs beside adapter 1 in the pinned slot; adapter 2 runs once adapter
// 1's request ended. With core/lora-pin-ignores-slots (vLLM's) the
// scheduler does not count the pin and admits adapter 2 beside adapter 1:
// with the pinned slot, three of two.
func TestAPinnedAdapterHoldsItsSlot(t *testing.T) {
	for _, bug := range []bool{false, true} {
		cfg := core.Config{MaxLoRAs: 2}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreLoRAPinIgnoresSlots.Name+"=return")
		}
		s := newSched(cfg)
		s.PinLoRA(3)
		a := loraReq("a", 1, seq(1, 4), 6)
		require.NoError(t, s.AddRequest(a))
		stepChecked(t, s)
		b, c := loraReq("b", 2, seq(20, 4), 3), loraReq("c", 3, seq(40, 4), 3)
		require.NoError(t, s.AddRequest(b))
		require.NoError(t, s.AddRequest(c))
		so := stepChecked(t, s)
		if bug {
			assert.Positive(t, scheduledTokens(so, b), "the bug admits adapter 2 into the pinned slot")
			continue
		}
		assert.Equal(t, -1, scheduledTokens(so, b), "adapter 2 waits: one slot is adapter 1's, the other the pin's")
		assert.Equal(t, []int{1, 3}, so.LoRAs)
		assert.Positive(t, scheduledTokens(so, c), "the pinned adapter's request runs in its slot")
		for steps := 0; s.HasRequests(); steps++ {
			require.Less(t, steps, 100)
			so := stepChecked(t, s)
			assert.LessOrEqual(t, len(adapters(so)), 2)
			if slices.Contains(adapters(so), 2) {
				assert.NotContains(t, adapters(so), 1, "adapter 2 runs once adapter 1 is done")
			}
		}
		assert.Equal(t, sampled(b, 3), b.Output)
		assert.True(t, s.UnpinLoRA(3))
		assert.False(t, s.UnpinLoRA(3), "unpinned once")
		assert.Empty(t, s.PinnedLoRAs())
	}
}

// TestTheCoreLoadsPinsAndRemovesAdapters: the executor's cache of
// MaxCPULoRAs adapters over the core's calls. A pin of an adapter not
// loaded is refused; loaded, it is pinned; a second pin, which would
// leave no slot to the others, is refused. Loads beyond the cache unload
// the least recently used adapter not pinned; a removal unloads and
// unpins, and says whether the adapter was loaded; ListLoRAs says what
// is loaded, in order. A step loads its batch's adapters, and counts the
// pinned slot among its own.
func TestTheCoreLoadsPinsAndRemovesAdapters(t *testing.T) {
	call := uint64(0)
	send := func(c *core.EngineCore, kind core.InputKind, lora int32) uint64 {
		call++
		c.Send(core.Input{Kind: kind, LoRA: lora, Call: call})
		return call
	}
	var pinUnloaded, load1, pin1, load2, pin2, list1, load3, load4, list2, remove1, remove1Again, list3, list4 uint64
	l := drivePause(t, core.Config{MaxLoRAs: 2, MaxCPULoRAs: 3}, func(rt task.Runtime, c *core.EngineCore) {
		pinUnloaded = send(c, core.InputPinLoRA, 1)
		load1 = send(c, core.InputLoadLoRA, 1)
		pin1 = send(c, core.InputPinLoRA, 1)
		load2 = send(c, core.InputLoadLoRA, 2)
		pin2 = send(c, core.InputPinLoRA, 2)
		list1 = send(c, core.InputListLoRAs, 0)
		load3 = send(c, core.InputLoadLoRA, 3)
		send(c, core.InputLoadLoRA, 2)         // used again: 3 is the least recently used
		load4 = send(c, core.InputLoadLoRA, 4) // unloads 3: 1 is pinned
		list2 = send(c, core.InputListLoRAs, 0)
		c.Send(core.Input{Kind: core.InputAdd, Req: loraIncarnation(1, 5)}) // loads 5, unloading 2
		rt.Sleep(50 * time.Millisecond)
		list3 = send(c, core.InputListLoRAs, 0)
		remove1 = send(c, core.InputRemoveLoRA, 1)
		remove1Again = send(c, core.InputRemoveLoRA, 1)
		list4 = send(c, core.InputListLoRAs, 0)
		c.Send(core.Input{Kind: core.InputShutdown})
	})
	_, r := l.reply(t, pinUnloaded)
	require.ErrorIs(t, r.Err, core.ErrLoRANotLoaded)
	for _, c := range []uint64{load1, load2, load3, load4} {
		_, r := l.reply(t, c)
		require.NoError(t, r.Err)
	}
	_, r = l.reply(t, pin1)
	require.NoError(t, r.Err)
	require.True(t, r.Done)
	_, r = l.reply(t, pin2)
	require.ErrorIs(t, r.Err, core.ErrLoRAPinSlot, "a second pin of two slots leaves none to the others")
	require.False(t, r.Done)
	for c, want := range map[uint64][]int{list1: {1, 2}, list2: {1, 2, 4}, list3: {1, 4, 5}, list4: {4, 5}} {
		_, r := l.reply(t, c)
		require.Equal(t, want, r.LoRAs, "ListLoRAs, call %d", c)
	}
	_, r = l.reply(t, remove1)
	require.True(t, r.Done, "1 was loaded")
	_, r = l.reply(t, remove1Again)
	require.False(t, r.Done, "and is no more")
	var steps int
	for _, e := range l.events {
		if e.Kind == core.EventStep {
			steps++
			require.Equal(t, 2, e.LoRA, "adapter 5's slot and the pin's")
		}
	}
	require.Positive(t, steps)
	require.Equal(t, sampled(loraIncarnation(1, 5), 3), l.tokens("a"))
}

// TestAPinTakesNoSlotARunningRequestUses: with one slot pins are refused
// outright; with two, a pin of a third adapter while adapters 1 and 2
// run is refused (vLLM pins it and dies at the next step, as
// core/lora-pin-ignores-slots does), and taken once they ended.
func TestAPinTakesNoSlotARunningRequestUses(t *testing.T) {
	refused := drivePause(t, core.Config{MaxLoRAs: 1}, func(rt task.Runtime, c *core.EngineCore) {
		c.Send(core.Input{Kind: core.InputLoadLoRA, LoRA: 1, Call: 1})
		c.Send(core.Input{Kind: core.InputPinLoRA, LoRA: 1, Call: 2})
		c.Send(core.Input{Kind: core.InputShutdown})
	})
	_, r := refused.reply(t, 2)
	require.ErrorIs(t, r.Err, core.ErrLoRAPinSlot, "one slot: a pin would leave none")
	require.ErrorContains(t, r.Err, "it would pin 1 of the 1 slots and leave none to the other adapters")

	b := loraReq("b", 2, seq(20, 4), 8)
	feed := func(rt task.Runtime, c *core.EngineCore) {
		a, b := loraReq("a", 1, seq(10, 4), 8), loraReq("b", 2, seq(20, 4), 8)
		a.Incarnation, b.Incarnation = 1, 2
		for _, r := range []*core.Request{a, b} {
			c.Send(core.Input{Kind: core.InputAdd, Req: r})
		}
		c.Send(core.Input{Kind: core.InputLoadLoRA, LoRA: 3, Call: 1})
		rt.Sleep(3 * time.Millisecond) // 1 and 2 run
		c.Send(core.Input{Kind: core.InputPinLoRA, LoRA: 3, Call: 2})
		rt.Sleep(50 * time.Millisecond) // they ended
		c.Send(core.Input{Kind: core.InputPinLoRA, LoRA: 3, Call: 3})
		c.Send(core.Input{Kind: core.InputShutdown})
	}
	l := drivePause(t, core.Config{MaxLoRAs: 2, MaxCPULoRAs: 3}, feed)
	_, r = l.reply(t, 2)
	require.ErrorIs(t, r.Err, core.ErrLoRAPinSlot, "1 and 2 run in both slots")
	require.ErrorContains(t, r.Err, "with the pins and the running requests' adapters it would need 3 of the 2 slots")
	_, r = l.reply(t, 3)
	require.NoError(t, r.Err)
	require.True(t, r.Done, "pinned once a slot is free")
	require.Equal(t, sampled(b, 8), l.tokens("b"))

	outs := drive(t, core.Config{MaxLoRAs: 2, MaxCPULoRAs: 3, Faults: rttest.Armed(t, failpoints.CoreLoRAPinIgnoresSlots.Name+"=return")}, feed)
	require.NotEmpty(t, outs)
	var pinned bool
	for _, o := range outs {
		pinned = pinned || (o.Reply != nil && o.Reply.Call == 2 && o.Reply.Done)
	}
	require.True(t, pinned, "vLLM pins it")
	require.ErrorContains(t, outs[len(outs)-1].Dead, "All items are pinned, cannot remove oldest from the cache.")
}

// TestARequestPassedOverKeepsItsLoRASlot: with async scheduling and a
// draft a step that the model always rejects, a request of adapter 1 at
// the model's length behind its optimistic tokens has nothing to compute
// at a step (vLLM's num_new_tokens 0) and is passed over, and the
// rejection then takes its tokens back: it runs again. Its slot is kept
// meanwhile, so b, of adapter 2, waits for it to end, and no step uses two
// adapters with one slot. Under core/lora-slot-left-when-passed-over,
// vLLM's scheduled_loras, the step that passes a over admits b, and the
// next step schedules both: two adapters, which vLLM's scheduler asserts
// against and the executor has no slot for.
func TestARequestPassedOverKeepsItsLoRASlot(t *testing.T) {
	for _, bug := range []bool{false, true} {
		cfg := core.Config{MaxLoRAs: 1, AsyncScheduling: true, MaxModelLen: 7,
			NumSpeculativeTokens: 1, Draft: core.DraftModel{Target: core.ToyModel{}, MissOdds: 1}}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreLoRASlotLeftWhenPassedOver.Name+"=return")
		}
		s := newSched(cfg)
		a := loraReq("a", 1, seq(1, 4), 100)
		a.Params.IgnoreEOS = true
		b := loraReq("b", 2, seq(20, 4), 2)
		require.NoError(t, s.AddRequest(a))
		p := &pipeline{s: s}
		p.step()
		require.NoError(t, s.AddRequest(b))
		passedOver, most := 0, 0
		got := map[string][]int{}
		for steps := 0; s.HasRequests() || p.so != nil; steps++ {
			require.Less(t, steps, 100)
			for _, f := range p.step() {
				got[f.InternalID] = append(got[f.InternalID], f.NewTokens...)
			}
			if a.Status == core.StatusRunning && (p.so == nil || scheduledTokens(p.so, a) < 0) {
				passedOver++
			}
			if p.so != nil {
				most = max(most, len(adapters(p.so)))
			}
		}
		assert.Equal(t, 1, passedOver, "bug %v: a step passed a over, running", bug)
		if bug {
			assert.Equal(t, 2, most, "the step after it schedules a beside b")
			continue
		}
		assert.Equal(t, 1, most, "no step uses more adapters than the one slot")
		assert.Equal(t, sampled(a, 3), got["a"], "a ran to the model's length")
		assert.Equal(t, core.StatusFinishedLength, a.Status)
		assert.Equal(t, sampled(b, 2), got["b"], "b ran once a ended")
	}
}

// TestARequestWhoseEndIsInFlightLeavesItsLoRASlot: with async scheduling,
// the step scheduled while a's last token is in flight — its MaxTokens'
// or the model length's — passes a over, and a runs no more: b, of another
// adapter, takes the slot at that step rather than a step later.
func TestARequestWhoseEndIsInFlightLeavesItsLoRASlot(t *testing.T) {
	for _, c := range []struct {
		name              string
		maxTokens, length int
	}{{"max-tokens", 3, 0}, {"model-length", 100, 7}} {
		t.Run(c.name, func(t *testing.T) {
			s := newSched(core.Config{MaxLoRAs: 1, AsyncScheduling: true, MaxModelLen: c.length})
			a := loraReq("a", 1, seq(1, 4), c.maxTokens)
			a.Params.IgnoreEOS = true
			b := loraReq("b", 2, seq(20, 4), 2)
			require.NoError(t, s.AddRequest(a))
			require.NoError(t, s.AddRequest(b))
			p := &pipeline{s: s}
			for step := range 3 { // a's prompt, then a token a step: its last in flight
				p.step()
				require.Positive(t, scheduledTokens(p.so, a), "step %d", step)
				require.Equal(t, -1, scheduledTokens(p.so, b), "step %d: b waits for the slot", step)
			}
			p.step() // scheduled with a's end in flight, which it then applies
			require.NotNil(t, p.so, "a step ran")
			assert.Equal(t, -1, scheduledTokens(p.so, a), "a passed over")
			assert.Positive(t, scheduledTokens(p.so, b), "b runs at the step that passes a over")
			assert.True(t, a.Status.Finished(), "a ended: %v", a.Status)
			p.drain(t)
			assert.Equal(t, core.StatusFinishedLength, b.Status)
		})
	}
}
