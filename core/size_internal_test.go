package core

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestTheSchedulerStaysInItsSizeClass: a simulated run makes a scheduler
// for every engine core, and a seed makes an engine; past 2,304 bytes
// Go's allocator rounds it up to 2,688, and every seed of every scenario
// pays 384 bytes more (benchab: abort-reuse +1.9% B/op when a field of
// SchedulerOutput, of which the scheduler holds two, and two of Config
// took it to 2,352). A field that must grow the scheduler past it should
// live in one of the structures it points to (kvOffload, specCounts,
// schedLoRA), which only the runs that use them allocate.
func TestTheSchedulerStaysInItsSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the size classes counted are a 64-bit platform's")
	}
	assert.LessOrEqual(t, unsafe.Sizeof(Scheduler{}), uintptr(2304))
}
