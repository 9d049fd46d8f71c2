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

func TestCheckShareIsHonoured(t *testing.T) {
	for _, c := range []struct {
		share string
		want  uint64 // of seeds 1-1000
	}{
		{"1%", 10}, {"0.7", 700}, {"0.4", 400}, {"30%", 300}, {"1/3", 333}, {"0.999", 999}, {"1", 1000}, {"0", 0},
	} {
		share, err := parseCheckShare(c.share)
		require.NoError(t, err, c.share)
		var n uint64
		for seed := uint64(1); seed <= 1000; seed++ {
			if share.checks(seed) {
				n++
			}
		}
		assert.Equal(t, c.want, n, c.share)
	}
	share, err := parseCheckShare("1%")
	require.NoError(t, err)
	assert.True(t, share.checks(100))
	assert.True(t, share.checks(0))
	assert.False(t, share.checks(99))
	assert.False(t, share.checks(101))
	assert.True(t, share.checks(^uint64(0)-15), "the last multiple of 100 below 2^64")
	assert.False(t, share.checks(^uint64(0)))

	// A sweep checks the share of its seeds whatever its workers.
	for _, c := range []struct {
		share, j string
		want     uint64
	}{{"0.7", "1", 70}, {"0.7", "3", 70}, {"0.4", "2", 40}, {"30%", "2", 30}, {"1%", "2", 1}} {
		_, r := sweepJSON(t, "-scenario", "abort-reuse", "-seeds", "1-100", "-check-determinism", c.share, "-j", c.j)
		assert.Equal(t, c.want, r.Determinism, "-check-determinism %s -j %s", c.share, c.j)
	}
}

func TestCheckShareRefusesWhatIsNotAShare(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"NaN", `-check-determinism "NaN" is not a finite number: want a share of seeds between 0 and 1`},
		{"nan%", `-check-determinism "nan%" is not a finite number`},
		{"inf/inf", `-check-determinism "inf/inf" is not a finite number`},
		{"Inf", `-check-determinism "Inf" is not a finite number`},
		{"1.5", `-check-determinism "1.5": want a share of seeds between 0 and 1, as in 1% or 0.01`},
		{"-1%", `-check-determinism "-1%": want a share`},
		{"1/0", `-check-determinism "1/0": want a share`},
		{"often", `-check-determinism "often": want a share`},
	} {
		code, _, errOut := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-10", "-check-determinism", c.in, "-out", t.TempDir())
		assert.Equal(t, 2, code, c.in)
		assert.Contains(t, errOut, c.want, c.in)
	}
}

func TestShardsOfAHugeRangeCoverItWithoutOverflow(t *testing.T) {
	set, err := parseSeeds("0-1099511627775") // 2^40 seeds, the most a sweep takes
	require.NoError(t, err)
	const n = 1 << 24 // 2^40 · 2^24 overflows 64 bits
	last := set.shard(n, n)
	assert.Equal(t, "1099511562240-1099511627775", last.String())
	assert.Equal(t, uint64(1<<16), last.n)
	mid := set.shard(n/2+1, n)
	assert.Equal(t, "549755813888-549755879423", mid.String())

	code, out, errOut := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "0-1099511627775", "-shard", "16777216/16777216",
		"-stop-after", "0", "-for", "1ms", "-quiet", "-json", "-out", t.TempDir(), "-check-determinism", "0")
	require.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, `"requested_seed_range": "1099511562240-1099511627775"`)
}
