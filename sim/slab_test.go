package sim

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/task"
)

func TestSlabHandsOutDistinctZeroedValuesInGrowingArrays(t *testing.T) {
	var b slab[[4]int]
	seen := map[*[4]int]bool{}
	for i := range 8 + 16 + 32 + 64 + 64 + 1 {
		v := b.new()
		require.False(t, seen[v], "value %d handed out twice", i)
		seen[v] = true
		assert.Equal(t, [4]int{}, *v)
		v[0] = i + 1 // what a caller writes stays its own
		switch i {
		case 0, 7:
			assert.Equal(t, 8, b.size, "the first array holds 8")
		case 8:
			assert.Equal(t, 16, b.size, "then 16")
		case 8 + 16 + 32 + 64:
			assert.Equal(t, 64, b.size, "never more than 64")
		}
	}
	assert.Equal(t, 185, b.n)
	for v := range seen {
		assert.Positive(t, v[0], "a later value overwrote an earlier one")
	}

	h := slab[int]{hint: 5}
	h.new()
	assert.Equal(t, 5, h.size, "the first array fits the hint")
	for range 5 {
		h.new()
	}
	assert.Equal(t, 10, h.size)
	big := slab[int]{hint: 1000}
	big.new()
	assert.Equal(t, slabHintMax, big.size, "a hint is bounded")
	for range slabHintMax {
		big.new()
	}
	assert.Equal(t, slabHintMax, big.size, "and an array after it never shrinks")
}

// TestAPoolSizesARunsSlabsByTheRunBefore: a run with a Pool makes room
// for as many tasks, mutexes and conds as the run before took, and the
// runs' hashes are a run's without a Pool.
func TestAPoolSizesARunsSlabsByTheRunBefore(t *testing.T) {
	prog := func(n int) func(rt task.Runtime) error {
		return func(rt task.Runtime) error {
			g := task.NewGroup(rt, "g") // a mutex and a cond
			for i := range n {
				q := task.NewQueue[int](rt, task.QueueName(fmt.Sprintf("q%d", i))) // a mutex and a cond each
				g.Go(fmt.Sprintf("t%d", i), func() {
					q.Put(i)
					q.Get()
				})
			}
			g.Wait()
			return nil
		}
	}
	pool := NewPool()
	defer pool.Close()
	for _, n := range []int{3, 20, 2} {
		plain := Run(Options{Seed: 1, Strategy: Chaos()}, prog(n))
		pooled := Run(Options{Seed: 1, Strategy: Chaos(), Pool: pool}, prog(n))
		require.NoError(t, pooled.Err)
		assert.Equal(t, plain.TraceHash, pooled.TraceHash, "%d tasks", n)
		assert.Equal(t, [3]int{n + 1, n + 1, n + 1}, pool.slabs, "main and n tasks; the group's and n queues' mutexes and conds")
		// The next run makes room for as many at once.
		next := newSched(&Options{Seed: 2, Pool: pool}, NewPCGChooser(2, StreamStrategy))
		for _, b := range []interface{ firstSize() int }{&next.taskSlab, &next.mutexSlab, &next.condSlab} {
			assert.Equal(t, n+1, b.firstSize(), "%d tasks: the next run's first array", n)
		}
		assert.Equal(t, n+1, cap(next.tasks), "and its list of tasks")
	}
	fresh := newSched(&Options{Seed: 2}, NewPCGChooser(2, StreamStrategy))
	assert.Equal(t, 8, fresh.taskSlab.firstSize(), "without a Pool, 8")
	assert.Equal(t, "q1.lock", pool.lockPoint("q1"))
	assert.Same(t, unsafe.StringData(pool.lockPoint("q1")), unsafe.StringData(pool.lockPoint("q1")), "a name's lock point is made once")
}

// firstSize makes b's first array, as its first value does, and returns
// its length.
func (b *slab[T]) firstSize() int {
	b.new()
	return b.size
}
