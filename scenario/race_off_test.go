//go:build !race

package scenario_test

// raceEnabled: the tests run under the race detector, which makes a seed
// some ten times dearer; the sweeps take fewer seeds.
const raceEnabled = false
