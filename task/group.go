package task

// Group starts tasks and waits for all of them to return, like
// sync.WaitGroup, on the runtime's monitor.
type Group struct {
	rt        Runtime
	mu        Mutex
	done      Cond
	waitPoint string
	n         int
}

// NewGroup returns an empty group whose Wait parks at name+".wait".
func NewGroup(rt Runtime, name string) *Group {
	mu := rt.NewMutex(name)
	return &Group{rt: rt, mu: mu, done: rt.NewCond(mu), waitPoint: name + ".wait"}
}

// Go starts fn as a task named name and counts it until it returns or panics.
func (g *Group) Go(name string, fn func()) {
	made(g.mu, "Group").Lock()
	g.n++
	g.mu.Unlock()
	g.rt.Go(name, func() {
		defer g.exit()
		fn()
	})
}

func (g *Group) exit() {
	g.mu.Lock()
	g.n--
	if g.n == 0 {
		g.done.Broadcast()
	}
	g.mu.Unlock()
}

// Wait blocks until every task started by Go has returned.
func (g *Group) Wait() {
	made(g.mu, "Group").Lock()
	for g.n > 0 {
		g.done.Wait(g.waitPoint)
	}
	g.mu.Unlock()
}

// Running returns the number of tasks started by Go that have not returned.
func (g *Group) Running() int {
	made(g.mu, "Group").Lock()
	n := g.n
	g.mu.Unlock()
	return n
}
