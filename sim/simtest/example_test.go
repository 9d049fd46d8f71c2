package simtest_test

import (
	"fmt"
	"strings"

	"github.com/llmdst/llmdst/sim/simtest"
	"github.com/llmdst/llmdst/task"
)

// Example finds the lost update of sim's example the way a test would
// (simtest.Check(t, cfg, program) in a TestTellers): Run returns the text
// Check fails the test with.
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
	// Seeds is set so that the output is the same under go test -short,
	// whose default is fewer.
	sum, err := simtest.Run("TestTellers", simtest.Config{Dir: "-", OutDir: "-", Seeds: simtest.DefaultSeeds}, program)
	fmt.Println("strategies:", strings.Join(sum.Strategies, " "))
	fmt.Println(err)
	// Output:
	// strategies: random pct:3 chaos starve:main starve:deposit starve:withdraw
	// simtest: seed 1 failed (strategy pct:3, 10 decisions), the lowest failing seed of seeds 0-999:
	//     balance 110, want 100
	// shrunk from 3 preemptions and 0 waits to 1 and 0, 10 decisions (17 runs)
	// the shrunk run fails the same way:
	//     balance 90, want 100
	// the shrunk run:
	//          0          +0s  sim                    starts main#0
	//          1          +0s  main#0                 starts deposit#1
	//          2          +0s  main#0                 starts withdraw#2
	//          3          +0s  main#0                 blocks at tellers.wait
	//          4          +0s  main#0                 at tellers.wait → withdraw#2 runs
	//          5          +0s  sim                    guided: preempt task 2 "withdraw" at "teller.after-read" to run task 1 "deposit"
	//          5          +0s  withdraw#2             at teller.after-read → deposit#1 runs
	//          7          +0s  deposit#1              exits
	//          8          +0s  deposit#1              at exit → withdraw#2 runs
	//          9          +0s  withdraw#2             wakes main#0
	//          9          +0s  withdraw#2             exits
	//         10          +0s  withdraw#2             at exit → main#0 runs
	//         10          +0s  main#0                 exits
	// again: LLMDST_SIM_SEED=1 LLMDST_SIM_STRATEGY=pct:3 go test -run '^TestTellers$' github.com/llmdst/llmdst/sim/simtest
}
