// Package bounds checks ranges without overflow. An offset or a length
// that comes from another process, another host or a script may be
// anywhere in its type's range, so off+n must not be formed before it is
// known to fit: near 2^64 it wraps to a small number and passes a naive
// check, and int(x) of a uint64 of 2^63 or more is negative.
package bounds

// Fits reports whether n bytes at off lie inside size bytes (off+n <=
// size), without forming off+n.
func Fits(off, n, size uint64) bool { return off <= size && n <= size-off }

// FitsInt is Fits for ints; a negative argument never fits.
func FitsInt(off, n, size int) bool {
	return off >= 0 && n >= 0 && size >= 0 && Fits(uint64(off), uint64(n), uint64(size))
}

// Inside reports whether [addr, addr+n) lies inside [base, base+size).
// base+size itself is never formed either, so a region that ends at the
// top of the address space is checked correctly.
func Inside(addr, n, base, size uint64) bool { return addr >= base && Fits(addr-base, n, size) }

// Int is the checked form of int(x): x as an int when it is at most max
// (a max below 0 admits nothing).
func Int(x uint64, max int) (int, bool) {
	if max < 0 || x > uint64(max) {
		return 0, false
	}
	return int(x), true
}

// Product is unit times every dimension, when no dimension is negative and
// the product is at most max; ok is false otherwise. A zero dimension
// makes the product 0 whatever the others are (an empty tensor of a
// shape that would be huge is still empty). unit must be >= 0.
func Product(dims []int, unit int, max int64) (n int64, ok bool) {
	if unit < 0 || max < 0 {
		return 0, false
	}
	n, over := int64(unit), false
	for _, d := range dims {
		switch {
		case d == 0:
			return 0, true
		case d < 0:
			over = true
		case !over && n > max/int64(d):
			over = true // keep looking: a later zero still wins
		case !over:
			n *= int64(d)
		}
	}
	if over || n > max {
		return 0, false
	}
	return n, true
}
