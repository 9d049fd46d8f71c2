package main

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// seedsMax bounds a sweep's seed list, so that a typo cannot ask for 10^18
// runs.
const seedsMax = 1 << 40

// seedSet is a sweep's seeds: ranges and single seeds, in order.
type seedSet struct {
	spans []span
	n     uint64
}

type span struct{ lo, hi uint64 } // inclusive

// parseSeeds reads "1-1000", "7", "1,5,9-12". It refuses a seed given
// twice: a sweep would run it twice and count it twice.
func parseSeeds(s string) (seedSet, error) {
	var set seedSet
	var parts []string // the text of each span, for errors
	if strings.TrimSpace(s) == "" {
		return set, usagef("-seeds is empty: want a range such as 1-1000, a seed such as 42, or a list such as 1,5,9-12")
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		loS, hiS, isRange := strings.Cut(part, "-")
		lo, err := strconv.ParseUint(loS, 10, 64)
		if err != nil {
			return set, usagef("-seeds: %q is not a seed or a range: want A-B with 0 ≤ A ≤ B, as in 1-1000", part)
		}
		hi := lo
		if isRange {
			if hi, err = strconv.ParseUint(hiS, 10, 64); err != nil {
				return set, usagef("-seeds: %q is not a range: want A-B with 0 ≤ A ≤ B, as in 1-1000", part)
			}
		}
		if hi < lo {
			return set, usagef("-seeds: the range %q is empty: its end %d is below its start %d", part, hi, lo)
		}
		set.spans = append(set.spans, span{lo, hi})
		parts = append(parts, part)
		set.n += hi - lo + 1
		if set.n > seedsMax || hi-lo+1 == 0 {
			return set, usagef("-seeds: more than %d seeds; split the sweep with -shard", uint64(seedsMax))
		}
	}
	// Sorted by start, a span overlaps an earlier one if it starts at or
	// before the furthest end seen so far.
	order := make([]int, len(set.spans))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return set.spans[order[a]].lo < set.spans[order[b]].lo })
	for k, reach := 1, order[0]; k < len(order); k++ {
		cur := order[k]
		if set.spans[cur].lo <= set.spans[reach].hi {
			first, second := min(reach, cur), max(reach, cur)
			return set, usagef("-seeds: %q and %q overlap (seed %d is in both): give each seed once", parts[first], parts[second], set.spans[cur].lo)
		}
		if set.spans[cur].hi > set.spans[reach].hi {
			reach = cur
		}
	}
	return set, nil
}

// at returns the i-th seed.
func (s seedSet) at(i uint64) uint64 {
	for _, sp := range s.spans {
		if n := sp.hi - sp.lo + 1; i < n {
			return sp.lo + i
		} else {
			i -= n
		}
	}
	panic("simrun: seed index out of range")
}

// shard returns the I-th of n contiguous parts of the set (1-based).
func (s seedSet) shard(i, n uint64) seedSet { return s.slice(mulDiv(s.n, i-1, n), mulDiv(s.n, i, n)) }

// mulDiv is ⌊a·b/c⌋ for b ≤ c, without overflow: a sweep's 2^40 seeds
// times a shard number past 2^24 do not fit in 64 bits.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c) // hi < c, since b ≤ c
	return q
}

// slice returns the seeds at indices [lo, hi), in order.
func (s seedSet) slice(lo, hi uint64) seedSet {
	var out seedSet
	for k := lo; k < hi; {
		first := s.at(k)
		// extend while contiguous
		j := k + 1
		for j < hi && s.at(j) == first+(j-k) {
			j++
		}
		out.spans = append(out.spans, span{first, first + (j - k) - 1})
		out.n += j - k
		k = j
	}
	return out
}

func (s seedSet) String() string {
	var parts []string
	for _, sp := range s.spans {
		parts = append(parts, sp.String())
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ",")
}

// parseShard reads "I/N".
func parseShard(s string) (i, n uint64, err error) {
	is, ns, ok := strings.Cut(s, "/")
	i, err1 := strconv.ParseUint(is, 10, 64)
	n, err2 := strconv.ParseUint(ns, 10, 64)
	if !ok || err1 != nil || err2 != nil || n == 0 {
		return 0, 0, usagef("-shard %q: want I/N, as in 2/8", s)
	}
	if i < 1 || i > n {
		return 0, 0, usagef("-shard %q: shard %d is out of range: want 1 ≤ I ≤ %d", s, i, n)
	}
	return i, n, nil
}

// checkShare is the share of a sweep's seeds run twice to check
// determinism, in parts per checkShareParts: an integer ratio, so that which
// seeds are checked is decided without floats.
type checkShare uint64

const checkShareParts = 1_000_000_000

// checks reports whether seed is run twice. The seeds checked are spread
// evenly over the seed numbers: seed s is checked when ⌊s·share⌋ steps up
// from ⌊(s−1)·share⌋, so any run of consecutive seeds has its share
// checked to within one seed (1% checks 100, 200, …; 70% checks 7 seeds
// of every 10). It depends on the seed alone: not on the worker that runs
// it, nor on the shard or prefix of a sweep it falls in.
func (c checkShare) checks(seed uint64) bool {
	if c == 0 {
		return false
	}
	if seed == 0 {
		return true // ⌊0⌋ steps up from ⌊−share⌋ = −1
	}
	return scaleDown(seed, uint64(c)) != scaleDown(seed-1, uint64(c))
}

// scaleDown is ⌊s·c/checkShareParts⌋, without overflow.
func scaleDown(s, c uint64) uint64 {
	hi, lo := bits.Mul64(s, c)
	q, _ := bits.Div64(hi, lo, checkShareParts) // hi < c ≤ checkShareParts
	return q
}

// parseCheckShare reads "1%", "0.01", "1/100" or "0".
func parseCheckShare(s string) (checkShare, error) {
	s = strings.TrimSpace(s)
	var f float64
	var err error
	switch {
	case strings.HasSuffix(s, "%"):
		f, err = strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		f /= 100
	case strings.Contains(s, "/"):
		a, b, _ := strings.Cut(s, "/")
		var x, y float64
		x, err = strconv.ParseFloat(a, 64)
		if err == nil {
			y, err = strconv.ParseFloat(b, 64)
		}
		if err == nil && y != 0 {
			f = x / y
		} else if err == nil {
			err = fmt.Errorf("division by zero")
		}
	default:
		f, err = strconv.ParseFloat(s, 64)
	}
	if err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return 0, usagef("-check-determinism %q is not a finite number: want a share of seeds between 0 and 1, as in 1%% or 0.01", s)
	}
	if err != nil || f < 0 || f > 1 {
		return 0, usagef("-check-determinism %q: want a share of seeds between 0 and 1, as in 1%% or 0.01", s)
	}
	c := checkShare(math.Round(f * checkShareParts))
	if c == 0 && f > 0 {
		c = 1 // a share asked for checks some seeds
	}
	return c, nil
}

// wholeNumber is a flag that takes a whole number ≥ 0 and says so when
// given anything else, where the flag package's own uint64 says only
// "parse error".
type wholeNumber uint64

func (n *wholeNumber) String() string { return strconv.FormatUint(uint64(*n), 10) }

func (n *wholeNumber) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("want a whole number from 0 to %d", uint64(math.MaxUint64))
	}
	if err != nil {
		return errors.New("want a whole number ≥ 0")
	}
	*n = wholeNumber(v)
	return nil
}
