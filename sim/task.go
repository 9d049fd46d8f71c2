package sim

// taskState is where a task is in its life.
type taskState uint8

const (
	stateRunnable taskState = iota // waiting for the baton
	stateRunning                   // holds the baton
	stateBlocked                   // parked on a mutex, a cond or a timer
	stateGoexit                    // parked for good after runtime.Goexit
	stateDone                      // returned, panicked or unwound
)

// PointKind says what kind of scheduling point a task reached.
type PointKind uint8

const (
	// PointStart: the task has not run yet.
	PointStart PointKind = iota
	// PointYield: an explicit Runtime.Yield; the task could go on.
	PointYield
	// PointLock: about to take a mutex; the task could go on.
	PointLock
	// PointBlock: the task parked (cond wait, contended lock, sleep).
	PointBlock
	// PointExit: the task returned.
	PointExit
)

func (k PointKind) String() string {
	switch k {
	case PointStart:
		return "start"
	case PointYield:
		return "yield"
	case PointLock:
		return "lock"
	case PointBlock:
		return "block"
	case PointExit:
		return "exit"
	}
	return "unknown"
}

// Task is a simulated task as strategies and traces see it. Its fields are
// read-only outside the simulator.
type Task struct {
	s     *sched
	id    int
	name  string
	fn    func()
	state taskState
	point string
	kind  PointKind
	co    coroutine
	pull  *pullCoro // co, when it is one: the hand-off calls it directly
	// inChain: the task's goroutine waits inside the resume of another
	// task, not in its own coroutine (see sched.stop).
	inChain bool

	returned  bool      // fn returned normally
	stopped   bool      // the unwind has panicked in it (see sched.stopTask)
	waitingOn *simMutex // for deadlock reports
	goid      uint64    // debug mode: the goroutine running the task
}

// ID returns the task's number: 0 for "main", then in order of creation.
func (t *Task) ID() int { return t.id }

// Name returns the name the task was started with.
func (t *Task) Name() string { return t.name }

// Point returns the scheduling point where the task last stopped.
func (t *Task) Point() string { return t.point }

// Kind returns the kind of that point.
func (t *Task) Kind() PointKind { return t.kind }
