// Package inplace copies and reduces elements directly over memory — the
// bytes of host tensors, device memory and domain windows — with loops
// over typed slices, never through arrays: what the collectives' kernels
// move is read once and written once.
//
// The contract:
//
//   - Reduce(dt, op, dsts, srcs) stores srcs[0] op srcs[1] op ... op
//     srcs[k-1], elementwise and left to right, into every dst; with one
//     source it copies it (bytes as they are). Every slice has the same
//     length, a multiple of dt's size.
//   - Each step is computed and rounded as the copying operations of
//     starlib/array compute it: integers wrap to their width (int64 and
//     uint64 exactly, never through float64), float16 and bfloat16 add in
//     float32 and round to nearest even after every step, FP8 and FP4 round
//     through float64 as a store does, bool is true when any (sum, max) or
//     every (min) input is non-zero. max and min of floats return NaN when
//     either input is NaN.
//   - The result is that of computing into a temporary and copying it out,
//     whatever the slices share: a dst may be one of the sources, and
//     overlapping ranges at different offsets are read before they are
//     written.
//   - Nothing is allocated except for that last case: work goes block by
//     block through a scratch buffer on the stack, each source block read
//     once, each dst block written once, while the block is in the cache.
//   - ReduceStop checks the task's stop signal (halt) between groups of
//     blocks and, once it fired, returns its error with the dsts partly
//     written: a stopped task's outputs are not its results.
package inplace

import (
	"math"
	"unsafe"

	"simpler/hal/dtype"
	"simpler/internal/halt"
	"simpler/kind"
)

// Op is an elementwise reduction.
type Op uint8

const (
	Sum Op = iota
	Max
	Min
)

var opNames = [...]string{"sum", "max", "min"}

func (o Op) String() string { return opNames[o] }

// ParseOp accepts "sum", "max" or "min".
func ParseOp(s string) (Op, bool) {
	for i, n := range opNames {
		if n == s {
			return Op(i), true
		}
	}
	return 0, false
}

// blockBytes is how much of each range one step works on: with a
// handful of sources and the scratch it stays in the first-level cache.
const blockBytes = 8 << 10

// stopEvery is how many blocks pass between two checks of the stop
// signal: 256 KiB, tens of microseconds of work, so that the check costs
// nothing measurable and a stop is seen well within a millisecond.
const stopEvery = 32

// Reduce stores op over srcs into every dst (see the package comment).
// It returns a ValueError when the slices disagree on their length or the
// length is not a whole number of elements, before it writes anything.
func Reduce(dt dtype.DType, op Op, dsts, srcs [][]byte) error {
	return ReduceStop(dt, op, dsts, srcs, nil)
}

// ReduceStop is Reduce that ends early, with stop's error, once stop has
// fired; a nil stop never fires.
func ReduceStop(dt dtype.DType, op Op, dsts, srcs [][]byte, stop *halt.Signal) error {
	size := dt.Size()
	switch {
	case size == 0:
		return kind.Errorf(kind.ValueError, "inplace: no element type")
	case len(srcs) == 0 || len(dsts) == 0:
		return kind.Errorf(kind.ValueError, "inplace: %d sources into %d destinations; want at least one of each", len(srcs), len(dsts))
	case op > Min:
		return kind.Errorf(kind.ValueError, "inplace: unknown op %d", op)
	}
	n := len(srcs[0])
	for _, s := range srcs {
		if len(s) != n {
			return kind.Errorf(kind.ValueError, "inplace: sources of %d and %d bytes", n, len(s))
		}
	}
	for _, d := range dsts {
		if len(d) != n {
			return kind.Errorf(kind.ValueError, "inplace: a destination of %d bytes for sources of %d", len(d), n)
		}
	}
	if n%size != 0 {
		return kind.Errorf(kind.ValueError, "inplace: %d bytes are not whole %s elements", n, dt)
	}
	if n == 0 {
		return nil
	}
	if len(srcs) == 1 && len(dsts) == 1 {
		copy(dsts[0], srcs[0]) // memmove: any overlap
		return nil
	}
	srcs = detach(dsts, srcs)
	if n <= smallBytes {
		return reduceSmall(dt, op, dsts, srcs)
	}
	return reduceBlocks(dt, op, dsts, srcs, stop)
}

// smallBytes is the largest reduction reduceSmall takes: a ring over many
// ranks moves segments of an element or a few.
const smallBytes = 256

// reduceSmall is one block of at most smallBytes. Its scratch is that
// small because Go zeroes a scratch array on every call, and zeroing
// blockBytes cost more than reducing a handful of elements.
func reduceSmall(dt dtype.DType, op Op, dsts, srcs [][]byte) error {
	var scratch [smallBytes / 8]uint64 // 8-byte aligned for every element type
	n := len(srcs[0])
	sb := unsafe.Slice((*byte)(unsafe.Pointer(&scratch[0])), n)
	var sbuf, dbuf [16][]byte
	reduceBlock(dt, op, window(dbuf[:0], dsts, 0, n), window(sbuf[:0], srcs, 0, n), sb)
	return nil
}

// reduceBlocks reduces n bytes block by block, checking stop every
// stopEvery blocks.
func reduceBlocks(dt dtype.DType, op Op, dsts, srcs [][]byte, stop *halt.Signal) error {
	n := len(srcs[0])
	var scratch [blockBytes / 8]uint64 // 8-byte aligned for every element type
	sb := unsafe.Slice((*byte)(unsafe.Pointer(&scratch[0])), blockBytes)
	var sbuf, dbuf [16][]byte
	for i, off := 0, 0; off < n; i, off = i+1, off+blockBytes {
		if i%stopEvery == stopEvery-1 && stop.Stopped() {
			return stop.Err("inplace")
		}
		m := min(blockBytes, n-off)
		bs := window(sbuf[:0], srcs, off, m)
		ds := window(dbuf[:0], dsts, off, m)
		reduceBlock(dt, op, ds, bs, sb[:m])
	}
	return nil
}

// window returns the [off, off+m) part of each range, in buf when it has
// room (it does for up to 16 ranges: no allocation).
func window(buf [][]byte, ranges [][]byte, off, m int) [][]byte {
	for _, r := range ranges {
		buf = append(buf, r[off:off+m:off+m])
	}
	return buf
}

// reduceBlock computes one block: the result lands in the first dst when
// that is safe, in scratch otherwise, then is copied to the other dsts.
// (detach has made every overlap of a dst and a source an exact alias.)
func reduceBlock(dt dtype.DType, op Op, dsts, srcs [][]byte, scratch []byte) {
	acc := scratch
	switch {
	case len(srcs) == 1:
		acc = srcs[0]
	case !overlaps(dsts[0], srcs[2:]):
		// The first pass of a fold reads the first two sources at i
		// before it writes acc[i], so acc may be either of them
		// (t.add_(u)); a later source it must not be.
		acc = dsts[0]
	}
	if len(srcs) > 1 {
		fold(dt, op, acc, srcs)
	}
	for _, d := range dsts {
		if !alias(d, acc) {
			copy(d, acc)
		}
	}
}

// alias reports whether a and b are the same bytes.
func alias(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// overlaps reports whether d shares any byte with one of srcs.
func overlaps(d []byte, srcs [][]byte) bool {
	for _, s := range srcs {
		if overlap(d, s) {
			return true
		}
	}
	return false
}

func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// detach copies every source that a dst overlaps at another offset (or
// with another length) into memory of its own: block by block, a dst
// block written early would otherwise be read later as a source block.
// A dst that is exactly a source is fine block by block; so is the usual
// case, where nothing overlaps, which allocates nothing.
func detach(dsts, srcs [][]byte) [][]byte {
	var out [][]byte
	for k, s := range srcs {
		for _, d := range dsts {
			if overlap(d, s) && !alias(d, s) {
				if out == nil {
					out = append([][]byte(nil), srcs...)
				}
				out[k] = append([]byte(nil), s...)
				break
			}
		}
	}
	if out == nil {
		return srcs
	}
	return out
}

// asSlice views little-endian bytes as elements (the simulator's memory is
// host memory and the host is little-endian).
func asSlice[T any](b []byte) []T {
	var zero T
	n := len(b) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// fold computes acc = srcs[0] op srcs[1] op ... (len(srcs) >= 2) in dt.
func fold(dt dtype.DType, op Op, acc []byte, srcs [][]byte) {
	switch dt {
	case dtype.Float32:
		foldT[float32](op, acc, srcs)
	case dtype.Int8:
		foldT[int8](op, acc, srcs)
	case dtype.Int16:
		foldT[int16](op, acc, srcs)
	case dtype.Int32:
		foldT[int32](op, acc, srcs)
	case dtype.Int64:
		foldT[int64](op, acc, srcs)
	case dtype.UInt8:
		foldT[uint8](op, acc, srcs)
	case dtype.UInt16:
		foldT[uint16](op, acc, srcs)
	case dtype.UInt32:
		foldT[uint32](op, acc, srcs)
	case dtype.UInt64:
		foldT[uint64](op, acc, srcs)
	case dtype.Bool:
		foldBool(op, acc, srcs)
	case dtype.Float16, dtype.BFloat16:
		foldHalf(dt, op, acc, srcs)
	default:
		foldNarrow(dt, op, acc, srcs)
	}
}

// foldT folds up to four sources per pass over acc, left to right: acc =
// s0 op s1 op s2 op s3, then acc = acc op s4 op s5 op s6, and so on. For
// an integer or float32 type that is the sequential result exactly.
func foldT[T number](op Op, accB []byte, srcs [][]byte) {
	acc := asSlice[T](accB)
	s := func(k int) []T { return asSlice[T](srcs[k]) }
	var k int
	switch {
	case len(srcs) >= 4:
		fold4(op, acc, s(0), s(1), s(2), s(3))
		k = 4
	case len(srcs) == 3:
		fold3(op, acc, s(0), s(1), s(2))
		k = 3
	default:
		fold2(op, acc, s(0), s(1))
		k = 2
	}
	for ; k+3 <= len(srcs); k += 3 {
		fold4(op, acc, acc, s(k), s(k+1), s(k+2))
	}
	switch len(srcs) - k {
	case 2:
		fold3(op, acc, acc, s(k), s(k+1))
	case 1:
		fold2(op, acc, acc, s(k))
	}
}

// foldBool: a bool is true when its byte is not zero; results are 0 or 1.
func foldBool(op Op, acc []byte, srcs [][]byte) {
	a, b := srcs[0], srcs[1][:len(srcs[0])]
	acc = acc[:len(a)]
	for i := range acc {
		acc[i] = boolOp(op, a[i], b[i])
	}
	for _, s := range srcs[2:] {
		s = s[:len(acc)]
		for i := range acc {
			acc[i] = boolOp(op, acc[i], s[i])
		}
	}
}

func boolOp(op Op, a, b byte) byte {
	if op == Min {
		if a != 0 && b != 0 {
			return 1
		}
		return 0
	}
	if a|b != 0 {
		return 1
	}
	return 0
}

// foldHalf folds float16 or bfloat16 in float32, rounding every step.
func foldHalf(dt dtype.DType, op Op, accB []byte, srcs [][]byte) {
	acc := asSlice[uint16](accB)
	dec, enc := halfToFloat, dtype.FloatToHalf
	if dt == dtype.BFloat16 {
		dec, enc = bf16ToFloat, dtype.FloatToBF16
	}
	a, b := asSlice[uint16](srcs[0]), asSlice[uint16](srcs[1])
	b = b[:len(a)]
	acc = acc[:len(a)]
	for i := range acc {
		acc[i] = enc(apply(op, dec(a[i]), dec(b[i])))
	}
	for _, sb := range srcs[2:] {
		s := asSlice[uint16](sb)[:len(acc)]
		for i := range acc {
			acc[i] = enc(apply(op, dec(acc[i]), dec(s[i])))
		}
	}
}

func halfToFloat(h uint16) float32 { return dtype.HalfToFloat(h) }
func bf16ToFloat(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// foldNarrow folds the FP8 and FP4 kinds (one byte each) element by
// element through their decoders, as an array store rounds them.
func foldNarrow(dt dtype.DType, op Op, acc []byte, srcs [][]byte) {
	sz := dt.Size()
	for i := 0; i+sz <= len(acc); i += sz {
		v := float32(dt.Float(srcs[0][i:]))
		for _, s := range srcs[1:] {
			v = apply(op, v, float32(dt.Float(s[i:])))
			v = float32(dt.RoundFloat(float64(v)))
		}
		dt.PutFloat(acc[i:], float64(v))
	}
}

// apply is one float32 step; max and min propagate NaN.
func apply(op Op, a, b float32) float32 {
	switch op {
	case Max:
		return max(a, b)
	case Min:
		return min(a, b)
	}
	return a + b
}
