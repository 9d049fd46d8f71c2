package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSeeds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		n    uint64
	}{
		{"1-1000", "1-1000", 1000},
		{"7", "7", 1},
		{"1,5,9-12", "1,5,9-12", 6},
		{"20-30,1-10,11", "20-30,1-10,11", 22}, // in the order given
	} {
		set, err := parseSeeds(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, set.String(), c.in)
		assert.Equal(t, c.n, set.n, c.in)
	}
}

func TestParseSeedsRefusesASeedGivenTwice(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1-10,1-10", `-seeds: "1-10" and "1-10" overlap (seed 1 is in both): give each seed once`},
		{"1-10,5", `-seeds: "1-10" and "5" overlap (seed 5 is in both)`},
		{"20-30,1-5,3-40", `-seeds: "1-5" and "3-40" overlap (seed 3 is in both)`},
		{"1-100,200,50-60", `-seeds: "1-100" and "50-60" overlap (seed 50 is in both)`},
		{"7,7", `-seeds: "7" and "7" overlap (seed 7 is in both)`},
	} {
		_, err := parseSeeds(c.in)
		var ue *usageError
		require.ErrorAs(t, err, &ue, c.in)
		assert.Contains(t, err.Error(), c.want, c.in)
	}
	code, out, errOut := simrun(t, "sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-10,1-10", "-out", t.TempDir())
	assert.Equal(t, 2, code, out)
	assert.Contains(t, errOut, `simrun sweep: -seeds: "1-10" and "1-10" overlap (seed 1 is in both): give each seed once`)
}
