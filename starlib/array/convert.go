package array

import (
	"fmt"
	"math"

	"go.starlark.net/starlark"

	"simpler/hal/dtype"
)

// Reader is a value that can produce an array copy of its contents (a
// Tensor, for instance).
// th is the thread reading, which the reader may record the read against
// (the race detector does); it may be nil.
type Reader interface {
	ReadArray(th *starlark.Thread) (*Array, error)
}

// FromValue builds a new array from v:
//   - an *Array or a Reader: converted to dt unless dt is dtype.Invalid,
//     reshaped to shape unless shape is nil (the element count must match);
//   - a list or tuple of numbers (int, float, bool), possibly nested: the
//     shape is inferred from the nesting, or given by shape (the element
//     count must match); with dt == dtype.Invalid, a list holding any float
//     is FLOAT32, one of only bools is BOOL, and one of ints is INT32 (INT64
//     or UINT64 when a value does not fit);
//   - a number: fills shape, which is then required;
//   - bytes: little-endian elements of dt, which is then required; 1-D
//     unless shape is given.
//
// The result never shares storage with v.
func FromValue(th *starlark.Thread, v starlark.Value, dt dtype.DType, shape []int) (*Array, error) {
	if dt != dtype.Invalid {
		if err := checkDType(dt); err != nil {
			return nil, err
		}
	}
	if shape != nil {
		if err := checkShape(shape); err != nil {
			return nil, err
		}
	}
	switch v := v.(type) {
	case *Array:
		return conform(v, dt, shape)
	case Reader:
		a, err := v.ReadArray(th)
		if err != nil {
			return nil, err
		}
		return conform(a, dt, shape)
	case *starlark.List, starlark.Tuple:
		return fromList(v, dt, shape)
	case starlark.Int, starlark.Float, starlark.Bool:
		if shape == nil {
			return nil, fmt.Errorf("ValueError: an array from the number %s needs a shape", v)
		}
		if dt == dtype.Invalid {
			dt = inferDType([]starlark.Value{v})
		}
		a := alloc(dt, shape)
		if err := a.fill(v); err != nil {
			return nil, err
		}
		return a, nil
	case starlark.Bytes:
		if dt == dtype.Invalid {
			return nil, fmt.Errorf("ValueError: an array from bytes needs a dtype")
		}
		if shape == nil {
			if len(v)%dt.Size() != 0 {
				return nil, fmt.Errorf("ValueError: %d bytes are not a whole number of %s elements (%d bytes each)",
					len(v), dt, dt.Size())
			}
			shape = []int{len(v) / dt.Size()}
		}
		return FromBytes(dt, shape, []byte(v))
	}
	return nil, fmt.Errorf("TypeError: cannot make an array from %s (want an array, a list, a number or bytes)", v.Type())
}

// conform returns a copy of a converted to dt (unless Invalid) and reshaped
// to shape (unless nil).
func conform(a *Array, dt dtype.DType, shape []int) (*Array, error) {
	if shape != nil && numel(shape) != a.Size() {
		return nil, fmt.Errorf("ValueError: cannot reshape an array of shape %s (%d elements) into shape %s (%d elements)",
			shapeString(a.shape), a.Size(), shapeString(shape), numel(shape))
	}
	var c *Array
	if dt != dtype.Invalid && dt != a.dt {
		c = a.astype(dt)
	} else {
		c = a.copy()
	}
	if shape != nil {
		c.shape = append([]int{}, shape...)
	}
	return c, nil
}

// fromList flattens a nested list or tuple.
func fromList(v starlark.Value, dt dtype.DType, shape []int) (*Array, error) {
	var got []int
	for x := v; ; {
		s, ok := x.(starlark.Indexable)
		if !ok || !isSeq(x) {
			break
		}
		got = append(got, s.Len())
		if s.Len() == 0 {
			break
		}
		x = s.Index(0)
	}
	if err := checkShape(got); err != nil {
		return nil, err
	}
	leaves := make([]starlark.Value, 0, numel(got))
	leaves, err := flatten(v, got, nil, leaves)
	if err != nil {
		return nil, err
	}
	if shape == nil {
		shape = got
	} else if numel(shape) != len(leaves) {
		return nil, fmt.Errorf("ValueError: a list of %d elements does not fill shape %s (%d elements)",
			len(leaves), shapeString(shape), numel(shape))
	}
	if dt == dtype.Invalid {
		dt = inferDType(leaves)
	}
	a := alloc(dt, shape)
	for i, x := range leaves {
		if err := a.set(i, x); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func isSeq(v starlark.Value) bool {
	switch v.(type) {
	case *starlark.List, starlark.Tuple:
		return true
	}
	return false
}

// flatten appends the numbers of the nested list v, whose dimensions must
// be shape, to leaves; at is v's position for error messages.
func flatten(v starlark.Value, shape, at []int, leaves []starlark.Value) ([]starlark.Value, error) {
	if len(shape) == 0 {
		switch v.(type) {
		case starlark.Int, starlark.Float, starlark.Bool:
			return append(leaves, v), nil
		case *starlark.List, starlark.Tuple:
			return nil, fmt.Errorf("ValueError: ragged nested list: element %s is a %s, want a number", indexString(at), v.Type())
		}
		return nil, fmt.Errorf("TypeError: array element %s must be a number (int, float or bool), got %s %s",
			indexString(at), v.Type(), v.String())
	}
	s, ok := v.(starlark.Indexable)
	if !ok || !isSeq(v) {
		return nil, fmt.Errorf("ValueError: ragged nested list: element %s is a %s, want a list of %d", indexString(at), v.Type(), shape[0])
	}
	if s.Len() != shape[0] {
		return nil, fmt.Errorf("ValueError: ragged nested list: element %s has length %d, want %d", indexString(at), s.Len(), shape[0])
	}
	var err error
	for i := 0; i < s.Len(); i++ {
		leaves, err = flatten(s.Index(i), shape[1:], append(at, i), leaves)
		if err != nil {
			return nil, err
		}
	}
	return leaves, nil
}

// inferDType picks the dtype of a list of numbers: FLOAT32 if any is a
// float (or the list is empty), BOOL if all are bools, else INT32, widened
// to INT64 or UINT64 when a value needs it.
func inferDType(vs []starlark.Value) dtype.DType {
	if len(vs) == 0 {
		return dtype.Float32
	}
	dt := dtype.Bool
	for _, v := range vs {
		switch v := v.(type) {
		case starlark.Float:
			return dtype.Float32
		case starlark.Int:
			if dt == dtype.Bool {
				dt = dtype.Int32
			}
			if i, ok := v.Int64(); ok {
				if (i < math.MinInt32 || i > math.MaxInt32) && dt == dtype.Int32 {
					dt = dtype.Int64
				}
			} else if v.Sign() > 0 {
				dt = dtype.UInt64
			}
		}
	}
	return dt
}

// set stores the number v into flat element i.
func (a *Array) set(i int, v starlark.Value) error {
	switch v := v.(type) {
	case starlark.Float:
		a.SetFloat(i, float64(v))
	case starlark.Bool:
		if a.f != nil {
			a.f[i] = 0
			if v {
				a.f[i] = 1
			}
		} else {
			a.n[i] = 0
			if v {
				a.n[i] = 1
			}
		}
	case starlark.Int:
		if a.f != nil {
			a.f[i] = roundF32(a.dt, float32(v.Float()))
			return nil
		}
		x, err := intBits(v)
		if err != nil {
			return err
		}
		a.n[i] = wrapInt(a.dt, x)
	default:
		return fmt.Errorf("TypeError: array element must be a number (int, float or bool), got %s", v.Type())
	}
	return nil
}

// fill stores the number v into every element.
func (a *Array) fill(v starlark.Value) error {
	if a.Size() == 0 {
		return nil
	}
	if err := a.set(0, v); err != nil {
		return err
	}
	if a.f != nil {
		for i := range a.f {
			a.f[i] = a.f[0]
		}
	} else {
		for i := range a.n {
			a.n[i] = a.n[0]
		}
	}
	return nil
}

// intBits returns the 64 bits of v: its int64 value, or its uint64 bits for
// values above the int64 range.
func intBits(v starlark.Int) (int64, error) {
	if x, ok := v.Int64(); ok {
		return x, nil
	}
	if x, ok := v.Uint64(); ok {
		return int64(x), nil
	}
	return 0, fmt.Errorf("ValueError: int %s does not fit in 64 bits", v)
}

// astype returns a copy converted to dt: floats round, floats to integers
// truncate toward zero, integers wrap, bool stores v != 0.
func (a *Array) astype(dt dtype.DType) *Array {
	c := alloc(dt, a.shape)
	switch {
	case a.f != nil && c.f != nil:
		copy(c.f, a.f)
		roundSlice(dt, c.f)
	case a.f != nil:
		for i, v := range a.f {
			c.n[i] = floatToInt(dt, float64(v))
		}
	case c.f != nil:
		if a.dt == dtype.UInt64 {
			for i, v := range a.n {
				c.f[i] = float32(uint64(v))
			}
		} else {
			for i, v := range a.n {
				c.f[i] = float32(v)
			}
		}
		roundSlice(dt, c.f)
	default:
		copy(c.n, a.n)
		wrapSlice(dt, c.n)
	}
	return c
}

// parseShape reads a shape argument: an int or a list/tuple of ints. With
// allowInfer, one dimension may be -1 (returned as -1 for the caller to
// resolve).
func parseShape(v starlark.Value, allowInfer bool) ([]int, error) {
	var dims []starlark.Value
	switch v := v.(type) {
	case starlark.Int:
		dims = []starlark.Value{v}
	case *starlark.List, starlark.Tuple:
		s := v.(starlark.Indexable)
		for i := 0; i < s.Len(); i++ {
			dims = append(dims, s.Index(i))
		}
	default:
		return nil, fmt.Errorf("TypeError: shape must be an int or a list/tuple of ints, got %s %s", v.Type(), v.String())
	}
	shape := make([]int, len(dims))
	infer := -1
	for i, d := range dims {
		n, ok := d.(starlark.Int)
		if !ok {
			return nil, fmt.Errorf("TypeError: shape dimensions must be ints, got %s %s in %s", d.Type(), d.String(), v.String())
		}
		x, ok := n.Int64()
		if !ok || x > maxElems || x < -1 || (x == -1 && !allowInfer) {
			return nil, fmt.Errorf("ValueError: invalid dimension %s in shape %s", n, v.String())
		}
		if x == -1 {
			if infer >= 0 {
				return nil, fmt.Errorf("ValueError: shape %s has more than one -1 dimension", v.String())
			}
			infer = i
		}
		shape[i] = int(x)
	}
	if infer < 0 {
		return shape, checkShape(shape)
	}
	return shape, nil
}
