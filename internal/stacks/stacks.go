// Package stacks reads the Go runtime's goroutine dumps: which goroutine the
// caller is, and which goroutine of a hung run holds the baton. A simulated
// task that loops without a scheduling point, or blocks on something the
// simulator does not know of, never gives the baton back, and no step limit
// sees it; its goroutine is the one that runs a task and is not parked in
// the simulator.
package stacks

import (
	"bytes"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// TaskFrame is in the stack of every goroutine that runs a simulated task
// (sim's tests check that it still is).
const TaskFrame = "github.com/llmdst/llmdst/sim.(*sched).body("

// ID returns the calling goroutine's id, from its stack's header. It costs
// a microsecond or so: for a goroutine to say once who it is, not per call.
func ID() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	g, _ := parseHeader(string(buf[:n]))
	return g.id
}

// All returns every goroutine's stack, as a crash prints them.
func All() []byte {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Stuck is the goroutine of a task that holds the baton outside the
// simulator.
type Stuck struct {
	Status string // its status: "running" or "runnable" when it spins, "chan receive" and the like when it waits
	Func   string // the innermost function of its stack outside the runtime and the standard library's locks
	Stack  string // its entry in the dump
}

// Spinning reports whether the task runs, rather than waits on something
// the simulator cannot see.
func (s Stuck) Spinning() bool { return s.Status == "running" || s.Status == "runnable" }

// FindStuck finds in dump the goroutine that runs a task and is not parked
// in the simulator (status "coroutine"), among those runner started,
// directly or through tasks. A goroutine whose creator has ended cannot be
// traced to a runner; when none is found among runner's, the first such
// one is taken.
func FindStuck(dump []byte, runner uint64) (Stuck, bool) {
	gs := parse(dump)
	parent := make(map[uint64]uint64, len(gs))
	for _, g := range gs {
		parent[g.id] = g.parent
	}
	// startedBy reports whether g descends from runner, and whether that
	// could be told.
	startedBy := func(g goroutine) (yes, known bool) {
		for id, hops := g.parent, 0; hops < len(gs); hops++ {
			if id == runner {
				return true, true
			}
			p, ok := parent[id]
			if !ok {
				return false, false // its creator has ended
			}
			if p == 0 {
				return false, true // a root: not runner's
			}
			id = p
		}
		return false, false
	}
	var unsure *goroutine
	for i := range gs {
		g := &gs[i]
		if g.status == "coroutine" || !strings.Contains(g.text, TaskFrame) {
			continue
		}
		yes, known := startedBy(*g)
		if yes {
			return g.stuck(), true
		}
		if !known && unsure == nil {
			unsure = g
		}
	}
	if unsure != nil {
		return unsure.stuck(), true
	}
	return Stuck{}, false
}

// goroutine is one goroutine of a dump.
type goroutine struct {
	id, parent uint64 // parent 0: none, or not known
	status     string // "running", "chan receive", "coroutine", …
	text       string // its whole entry in the dump
}

func (g *goroutine) stuck() Stuck {
	return Stuck{Status: g.status, Func: firstOwnFunction(g.text), Stack: g.text}
}

// parseHeader reads "goroutine 7 [chan receive, 2 minutes]:".
func parseHeader(s string) (goroutine, bool) {
	rest, ok := strings.CutPrefix(s, "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	idText, rest, ok := strings.Cut(rest, " [")
	if !ok {
		return goroutine{}, false
	}
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return goroutine{}, false
	}
	status, _, _ := strings.Cut(rest, "]")
	status, _, _ = strings.Cut(status, ",")
	return goroutine{id: id, status: status}, true
}

// parse splits a dump into its goroutines.
func parse(dump []byte) []goroutine {
	var gs []goroutine
	for _, entry := range bytes.Split(dump, []byte("\n\n")) {
		text := strings.TrimSpace(string(entry))
		g, ok := parseHeader(text)
		if !ok {
			continue
		}
		g.text = text
		if i := strings.LastIndex(text, "\ncreated by "); i >= 0 {
			line, _, _ := strings.Cut(text[i+1:], "\n")
			if _, p, ok := strings.Cut(line, " in goroutine "); ok {
				g.parent, _ = strconv.ParseUint(strings.TrimSpace(p), 10, 64)
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// libraryPrefixes are the packages a stuck task is seen in without being
// stuck because of them: it waits or loops in them on behalf of its caller.
var libraryPrefixes = []string{"runtime.", "internal/", "sync.", "sync/", "time.", "iter."}

// firstOwnFunction is the innermost function of a stack outside the
// runtime and the standard library's locks and channels: where a task
// spins, or what it blocks in.
func firstOwnFunction(stack string) string {
	lines := strings.Split(stack, "\n")
	first := ""
	for _, line := range lines[1:] {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by ") || line == "" {
			continue
		}
		fn := line
		if i := strings.LastIndex(fn, "("); i > 0 {
			fn = fn[:i]
		}
		if first == "" {
			first = fn
		}
		if !slices.ContainsFunc(libraryPrefixes, func(p string) bool { return strings.HasPrefix(fn, p) }) {
			return fn
		}
	}
	return first
}
