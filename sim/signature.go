package sim

import (
	"errors"
	"fmt"
	"strings"
)

// Signature names the failure mode of a run's error, "" for nil: the kind of
// run failure and where it happened, with the numbers that differ between
// runs of the same mode (steps, times, counts, ids) masked as N. Two runs
// fail the same way when their signatures are equal: Shrink's test compares
// them, and a sweep groups its failures by them.
//
//   - a replay that left its schedule: "replay diverged" (whatever else the
//     run reports follows from being cut short);
//   - an error with a Signature() string method, in the chain or joined:
//     what that says (a hang names where the stuck task is, a property
//     checker's violation the property and where it was seen);
//   - a deadlock: "deadlock:" and every blocked task as NAME@POINT;
//   - a step limit: "step limit";
//   - a panic: the task and the first line of the value, a Goexit the task;
//   - two runs of a seed that differed: "nondeterministic";
//   - any other error: its first line.
func Signature(err error) string {
	if err == nil {
		return ""
	}
	var mm *ScheduleMismatchError
	if errors.As(err, &mm) {
		return "replay diverged"
	}
	var own signer
	if errors.As(err, &own) {
		return own.Signature()
	}
	var dl *DeadlockError
	if errors.As(err, &dl) {
		var b strings.Builder
		b.WriteString("deadlock:")
		for _, t := range dl.Blocked {
			fmt.Fprintf(&b, " %s@%s", t.Name, t.Point)
		}
		return b.String()
	}
	var sl *StepLimitError
	if errors.As(err, &sl) {
		return "step limit"
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		if pe.Goexit {
			return "goexit in " + pe.Task
		}
		return fmt.Sprintf("panic in %s: %s", pe.Task, MaskDigits(firstLine(fmt.Sprint(pe.Value))))
	}
	var nd *NondeterminismError
	if errors.As(err, &nd) {
		return "nondeterministic"
	}
	return MaskDigits(firstLine(err.Error()))
}

// signer is an error that names its own failure mode.
type signer interface {
	error
	Signature() string
}

// Signature is the failure mode of a hang: where the task is stuck.
func (e *HangError) Signature() string {
	switch {
	case e.Status == "":
		return "hang"
	case e.Spinning():
		return "hang in " + e.Func
	}
	return "hang blocked in " + e.Func
}

// MaskDigits replaces every run of digits in s with N, so that one check
// failing with different numbers is one failure mode.
func MaskDigits(s string) string {
	var b strings.Builder
	inNum := false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !inNum {
				b.WriteByte('N')
			}
			inNum = true
			continue
		}
		inNum = false
		b.WriteRune(r)
	}
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
