package props_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
)

// TestPrefixCachingPassesTheCheckerOnTheRealRuntime: prefix caching on
// goroutines, in a cache small enough that requests are preempted and
// cached blocks evicted and handed out again, with clients that share a
// system prompt, reuse their ids, abort and cancel: no property breaks, the
// cache is hit, and every request ends. Under make test it runs with the
// race detector. The same workload with the planted eviction bug breaks
// the model-token property: the model reads the KV it is given, so a block
// handed over wrongly shows as a token that is not the model's.
func TestPrefixCachingPassesTheCheckerOnTheRealRuntime(t *testing.T) {
	c, st := prefixCachingWorkload(t, nil)
	require.NoError(t, c.Finish())
	assert.Empty(t, c.Violations())
	s := c.Summary()
	assert.Equal(t, 24, s.Requests)
	assert.Equal(t, 24, s.Finished, "every request finished")
	assert.Positive(t, st.PrefixCacheHits, "the shared system prompt is found cached")
	assert.Zero(t, st.KVUsedBlocks, "nothing holds a block once the core is idle")

	bug := rttest.Armed(t, "core/kv-keep-evicted-hash=return")
	c, _ = prefixCachingWorkload(t, bug)
	var v *props.Violation
	require.ErrorAs(t, c.Finish(), &v, "the planted bug goes unseen")
	assert.Equal(t, props.ModelTokens, v.Property)
}

// prefixCachingWorkload runs four clients of six requests each on an engine
// with prefix caching and a small cache, the checker on every event, and
// returns the checker and the engine's stats once the core is idle.
func prefixCachingWorkload(t *testing.T, faults *failpoints.Set) (*props.Checker, engine.Stats) {
	c := props.NewChecker(core.ToyModel{})
	c.SetModelLen(core.DefaultMaxModelLen)
	e, err := engine.New(engine.Config{Observer: c.Locked(), StepTime: 50 * time.Microsecond,
		EnablePrefixCaching: true, BlockSize: 2, NumBlocks: 40, Faults: faults})
	require.NoError(t, err)
	const system = "you are a helpful assistant who answers in few words "
	questions := []string{"what is the sea", "why is the sun hot", "how far is the moon from the earth"}
	kinds := []engine.OutputKind{engine.Cumulative, engine.Delta, engine.FinalOnly}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for client := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("client-", client)
			for round := range 6 {
				p := engine.Params{MaxTokens: 4 + 3*round, Output: kinds[(client+round)%len(kinds)], N: 1 + round%2}
				r, err := e.AddRequest(id, system+questions[(client+round)%len(questions)], p)
				if err != nil {
					errs <- fmt.Errorf("%s round %d: %w", id, round, err)
					return
				}
				switch round % 3 {
				case 1:
					if _, err := r.Next(); err != nil {
						errs <- fmt.Errorf("%s round %d: %w", id, round, err)
						return
					}
					e.Abort(id) // reused at once in the next round
				case 2:
					r.Cancel()
				}
				outs, err := drainAll(r)
				if err != nil {
					errs <- fmt.Errorf("%s round %d: %w", id, round, err)
					return
				}
				if round%3 == 0 && (len(outs) == 0 || !outs[len(outs)-1].Finished) {
					errs <- fmt.Errorf("%s round %d: no finished output", id, round)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NoError(t, e.WaitIdle(context.Background()))
	st := e.Stats()
	require.NoError(t, e.Close())
	return c, st
}
