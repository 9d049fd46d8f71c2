package simtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTheCommandNamesTheTestsPackage: the package in the command a failure
// prints is the test's, even when Check is called through a helper of
// another package.
func TestTheCommandNamesTheTestsPackage(t *testing.T) {
	for _, tc := range []struct {
		test  string
		funcs []string
		want  string
	}{
		{"TestTellers", []string{"example.com/bank_test.TestTellers", "testing.tRunner"}, "example.com/bank"},
		{"TestTellers/sub", []string{"example.com/testutil.SimCheck", "example.com/bank.TestTellers.func1", "testing.tRunner"}, "example.com/bank"},
		{"TestTellers", []string{"example.com/bank.TestTellersAgain", "example.com/bank.TestTellers", "testing.tRunner"}, "example.com/bank"},
		{"TestNamedByRun", []string{"example.com/x/y_test.helper", "example.com/x/y_test.TestSomething", "testing.tRunner"}, "example.com/x/y"},
		{"TestX", []string{"main.main"}, "main"},
		{"TestX", nil, "."},
	} {
		assert.Equal(t, tc.want, testPackage(tc.test, tc.funcs), "%s %v", tc.test, tc.funcs)
	}
}
