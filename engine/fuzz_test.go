package engine_test

import (
	"errors"
	"io"
	"testing"

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
