package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const gib = 1 << 30

func files(kv ...string) fstest.MapFS {
	m := fstest.MapFS{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = &fstest.MapFile{Data: []byte(kv[i+1])}
	}
	return m
}

// v2Host is a host of 24 GiB with cgroup v2 mounted at /sys/fs/cgroup,
// simrun in the cgroup of /proc/self/cgroup's line cgroup, and kv's files.
func v2Host(cgroup string, kv ...string) fstest.MapFS {
	return files(append([]string{"proc/meminfo", meminfo24G, "proc/self/mountinfo", mountV2, "proc/self/cgroup", cgroup}, kv...)...)
}

const (
	meminfo24G = "MemTotal:       25165824 kB\nMemFree:         1000000 kB\n" // 24 GiB
	// mountinfo's lines of the cgroup hierarchies, mounted from their root.
	mountV2 = "40 30 0:37 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	mountV1 = "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
		"34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
)

func TestTheMemoryLimitIsHalfTheLeastMemorySimrunMayUse(t *testing.T) {
	for _, c := range []struct {
		name string
		fs   fstest.MapFS
		want int64
	}{
		{"the machine's memory alone", files("proc/meminfo", meminfo24G), 12 * gib},
		{"MemTotal on a later line", files("proc/meminfo", "MemFree: 1000 kB\nMemTotal: 4194304 kB\n"), 2 * gib},
		{"a v2 container's limit under the machine's", v2Host("0::/\n",
			"sys/fs/cgroup/memory.max", "2147483648\n"), 1 * gib},
		{"v2's memory.high, under its memory.max", v2Host("0::/\n",
			"sys/fs/cgroup/memory.max", "4294967296\n",
			"sys/fs/cgroup/memory.high", "2147483648\n"), 1 * gib},
		{"a v2 limit of max is none", v2Host("0::/\n",
			"sys/fs/cgroup/memory.max", "max\n"), 12 * gib},
		{"a v2 ancestor's limit, the cgroup's own unset", v2Host("0::/ci.slice/job-7\n",
			"sys/fs/cgroup/ci.slice/job-7/memory.max", "max\n",
			"sys/fs/cgroup/ci.slice/memory.max", "1073741824\n"), gib / 2},
		{"the least of a cgroup's and its ancestor's", v2Host("0::/a/b\n",
			"sys/fs/cgroup/a/b/memory.max", "4294967296\n",
			"sys/fs/cgroup/a/memory.max", "8589934592\n"), 2 * gib},
		{"v2 mounted where mountinfo says (a hybrid host's unified)", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", mountV1+"40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
			"proc/self/cgroup", "4:memory:/\n0::/a\n",
			"sys/fs/cgroup/unified/a/memory.max", "1073741824\n",
			"sys/fs/cgroup/memory/a/memory.max", "268435456\n"), gib / 2}, // v1's hierarchy, not v2's
		{"a mount's point and root with a space, escaped", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", "40 30 0:37 /ci\\040job /sys/fs/cgroup\\040v2 rw - cgroup2 cgroup2 rw\n",
			"proc/self/cgroup", "0::/ci job/x\n",
			"sys/fs/cgroup v2/x/memory.max", "1073741824\n"), gib / 2},
		{"a hierarchy mounted at the root", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", "40 30 0:37 / / rw - cgroup2 cgroup2 rw\n",
			"proc/self/cgroup", "0::/\n",
			"memory.max", "1073741824\n"), gib / 2},
		{"a v2 cgroup outside the namespace is not read", v2Host("0::/../x\n",
			"sys/fs/cgroup/x/memory.max", "268435456\n"), 12 * gib},
		{"a v2 limit of 0 is none", v2Host("0::/\n",
			"sys/fs/cgroup/memory.max", "0\n"), 12 * gib},
		{"a v1 memory controller's limit, among others", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", mountV1,
			"proc/self/cgroup", "5:cpu:/job\n4:blkio,memory:/job\n0::/\n",
			"sys/fs/cgroup/cpu/job/memory.limit_in_bytes", "1073741824\n", // not the memory hierarchy's
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes", "6442450944\n"), 3 * gib},
		{"v1's number for no limit is none (a hybrid host)", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", mountV1,
			"proc/self/cgroup", "4:memory:/process_api/bc66\n0::/\n",
			"sys/fs/cgroup/memory/process_api/bc66/memory.limit_in_bytes", "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"), 12 * gib},
		{"v1's number for no limit, and no /proc/meminfo: nothing", files(
			"proc/self/mountinfo", mountV1,
			"proc/self/cgroup", "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854710272\n"), 0}, // 64 KiB pages
		{"a v1 limit of terabytes is one", files(
			"proc/meminfo", "MemTotal: 4294967296 kB\n", // 4 TiB
			"proc/self/mountinfo", mountV1,
			"proc/self/cgroup", "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "2199023255552\n"), 1 << 40},
		{"a v1 container without a cgroup namespace: its mount starts at its own cgroup", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", "34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n",
			"proc/self/cgroup", "4:memory:/docker/abc/job\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes", "1073741824\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n"), gib / 2},
		{"a v1 cgroup that only looks like the mount's ancestors is not read", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", "34 30 0:31 /docker/outer /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n",
			"proc/self/cgroup", "4:memory:/docker/outer\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n",
			"sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "268435456\n"), 1 * gib},
		{"a cgroup outside the mount's root is not read", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", "34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n",
			"proc/self/cgroup", "4:memory:/docker/abcd\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456\n"), 12 * gib},
		{"no mountinfo: no cgroup read", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "0::/\n",
			"sys/fs/cgroup/memory.max", "1073741824\n"), 12 * gib},
		{"a cgroup limit with no /proc/meminfo", files(
			"proc/self/mountinfo", mountV2,
			"proc/self/cgroup", "0::/\n",
			"sys/fs/cgroup/memory.max", "1073741824\n"), gib / 2},
		{"unreadable numbers are none", files(
			"proc/meminfo", meminfo24G,
			"proc/self/mountinfo", mountV2+"garbage\n",
			"proc/self/cgroup", "0::/\nnonsense\n4:memory:relative\n",
			"sys/fs/cgroup/memory.max", "lots\n"), 12 * gib},
		{"a MemTotal without its unit is none", files("proc/meminfo", "MemTotal: 25165824\n"), 0},
		{"a MemTotal not in kB is none", files("proc/meminfo", "MemTotal: 25165824 MB\n"), 0},
		{"nothing to read", files(), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, memoryLimit(c.fs))
		})
	}
}

func TestThisMachinesMemoryLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc and /sys/fs/cgroup")
	}
	limit := memoryLimit(os.DirFS("/"))
	total := memTotal(os.DirFS("/"))
	require.Positive(t, total, "/proc/meminfo's MemTotal")
	assert.Positive(t, limit)
	assert.LessOrEqual(t, limit, total/2)
}

func TestSimrunsGCIsGOGC400AndTheLimitUnlessTheEnvironmentSaysOtherwise(t *testing.T) {
	oldPercent := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(oldPercent); debug.SetMemoryLimit(oldLimit) })
	root := files("proc/meminfo", meminfo24G)

	tuneGC(func(string) string { return "" }, root)
	assert.Equal(t, gcPercent, debug.SetGCPercent(100))
	assert.Equal(t, int64(12*gib), debug.SetMemoryLimit(oldLimit))

	env := map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}
	tuneGC(func(k string) string { return env[k] }, root)
	assert.Equal(t, 100, debug.SetGCPercent(100), "GOGC's, left alone")
	assert.Equal(t, oldLimit, debug.SetMemoryLimit(-1), "GOMEMLIMIT's, left alone")

	assert.Zero(t, setMemoryLimit(func(string) string { return "" }, files()), "nothing read, no limit")
	assert.Equal(t, oldLimit, debug.SetMemoryLimit(-1))
}
