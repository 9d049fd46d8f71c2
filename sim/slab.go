package sim

// slab hands out zeroed values of T from arrays it makes a few at a time,
// each array kept whole while any of its values is in use: a run's tasks,
// mutexes and conds cost an allocation an array rather than one each.
type slab[T any] struct {
	free []T
	n    int // values handed out
	size int // the length of the last array made
	// hint is the first array's length, when a Pool knows how many values
	// the run before took (a sweep's seeds take about as many each),
	// at most slabHintMax: 0 starts at 8. Later arrays double to 64, or
	// keep a larger first array's length.
	hint int
}

// slabHintMax bounds a slab's first array, whatever the run before took.
const slabHintMax = 256

func (b *slab[T]) new() *T {
	if len(b.free) == 0 {
		switch {
		case b.size == 0 && b.hint > 0:
			b.size = min(b.hint, slabHintMax)
		case b.size == 0:
			b.size = 8
		default:
			b.size = max(min(2*b.size, 64), b.size)
		}
		b.free = make([]T, b.size)
	}
	b.n++
	v := &b.free[0]
	b.free = b.free[1:]
	return v
}
