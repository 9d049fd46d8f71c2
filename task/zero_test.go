package task_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/task"
)

// TestAZeroValueSaysToUseItsConstructor: a type whose sync counterpart
// works as a zero value (var mu sync.RWMutex) needs the runtime's monitor
// here. Code ported by changing only the type panics with a message that
// names the constructor, at every method, rather than on a nil pointer.
func TestAZeroValueSaysToUseItsConstructor(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		typ   string
		calls map[string]func()
	}{
		{"Queue", map[string]func(){
			"Put":        func() { var q task.Queue[int]; q.Put(1) },
			"PutContext": func() { var q task.Queue[int]; _ = q.PutContext(ctx, 1) },
			"TryPut":     func() { var q task.Queue[int]; q.TryPut(1) },
			"Get":        func() { var q task.Queue[int]; q.Get() },
			"GetContext": func() { var q task.Queue[int]; _, _ = q.GetContext(ctx) },
			"TryGet":     func() { var q task.Queue[int]; q.TryGet() },
			"Close":      func() { var q task.Queue[int]; q.Close() },
			"Len":        func() { var q task.Queue[int]; q.Len() },
		}},
		{"Group", map[string]func(){
			"Go":      func() { var g task.Group; g.Go("worker", func() {}) },
			"Wait":    func() { var g task.Group; g.Wait() },
			"Running": func() { var g task.Group; g.Running() },
		}},
		{"Once", map[string]func(){
			"Do": func() { var o task.Once; o.Do(func() {}) },
		}},
		{"RWMutex", map[string]func(){
			"Lock":     func() { var rw task.RWMutex; rw.Lock() },
			"TryLock":  func() { var rw task.RWMutex; rw.TryLock() },
			"Unlock":   func() { var rw task.RWMutex; rw.Unlock() },
			"RLock":    func() { var rw task.RWMutex; rw.RLock() },
			"TryRLock": func() { var rw task.RWMutex; rw.TryRLock() },
			"RUnlock":  func() { var rw task.RWMutex; rw.RUnlock() },
		}},
		{"Semaphore", map[string]func(){
			"Acquire":        func() { var s task.Semaphore; s.Acquire() },
			"AcquireContext": func() { var s task.Semaphore; _ = s.AcquireContext(ctx) },
			"TryAcquire":     func() { var s task.Semaphore; s.TryAcquire() },
			"Release":        func() { var s task.Semaphore; s.Release() },
			"Held":           func() { var s task.Semaphore; s.Held() },
		}},
		{"Weighted", map[string]func(){
			"Acquire":    func() { var s task.Weighted; _ = s.Acquire(ctx, 1) },
			"TryAcquire": func() { var s task.Weighted; s.TryAcquire(1) },
			"Release":    func() { var s task.Weighted; s.Release(1) },
			"Held":       func() { var s task.Weighted; s.Held() },
			"Waiting":    func() { var s task.Weighted; s.Waiting() },
		}},
	} {
		want := "task: a zero " + c.typ + " is not ready for use: its lock comes from the runtime, so make it with task.New" + c.typ
		for name, call := range c.calls {
			assert.PanicsWithValue(t, want, call, "%s.%s", c.typ, name)
		}
	}
}
