//go:build unix

package triage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// alive reports whether a process exists and is not a zombie: an orphan
// whose reaper is slow counts as dead once killed.
func alive(pid int) bool {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// The state follows the parenthesised command name.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			return s[i+2] != 'Z' && s[i+2] != 'X'
		}
	}
	return syscall.Kill(pid, 0) == nil
}

// assertGone asserts that the processes a hung fixture copy recorded (its
// own and its child's) have ended.
func assertGone(t *testing.T, rec map[string]string) {
	t.Helper()
	for _, key := range []string{"pid", "child"} {
		pid, err := strconv.Atoi(rec[key])
		require.NoError(t, err, "the hung copy recorded its %s", key)
		assert.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 10*time.Millisecond, "%s %d still running", key, pid)
	}
}

func TestStressTimeoutKillsAHungCopyAndItsChildren(t *testing.T) {
	rec := t.TempDir()
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 2, Rounds: 1, Timeout: 2 * time.Second, Cmd: []string{flakyBin(t)},
		Env: []string{"FLAKY_PARALLEL=2", "FLAKY_HANG=1", "FLAKY_RECORD=" + rec},
	}, nil)
	require.NoError(t, err)
	require.Len(t, rep.Copies, 2)
	hung, fine := rep.Copies[0], rep.Copies[1]
	assert.True(t, hung.TimedOut)
	assert.True(t, hung.Failed)
	// SIGQUIT first: the Go runtime prints where every goroutine is, the
	// sleep that hung among them, and exits with status 2.
	assert.Equal(t, "", hung.Signal)
	assert.Equal(t, 2, hung.ExitCode)
	assert.Contains(t, string(hung.Output), "SIGQUIT: quit")
	assert.Contains(t, string(hung.Output), "time.Sleep(")
	assert.Contains(t, string(hung.Output), "main.main()")
	assert.Equal(t, "timed out after <dur>", hung.Signature)
	assert.False(t, fine.Failed)
	assert.False(t, fine.TimedOut)
	require.Len(t, rep.Variants[0].Modes, 1)
	assert.Equal(t, "timed out after <dur>", rep.Variants[0].Modes[0].Signature)
	assert.Contains(t, rep.Conditions(), "timeout 2s per copy")
	assertGone(t, records(t, rec)["A-1-1"])
}

// TestStressTimeoutKillsACopyThatIgnoresSIGQUIT: the stacks are asked
// for, not waited for: a copy that ignores SIGQUIT is killed once the
// output pipes' grace has passed.
func TestStressTimeoutKillsACopyThatIgnoresSIGQUIT(t *testing.T) {
	rec := t.TempDir()
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 1, Rounds: 1, Timeout: time.Second, Cmd: []string{flakyBin(t)},
		Env: []string{"FLAKY_HANG=1", "FLAKY_IGNORE_QUIT=1", "FLAKY_RECORD=" + rec},
	}, nil)
	require.NoError(t, err)
	require.Len(t, rep.Copies, 1)
	hung := rep.Copies[0]
	assert.True(t, hung.TimedOut)
	assert.Equal(t, "SIGKILL", hung.Signal)
	assert.Equal(t, "timed out after <dur>", hung.Signature)
	assertGone(t, records(t, rec)["A-1-1"])
}

func TestStressCancelKillsTheRunningCopies(t *testing.T) {
	rec := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rep, err := Stress(ctx, StressConfig{
		Parallel: 3, Rounds: 3, Cmd: []string{flakyBin(t)},
		Env: []string{"FLAKY_PARALLEL=3", "FLAKY_HANG=2", "FLAKY_RECORD=" + rec},
	}, func(done, total int) {
		if done == 2 { // all but the hung copy have ended
			// Cancel once the hung copy has recorded its processes: on a
			// loaded machine it may not have started yet.
			go func() {
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					if b, err := os.ReadFile(filepath.Join(rec, "A-1-2")); err == nil && strings.Contains(string(b), "child=") {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
		}
	})
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	assert.Equal(t, "stress: interrupted in round 1 of variant A: context canceled", err.Error())
	require.NotNil(t, rep)
	assert.Empty(t, rep.Copies, "the interrupted round is not reported")
	assert.Empty(t, rep.Variants[0].Rounds)
	assertGone(t, records(t, rec)["A-1-2"])

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), "  -        -        -        0/0\n", "rounds not run read as -")
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestStressLoadBurnsCPUAndStops(t *testing.T) {
	bin := flakyBin(t)
	before := cpuTime(t)
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 2, Rounds: 1, Load: 2, Cmd: []string{bin},
		Env: []string{"FLAKY_PARALLEL=2", "FLAKY_SLEEP_MS=300"},
	}, nil)
	require.NoError(t, err)
	// The copies sleep; only the burners can have used this much CPU.
	assert.Greater(t, cpuTime(t)-before, 50*time.Millisecond, "the load burned CPU beside the copies")
	assert.Contains(t, rep.Conditions(), fmt.Sprintf("load 2 spinning goroutine(s) (GOMAXPROCS %d)", rep.GOMAXPROCS))
	assert.Equal(t, 2, rep.Summary().Load)
	goleak.VerifyNone(t) // the burners are gone
}
