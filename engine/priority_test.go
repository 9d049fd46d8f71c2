package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/task"
)

// TestPriorityNeedsThePriorityPolicy: as vLLM, a priority other than 0 is
// refused unless the engine schedules by priority — it would not be
// honoured — before anything is registered; under PolicyPriority any
// priority runs.
func TestPriorityNeedsThePriorityPolicy(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{})
		defer e.Close()
		for _, p := range []engine.Params{{MaxTokens: 2, Priority: 3}, {MaxTokens: 2, Priority: -1, N: 2}} {
			_, err := e.AddRequest("r", "hello", p)
			require.ErrorIs(t, err, engine.ErrInvalidRequest)
			assert.EqualError(t, err, fmt.Sprintf("engine: invalid request: Priority %d needs the priority scheduling policy, "+
				"but the engine's SchedulingPolicy is fcfs: set Config.SchedulingPolicy to PolicyPriority, or leave Priority 0", p.Priority))
		}
		_, err := e.AddRequest("r", "", engine.Params{MaxTokens: 2, Priority: 1})
		assert.ErrorContains(t, err, "Priority 1 needs the priority scheduling policy", "judged before the prompt, as vLLM does")
		assert.False(t, e.HasUnfinishedRequests(), "a refused request leaves nothing behind")
		assert.Equal(t, want("hello", 2), tokensOf(engine.Cumulative, drain(t, add(t, e, "r", "hello", engine.Params{MaxTokens: 2}))), "priority 0 is FCFS's")

		p := newEngine(t, rt, engine.Config{SchedulingPolicy: engine.PolicyPriority})
		defer p.Close()
		for i, prio := range []int{-7, 0, 3} {
			r := add(t, p, fmt.Sprint("r", i), "hello", engine.Params{MaxTokens: 3, Priority: prio})
			assert.Equal(t, want("hello", 3), tokensOf(engine.Cumulative, drain(t, r)))
		}
	})
	e, err := engine.New(engine.Config{SchedulingPolicy: 9})
	assert.Nil(t, e)
	assert.EqualError(t, err, "core: unknown SchedulingPolicy 9: want PolicyFCFS or PolicyPriority")
}

// lockedChecker is a props.Checker that the engine's tasks may feed at
// once on the real runtime.
type lockedChecker struct {
	mu sync.Mutex
	c  *props.Checker
}

func (l *lockedChecker) observe(ev engine.Event) {
	l.mu.Lock()
	l.c.Observe(ev)
	l.mu.Unlock()
}

// TestPriorityPreemptsTheLeastUrgentUnderKVPressure: a long request of two
// sequences and priority 5 runs first; three short ones of the default
// priority 0 join it. The cache, 20 usable blocks of 4 tokens (21, the
// null block aside), holds the three
// short ones at their end (6 blocks each) but not a long sequence (11)
// beside them. The priority policy preempts only the long request's
// sequences — both inherit its priority: a sequence of priority 0 would
// come before the short ones, which arrived later — while FCFS preempts
// the newest, the short ones. Every request still gets exactly its
// tokens, and the property checker finds nothing wrong.
func TestPriorityPreemptsTheLeastUrgentUnderKVPressure(t *testing.T) {
	const longTokens, shortTokens = 40, 20
	for _, policy := range []engine.SchedulingPolicy{engine.PolicyPriority, engine.PolicyFCFS} {
		t.Run(policy.String(), func(t *testing.T) {
			rttest.Both(t, func(t *testing.T, rt task.Runtime) {
				check := &lockedChecker{c: props.NewChecker(core.ToyModel{})}
				check.c.SetModelLen(core.DefaultMaxModelLen)
				var mu sync.Mutex
				var preempted []string
				e := newEngine(t, rt, engine.Config{BlockSize: 4, NumBlocks: 21, SchedulingPolicy: policy, Observer: func(ev engine.Event) {
					check.observe(ev)
					if ev.Kind == core.EventPreempt {
						mu.Lock()
						preempted = append(preempted, ev.InternalID)
						mu.Unlock()
					}
				}})
				low := 5
				if policy == engine.PolicyFCFS {
					low = 0
				}
				long := add(t, e, "long", "hello", engine.Params{MaxTokens: longTokens, N: 2, Output: engine.Delta, Priority: low})
				first, err := long.Next()
				require.NoError(t, err)
				prompts := []string{"one", "two words", "three more words"}
				var short []*engine.Request
				for i, prompt := range prompts {
					short = append(short, add(t, e, fmt.Sprint("short", i), prompt, engine.Params{MaxTokens: shortTokens, Output: engine.Delta}))
				}
				for i, r := range short {
					assert.Equal(t, want(prompts[i], shortTokens), tokensOf(engine.Delta, drain(t, r)), "short%d", i)
				}
				seqs := foldCompletions(t, "long", "hello", 2, engine.Delta, append([]engine.Output{first}, drain(t, long)...))
				for j, s := range seqs {
					assert.Equal(t, seqWant("hello", j, longTokens, engine.Params{MaxTokens: longTokens}), s.TokenIDs, "long sequence %d", j)
				}
				require.NoError(t, e.WaitIdle(context.Background()))
				require.NoError(t, e.Close())
				require.NoError(t, check.c.Finish())

				mu.Lock()
				defer mu.Unlock()
				require.NotEmpty(t, preempted, "the cache was meant to run out")
				longSeqs := 0
				for _, id := range preempted {
					if strings.HasSuffix(id, "_"+long.InternalID()) {
						longSeqs++
					}
				}
				if policy == engine.PolicyPriority {
					assert.Equal(t, len(preempted), longSeqs, "only the long request's sequences are preempted: %v", preempted)
				} else {
					assert.Less(t, longSeqs, len(preempted), "FCFS preempts the newest, the short requests: %v", preempted)
				}
			})
		})
	}
}
