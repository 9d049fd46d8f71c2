package main

import (
	"bufio"
	"bytes"
	"io/fs"
	"math"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// simrun collects garbage less often than Go does by default (GOGC=400):
// a sweep's live data is small, so its heap grows to five times that and
// no more. A seed with steps of no time is the exception: its starved
// output handler holds hundreds of thousands of batches at once, and five
// times that is hundreds of MB a worker. So that such a sweep works harder
// at collecting rather than be killed for its memory, simrun sets a soft
// memory limit (runtime/debug.SetMemoryLimit) of half the memory it may
// use: the machine's, or its cgroup's when that is less. A sweep whose
// live data stays under that pays nothing for it; GOMEMLIMIT, like GOGC,
// overrides it.

// setMemoryLimit sets the soft memory limit from what root tells of the
// memory simrun may use, unless GOMEMLIMIT is set or nothing tells of it,
// and returns the limit it set, or 0.
func setMemoryLimit(getenv func(string) string, root fs.FS) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := memoryLimit(root)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	return limit
}

// memoryShare is the part of the memory simrun may use that its heap may
// grow to before the collector works harder.
const memoryShare = 2

// memoryLimit returns the soft memory limit simrun sets: a share of the
// least of the machine's memory (/proc/meminfo) and the limits of the
// cgroups simrun is in, v2 or v1, each cgroup's own and its ancestors'.
// root is the filesystem's root, os.DirFS("/") but in tests. It returns 0
// when it reads none of them.
func memoryLimit(root fs.FS) int64 {
	total := memTotal(root)
	for _, n := range cgroupLimits(root) {
		if total == 0 || n < total {
			total = n
		}
	}
	return total / memoryShare
}

// memTotal is MemTotal of /proc/meminfo in bytes, or 0.
func memTotal(root fs.FS) int64 {
	b, err := fs.ReadFile(root, "proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb <= 0 || kb > math.MaxInt64/1024 {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// cgroupLimits reads the memory limits of the cgroups /proc/self/cgroup
// names and of their ancestors: v2's memory.max and v1's
// memory.limit_in_bytes. One that is unset ("max", or v1's page-rounded
// largest number) or unreadable is left out.
func cgroupLimits(root fs.FS) []int64 {
	b, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return nil
	}
	var out []int64
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2's is 0 with no controllers.
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		var dir, file string
		switch {
		case f[0] == "0" && f[1] == "":
			dir, file = "sys/fs/cgroup", "memory.max"
		case hasController(f[1], "memory"):
			dir, file = "sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		// Inside a container the path may be one the container's view of
		// the hierarchy does not have: what is missing is skipped, and
		// the hierarchy's root, the container's own, read too.
		for p := path.Clean(f[2]); ; p = path.Dir(p) {
			name := path.Join(dir, strings.TrimPrefix(p, "/"), file)
			if n, ok := readLimit(root, name); ok {
				out = append(out, n)
			}
			if p == "/" {
				break
			}
		}
	}
	return out
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// noLimitV1 is at most what cgroup v1 reports for no limit: the largest
// int64 rounded down to a page, of any page size up to a MiB.
const noLimitV1 = math.MaxInt64 &^ (1<<20 - 1)

// readLimit reads one cgroup memory limit file: false when it is missing,
// says "max", or holds v1's number for none.
func readLimit(root fs.FS, name string) (int64, bool) {
	b, err := fs.ReadFile(root, name)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= noLimitV1 {
		return 0, false
	}
	return n, true
}
