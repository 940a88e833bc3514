package engine

import (
	"math/bits"
	"slices"
)

// A tensor's layout. Shape says how many elements each dimension has;
// Strides, when set, says how many elements apart consecutive indices of
// each dimension are (upstream counts strides in elements, not bytes).
// Nil Strides is the row-major layout; Tensor.view stores row-major
// strides as nil (NormalStrides), so a strided view from a script is
// never one contiguous run of bytes, and the contiguous fast paths apply
// to every other tensor.
//
// Span is how far the tensor reaches from Addr: the bytes from its first
// element to one past its last. That is what must lie inside the memory
// behind it; NBytes, the bytes of its elements, is what a kernel reads.

// RowMajor returns the strides of shape laid out row-major.
func RowMajor(shape []int) []int {
	st := make([]int, len(shape))
	n := 1
	for d := len(shape) - 1; d >= 0; d-- {
		st[d] = n
		n *= shape[d]
	}
	return st
}

// NormalStrides returns strides as a Tensor stores them: nil when they
// are row-major for shape (a dimension of one element has no stride that
// matters), else a copy.
func NormalStrides(shape, strides []int) []int {
	if strides == nil {
		return nil
	}
	n := 1
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] != 1 && strides[d] != n {
			return slices.Clone(strides)
		}
		n *= shape[d]
	}
	return nil
}

// Span is the bytes from t's first element to one past its last (0 for a
// tensor of no elements), and false when that is more than maxBytes or a
// stride is negative.
func (t Tensor) Span() (int, bool) {
	if t.Strides == nil {
		return tensorBytes(t)
	}
	if len(t.Strides) != len(t.Shape) {
		return 0, false
	}
	last := uint64(0) // element offset of the last element
	for d, n := range t.Shape {
		s := t.Strides[d]
		switch {
		case n == 0:
			return 0, true
		case n < 0 || s < 0:
			return 0, false
		}
		hi, lo := bits.Mul64(uint64(n-1), uint64(s))
		if hi != 0 || lo > maxBytes {
			return 0, false
		}
		last += lo
		if last > maxBytes {
			return 0, false
		}
	}
	n := (last + 1) * uint64(t.DType.Size())
	if n > maxBytes {
		return 0, false
	}
	return int(n), true
}

// spanBytes is Span for a tensor already checked at submit.
func (t Tensor) spanBytes() int {
	n, _ := t.Span()
	return n
}

// checkLayout refuses, at submit, a tensor whose strides cannot be laid
// out: one per dimension, none negative, a span of at most maxBytes, and
// no zero stride on a dimension of several elements that the task writes
// (every index of it would be the same bytes, written in no order).
func checkLayout(op string, i int, t Tensor, tag Tag) error {
	if t.Strides == nil {
		return nil
	}
	if len(t.Strides) != len(t.Shape) {
		return Errorf(ValueError, "%s: tensor %d has %d strides for %d dimensions", op, i, len(t.Strides), len(t.Shape))
	}
	for d, s := range t.Strides {
		if s < 0 {
			return Errorf(ValueError, "%s: tensor %d: stride %d of dimension %d is negative", op, i, s, d)
		}
		if s == 0 && t.Shape[d] > 1 && tag.Writes() {
			return Errorf(ValueError, "%s: tensor %d is %s but dimension %d (%d elements) has stride 0: its elements would be the same bytes", op, i, tag, d, t.Shape[d])
		}
	}
	if _, ok := t.Span(); !ok {
		return Errorf(ValueError, "%s: tensor %d: shape %v with strides %v of %s reaches more than %d bytes", op, i, t.Shape, t.Strides, t.DType, maxBytes)
	}
	return nil
}

// layout is a tensor's bytes as dependency inference sees them: the
// address of its first element, the size of an element, and the
// dimensions that move through memory (more than one element, a stride
// not 0), outermost (largest stride) first, strides in bytes. A
// contiguous tensor is one element of all its bytes and no dimensions.
type layout struct {
	addr uint64
	elem uint64
	dims []dim
}

type dim struct {
	n, stride uint64 // elements, and bytes between consecutive ones
}

// layoutOf returns the layout of a strided tensor t at addr (which may
// differ from t.Addr for a remote buffer).
func layoutOf(t Tensor, addr uint64) layout {
	es := uint64(t.DType.Size())
	l := layout{addr: addr, elem: es}
	for d, n := range t.Shape {
		if n > 1 && t.Strides[d] != 0 { // a zero stride reads the same bytes again
			l.dims = append(l.dims, dim{n: uint64(n), stride: uint64(t.Strides[d]) * es})
		}
	}
	slices.SortStableFunc(l.dims, func(a, b dim) int {
		switch {
		case a.stride > b.stride:
			return -1
		case a.stride < b.stride:
			return 1
		}
		return 0
	})
	return l
}

// extent is the bytes from the first element of dims to one past its
// last, for elements of elem bytes.
func extent(dims []dim, elem uint64) uint64 {
	n := elem
	for _, d := range dims {
		n += (d.n - 1) * d.stride
	}
	return n
}

// same reports whether l and o are the same bytes laid out the same way.
func (l layout) same(o layout) bool {
	return l.addr == o.addr && l.elem == o.elem && slices.Equal(l.dims, o.dims)
}

// bound is l's bounding byte range [lo, hi).
func (l layout) bound() (uint64, uint64) { return l.addr, l.addr + extent(l.dims, l.elem) }

// touches reports whether any byte of l lies in [lo, hi): the outermost
// dimension's indices whose rows could reach the range are tried, each
// recursing into the rows inside it, so a range that falls between the
// rows of a view is told apart from one that meets them.
func (l layout) touches(lo, hi uint64) bool {
	return touchRows(l.addr, l.dims, l.elem, lo, hi)
}

func touchRows(base uint64, dims []dim, elem, lo, hi uint64) bool {
	if len(dims) == 0 {
		return base < hi && lo < base+elem
	}
	d, rest := dims[0], dims[1:]
	inner := extent(rest, elem)
	if d.stride == 0 {
		return touchRows(base, rest, elem, lo, hi)
	}
	// Row k covers [base+k*stride, base+k*stride+inner): it can meet
	// [lo, hi) only for first <= k <= last.
	first := uint64(0)
	if lo >= base+inner {
		first = (lo-base-inner)/d.stride + 1
	}
	if hi <= base {
		return false
	}
	last := min(d.n-1, (hi-base-1)/d.stride)
	for k := first; k <= last; k++ {
		if touchRows(base+k*d.stride, rest, elem, lo, hi) {
			return true
		}
	}
	return false
}

// overlaps reports whether two layouts share a byte: bounding ranges
// first, then per dimension when both are laid out alike (the same
// element size and dimension strides): each start then splits into one
// index per dimension and a remainder inside the innermost step, and
// when every element of both stays inside its own step of each dimension
// (coords), two elements share a byte only at the same indices with
// remainders less than an element apart. So the two views share a byte
// only if their index ranges meet in every dimension. Layouts unlike each
// other are taken to overlap when their bounding ranges do (an edge too
// many, never one too few); a contiguous range is compared row by row.
func overlaps(a, b layout) bool {
	alo, ahi := a.bound()
	blo, bhi := b.bound()
	if alo >= bhi || blo >= ahi {
		return false
	}
	switch {
	case len(a.dims) == 0: // a is contiguous: exact against any layout
		return b.touches(alo, ahi)
	case len(b.dims) == 0:
		return a.touches(blo, bhi)
	case a.elem != b.elem || len(a.dims) != len(b.dims) || len(a.dims) > maxDims:
		return true
	}
	for k := range a.dims {
		if a.dims[k].stride != b.dims[k].stride {
			return true
		}
	}
	base := min(a.addr, b.addr)
	ca, ra, ok := coords(a, base)
	if !ok {
		return true
	}
	cb, rb, ok := coords(b, base)
	if !ok {
		return true
	}
	if max(ra, rb)-min(ra, rb) >= a.elem {
		return false // the same slot of every step, elements apart
	}
	for k := range a.dims {
		if ca[k] >= cb[k]+b.dims[k].n || cb[k] >= ca[k]+a.dims[k].n {
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
func coords(l layout, base uint64) ([maxDims]uint64, uint64, bool) {
	var c [maxDims]uint64
	off := l.addr - base
	for k, d := range l.dims {
		c[k] = off / d.stride
		off -= c[k] * d.stride
	}
	n := len(l.dims)
	if off+l.elem > l.dims[n-1].stride {
		return c, 0, false
	}
	start := off // bytes from the start of dimension k-1's current step
	for k := n - 1; k >= 1; k-- {
		start += c[k] * l.dims[k].stride
		if start+extent(l.dims[k:], l.elem) > l.dims[k-1].stride {
			return c, 0, false
		}
	}
	return c, off, true
}

// checkWriteOverlap refuses a task member two of whose tensors write
// overlapping bytes: nothing orders two arguments of one task, so which
// write lands is up to the kernel (upstream refuses them at submit too).
// Reads may overlap anything; an empty tensor writes no bytes; tensors
// the runtime allocates (address 0) are fresh memory.
func checkWriteOverlap(op string, a *TaskArgs) error {
	for i := range a.Tensors {
		if !a.Tags[i].Writes() {
			continue
		}
		for j := i + 1; j < len(a.Tensors); j++ {
			if !a.Tags[j].Writes() {
				continue
			}
			if writesOverlap(a.Tensors[i], a.Tensors[j]) {
				return Errorf(ValueError, "%s: tensors %d (%s, %s) and %d (%s, %s) write overlapping bytes; two arguments of one task are not ordered, so give each its own bytes",
					op, i, a.Tags[i], a.Tensors[i], j, a.Tags[j], a.Tensors[j])
			}
		}
	}
	return nil
}

// writesOverlap reports whether two checked tensors of one member share a
// byte of the same memory.
func writesOverlap(x, y Tensor) bool {
	kx, lx, okx := placeOf(x)
	ky, ly, oky := placeOf(y)
	if !okx || !oky || kx != ky {
		return false
	}
	return overlaps(lx, ly)
}

// placeOf is where a tensor's bytes are, as dependency inference keys
// them (addrOf; device tensors on the member's own chip, since members are
// never compared), and its layout there; false for a tensor with no bytes
// of its own yet (address 0, inline) or none at all.
func placeOf(t Tensor) (spaceKey, layout, bool) {
	if t.Inline != nil || t.Remote == nil && t.Addr == 0 {
		return spaceKey{}, layout{}, false
	}
	k, addr := addrOf(t, memberDevice)
	n := t.spanBytes()
	if n == 0 || t.Elems() == 0 {
		return k, layout{}, false
	}
	if t.Strides == nil {
		return k, layout{addr: addr, elem: uint64(n)}, true
	}
	return k, layoutOf(t, addr), true
}

// memberDevice is the space of a task member's own device memory, when
// only tensors of one member are compared.
const memberDevice = -3

// addrOf is the space of a tensor's bytes and the address of its first
// byte there: host memory, the device memory of NEXT_LEVEL worker device
// (for a ChildMemory tensor), or a remote allocation (owner, buffer,
// generation; addresses in the owner's allocation, so an owner's and an
// importer's views of a range are one range).
func addrOf(t Tensor, device int) (spaceKey, uint64) {
	switch {
	case t.Remote != nil:
		b := t.Remote.Buf
		return spaceKey{space: remoteSpace, owner: b.Owner, buf: b.BufferID, gen: b.Gen}, uint64(b.Offset + t.Remote.Offset)
	case t.ChildMemory:
		return spaceKey{space: device}, t.Addr
	}
	return spaceKey{space: -1}, t.Addr
}
