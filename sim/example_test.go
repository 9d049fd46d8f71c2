package sim_test

import (
	"fmt"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// Example finds a lost update by sweeping seeds, then replays the failing
// schedule and gets the same run back.
func Example() {
	program := func(rt task.Runtime) error {
		balance := 100
		g := task.NewGroup(rt, "tellers")
		for _, name := range []string{"deposit", "withdraw"} {
			g.Go(name, func() {
				b := balance
				rt.Yield("teller.after-read")
				if name == "deposit" {
					balance = b + 10
				} else {
					balance = b - 10
				}
			})
		}
		g.Wait()
		if balance != 100 {
			return fmt.Errorf("balance %d, want 100", balance)
		}
		return nil
	}
	for seed := uint64(0); seed < 100; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.PCT(2)}, program)
		if res.Err == nil {
			continue
		}
		again := sim.Run(sim.Options{Strategy: sim.Replay(res.Schedule)}, program)
		fmt.Println("found:", res.Err != nil)
		fmt.Println("replayed:", again.Err != nil && again.Err.Error() == res.Err.Error(),
			"same hash:", again.TraceHash == res.TraceHash)
		break
	}
	// Output:
	// found: true
	// replayed: true same hash: true
}
