package array

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/hal/dtype"
)

var (
	_ starlark.Value      = (*Array)(nil)
	_ starlark.HasAttrs   = (*Array)(nil)
	_ starlark.Sliceable  = (*Array)(nil)
	_ starlark.Sequence   = (*Array)(nil)
	_ starlark.Mapping    = (*Array)(nil)
	_ starlark.Container  = (*Array)(nil)
	_ starlark.HasBinary  = (*Array)(nil)
	_ starlark.HasUnary   = (*Array)(nil)
	_ starlark.Comparable = (*Array)(nil)
)

// Type returns "array".
func (a *Array) Type() string { return "array" }

// Freeze does nothing: Starlark cannot change an array.
func (a *Array) Freeze() {}

// Truth reports whether the array has elements.
func (a *Array) Truth() starlark.Bool { return a.Size() > 0 }

// Hash fails: arrays are not hashable.
func (a *Array) Hash() (uint32, error) { return 0, fmt.Errorf("TypeError: unhashable type: array") }

// Attr returns an attribute or a bound method.
func (a *Array) Attr(name string) (starlark.Value, error) {
	switch name {
	case "shape":
		t := make(starlark.Tuple, len(a.shape))
		for i, d := range a.shape {
			t[i] = starlark.MakeInt(d)
		}
		return t, nil
	case "dtype":
		return DTypeConst(a.dt), nil
	case "size":
		return starlark.MakeInt(a.Size()), nil
	case "ndim":
		return starlark.MakeInt(a.ndim()), nil
	}
	if m, ok := methods[name]; ok {
		return starlark.NewBuiltin(name, m).BindReceiver(a), nil
	}
	return nil, nil
}

// AttrNames lists attributes and methods.
func (a *Array) AttrNames() []string { return attrNames }

// dim0 returns the first dimension (1 for a 0-d array).
func (a *Array) dim0() int {
	if a.ndim() == 0 {
		return 1
	}
	return a.shape[0]
}

// scalar returns flat element i as a Starlark number: float for float
// kinds, bool for BOOL, int otherwise.
func (a *Array) scalar(i int) starlark.Value {
	switch {
	case a.f != nil:
		return starlark.Float(a.f[i])
	case a.dt == dtype.Bool:
		return starlark.Bool(a.n[i] != 0)
	case a.dt == dtype.UInt64:
		return starlark.MakeUint64(uint64(a.n[i]))
	}
	return starlark.MakeInt64(a.n[i])
}

// Index returns item i of the first dimension (0 <= i < Shape()[0]): a
// number for a 1-D array, an (N-1)-D copy otherwise.
func (a *Array) Index(i int) starlark.Value {
	if a.ndim() <= 1 {
		return a.scalar(i)
	}
	return a.rows([]int{i})
}

// rows copies items idx of the first dimension into a new array; for one
// index it drops the first dimension.
func (a *Array) rows(idx []int) *Array {
	shape := append([]int{len(idx)}, a.shape[1:]...)
	if len(idx) == 1 {
		shape = shape[1:]
	}
	c := alloc(a.dt, shape)
	stride := numel(a.shape[1:])
	for k, i := range idx {
		if c.f != nil {
			copy(c.f[k*stride:(k+1)*stride], a.f[i*stride:])
		} else {
			copy(c.n[k*stride:(k+1)*stride], a.n[i*stride:])
		}
	}
	return c
}

// Get implements a[i] (negative i counts from the end) and a[i, j, ...],
// which indexes successive dimensions.
func (a *Array) Get(k starlark.Value) (starlark.Value, bool, error) {
	keys := starlark.Tuple{k}
	if t, ok := k.(starlark.Tuple); ok {
		keys = t
	}
	if len(keys) > a.ndim() {
		return nil, false, fmt.Errorf("IndexError: too many indices for array of shape %s: %d", shapeString(a.shape), len(keys))
	}
	off := 0
	for d, key := range keys {
		x, ok := key.(starlark.Int)
		if !ok {
			return nil, false, fmt.Errorf("TypeError: array index must be an int, got %s %s", key.Type(), key.String())
		}
		n := a.shape[d]
		i, ok := x.Int64()
		if ok && i < 0 {
			i += int64(n)
		}
		if !ok || i < 0 || i >= int64(n) {
			if d == 0 {
				return nil, false, fmt.Errorf("IndexError: array index %s out of range for length %d", x, n)
			}
			return nil, false, fmt.Errorf("IndexError: array index %s out of range for dimension %d of length %d", x, d, n)
		}
		off = off*n + int(i)
	}
	rest := a.shape[len(keys):]
	if len(rest) == 0 {
		return a.scalar(off), true, nil
	}
	stride := numel(rest)
	c := alloc(a.dt, rest)
	if c.f != nil {
		copy(c.f, a.f[off*stride:])
	} else {
		copy(c.n, a.n[off*stride:])
	}
	return c, true, nil
}

// Slice implements a[start:end:step] on the first dimension; Starlark
// has already resolved the bounds against Len.
func (a *Array) Slice(start, end, step int) starlark.Value {
	if a.ndim() == 0 {
		return a.copy()
	}
	var idx []int
	if step > 0 {
		for i := start; i < end; i += step {
			idx = append(idx, i)
		}
	} else {
		for i := start; i > end; i += step {
			idx = append(idx, i)
		}
	}
	c := a.rows(idx)
	if len(idx) == 1 { // rows dropped the first dimension
		c.shape = append([]int{1}, c.shape...)
	}
	return c
}

// Iterate yields the items of the first dimension (a 0-d array yields its
// one element).
func (a *Array) Iterate() starlark.Iterator { return &iterator{a: a} }

type iterator struct {
	a *Array
	i int
}

func (it *iterator) Next(p *starlark.Value) bool {
	if it.i >= it.a.dim0() {
		return false
	}
	*p = it.a.Index(it.i)
	it.i++
	return true
}

func (it *iterator) Done() {}

// Has implements "x in a": whether some element equals the number x.
func (a *Array) Has(x starlark.Value) (bool, error) {
	var f float64
	switch x := x.(type) {
	case starlark.Int, starlark.Float:
		f, _ = starlark.AsFloat(x)
	case starlark.Bool:
		if x {
			f = 1
		}
	default:
		return false, nil
	}
	for i := 0; i < a.Size(); i++ {
		if a.Float(i) == f {
			return true, nil
		}
	}
	return false, nil
}

// CompareSameType implements == and !=: equal arrays have the same dtype,
// shape and elements (NaN equals nothing).
func (a *Array) CompareSameType(op syntax.Token, y starlark.Value, depth int) (bool, error) {
	b := y.(*Array)
	switch op {
	case syntax.EQL:
		return a.equal(b), nil
	case syntax.NEQ:
		return !a.equal(b), nil
	}
	return false, fmt.Errorf("TypeError: arrays support only == and !=, not %s", op)
}

func (a *Array) equal(b *Array) bool {
	if a.dt != b.dt || !sameShape(a.shape, b.shape) {
		return false
	}
	if a.f != nil {
		for i, v := range a.f {
			if v != b.f[i] {
				return false
			}
		}
		return true
	}
	for i, v := range a.n {
		if v != b.n[i] {
			return false
		}
	}
	return true
}

func sameShape(x, y []int) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
