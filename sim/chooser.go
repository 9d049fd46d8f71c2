package sim

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime/debug"
)

// Chooser is the source of every decision a strategy makes. A run is a pure
// function of its program and its Chooser's answers, which is what makes it
// replayable.
type Chooser interface {
	// Intn returns a number in [0, n). n ≥ 1. Strategies arrange their
	// draws so that 0 is the calm answer (no preemption, no starvation), so
	// a shrinker that lowers draws towards 0 simplifies the schedule.
	Intn(n int) int
}

// enumerating reports whether c, a run's chooser as a policy gets it,
// answers with every answer of a draw in turn (Explore's walk) rather than
// with a sample. A policy whose draw gives one outcome for many answers —
// the odds of a starvation window — then draws each outcome once, so that
// no two schedules of the walk are the same run.
func enumerating(c Chooser) bool {
	g, ok := c.(*guardedDraws)
	if !ok {
		return false
	}
	_, ok = g.inner.(*walkChooser)
	return ok
}

// Repanicker is implemented by choosers whose panics carry meaning for the
// caller of Run (rapid ends an exhausted draw by panicking). When the run's
// chooser implements it and returns true, a panic in any simulated task is
// raised again in the goroutine that called Run, once the run is unwound.
type Repanicker interface {
	Repanic() bool
}

// Stream numbers for rand.NewPCG: one per subsystem, so a new draw in one
// never reshuffles the others.
const (
	StreamStrategy uint64 = 0x5354524154454759 // "STRATEGY"
	StreamWorkload uint64 = 0x574f524b4c4f4144 // "WORKLOAD"
	StreamFaults   uint64 = 0x4641554c54530000 // "FAULTS"
)

// PCGChooser draws from a PCG generator.
type PCGChooser struct{ src rand.PCG }

// NewPCGChooser returns the chooser of seed on the given stream.
func NewPCGChooser(seed, stream uint64) *PCGChooser {
	c := &PCGChooser{}
	c.src.Seed(seed, stream)
	return c
}

// Intn implements Chooser: Lemire's multiply-and-shift with rejection on
// the generator's 64-bit outputs, exact and the same on every platform.
func (c *PCGChooser) Intn(n int) int {
	if n <= 1 {
		return 0
	}
	un := uint64(n)
	hi, lo := bits.Mul64(c.src.Uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(c.src.Uint64(), un)
		}
	}
	return int(hi)
}

// pcgDraws is the chooser a run uses when it draws from its own PCG: it
// cannot panic, so it needs no guard.
type pcgDraws struct{ c *PCGChooser }

func (d pcgDraws) Intn(n int) int {
	if n < 1 {
		panic(fmt.Sprintf("sim: Intn(%d): n must be ≥ 1", n))
	}
	return d.c.Intn(n)
}

// guardedDraws wraps a chooser that may panic — rapid ends an exhausted or
// rejected draw by panicking. The panic must not unwind through the
// simulated program's code, which might recover it and go on in a broken
// state; so the guard contains it, ends the run, and answers 0 so that the
// policy returns. Run raises it again in its caller if asked to. Every
// answer is checked. The draws stay out of the trace hash: a replay, which
// draws nothing, hashes the same as the run it replays.
type guardedDraws struct {
	inner Chooser
	s     *sched
}

func (d *guardedDraws) Intn(n int) (v int) {
	if n < 1 {
		panic(fmt.Sprintf("sim: Intn(%d): n must be ≥ 1", n))
	}
	if n == 1 || d.s.ended {
		return 0
	}
	defer func() {
		if r := recover(); r != nil {
			d.s.fail(&PanicError{TaskID: -1, Task: "chooser", Value: r, Stack: debug.Stack(), site: panicSite(r)})
			v = 0
		}
	}()
	v = d.inner.Intn(n)
	if v < 0 || v >= n {
		panic(fmt.Sprintf("sim: chooser %T returned %d for Intn(%d)", d.inner, v, n))
	}
	return v
}
