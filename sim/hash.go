package sim

// hasher folds a run's decisions and events into a 64-bit FNV-1a style hash.
// It reads only integers and strings given to it, never pointers or wall
// time, so the same run hashes the same on any machine.
type hasher uint64

const (
	hashOffset = 14695981039346656037
	hashPrime  = 1099511628211
)

func newHasher() hasher { return hashOffset }

func (h *hasher) word(w uint64) {
	x := uint64(*h)
	// Fold the word in byte-wide lanes so that every bit reaches the product.
	x = (x ^ (w & 0xffffffff)) * hashPrime
	x = (x ^ (w >> 32)) * hashPrime
	*h = hasher(x)
}

func (h *hasher) str(s string) {
	x := uint64(*h)
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		x = (x ^ (w & 0xffffffff)) * hashPrime
		x = (x ^ (w >> 32)) * hashPrime
	}
	for ; i < len(s); i++ {
		x = (x ^ uint64(s[i])) * hashPrime
	}
	x = (x ^ uint64(len(s))) * hashPrime
	*h = hasher(x)
}
