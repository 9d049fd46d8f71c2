package task

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Reacher is implemented by runtimes that record the situations code
// reaches: the simulator lists them in its run's result.
type Reacher interface {
	Reach(name string)
}

// ReachedEnv names the environment variable that makes a process on the
// real runtime log the situations it reaches: when it names a file, the
// first Reach of each name appends the name to it, one a line. simrun
// stress sets it for every copy it runs and counts the copies that reached
// each situation.
const ReachedEnv = "LLMDST_REACHED"

// Reach says that the calling task reached a named situation: the window a
// race needs, a rare branch, a recovery path. A run that passes says
// nothing of a race whose window it never opened; under the simulator the
// run's result lists the situations it reached (sim.Result.Reached), so a
// sweep of passing seeds can show that it went where a failure would be —
// FoundationDB's code probes, Antithesis's "sometimes" assertions. On the
// real runtime it does nothing, unless the process was started with
// ReachedEnv naming a file, to which it appends each name the first time.
// It is not a scheduling point, and it does not change the run: the trace
// hash is the same with or without it.
func Reach(rt Runtime, name string) {
	// Small enough to be inlined: on the real runtime, production's case,
	// a probe is one comparison and one load.
	if _, real := rt.(realRuntime); !real || realReached != nil {
		reach(rt, name)
	}
}

// reach is Reach's slow side, kept out of line so that Reach stays small:
// the simulator's record, or the real runtime's log.
//
//go:noinline
func reach(rt Runtime, name string) {
	if _, real := rt.(realRuntime); real {
		if realReached != nil {
			realReached.reach(name)
		}
		return
	}
	if r, ok := rt.(Reacher); ok {
		r.Reach(name)
	}
}

// realReached is the log of the real runtime's situations, nil unless
// ReachedEnv was set when the process started. It is set before main and
// never again.
var realReached *reachedLog

func init() {
	if path := os.Getenv(ReachedEnv); path != "" {
		realReached = newReachedLog(path)
	}
}

// reachedLog appends each situation reached to a file, once. A name is
// written when first reached, the file opened for it and closed again, so
// that a process that crashes or is killed afterwards has logged it.
type reachedLog struct {
	path   string
	mu     sync.Mutex
	seen   map[string]bool
	failed bool // an append failed and was reported: the log is off
}

func newReachedLog(path string) *reachedLog {
	return &reachedLog{path: path, seen: map[string]bool{}}
}

func (l *reachedLog) reach(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[name] || l.failed {
		return
	}
	l.seen[name] = true
	// One name a line: a name that holds a line break would read back as
	// two.
	line := strings.NewReplacer("\n", " ", "\r", " ").Replace(name) + "\n"
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		l.failed = true
		fmt.Fprintf(os.Stderr, "task: %s=%s: cannot log the situation %q, and logs no more: %v\n", ReachedEnv, l.path, name, err)
	}
}

// ReadReached reads a log ReachedEnv named: the situations a process
// reached, each once, in the order first reached. A file that does not
// exist is a process that reached none.
func ReadReached(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && !seen[line] {
			seen[line] = true
			names = append(names, line)
		}
	}
	return names, nil
}
