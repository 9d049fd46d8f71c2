package sim

import (
	"fmt"
	"strconv"
	"strings"
)

// Draws are the answers a run's chooser gave, in order: a schedule of
// Explore's walk, which a run follows again with FollowDraws. Every draw
// past the end is 0, the calm answer.
type Draws []int

// Departures is how many of d are not the calm answer 0: how far the
// schedule departs from the calm one.
func (d Draws) Departures() int {
	n := 0
	for _, v := range d {
		if v != 0 {
			n++
		}
	}
	return n
}

// String writes d as its departures, each as the draw's number (from 1) and
// its answer, "57:3,210:1", or "calm" when it has none; ParseDraws reads it.
// A walk's schedule is hundreds of draws and a few departures.
func (d Draws) String() string {
	var b strings.Builder
	for i, v := range d {
		if v == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", i+1, v)
	}
	if b.Len() == 0 {
		return "calm"
	}
	return b.String()
}

// drawsMax bounds the draw numbers ParseDraws reads: far above any run's
// (the default step limit is 10 million decisions), far below what would
// exhaust memory.
const drawsMax = 1 << 26

// ParseDraws reads Draws as String writes them: "calm" (or "") for none,
// or comma-separated departures N:V, the draw N (from 1, in increasing
// order) answered V ≥ 1. The Draws it returns are never nil, the calm
// schedule's included: nil Draws are no schedule given.
func ParseDraws(s string) (Draws, error) {
	d := Draws{}
	if s == "" || s == "calm" {
		return d, nil
	}
	for _, part := range strings.Split(s, ",") {
		ns, vs, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("draws %q: %q is not N:V (the draw N answered V)", s, part)
		}
		n, err := strconv.Atoi(ns)
		if err != nil || n < 1 || n > drawsMax {
			return nil, fmt.Errorf("draws %q: in %q, the draw's number must be a whole number from 1 to %d", s, part, drawsMax)
		}
		v, err := strconv.Atoi(vs)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("draws %q: in %q, the answer must be a whole number ≥ 1 (0, the calm answer, is every draw not given)", s, part)
		}
		if n <= len(d) {
			return nil, fmt.Errorf("draws %q: draw %d comes after draw %d: give the draws in increasing order, each once", s, n, len(d))
		}
		d = append(d, make(Draws, n-len(d))...)
		d[n-1] = v
	}
	return d, nil
}

// FollowDraws returns a chooser for one run that answers its draws with d,
// then with 0, each answer capped at the draw's last: with the Strategy and
// Seed explored, the run is the schedule Explore ran (ExploreResult.Draws,
// HangError.Draws). Draws beyond what the code under test asks for change
// nothing; Run's Result.Warnings names them, and answers past a draw's
// last.
func FollowDraws(d Draws) Chooser { return &walkChooser{prefix: d} }
