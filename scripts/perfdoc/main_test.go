package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
cpu: AMD EPYC
BenchmarkYieldSwitch/pull-2   	 1000	 110.0 ns/op	 110.0 ns/switch
BenchmarkYieldSwitch/pull-2   	 1000	  95.0 ns/op	  95.0 ns/switch
BenchmarkYieldSwitch/pull-2   	 1000	 101.0 ns/op	 101.0 ns/switch
`

func TestMedianAndSpreadOverTheCounts(t *testing.T) {
	b, env, err := parseBench(strings.NewReader(sample))
	require.NoError(t, err)
	assert.Equal(t, "AMD EPYC", env["cpu"])
	m, ok := get(b, "BenchmarkYieldSwitch/pull-2", "ns/switch")
	require.True(t, ok)
	assert.Equal(t, 101.0, m)
	assert.Equal(t, "95 – 110 (3)", spread(b, "BenchmarkYieldSwitch/pull-2", "ns/switch", "%.0f"))
	assert.Equal(t, "—", spread(b, "BenchmarkMissing-2", "ns/switch", "%.0f"))
	assert.Equal(t, "—", spread(b, "BenchmarkYieldSwitch/pull-2", "tokens/s", "%.0f"))
}

func TestParseBenchSaysWhatIsNotANumber(t *testing.T) {
	_, _, err := parseBench(strings.NewReader("BenchmarkX-2 10 fast ns/op\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"fast" is not a number`)
}
