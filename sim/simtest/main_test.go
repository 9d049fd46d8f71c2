package simtest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: Check's workers
// and their pools end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
