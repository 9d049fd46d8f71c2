// Package rttest runs one test body on the real runtime and under the
// simulator, so that every behaviour a test asserts is asserted in both
// worlds; and builds the failpoint set a test arms on purpose (Armed).
//
// The caller's duties:
//
//  1. Write the body against the task.Runtime it is given: start tasks with
//     rt.Go or task.Group, never with the go statement.
//  2. Assert with testify on the *testing.T it is given; a failed require
//     ends the run (under the simulator, as a task's Goexit).
//
// Usage:
//
//	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
//		e, err := engine.New(engine.Config{Runtime: rt})
//		require.NoError(t, err)
//		defer e.Close()
//	})
package rttest
