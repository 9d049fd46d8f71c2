// Command flaky is the fixture of the triage tests: a "test" that fails
// deterministically, from the copy it is told it is, in known ways and at
// known rates, printing what varies between runs (numbers, addresses,
// durations, temporary paths) so that signatures must mask it.
//
// Copy i = (LLMDST_STRESS_ROUND-1)*FLAKY_PARALLEL + LLMDST_STRESS_COPY-1 of a
// variant fails
//
//   - with a CHECK on a count when i%5 == 0 (20%), exit status 1;
//   - else, unless -fixed-tok, because its temporary tokenizer file
//     vanished when i%8 == 3 (10% of all copies), exit status 1;
//   - else, with -new-bug, with an index-out-of-range panic when
//     i%4 == 1, exit status 2;
//
// and passes otherwise.
//
// FLAKY_RECORD=DIR makes every copy write DIR/VARIANT-ROUND-COPY with its
// TMPDIR, arguments and process ids. FLAKY_CHECK_TMP=1 makes a copy fail
// when another copy left its marker file in its TMPDIR, and leave its own. FLAKY_HANG=N makes copy N of every round start a child
// and then sleep for an hour, as a hung test does; with FLAKY_IGNORE_QUIT=1
// it ignores SIGQUIT too. FLAKY_SLEEP_MS=M makes every copy take M
// milliseconds longer. FLAKY_REACH=1 makes every copy with i%8 == 3, the
// tokenizer race's window, say so with task.Reach(…, "tok-window") (twice:
// it is logged once), whether or not it fails there.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmdst/llmdst/task"
)

func main() {
	if os.Getenv("FLAKY_SLEEPER") != "" {
		time.Sleep(time.Hour)
		return
	}
	variant := os.Getenv("LLMDST_STRESS_VARIANT")
	round := envInt("LLMDST_STRESS_ROUND", 1)
	copyN := envInt("LLMDST_STRESS_COPY", 1)
	parallel := envInt("FLAKY_PARALLEL", 1)
	i := (round-1)*parallel + copyN - 1
	args := os.Args[1:]

	record := []string{"tmpdir=" + os.Getenv("TMPDIR"), "args=" + strings.Join(args, " "), "pid=" + strconv.Itoa(os.Getpid())}
	hang := envInt("FLAKY_HANG", 0) == copyN
	if hang {
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "FLAKY_SLEEPER=1")
		if err := child.Start(); err != nil {
			fmt.Println("error: cannot start the sleeper:", err)
			os.Exit(4)
		}
		record = append(record, "child="+strconv.Itoa(child.Process.Pid))
	}
	if os.Getenv("FLAKY_CHECK_TMP") != "" {
		if os.Getenv("TMPDIR") == "" {
			fmt.Println("error: FLAKY_CHECK_TMP needs TMPDIR set, so as not to litter the system's")
			os.Exit(3)
		}
		marker := filepath.Join(os.TempDir(), "flaky-marker")
		if _, err := os.Stat(marker); err == nil {
			fmt.Println("error: TMPDIR", os.TempDir(), "is shared with another copy")
			os.Exit(3)
		}
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			fmt.Println("error: cannot write to TMPDIR:", err)
			os.Exit(3)
		}
	}
	if dir := os.Getenv("FLAKY_RECORD"); dir != "" {
		name := fmt.Sprintf("%s-%d-%d", variant, round, copyN)
		// Write then rename, so that a reader never sees half a record.
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, []byte(strings.Join(record, "\n")+"\n"), 0o600); err != nil {
			fmt.Println("error: cannot record:", err)
			os.Exit(3)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			fmt.Println("error: cannot record:", err)
			os.Exit(3)
		}
	}
	if hang {
		if os.Getenv("FLAKY_IGNORE_QUIT") != "" {
			signal.Ignore(syscall.SIGQUIT)
		}
		time.Sleep(time.Hour)
	}
	time.Sleep(time.Duration(envInt("FLAKY_SLEEP_MS", 0)) * time.Millisecond)

	if os.Getenv("FLAKY_REACH") == "1" && i%8 == 3 {
		task.Reach(task.Real(), "tok-window")
		task.Reach(task.Real(), "tok-window")
	}

	start := time.Now()
	fmt.Printf("[engine] copy %d of round %d, seed 0x%x, build 848d4a87%04x\n", copyN, round, 0x1f3a+i*7919, i)
	fmt.Printf("[engine] worker pool at 0xc%09x started in %dµs\n", 0x12345+i*4096, 150+i)
	switch {
	case i%5 == 0:
		fmt.Printf("[engine] drained in %v\n", time.Since(start)+time.Duration(i)*time.Millisecond)
		fmt.Printf("engine_test.cpp:131: CHECK( Drain(engine, reused) == 3 ) with expansion: %d == 3\n", 4+i%4)
		fmt.Println("test cases: 1 | 1 failed")
		os.Exit(1)
	case i%8 == 3 && !slices.Contains(args, "-fixed-tok"):
		f, err := os.CreateTemp("", "engine_test_*_tok_0.json")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(4)
		}
		f.Close()
		os.Remove(f.Name()) // another copy cleaned up "its" file
		if _, err := os.Open(f.Name()); err != nil {
			fmt.Fprintf(os.Stderr, "tokenizer: cannot open %s\n", f.Name())
			os.Exit(1)
		}
	case i%4 == 1 && slices.Contains(args, "-new-bug"):
		slots := []int{1, 2, 3}
		_ = slots[3+i%5] // panics: index out of range [N] with length 3
	}
	fmt.Println("test cases: 1 | 1 passed")
}

func envInt(key string, def int) int {
	v, err := strconv.Atoi(os.Getenv(key))
	if err != nil {
		return def
	}
	return v
}
