package sim_test

import (
	"testing"

	"github.com/llmdst/llmdst/sim"
)

// FuzzParseSchedule: any text either parses into a schedule that prints
// back to text that parses to the same schedule, or is refused with a
// *ScheduleError; it never panics.
func FuzzParseSchedule(f *testing.F) {
	good := sim.NewSchedule([]sim.Step{{Task: 0}, {Task: 0}, {Task: 1}, {Wait: true, Task: -1, Until: 1500}}, []string{"main", "w"},
		[]sim.Meta{{Key: "seed", Value: "7"}}).String()
	f.Add(good)
	f.Add("llmdst-schedule v1\nsteps 0\nend\n")
	f.Add("llmdst-schedule v2\n")
	f.Add("")
	f.Add("llmdst-schedule v1\ntask 0 \"main\"\nsteps 2\n0*2\nend\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := sim.ParseSchedule(text)
		if err != nil {
			if _, ok := err.(*sim.ScheduleError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		again, err := sim.ParseSchedule(s.String())
		if err != nil {
			t.Fatalf("a parsed schedule does not parse again: %v\n%s", err, s)
		}
		if again.String() != s.String() {
			t.Fatalf("round trip changed the schedule:\n%s\n---\n%s", s, again)
		}
	})
}
