package sim

import (
	"fmt"
	"runtime"
	"strings"
)

// panicSite returns a key for where a panic began: its value's type and the
// first frame of the panicking stack that is neither the runtime nor a test
// library's assertion helpers. Call it from a deferred function that
// recovered the panic.
func panicSite(v any) uint64 {
	var pcs [48]uintptr
	n := runtime.Callers(2, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	key := fmt.Sprintf("%T", v)
	seenPanic := false
	for {
		f, more := frames.Next()
		if seenPanic && !strings.HasPrefix(f.Function, "runtime.") && !isHelperFrame(f.Function) {
			key += fmt.Sprintf("@%s:%d", f.Function, f.Line)
			break
		}
		if f.Function == "runtime.gopanic" {
			seenPanic = true
		}
		if !more {
			break
		}
	}
	h := newHasher()
	h.str(key)
	return uint64(h)
}

func isHelperFrame(fn string) bool {
	return strings.HasPrefix(fn, "pgregory.net/rapid.") || strings.HasPrefix(fn, "github.com/stretchr/testify/")
}

// repanic raises v again from the call site chosen by site.
func repanic(v any, site uint64) {
	repanicSites[site%uint64(len(repanicSites))](v)
}
