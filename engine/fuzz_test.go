package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
)

// FuzzAddRequest: whatever a caller passes, AddRequest either refuses it
// with ErrInvalidRequest or ErrDuplicateRequestID, or accepts a request that
// then ends; it never panics and never hangs.
func FuzzAddRequest(f *testing.F) {
	f.Add("a", "hello", 3, 0, uint8(0), "", 0, false, 0)
	f.Add("", "hello", 1, 0, uint8(1), "", 0, false, 1)
	f.Add("b", "", 1, 0, uint8(2), "x", -1, true, -1)
	f.Add("c", "the quick brown fox", 0, 5, uint8(7), "", 3, false, 2)
	f.Add("d", "hello", 5, 1, uint8(2), "the", 7, false, 3)
	e, err := engine.New(engine.Config{StepTime: engine.NoStepTime, MaxModelLen: 256, BlockSize: 4, NumBlocks: 256})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	f.Fuzz(func(t *testing.T, id, prompt string, maxTokens, minTokens int, kind uint8, stop string, stopToken int, ignoreEOS bool, n int) {
		p := engine.Params{MaxTokens: maxTokens, MinTokens: minTokens, Output: engine.OutputKind(kind), IgnoreEOS: ignoreEOS,
			StopTokenIDs: []int{stopToken}, N: n}
		if n > 4 && n <= engine.MaxN {
			p.N = n % 5 // a few sequences at most: many valid ones only make runs long
		}
		if stop != "" || kind%2 == 0 {
			p.Stop = []string{stop}
		}
		if maxTokens > 300 {
			p.MaxTokens = 300 // a big but valid request is still a valid input; keep runs short
		}
		r, err := e.AddRequest(id, prompt, p)
		if err != nil {
			if !errors.Is(err, engine.ErrInvalidRequest) && !errors.Is(err, engine.ErrDuplicateRequestID) {
				t.Fatalf("AddRequest(%q, %q, %+v): an error that is neither invalid nor duplicate: %v", id, prompt, p, err)
			}
			return
		}
		if kind%3 == 1 {
			r.Cancel()
		}
		for {
			out, err := r.Next()
			if errors.Is(err, io.EOF) {
				t.Fatalf("io.EOF before a finished output")
			}
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if out.Finished {
				return
			}
		}
	})
}

// FuzzAddLoRARequest: whatever adapter a request names, on an engine with
// LoRA on or off, AddRequest either refuses it with ErrInvalidRequest or
// accepts it, and an accepted request ends with its adapter's tokens.
func FuzzAddLoRARequest(f *testing.F) {
	f.Add(true, "sql", 1, 3)
	f.Add(true, "", 2, 1)
	f.Add(true, "chat", 0, 2)
	f.Add(false, "sql", 1, 2)
	f.Add(true, "x", -7, 1)
	on, err := engine.New(engine.Config{StepTime: engine.NoStepTime, EnableLoRA: true, MaxLoRAs: 2, EnablePrefixCaching: true, BlockSize: 4})
	if err != nil {
		f.Fatal(err)
	}
	off, err := engine.New(engine.Config{StepTime: engine.NoStepTime})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { on.Close(); off.Close() })
	f.Fuzz(func(t *testing.T, enabled bool, name string, id, maxTokens int) {
		e := off
		if enabled {
			e = on
		}
		p := engine.Params{MaxTokens: min(maxTokens, 16), IgnoreEOS: true, LoRA: &engine.LoRARequest{Name: name, ID: id}}
		r, err := e.AddRequest("a", "the quick brown fox", p)
		if err != nil {
			if !errors.Is(err, engine.ErrInvalidRequest) {
				t.Fatalf("AddRequest(%+v) on an engine with LoRA %v: an error that is not ErrInvalidRequest: %v", *p.LoRA, enabled, err)
			}
			return
		}
		if !enabled || id < 1 || name == "" {
			t.Fatalf("AddRequest accepted adapter %+v on an engine with LoRA %v", *p.LoRA, enabled)
		}
		var tokens []int
		for {
			out, err := r.Next()
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if out.Finished {
				tokens = out.TokenIDs
				break
			}
		}
		m := core.ToyModel{}
		want := core.TokensFor(m, core.LoRAKey(m.Prepare(core.Tokenizer{}.Encode("the quick brown fox")), id), p.MaxTokens)
		if !slices.Equal(tokens, want) {
			t.Fatalf("adapter %d: tokens %v, want its own %v", id, tokens, want)
		}
	})
}

// FuzzLoRACalls: any sequence of AddLoRA, PinLoRA, RemoveLoRA and
// ListLoRAs calls, each with any id, on an engine with LoRA on or off
// and 1 to 3 slots, gets each call ok or an error that is
// ErrInvalidRequest, never another error or a dead engine; a list holds
// at most the cache and every adapter pinned and not removed since; and
// a request of an adapter afterwards still ends with its own tokens. ops
// is read two bytes a call: the call, and the id (1 to 4, or out of
// range).
func FuzzLoRACalls(f *testing.F) {
	f.Add(true, uint8(2), []byte{0, 1, 1, 1, 3, 0, 2, 1, 3, 0})
	f.Add(true, uint8(1), []byte{0, 2, 1, 2, 2, 2, 1, 9})
	f.Add(false, uint8(1), []byte{1, 1, 3, 0})
	f.Add(true, uint8(3), []byte{0, 1, 0, 2, 0, 3, 1, 1, 1, 2, 1, 3, 0, 4, 3, 0})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, enabled bool, slots uint8, ops []byte) {
		cfg := engine.Config{StepTime: engine.NoStepTime, EnablePrefixCaching: true, BlockSize: 4}
		if enabled {
			cfg.EnableLoRA, cfg.MaxLoRAs = true, 1+int(slots%3)
		}
		e, err := engine.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		pinned := map[int]bool{}
		for i := 0; i+1 < len(ops) && i < 64; i += 2 {
			id := int(ops[i+1]%5) + 1 // 1 to 4, and 5
			if id == 5 {
				id = -int(ops[i+1]) // out of range
			}
			var err error
			switch ops[i] % 4 {
			case 0:
				err = e.AddLoRA(ctx, engine.LoRARequest{Name: fmt.Sprintf("a%d", id), ID: id})
			case 1:
				var ok bool
				if ok, err = e.PinLoRA(ctx, id); ok {
					pinned[id] = true
				}
			case 2:
				var removed bool
				removed, err = e.RemoveLoRA(ctx, id)
				if err == nil && pinned[id] && !removed {
					t.Fatalf("RemoveLoRA(%d) found the pinned adapter not loaded", id)
				}
				delete(pinned, id)
			case 3:
				var loaded []int
				loaded, err = e.ListLoRAs(ctx)
				if err == nil {
					if len(loaded) > cfg.CPULoRAs() {
						t.Fatalf("ListLoRAs: %v, more than the cache's %d", loaded, cfg.CPULoRAs())
					}
					for p := range pinned {
						if !slices.Contains(loaded, p) {
							t.Fatalf("ListLoRAs: %v, without pinned adapter %d", loaded, p)
						}
					}
				}
			}
			if err != nil && !errors.Is(err, engine.ErrInvalidRequest) {
				t.Fatalf("call %d (op %d, id %d), LoRA %v: an error that is not ErrInvalidRequest: %v", i/2, ops[i]%4, id, enabled, err)
			}
		}
		if !enabled {
			return
		}
		for id := 1; id <= 4; id++ {
			p := engine.Params{MaxTokens: 4, IgnoreEOS: true, LoRA: &engine.LoRARequest{Name: fmt.Sprintf("a%d", id), ID: id}}
			r, err := e.AddRequest("a", "the quick brown fox", p)
			if err != nil {
				t.Fatalf("AddRequest of adapter %d: %v", id, err)
			}
			var tokens []int
			for {
				out, err := r.Next()
				if err != nil {
					t.Fatalf("Next of adapter %d: %v", id, err)
				}
				if out.Finished {
					tokens = out.TokenIDs
					break
				}
			}
			m := core.ToyModel{}
			if want := core.TokensFor(m, core.LoRAKey(m.Prepare(core.Tokenizer{}.Encode("the quick brown fox")), id), 4); !slices.Equal(tokens, want) {
				t.Fatalf("adapter %d: tokens %v, want its own %v", id, tokens, want)
			}
		}
	})
}
