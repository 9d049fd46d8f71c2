package sim

// simMutex is a task.Mutex under the simulator. Lock is a scheduling point;
// a contended Lock parks the task, and Unlock hands the mutex to the task
// that has waited longest.
type simMutex struct {
	s         *sched
	name      string
	lockPoint string
	owner     *Task
	waiters   []*Task
	buf       [2]*Task // waiters' first array
}

func (m *simMutex) Lock() {
	s := m.s
	s.enter()
	if s.ended {
		// The run is over (or being unwound): nothing else will run, so a
		// deferred cleanup may take the lock without waiting.
		s.drainCall()
		m.owner = s.cur
		return
	}
	s.point(PointLock, m.lockPoint)
	m.acquire()
}

// acquire takes the mutex for the running task, parking it while another
// task holds it.
func (m *simMutex) acquire() {
	s := m.s
	t := s.cur
	if m.owner != nil && !s.unwinding {
		m.waiters = append(m.waiters, t)
		t.waitingOn = m
		s.block(m.lockPoint)
		t.waitingOn = nil
	}
	// Unlock has handed the mutex to t already if it waited, unless the
	// run ended meanwhile: once the run is over, t takes it as Lock does
	// then (t goes on to finish a panic, see sched.drain).
	m.owner = t
}

func (m *simMutex) Unlock() {
	s := m.s
	s.enter()
	if m.owner == nil {
		if s.ended {
			return
		}
		panic("sim: unlock of unlocked mutex " + m.name)
	}
	m.release()
}

// release hands the held mutex to its longest waiter, if any.
func (m *simMutex) release() {
	s := m.s
	if s.unwinding || len(m.waiters) == 0 {
		m.owner = nil
		return
	}
	w := popFront(&m.waiters)
	m.owner = w
	s.wake(w)
}

// simCond is a task.Cond under the simulator. Signal wakes the task that
// has waited longest, as sync.Cond does.
type simCond struct {
	m       *simMutex
	waiters []*Task
	buf     [2]*Task // waiters' first array
}

func (c *simCond) Wait(point string) {
	s := c.m.s
	s.enter()
	if s.ended {
		s.stopTask(s.cur)
	}
	t := s.cur
	if c.m.owner != t {
		panic("sim: Cond.Wait without holding mutex " + c.m.name)
	}
	c.waiters = append(c.waiters, t)
	c.m.release()
	s.block(point)
	c.m.acquire()
}

func (c *simCond) Signal() {
	s := c.m.s
	s.enter()
	if len(c.waiters) == 0 || s.unwinding {
		return
	}
	s.wake(popFront(&c.waiters))
}

func (c *simCond) Broadcast() {
	s := c.m.s
	s.enter()
	if s.unwinding {
		return
	}
	for _, w := range c.waiters {
		s.wake(w)
	}
	c.waiters = c.waiters[:0]
}

// popFront removes the first task of a short FIFO in place, keeping the
// backing array so that waiting does not allocate.
func popFront(ts *[]*Task) *Task {
	q := *ts
	t := q[0]
	copy(q, q[1:])
	q[len(q)-1] = nil
	*ts = q[:len(q)-1]
	return t
}
