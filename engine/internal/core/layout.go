package core

import "slices"

// MaxDims is the most dimensions a tensor has (the engine refuses more at
// submit), so the coordinates of a layout fit in an array.
const MaxDims = 16

// Layout is a tensor's bytes as dependency inference sees them: the
// address of its first element, the size of an element, and the
// dimensions that move through memory (more than one element, a stride
// not 0), outermost (largest stride) first, strides in bytes. A
// contiguous tensor is one element of all its bytes and no dimensions.
type Layout struct {
	Addr uint64
	Elem uint64
	Dims []Dim
}

type Dim struct {
	N, Stride uint64 // elements, and bytes between consecutive ones
}

// extent is the bytes from the first element of dims to one past its
// last, for elements of elem bytes.
func extent(dims []Dim, elem uint64) uint64 {
	n := elem
	for _, d := range dims {
		n += (d.N - 1) * d.Stride
	}
	return n
}

// same reports whether l and o are the same bytes laid out the same way.
func (l Layout) same(o Layout) bool {
	return l.Addr == o.Addr && l.Elem == o.Elem && slices.Equal(l.Dims, o.Dims)
}

// bound is l's bounding byte range [lo, hi).
func (l Layout) bound() (uint64, uint64) { return l.Addr, l.Addr + extent(l.Dims, l.Elem) }

// touches reports whether any byte of l lies in [lo, hi): the outermost
// dimension's indices whose rows could reach the range are tried, each
// recursing into the rows inside it, so a range that falls between the
// rows of a view is told apart from one that meets them.
func (l Layout) touches(lo, hi uint64) bool {
	return touchRows(l.Addr, l.Dims, l.Elem, lo, hi)
}

func touchRows(base uint64, dims []Dim, elem, lo, hi uint64) bool {
	if len(dims) == 0 {
		return base < hi && lo < base+elem
	}
	d, rest := dims[0], dims[1:]
	inner := extent(rest, elem)
	if d.Stride == 0 {
		return touchRows(base, rest, elem, lo, hi)
	}
	// Row k covers [base+k*stride, base+k*stride+inner): it can meet
	// [lo, hi) only for first <= k <= last.
	first := uint64(0)
	if lo >= base+inner {
		first = (lo-base-inner)/d.Stride + 1
	}
	if hi <= base {
		return false
	}
	last := min(d.N-1, (hi-base-1)/d.Stride)
	for k := first; k <= last; k++ {
		if touchRows(base+k*d.Stride, rest, elem, lo, hi) {
			return true
		}
	}
	return false
}

// overlaps reports whether two Layouts share a byte: bounding ranges
// first, then per dimension when both are laid out alike (the same
// element size and dimension strides): each start then splits into one
// index per dimension and a remainder inside the innermost step, and
// when every element of both stays inside its own step of each dimension
// (coords), two elements share a byte only at the same indices with
// remainders less than an element apart. So the two views share a byte
// only if their index ranges meet in every dimension. Layouts unlike each
// other are taken to overlap when their bounding ranges do (an edge too
// many, never one too few); a contiguous range is compared row by row.
func Overlaps(a, b Layout) bool {
	alo, ahi := a.bound()
	blo, bhi := b.bound()
	if alo >= bhi || blo >= ahi {
		return false
	}
	switch {
	case len(a.Dims) == 0: // a is contiguous: exact against any layout
		return b.touches(alo, ahi)
	case len(b.Dims) == 0:
		return a.touches(blo, bhi)
	case a.Elem != b.Elem || len(a.Dims) != len(b.Dims) || len(a.Dims) > MaxDims:
		return true
	}
	for k := range a.Dims {
		if a.Dims[k].Stride != b.Dims[k].Stride {
			return true
		}
	}
	base := min(a.Addr, b.Addr)
	ca, ra, ok := coords(a, base)
	if !ok {
		return true
	}
	cb, rb, ok := coords(b, base)
	if !ok {
		return true
	}
	if max(ra, rb)-min(ra, rb) >= a.Elem {
		return false // the same slot of every step, elements apart
	}
	for k := range a.Dims {
		if ca[k] >= cb[k]+b.Dims[k].N || cb[k] >= ca[k]+a.Dims[k].N {
			return false
		}
	}
	return true
}

// coords splits l's start, counted from base, into one index per
// dimension (outermost first) and a remainder below the innermost
// stride, and false unless every element of l stays inside one step of
// each dimension: from its index on, a dimension's rows (with the
// remainder) reach no further than the stride of the dimension outside
// it, and an element no further than the innermost stride. Then no two
// different indices name overlapping bytes.
func coords(l Layout, base uint64) ([MaxDims]uint64, uint64, bool) {
	var c [MaxDims]uint64
	off := l.Addr - base
	for k, d := range l.Dims {
		c[k] = off / d.Stride
		off -= c[k] * d.Stride
	}
	n := len(l.Dims)
	if off+l.Elem > l.Dims[n-1].Stride {
		return c, 0, false
	}
	start := off // bytes from the start of dimension k-1's current step
	for k := n - 1; k >= 1; k-- {
		start += c[k] * l.Dims[k].Stride
		if start+extent(l.Dims[k:], l.Elem) > l.Dims[k-1].Stride {
			return c, 0, false
		}
	}
	return c, off, true
}
