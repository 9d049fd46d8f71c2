// Package simprog holds small programs written against task.Runtime whose
// races the tests of sim and simtest find: each is a fixed workload, its
// bug the only way it fails.
package simprog

import (
	"fmt"
	"time"

	"github.com/llmdst/llmdst/task"
)

// Courier is a sender stamping three parcels a millisecond apart and a
// receiver, started first, that fails on one older than a millisecond when
// it takes it. A task takes no virtual time unless a strategy withholds it,
// so only a receiver starved for longer than the sender's sleep loses the
// race: ordering the tasks alone never does.
func Courier(rt task.Runtime) error {
	q := task.NewQueue[time.Time](rt)
	var stale error
	g := task.NewGroup(rt, "courier")
	g.Go("receiver", func() {
		for {
			at, ok := q.Get()
			if !ok {
				return
			}
			if age := rt.Now().Sub(at); age > time.Millisecond && stale == nil {
				stale = fmt.Errorf("a parcel %v old", age)
			}
		}
	})
	g.Go("sender", func() {
		for range 3 {
			q.Put(rt.Now())
			rt.Sleep(time.Millisecond)
		}
		q.Close()
	})
	g.Wait()
	return stale
}
