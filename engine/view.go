package engine

import (
	"math/bits"
	"slices"

	"simpler/engine/internal/core"
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

// layoutOf returns the layout of a strided tensor t at addr (which may
// differ from t.Addr for a remote buffer).
func layoutOf(t Tensor, addr uint64) core.Layout {
	es := uint64(t.DType.Size())
	l := core.Layout{Addr: addr, Elem: es}
	for d, n := range t.Shape {
		if n > 1 && t.Strides[d] != 0 { // a zero stride reads the same bytes again
			l.Dims = append(l.Dims, core.Dim{N: uint64(n), Stride: uint64(t.Strides[d]) * es})
		}
	}
	slices.SortStableFunc(l.Dims, func(a, b core.Dim) int {
		switch {
		case a.Stride > b.Stride:
			return -1
		case a.Stride < b.Stride:
			return 1
		}
		return 0
	})
	return l
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
	return core.Overlaps(lx, ly)
}

// placeOf is where a tensor's bytes are, as dependency inference keys
// them (addrOf; device tensors on the member's own chip, since members are
// never compared), and its layout there; false for a tensor with no bytes
// of its own yet (address 0, inline) or none at all.
func placeOf(t Tensor) (core.SpaceKey, core.Layout, bool) {
	if t.Inline != nil || t.Remote == nil && t.Addr == 0 {
		return core.SpaceKey{}, core.Layout{}, false
	}
	k, addr := addrOf(t, memberDevice)
	n := t.spanBytes()
	if n == 0 || t.Elems() == 0 {
		return k, core.Layout{}, false
	}
	if t.Strides == nil {
		return k, core.Layout{Addr: addr, Elem: uint64(n)}, true
	}
	return k, layoutOf(t, addr), true
}

// addrOf is the space of a tensor's bytes and the address of its first
// byte there: host memory, the device memory of NEXT_LEVEL worker device
// (for a ChildMemory tensor), or a remote allocation (owner, buffer,
// generation; addresses in the owner's allocation, so an owner's and an
// importer's views of a range are one range).
func addrOf(t Tensor, device int) (core.SpaceKey, uint64) {
	switch {
	case t.Remote != nil:
		b := t.Remote.Buf
		return core.SpaceKey{Space: remoteSpace, Owner: b.Owner, Buf: b.BufferID, Gen: b.Gen}, uint64(b.Offset + t.Remote.Offset)
	case t.ChildMemory:
		return core.SpaceKey{Space: device}, t.Addr
	}
	return core.SpaceKey{Space: hostSpace}, t.Addr
}
