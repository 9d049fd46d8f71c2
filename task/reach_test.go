package task_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/task"
)

// reachChildEnv makes TestReachChild the body of a child process.
const reachChildEnv = "LLMDST_TASK_REACH_CHILD"

// TestReachChild is a child process's body for the tests below: it
// reaches situations on the real runtime, some more than once, from
// several goroutines.
func TestReachChild(t *testing.T) {
	if os.Getenv(reachChildEnv) != "1" {
		t.Skip("the body of a child process")
	}
	rt := task.Real()
	task.Reach(rt, "window")
	g := task.NewGroup(rt, "g")
	for range 8 {
		g.Go("reacher", func() {
			task.Reach(rt, "window")
			task.Reach(rt, "two\nlines")
		})
	}
	g.Wait()
	task.Reach(rt, "last")
}

// child runs TestReachChild in a process of its own with env added, and
// returns its combined output.
func child(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReachChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), reachChildEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// TestReachOnTheRealRuntimeLogsWhenAsked: on the real runtime Reach does
// nothing unless the process started with LLMDST_REACHED naming a file;
// then it appends each name the first time it is reached, a name with a
// line break on one line.
func TestReachOnTheRealRuntimeLogsWhenAsked(t *testing.T) {
	log := filepath.Join(t.TempDir(), "reached")
	child(t, task.ReachedEnv+"="+log)
	names, err := task.ReadReached(log)
	require.NoError(t, err)
	assert.Equal(t, []string{"window", "two lines", "last"}, names)

	// Without it, nothing is written anywhere: the log of a process that
	// reached nothing does not exist, and reads as none.
	none := filepath.Join(t.TempDir(), "none")
	child(t, task.ReachedEnv+"=")
	names, err = task.ReadReached(none)
	require.NoError(t, err)
	assert.Empty(t, names)
	_, err = os.Stat(none)
	assert.True(t, os.IsNotExist(err))
}

// TestReachOnTheRealRuntimeSaysOnceWhenItCannotLog: a log that cannot be
// written is reported on stderr once, and the program goes on.
func TestReachOnTheRealRuntimeSaysOnceWhenItCannotLog(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "no-such-dir", "reached")
	out := child(t, task.ReachedEnv+"="+bad)
	assert.Contains(t, out, "task: LLMDST_REACHED="+bad+": cannot log the situation \"window\", and logs no more")
	assert.Equal(t, 1, strings.Count(out, "cannot log"), out)
}

// TestReadReachedReadsEachNameOnce: two processes that shared a log (or
// one that appended twice) read back as each name once, in order.
func TestReadReachedReadsEachNameOnce(t *testing.T) {
	log := filepath.Join(t.TempDir(), "reached")
	require.NoError(t, os.WriteFile(log, []byte("a\nb\na\n\nc\n"), 0o644))
	names, err := task.ReadReached(log)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, names)

	_, err = task.ReadReached(t.TempDir()) // a directory
	assert.Error(t, err)
}
