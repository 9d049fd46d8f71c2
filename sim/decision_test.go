package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/task"
)

// waitAt is a strategy that waits until a fixed time at its first decision
// and picks the first candidate afterwards.
type waitAt time.Duration

func (w waitAt) String() string           { return fmt.Sprintf("wait-at(%v)", time.Duration(w)) }
func (w waitAt) NewPolicy(Chooser) Policy { return &waitAtPolicy{until: time.Duration(w)} }

type waitAtPolicy struct {
	until time.Duration
	done  bool
}

func (p *waitAtPolicy) Pick(v *View) Decision {
	if p.done {
		return Pick(0)
	}
	p.done = true
	return WaitUntil(p.until)
}

func TestStrategyWaitsAreCheckedAgainstNow(t *testing.T) {
	prog := func(rt task.Runtime) error { rt.Yield("point"); return nil }
	res := Run(Options{Strategy: waitAt(3 * time.Millisecond)}, prog)
	require.NoError(t, res.Err)
	assert.Equal(t, 3*time.Millisecond, res.Elapsed, "the clock moves to the wait's end")
	for _, until := range []time.Duration{0, -time.Millisecond} {
		res := Run(Options{Strategy: waitAt(until)}, prog)
		var pe *PanicError
		require.ErrorAs(t, res.Err, &pe, "a wait until %v", until)
		assert.Equal(t, fmt.Sprintf("sim: strategy wait-at(%v) asked to wait until %v, which is not after now (0s)", until, until), pe.Value)
	}
}

// TestARecordedRunIsBoundedByWhatAScheduleHolds: a run with no step limit,
// or one past what a schedule's text may declare, would record a schedule
// ParseSchedule refuses; recorded, it stops where a schedule ends. A run
// that records nothing keeps the limit it was given.
func TestARecordedRunIsBoundedByWhatAScheduleHolds(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want int64
	}{
		{Options{StepsMax: -1}, ScheduleStepsMax},
		{Options{StepsMax: ScheduleStepsMax + 1}, ScheduleStepsMax},
		{Options{StepsMax: ScheduleStepsMax}, ScheduleStepsMax},
		{Options{}, DefaultStepsMax},
		{Options{StepsMax: 500}, 500},
		{Options{StepsMax: -1, NoRecord: true}, -1},
		{Options{StepsMax: ScheduleStepsMax + 1, NoRecord: true}, ScheduleStepsMax + 1},
	} {
		s := newSched(&c.opts, NewPCGChooser(1, StreamStrategy))
		assert.Equal(t, c.want, s.stepsMax, "%+v", c.opts)
	}
}
