package main

import (
	"io/fs"
	"math"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// simrun collects garbage less often than Go does by default (gcPercent):
// a sweep's live data is small, so its heap grows to five times that and
// no more. A seed with steps of no time is the exception: its starved
// output handler holds hundreds of thousands of batches at once, and five
// times that is hundreds of MB a worker. So that such a sweep works harder
// at collecting before it nears what the machine or its cgroup allows,
// simrun sets a soft memory limit (runtime/debug.SetMemoryLimit) of half
// the least of them. A sweep whose live data stays under that pays nothing
// for it. GOMEMLIMIT replaces the limit, as GOGC replaces gcPercent; each
// simrun process takes its half, so two in one cgroup may reach all of it.

// gcPercent is simrun's GOGC: a sweep allocates in short-lived bursts, one
// run at a time per core, with little live data, so collecting less often
// buys speed for memory this tool can spare.
const gcPercent = 400

// tuneGC sets simrun's GOGC, unless GOGC is set, and its memory limit.
func tuneGC(getenv func(string) string, root fs.FS) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	setMemoryLimit(getenv, root)
}

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

// memoryShare divides the memory simrun may use into what its heap may
// grow to before the collector works harder: a half.
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
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
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
// names, and of their ancestors as far up as this view of the hierarchy
// goes: v2's memory.max and memory.high and v1's memory.limit_in_bytes, where
// /proc/self/mountinfo says the hierarchy is mounted, and from which of its
// cgroups (a container's mount starts at its own). A cgroup outside the
// mount is not read, nor is a limit that is unset ("max", or v1's
// page-rounded largest number) or unreadable.
func cgroupLimits(root fs.FS) []int64 {
	mounts := cgroupMounts(root)
	b, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil || len(mounts) == 0 {
		return nil
	}
	var out []int64
	for line := range strings.Lines(string(b)) {
		// hierarchy-ID:controllers:path; v2's is 0 with no controllers.
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), ":", 3)
		if len(f) != 3 {
			continue
		}
		v2 := f[0] == "0" && f[1] == ""
		if !v2 && !hasController(f[1], "memory") {
			continue
		}
		for _, m := range mounts {
			if m.v2 != v2 {
				continue
			}
			rel, ok := under(f[2], m.root)
			if !ok {
				continue
			}
			files := []string{"memory.limit_in_bytes"}
			if v2 { // memory.high throttles the cgroup and reclaims its memory
				files = []string{"memory.max", "memory.high"}
			}
			for p := rel; ; p = path.Dir(p) {
				for _, f := range files {
					if n, ok := readLimit(root, path.Join(m.point, p, f)); ok {
						out = append(out, n)
					}
				}
				if p == "/" || p == "." {
					break
				}
			}
		}
	}
	return out
}

// cgroupMount is where a cgroup hierarchy with memory limits is mounted
// (relative to the root, without its leading slash), and the cgroup of the
// hierarchy the mount shows.
type cgroupMount struct {
	point, root string
	v2          bool
}

// cgroupMounts reads /proc/self/mountinfo for the cgroup v2 hierarchy and
// the v1 hierarchy of the memory controller.
func cgroupMounts(root fs.FS) []cgroupMount {
	b, err := fs.ReadFile(root, "proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []cgroupMount
	for line := range strings.Lines(string(b)) {
		// ID parent major:minor root mount-point options [optional...] - type source super-options
		before, after, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(before), strings.Fields(after)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		m := cgroupMount{root: unescapeMount(f[3]), point: strings.TrimPrefix(unescapeMount(f[4]), "/")}
		switch {
		case g[0] == "cgroup2":
			m.v2 = true
		case g[0] == "cgroup" && hasController(g[2], "memory"):
		default:
			continue
		}
		if m.point == "" {
			m.point = "."
		}
		out = append(out, m)
	}
	return out
}

// under returns p relative to root, as an absolute path, and whether p is
// root or below it. A path that climbs out (a cgroup outside this cgroup
// namespace, which the kernel shows with "..") is not.
func under(p, root string) (string, bool) {
	if !strings.HasPrefix(p, "/") || slices.Contains(strings.Split(p, "/"), "..") {
		return "", false
	}
	p, root = path.Clean(p), path.Clean(root)
	switch {
	case root == "/":
		return p, true
	case p == root:
		return "/", true
	case strings.HasPrefix(p, root+"/"):
		return p[len(root):], true
	}
	return "", false
}

// unescapeMount undoes mountinfo's octal escapes of a space, a tab, a
// newline and a backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

func hasController(list, name string) bool {
	return slices.Contains(strings.Split(list, ","), name)
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
