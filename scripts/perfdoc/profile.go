package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// profileShares is what a CPU profile's time went to, each function's own
// (flat) time summed by the part of the code it is in, as `go tool pprof
// -top` lists it.
type profileShares struct {
	parts []share // largest first
	top   share   // the function with the most time of its own
}

type share struct {
	name string
	pct  float64
}

// part returns the share of the part named, 0 when the profile has none.
func (p *profileShares) part(name string) float64 {
	for _, s := range p.parts {
		if s.name == name {
			return s.pct
		}
	}
	return 0
}

// topLine is a line of `go tool pprof -top`: flat, flat%, sum%, cum, cum%,
// the function.
var topLine = regexp.MustCompile(`^\s*\S+\s+([0-9.]+)%\s+[0-9.]+%\s+\S+\s+[0-9.]+%\s+(\S.*)$`)

// readProfileTop reads `go tool pprof -top -nodefraction=0` of a CPU
// profile. It refuses a listing that leaves nodes out, since the shares
// would not add up.
func readProfileTop(path string) (*profileShares, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := parseProfileTop(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

func parseProfileTop(r io.Reader) (*profileShares, error) {
	sums := map[string]float64{}
	p := &profileShares{}
	header, total := false, 0.0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Dropped ") {
			return nil, fmt.Errorf("the listing leaves nodes out (%q): list it with -nodefraction=0", line)
		}
		if !header {
			header = strings.Contains(line, "flat%") && strings.Contains(line, "cum%")
			continue
		}
		m := topLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("not a line of go tool pprof -top: %q", line)
		}
		pct, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		fn := m[2]
		if i := strings.LastIndex(fn, " ("); i > 0 && strings.HasSuffix(fn, ")") { // (inline), (partial-inline)
			fn = fn[:i]
		}
		sums[partOf(fn)] += pct
		total += pct
		if pct > p.top.pct {
			p.top = share{fn, pct}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !header || len(sums) == 0 {
		return nil, fmt.Errorf("no listing of functions: not the output of go tool pprof -top")
	}
	if total < 99 { // each line's share is rounded to a hundredth
		return nil, fmt.Errorf("the functions listed hold %.1f%% of the samples: list every one (-nodecount, -nodefraction=0)", total)
	}
	for name, pct := range sums {
		p.parts = append(p.parts, share{name, pct})
	}
	sort.Slice(p.parts, func(i, j int) bool {
		if p.parts[i].pct != p.parts[j].pct {
			return p.parts[i].pct > p.parts[j].pct
		}
		return p.parts[i].name < p.parts[j].name
	})
	return p, nil
}

const (
	partRuntime = "the Go runtime"
	partSim     = "the simulator"
	modulePath  = "github.com/llmdst/llmdst/"
)

// ours names the module's packages as the document speaks of them.
var ours = map[string]string{
	"sim":        partSim,
	"core":       "the engine's core",
	"engine":     "the engine's frontend",
	"props":      "the checker",
	"scenario":   "the scenarios",
	"task":       "the task seam",
	"failpoints": "the failpoints",
}

// partOf says which part of the code a function of a profile of simrun is
// in: the Go runtime (its assembly, which has no package, and the
// equality functions the compiler writes), simrun's own package main, one
// of the module's other packages, the rest of the standard library,
// another module, or code outside Go (C, the kernel, what pprof could not
// name).
func partOf(fn string) string {
	switch {
	case strings.HasPrefix(fn, "<") || strings.HasPrefix(fn, "[") || strings.Contains(fn, "cgo"):
		return "code outside Go" // <unknown>, [libc.so.6], _cgo_topofstack
	case strings.HasPrefix(fn, "type:"):
		return partRuntime // type:.eq.core.Request
	case strings.HasPrefix(fn, "main."):
		return "simrun itself"
	}
	if i := strings.IndexByte(fn, '['); i >= 0 { // a generic's shape may name other packages
		fn = fn[:i]
	}
	slash := strings.LastIndexByte(fn, '/')
	dot := strings.IndexByte(fn[slash+1:], '.')
	if dot < 0 {
		return partRuntime // aeshashbody, memeqbody, gcWriteBarrier...
	}
	pkg := fn[:slash+1+dot]
	switch {
	case pkg == "runtime" || strings.HasPrefix(pkg, "runtime/") || strings.HasPrefix(pkg, "internal/runtime/"):
		return partRuntime
	case strings.HasPrefix(pkg, modulePath):
		rel := strings.TrimPrefix(pkg, modulePath)
		if name, ok := ours[rel]; ok {
			return name
		}
		return "llmdst's " + rel
	case !strings.Contains(strings.SplitN(pkg, "/", 2)[0], "."):
		return "the rest of the standard library"
	default:
		return "other modules"
	}
}

// writeProfile says what a legacy seed's CPU went to, by the profile of
// this run's sweep; nothing when there is none.
func writeProfile(p func(string, ...any), prof *profileShares) {
	if prof == nil {
		return
	}
	var parts []string
	rest := 0.0
	for _, s := range prof.parts {
		if s.pct < 1 {
			rest += s.pct
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", s.name, s.pct))
	}
	if rest > 0 {
		parts = append(parts, fmt.Sprintf("and %.1f%% in parts of under 1%% each", rest))
	}
	p("Nor is one cost most of a seed. A legacy sweep's CPU profile on this run (`simrun sweep -scenario")
	p("abort-reuse -legacy -seeds 1-100000 -j 1 -check-determinism 0 -cpuprofile`, `go tool pprof -top`),")
	p("each function's own time summed by")
	p("part: %s. No function has more than %.1f%% of its own", strings.Join(parts, ", "), prof.top.pct)
	p("(`%s`). A simulator whose own code cost nothing would make a seed %.2f times faster (the", prof.top.name, 100/(100-prof.part(partSim)))
	p("coroutine switches it asks for are the runtime's).")
}
