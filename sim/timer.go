package sim

import "time"

// timerEntry is a sleeping task or an AfterFunc callback, due at deadline.
// Entries fire in (deadline, seq) order, seq being the order of creation.
type timerEntry struct {
	deadline time.Duration
	seq      uint64
	sleeper  *Task  // wake this task, or
	fn       func() // run this as a task named "timer"
	index    int    // position in the heap; -1 once fired or stopped
}

// timerHeap is a binary min-heap of timer entries.
type timerHeap []*timerEntry

func (h timerHeap) less(i, j int) bool {
	if h[i].deadline != h[j].deadline {
		return h[i].deadline < h[j].deadline
	}
	return h[i].seq < h[j].seq
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *timerHeap) push(e *timerEntry) {
	e.index = len(*h)
	*h = append(*h, e)
	h.up(e.index)
}

func (h *timerHeap) pop() *timerEntry {
	return h.removeAt(0)
}

func (h *timerHeap) remove(e *timerEntry) {
	h.removeAt(e.index)
}

func (h *timerHeap) removeAt(i int) *timerEntry {
	old := *h
	n := len(old) - 1
	e := old[i]
	if i != n {
		old.swap(i, n)
	}
	old[n] = nil
	*h = old[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	e.index = -1
	return e
}

func (h timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h timerHeap) down(i0 int) bool {
	i := i0
	n := len(h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.less(r, j) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
