// Package array is the Starlark array value scripts compute and check tensor
// data with, and the Go API other packages build and read arrays through.
//
// An *Array is a dense row-major block of elements of one dtype.DType. Float
// kinds are held as []float32 and every store rounds to the kind (float16,
// bfloat16 and the FP8/FP4 kinds round to nearest even, as the hardware does);
// integer and bool kinds are held as []int64 and every store wraps to the
// width (bool stores v != 0; uint64 keeps its bits and compares, divides and
// prints as unsigned). Arithmetic is elementwise and done in the array's
// dtype, between arrays of the same dtype and shape or with a number on
// either side; there is no other broadcasting. Arrays cannot be changed from
// Starlark. Errors start with their kind: "ValueError: ", "TypeError: ",
// "IndexError: ".
//
// As in numpy, len(a), indexing, iteration and slicing work on the first
// dimension; Size is the element count.
package array

import (
	"encoding/binary"
	"fmt"
	"math"

	"simpler/hal/dtype"
)

// maxElems bounds the element count of one array (2 GiB of int64
// elements), so that a shape typed in a script fails cleanly instead of
// exhausting memory or overflowing int arithmetic.
const maxElems = 1 << 28

// Array is a dense row-major array of one element type. Exactly one of f
// (float kinds) and n (integer and bool kinds) is in use.
type Array struct {
	dt    dtype.DType
	shape []int
	f     []float32
	n     []int64
}

// New returns a zero-filled array. It panics on an invalid dtype or a
// negative dimension; FromValue and the Starlark builtins report those as
// errors instead.
func New(dt dtype.DType, shape []int) *Array {
	if err := checkDType(dt); err != nil {
		panic("array.New: " + err.Error())
	}
	if err := checkShape(shape); err != nil {
		panic("array.New: " + err.Error())
	}
	return alloc(dt, shape)
}

// alloc makes a zero array of a checked dtype and shape.
func alloc(dt dtype.DType, shape []int) *Array {
	a := &Array{dt: dt, shape: append([]int{}, shape...)}
	if dt.IsFloat() {
		a.f = make([]float32, numel(shape))
	} else {
		a.n = make([]int64, numel(shape))
	}
	return a
}

// FromBytes decodes little-endian elements; len(b) must be
// product(shape)*dt.Size().
func FromBytes(dt dtype.DType, shape []int, b []byte) (*Array, error) {
	if err := checkDType(dt); err != nil {
		return nil, err
	}
	if err := checkShape(shape); err != nil {
		return nil, err
	}
	if want := numel(shape) * dt.Size(); len(b) != want {
		return nil, fmt.Errorf("ValueError: %d bytes do not hold an array of shape %s and dtype %s (need %d bytes)",
			len(b), shapeString(shape), dt, want)
	}
	a := alloc(dt, shape)
	a.decode(b)
	return a, nil
}

// Bytes returns the little-endian encoding of the elements.
func (a *Array) Bytes() []byte {
	b := make([]byte, a.Size()*a.dt.Size())
	a.encode(b)
	return b
}

// DType returns the element type.
func (a *Array) DType() dtype.DType { return a.dt }

// Shape returns a copy of the dimensions.
func (a *Array) Shape() []int { return append([]int{}, a.shape...) }

// Len is the length of the first dimension, as Starlark's len() and
// indexing see it (1 for a 0-d array).
func (a *Array) Len() int {
	if len(a.shape) == 0 {
		return 1
	}
	return a.shape[0]
}

// Size returns the element count.
func (a *Array) Size() int {
	if a.f != nil {
		return len(a.f)
	}
	return len(a.n)
}

// Float returns flat element i as a float64 (uint64 reads as unsigned).
func (a *Array) Float(i int) float64 {
	switch {
	case a.f != nil:
		return float64(a.f[i])
	case a.dt == dtype.UInt64:
		return float64(uint64(a.n[i]))
	}
	return float64(a.n[i])
}

// SetFloat stores v into flat element i, rounding (float kinds) or
// truncating toward zero and wrapping (integer kinds; bool stores v != 0).
func (a *Array) SetFloat(i int, v float64) {
	if a.f != nil {
		a.f[i] = roundF32(a.dt, float32(v))
		return
	}
	a.n[i] = floatToInt(a.dt, v)
}

func (a *Array) ndim() int { return len(a.shape) }

// isFloat reports whether the elements live in a.f.
func (a *Array) isFloat() bool { return a.f != nil }

// copy returns a deep copy.
func (a *Array) copy() *Array {
	c := &Array{dt: a.dt, shape: append([]int{}, a.shape...)}
	if a.f != nil {
		c.f = append(make([]float32, 0, len(a.f)), a.f...)
	} else {
		c.n = append(make([]int64, 0, len(a.n)), a.n...)
	}
	return c
}

func checkDType(dt dtype.DType) error {
	if dt.Size() == 0 {
		return fmt.Errorf("ValueError: invalid dtype %s", dt)
	}
	return nil
}

func checkShape(shape []int) error {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("ValueError: negative dimension %d in shape %s", d, shapeString(shape))
		}
		if d != 0 && n > maxElems/d {
			return fmt.Errorf("ValueError: shape %s has more than %d elements", shapeString(shape), maxElems)
		}
		n *= d
	}
	return nil
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// roundF32 returns v as it reads back after a store in float kind dt.
func roundF32(dt dtype.DType, v float32) float32 {
	switch dt {
	case dtype.Float32:
		return v
	case dtype.Float16:
		return dtype.HalfToFloat(dtype.FloatToHalf(v))
	case dtype.BFloat16:
		return math.Float32frombits(uint32(dtype.FloatToBF16(v)) << 16)
	}
	return float32(dt.RoundFloat(float64(v)))
}

// roundSlice rounds every element of f to float kind dt.
func roundSlice(dt dtype.DType, f []float32) {
	switch dt {
	case dtype.Float32:
	case dtype.Float16:
		for i, v := range f {
			f[i] = dtype.HalfToFloat(dtype.FloatToHalf(v))
		}
	case dtype.BFloat16:
		for i, v := range f {
			f[i] = math.Float32frombits(uint32(dtype.FloatToBF16(v)) << 16)
		}
	default:
		for i, v := range f {
			f[i] = float32(dt.RoundFloat(float64(v)))
		}
	}
}

// wrapInt returns v as it reads back after a store in integer kind dt.
func wrapInt(dt dtype.DType, v int64) int64 {
	switch dt {
	case dtype.Int8:
		return int64(int8(v))
	case dtype.Int16:
		return int64(int16(v))
	case dtype.Int32:
		return int64(int32(v))
	case dtype.UInt8:
		return int64(uint8(v))
	case dtype.UInt16:
		return int64(uint16(v))
	case dtype.UInt32:
		return int64(uint32(v))
	case dtype.Bool:
		if v != 0 {
			return 1
		}
		return 0
	}
	return v // int64, uint64
}

// wrapSlice wraps every element of n to integer kind dt.
func wrapSlice(dt dtype.DType, n []int64) {
	switch dt {
	case dtype.Int8:
		for i, v := range n {
			n[i] = int64(int8(v))
		}
	case dtype.Int16:
		for i, v := range n {
			n[i] = int64(int16(v))
		}
	case dtype.Int32:
		for i, v := range n {
			n[i] = int64(int32(v))
		}
	case dtype.UInt8:
		for i, v := range n {
			n[i] = int64(uint8(v))
		}
	case dtype.UInt16:
		for i, v := range n {
			n[i] = int64(uint16(v))
		}
	case dtype.UInt32:
		for i, v := range n {
			n[i] = int64(uint32(v))
		}
	case dtype.Bool:
		for i, v := range n {
			if v != 0 {
				n[i] = 1
			}
		}
	}
}

// floatToInt converts v for a store in integer kind dt: NaN is 0, other
// values truncate toward zero, saturate at the 64-bit range and wrap to the
// width; bool stores v != 0 (NaN is true).
func floatToInt(dt dtype.DType, v float64) int64 {
	if dt == dtype.Bool {
		if v != 0 {
			return 1
		}
		return 0
	}
	switch {
	case v != v:
		return 0
	case dt == dtype.UInt64 && v >= 1<<63:
		if v >= 1<<64 {
			return -1 // all bits set: the largest uint64
		}
		return int64(uint64(v))
	case v >= 1<<63:
		return math.MaxInt64
	case v <= -1<<63:
		return math.MinInt64
	}
	return wrapInt(dt, int64(v))
}

var le = binary.LittleEndian

func (a *Array) decode(b []byte) {
	f, n := a.f, a.n
	switch a.dt {
	case dtype.Float32:
		for i := range f {
			f[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
	case dtype.Float16:
		for i := range f {
			f[i] = dtype.HalfToFloat(le.Uint16(b[2*i:]))
		}
	case dtype.BFloat16:
		for i := range f {
			f[i] = math.Float32frombits(uint32(le.Uint16(b[2*i:])) << 16)
		}
	case dtype.Int8:
		for i := range n {
			n[i] = int64(int8(b[i]))
		}
	case dtype.UInt8:
		for i := range n {
			n[i] = int64(b[i])
		}
	case dtype.Bool:
		for i := range n {
			if b[i] != 0 {
				n[i] = 1
			}
		}
	case dtype.Int16:
		for i := range n {
			n[i] = int64(int16(le.Uint16(b[2*i:])))
		}
	case dtype.UInt16:
		for i := range n {
			n[i] = int64(le.Uint16(b[2*i:]))
		}
	case dtype.Int32:
		for i := range n {
			n[i] = int64(int32(le.Uint32(b[4*i:])))
		}
	case dtype.UInt32:
		for i := range n {
			n[i] = int64(le.Uint32(b[4*i:]))
		}
	case dtype.Int64, dtype.UInt64:
		for i := range n {
			n[i] = int64(le.Uint64(b[8*i:]))
		}
	default: // FP8 and FP4 kinds, one element per byte
		for i := range f {
			f[i] = float32(a.dt.Float(b[i:]))
		}
	}
}

func (a *Array) encode(b []byte) {
	f, n := a.f, a.n
	switch a.dt {
	case dtype.Float32:
		for i, v := range f {
			le.PutUint32(b[4*i:], math.Float32bits(v))
		}
	case dtype.Float16:
		for i, v := range f {
			le.PutUint16(b[2*i:], dtype.FloatToHalf(v))
		}
	case dtype.BFloat16:
		for i, v := range f {
			le.PutUint16(b[2*i:], dtype.FloatToBF16(v))
		}
	case dtype.Int8, dtype.UInt8, dtype.Bool:
		for i, v := range n {
			b[i] = byte(v)
		}
	case dtype.Int16, dtype.UInt16:
		for i, v := range n {
			le.PutUint16(b[2*i:], uint16(v))
		}
	case dtype.Int32, dtype.UInt32:
		for i, v := range n {
			le.PutUint32(b[4*i:], uint32(v))
		}
	case dtype.Int64, dtype.UInt64:
		for i, v := range n {
			le.PutUint64(b[8*i:], uint64(v))
		}
	default:
		for i, v := range f {
			a.dt.PutFloat(b[i:], float64(v))
		}
	}
}
