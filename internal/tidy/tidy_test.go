package tidy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/tidy"
)

// TestEnginePackagesAreTidy is the rule itself: core/ and engine/ use the
// task and clock seam for time, concurrency and randomness.
func TestEnginePackagesAreTidy(t *testing.T) {
	for _, dir := range []string{"../../core", "../../engine"} {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			continue
		}
		findings, err := tidy.Check(dir)
		require.NoError(t, err)
		for _, f := range findings {
			t.Error(f)
		}
	}
}

func TestCheckCatchesEveryBanWithItsReplacement(t *testing.T) {
	dir := t.TempDir()
	src := `package bad

import (
	"math/rand"
	r2 "math/rand/v2"
	"runtime"
	"sync"
	"time"
)

type S struct {
	mu sync.Mutex
	c  *sync.Cond
	wg sync.WaitGroup
	ch chan int
}

func F(s *S) {
	_ = time.Now()
	time.Sleep(time.Second)
	<-time.After(time.Second)
	_ = time.NewTimer(time.Second)
	time.AfterFunc(time.Second, func() {})
	go F(s)
	select {}
	runtime.Gosched()
	_ = rand.Intn(3)
	_ = r2.IntN(3)
	_ = r2.New(r2.NewPCG(1, 2))
	s.ch <- 1
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad_test.go"), []byte("package bad\nfunc init() { go func() {}() }\n"), 0o644))
	findings, err := tidy.Check(dir)
	require.NoError(t, err)
	var got []string
	for _, f := range findings {
		got = append(got, f.String())
		assert.NotContains(t, f.Pos.Filename, "_test.go", "test files are exempt")
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`import "math/rand" is banned here; use rand.New(rand.NewPCG(seed, stream))`,
		"sync.Mutex is banned here; use rt.NewMutex(name)",
		"sync.Cond is banned here; use rt.NewCond(m)",
		"sync.WaitGroup is banned here; use task.NewGroup(rt, name)",
		"a channel is banned here; use task.Queue",
		"time.Now is banned here; use the clock: rt.Now()",
		"time.Sleep is banned here; use rt.Sleep(d)",
		"time.After is banned here",
		"time.NewTimer is banned here",
		"time.AfterFunc is banned here; use rt.AfterFunc(d, f)",
		"the go statement is banned here; use rt.Go(name, fn)",
		"select is banned here",
		"runtime.Gosched is banned here; use rt.Yield(point)",
		"math/rand/v2.IntN (global randomness) is banned here",
		"a channel receive is banned here",
		"a channel send is banned here; use task.Queue.Put",
	} {
		assert.Contains(t, all, want)
	}
	assert.NotContains(t, all, "NewPCG (global", "seeded generators are allowed")
	assert.NotContains(t, all, "r2.New ", "seeded generators are allowed")
}

// TestCheckCatchesWallClockDeadlinesAndOSRandomness: a context deadline is
// the wall clock by another name (it fires on real time, which the
// simulator cannot see or replay), and crypto/rand is randomness no seed
// reproduces.
func TestCheckCatchesWallClockDeadlinesAndOSRandomness(t *testing.T) {
	dir := t.TempDir()
	src := `package bad

import (
	"context"
	crand "crypto/rand"
	"time"
)

func F(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, cancel2 := context.WithDeadline(ctx, time.Time{})
	defer cancel2()
	_, cancel3 := context.WithCancel(ctx)
	defer cancel3()
	_ = crand.Text()
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.go"), []byte(src), 0o644))
	findings, err := tidy.Check(dir)
	require.NoError(t, err)
	var got []string
	for _, f := range findings {
		got = append(got, f.String())
	}
	all := strings.Join(got, "\n")
	assert.Contains(t, all, "context.WithTimeout is banned here")
	assert.Contains(t, all, "context.WithDeadline is banned here")
	assert.Contains(t, all, `import "crypto/rand" is banned here`)
	assert.NotContains(t, all, "context.WithCancel is banned", "a cancel a task calls is deterministic")
	assert.Len(t, findings, 3)
}
