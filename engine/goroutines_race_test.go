package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/task"
)

// TestGoroutinesCallingAtOnceKeepTheProperties: on the real runtime, four
// clients add, read, cancel and abort requests on four ids and wait for
// the engine to be idle, while a trainer pauses (each mode) and resumes,
// all at once for a second and a half. Every request ends, and the checker
// newEngine puts on the engine finds no property violated. Before the
// checker held WaitIdle to the inputs sent before it, it called a request
// added meanwhile a violation in every run of this test.
func TestGoroutinesCallingAtOnceKeepTheProperties(t *testing.T) {
	// No step latency: four times the requests of the default 1 ms step
	// in the same time, and the old checker still fails every run.
	e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime})
	deadline := time.Now().Add(1500 * time.Millisecond)
	var added, idles, pauses atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for time.Now().Before(deadline) {
				id := fmt.Sprintf("id%d", r.IntN(4))
				switch r.IntN(5) {
				case 0, 1, 2:
					req, err := e.AddRequest(id, "hello there", engine.Params{MaxTokens: 1 + r.IntN(5), Output: engine.OutputKind(r.IntN(3))})
					if errors.Is(err, engine.ErrDuplicateRequestID) {
						continue // another client's request of that id is live
					}
					if !assert.NoError(t, err) {
						return
					}
					added.Add(1)
					if r.IntN(2) == 0 {
						req.Cancel()
					}
					if _, err := readAll(req); !assert.NoError(t, err, "request %s", id) {
						return
					}
				case 3:
					e.Abort(id)
				case 4:
					assert.NoError(t, e.WaitIdle(context.Background()))
					idles.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(99, 1))
		for time.Now().Before(deadline) {
			assert.NoError(t, e.PauseGeneration(context.Background(), engine.PauseOptions{Mode: engine.PauseMode(r.IntN(3))}))
			pauses.Add(1)
			time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
			assert.NoError(t, e.ResumeGeneration(context.Background()))
			time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
		}
	})
	wg.Wait()
	assert.Positive(t, added.Load())
	assert.Positive(t, idles.Load())
	assert.Positive(t, pauses.Load())
	t.Logf("%d requests, %d WaitIdle, %d pauses", added.Load(), idles.Load(), pauses.Load())
}
