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

const meminfo24G = "MemTotal:       25165824 kB\nMemFree:         1000000 kB\n" // 24 GiB

func TestTheMemoryLimitIsHalfTheLeastMemorySimrunMayUse(t *testing.T) {
	for _, c := range []struct {
		name string
		fs   fstest.MapFS
		want int64
	}{
		{"the machine's memory alone", files("proc/meminfo", meminfo24G), 12 * gib},
		{"a v2 container's limit under the machine's", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "0::/\n",
			"sys/fs/cgroup/memory.max", "2147483648\n"), 1 * gib},
		{"a v2 limit of max is none", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "0::/\n",
			"sys/fs/cgroup/memory.max", "max\n"), 12 * gib},
		{"a v2 ancestor's limit, the cgroup's own unset", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "0::/ci.slice/job-7\n",
			"sys/fs/cgroup/ci.slice/job-7/memory.max", "max\n",
			"sys/fs/cgroup/ci.slice/memory.max", "1073741824\n"), gib / 2},
		{"the least of a cgroup's and its ancestor's", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "0::/a/b\n",
			"sys/fs/cgroup/a/b/memory.max", "4294967296\n",
			"sys/fs/cgroup/a/memory.max", "8589934592\n"), 2 * gib},
		{"a v1 memory controller's limit, among others", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "5:devices:/\n4:cpu,memory:/job\n0::/\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes", "6442450944\n"), 3 * gib},
		{"v1's number for no limit is none (a hybrid host)", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "4:memory:/process_api/bc66\n0::/\n",
			"sys/fs/cgroup/memory/process_api/bc66/memory.limit_in_bytes", "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"), 12 * gib},
		{"v1's number for no limit, and no /proc/meminfo: nothing", files(
			"proc/self/cgroup", "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854710272\n"), 0}, // 64 KiB pages
		{"a container's view without the cgroup's path: its root read", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "0::/kubepods/pod1/abc\n",
			"sys/fs/cgroup/memory.max", "3221225472\n"), 3 * gib / 2},
		{"a cgroup limit with no /proc/meminfo", files(
			"proc/self/cgroup", "0::/\n",
			"sys/fs/cgroup/memory.max", "1073741824\n"), gib / 2},
		{"unreadable numbers are none", files(
			"proc/meminfo", meminfo24G,
			"proc/self/cgroup", "0::/\nnonsense\n4:memory:relative\n",
			"sys/fs/cgroup/memory.max", "lots\n"), 12 * gib},
		{"a MemTotal not in kB is none", files("proc/meminfo", "MemTotal: 25165824 MB\n"), 0},
		{"nothing to read", files(), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, memoryLimit(c.fs))
		})
	}
}

func TestSimrunSetsItsMemoryLimitUnlessGOMEMLIMITDoes(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	root := files("proc/meminfo", meminfo24G)

	set := setMemoryLimit(func(string) string { return "" }, root)
	assert.Equal(t, int64(12*gib), set)
	assert.Equal(t, int64(12*gib), debug.SetMemoryLimit(-1), "the runtime's limit")

	debug.SetMemoryLimit(old)
	env := map[string]string{"GOMEMLIMIT": "300MiB"}
	assert.Zero(t, setMemoryLimit(func(k string) string { return env[k] }, root))
	assert.Equal(t, old, debug.SetMemoryLimit(-1), "GOMEMLIMIT's, left alone")

	assert.Zero(t, setMemoryLimit(func(string) string { return "" }, files()), "nothing read")
	assert.Equal(t, old, debug.SetMemoryLimit(-1))
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
