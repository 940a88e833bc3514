package array

import (
	"fmt"
	"math"
	"sort"

	"go.starlark.net/starlark"

	"simpler/hal/dtype"
)

type method = func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error)

var methods = map[string]method{
	"sum":     noArgs(func(a *Array) (starlark.Value, error) { return a.sum(), nil }),
	"max":     noArgs(func(a *Array) (starlark.Value, error) { return a.extreme("max", 1) }),
	"min":     noArgs(func(a *Array) (starlark.Value, error) { return a.extreme("min", -1) }),
	"abs":     noArgs(func(a *Array) (starlark.Value, error) { return a.abs(), nil }),
	"mean":    noArgs(func(a *Array) (starlark.Value, error) { return a.mean() }),
	"tolist":  noArgs(func(a *Array) (starlark.Value, error) { return a.tolist(0, 0), nil }),
	"tobytes": noArgs(func(a *Array) (starlark.Value, error) { return starlark.Bytes(a.Bytes()), nil }),
	"copy":    noArgs(func(a *Array) (starlark.Value, error) { return a.copy(), nil }),
	"reshape": reshapeMethod,
	"astype":  astypeMethod,
}

var attrNames = func() []string {
	names := []string{"dtype", "ndim", "shape", "size"}
	for name := range methods {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}()

func noArgs(f func(a *Array) (starlark.Value, error)) method {
	return func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 0); err != nil {
			return nil, typeError(err)
		}
		return f(b.Receiver().(*Array))
	}
}

func typeError(err error) error { return fmt.Errorf("TypeError: %v", err) }

// sum adds in float64 (float kinds; the result rounds to the dtype) or in
// 64-bit integers (uint64 unsigned, bool counts).
func (a *Array) sum() starlark.Value {
	if a.f != nil {
		var s float64
		for _, v := range a.f {
			s += float64(v)
		}
		return starlark.Float(roundF32(a.dt, float32(s)))
	}
	var s int64
	for _, v := range a.n {
		s += v
	}
	if a.dt == dtype.UInt64 {
		return starlark.MakeUint64(uint64(s))
	}
	return starlark.MakeInt64(s)
}

// extreme returns the largest (sign 1) or smallest (sign -1) element; NaN
// wins, as in numpy.
func (a *Array) extreme(name string, sign int) (starlark.Value, error) {
	if a.Size() == 0 {
		return nil, fmt.Errorf("ValueError: %s() of an empty array (shape %s)", name, shapeString(a.shape))
	}
	best := 0
	switch {
	case a.f != nil:
		for i, v := range a.f {
			if v != v {
				best = i
				break
			}
			if (sign > 0 && v > a.f[best]) || (sign < 0 && v < a.f[best]) {
				best = i
			}
		}
	case a.dt == dtype.UInt64:
		for i, v := range a.n {
			if (sign > 0 && uint64(v) > uint64(a.n[best])) || (sign < 0 && uint64(v) < uint64(a.n[best])) {
				best = i
			}
		}
	default:
		for i, v := range a.n {
			if (sign > 0 && v > a.n[best]) || (sign < 0 && v < a.n[best]) {
				best = i
			}
		}
	}
	return a.scalar(best), nil
}

// abs returns |a| elementwise; signed integers wrap (abs of int8 -128 is
// -128), unsigned ones are unchanged.
func (a *Array) abs() *Array {
	c := a.copy()
	if c.f != nil {
		for i, v := range c.f {
			c.f[i] = float32(math.Abs(float64(v)))
		}
		return c
	}
	if a.dt.IsSigned() {
		for i, v := range c.n {
			if v < 0 {
				c.n[i] = -v
			}
		}
		wrapSlice(a.dt, c.n)
	}
	return c
}

// mean is the float64 average, rounded to the dtype for float kinds.
func (a *Array) mean() (starlark.Value, error) {
	if a.Size() == 0 {
		return nil, fmt.Errorf("ValueError: mean() of an empty array (shape %s)", shapeString(a.shape))
	}
	var s float64
	for i := 0; i < a.Size(); i++ {
		s += a.Float(i)
	}
	m := s / float64(a.Size())
	if a.f != nil {
		return starlark.Float(roundF32(a.dt, float32(m))), nil
	}
	return starlark.Float(m), nil
}

// tolist returns dimension dim from flat offset off as nested lists.
func (a *Array) tolist(dim, off int) starlark.Value {
	if dim == a.ndim() {
		return a.scalar(off)
	}
	n, stride := a.shape[dim], numel(a.shape[dim+1:])
	l := make([]starlark.Value, n)
	for i := range l {
		l[i] = a.tolist(dim+1, off+i*stride)
	}
	return starlark.NewList(l)
}

// reshapeMethod implements a.reshape(shape) and a.reshape(d0, d1, ...);
// one dimension may be -1.
func reshapeMethod(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("TypeError: reshape: unexpected keyword argument %s", kwargs[0][0])
	}
	var spec starlark.Value = args
	switch len(args) {
	case 0:
		return nil, fmt.Errorf("TypeError: reshape: missing argument shape")
	case 1:
		spec = args[0]
	}
	shape, err := parseShape(spec, true)
	if err != nil {
		return nil, err
	}
	return b.Receiver().(*Array).reshape(shape)
}

func (a *Array) reshape(shape []int) (*Array, error) {
	desc := shapeString(shape)
	known := append([]int{}, shape...)
	infer := -1
	for i, d := range known {
		if d == -1 {
			infer, known[i] = i, 1
		}
	}
	if err := checkShape(known); err != nil {
		return nil, err
	}
	if infer >= 0 && numel(known) != 0 && a.Size()%numel(known) == 0 {
		shape[infer] = a.Size() / numel(known)
	}
	if infer >= 0 && shape[infer] == -1 || numel(shape) != a.Size() {
		return nil, fmt.Errorf("ValueError: cannot reshape an array of size %d into shape %s", a.Size(), desc)
	}
	c := a.copy()
	c.shape = shape
	return c, nil
}

func astypeMethod(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "dtype", &v); err != nil {
		return nil, typeError(err)
	}
	dt, err := ParseDType(v)
	if err != nil {
		return nil, err
	}
	return b.Receiver().(*Array).astype(dt), nil
}
