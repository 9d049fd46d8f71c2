package stacks

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFindStuckPicksTheRunnersTask: two workers each run a task; worker
// 10's (goroutine 31, started by its task 20) is stuck on a lock. Worker
// 11's task is running too, and a parked task of worker 10 is in the
// simulator.
func TestFindStuckPicksTheRunnersTask(t *testing.T) {
	dump := []byte(`goroutine 1 [chan receive]:
main.main()
	/x/main.go:1 +0x1

goroutine 20 [coroutine]:
github.com/llmdst/llmdst/sim.(*sched).stop(0xc0, 0x1)
	/x/sim/sched.go:1 +0x1
github.com/llmdst/llmdst/sim.(*sched).body(0xc0, 0xc1)
	/x/sim/sched.go:2 +0x1
created by iter.Pull[...] in goroutine 10
	/go/iter.go:1 +0x1

goroutine 41 [runnable]:
other.busy()
	/x/other.go:1 +0x1
github.com/llmdst/llmdst/sim.(*sched).body(0xc0, 0xc1)
	/x/sim/sched.go:2 +0x1
created by iter.Pull[...] in goroutine 11
	/go/iter.go:1 +0x1

goroutine 31 [sync.Mutex.Lock, 3 minutes]:
internal/sync.runtime_SemacquireMutex(0x1)
	/go/rt.go:1 +0x1
sync.(*Mutex).Lock(...)
	/go/mutex.go:1
example.(*Core).step(0xc0)
	/x/core.go:9 +0x1
github.com/llmdst/llmdst/sim.(*sched).body(0xc0, 0xc1)
	/x/sim/sched.go:2 +0x1
created by iter.Pull[...] in goroutine 20
	/go/iter.go:1 +0x1

goroutine 10 [coroutine]:
main.worker()
	/x/sweep.go:1 +0x1
created by main.sweep in goroutine 1
	/x/sweep.go:2 +0x1

goroutine 11 [coroutine]:
main.worker()
	/x/sweep.go:1 +0x1
created by main.sweep in goroutine 1
	/x/sweep.go:2 +0x1
`)
	s, ok := FindStuck(dump, 10)
	require.True(t, ok)
	assert.Equal(t, "sync.Mutex.Lock", s.Status)
	assert.False(t, s.Spinning())
	assert.Equal(t, "example.(*Core).step", s.Func)
	assert.True(t, strings.HasPrefix(s.Stack, "goroutine 31 ["), s.Stack)

	s, ok = FindStuck(dump, 11)
	require.True(t, ok)
	assert.True(t, s.Spinning())
	assert.Equal(t, "other.busy", s.Func)

	_, ok = FindStuck([]byte("goroutine 1 [running]:\nmain.main()\n\t/x:1\n"), 99)
	assert.False(t, ok, "no task in the dump")
}

// TestFindStuckTakesATaskWhoseCreatorHasEnded: a pool goroutine whose
// creator is gone cannot be traced to any runner; it is still named, when
// nothing traced to the runner is stuck.
func TestFindStuckTakesATaskWhoseCreatorHasEnded(t *testing.T) {
	dump := []byte(`goroutine 7 [runnable]:
pkg.loop()
	/x/pkg.go:3 +0x1
github.com/llmdst/llmdst/sim.(*sched).body(0xc0, 0xc1)
	/x/sim/sched.go:2 +0x1
created by iter.Pull[...] in goroutine 5
	/go/iter.go:1 +0x1
`)
	s, ok := FindStuck(dump, 3)
	require.True(t, ok)
	assert.Equal(t, "pkg.loop", s.Func)
}

func TestIDIsTheCallersGoroutine(t *testing.T) {
	ids := make(chan uint64, 2)
	ids <- ID()
	go func() { ids <- ID() }()
	a, b := <-ids, <-ids
	assert.Positive(t, a)
	assert.Positive(t, b)
	assert.NotEqual(t, a, b)
	assert.Contains(t, string(All()), "goroutine "+strconv.FormatUint(a, 10)+" [running]:", "All shows the caller, running")
}
