package array

import (
	"fmt"
	"math"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"simpler/hal/dtype"
	"simpler/internal/halt"
)

// Module is the Starlark module "array".
var Module = &starlarkstruct.Module{
	Name: "array",
	Members: starlark.StringDict{
		"zeros":        starlark.NewBuiltin("zeros", zeros),
		"full":         starlark.NewBuiltin("full", full),
		"arange":       starlark.NewBuiltin("arange", arange),
		"from_list":    starlark.NewBuiltin("from_list", fromListBuiltin),
		"frombytes":    starlark.NewBuiltin("frombytes", frombytes),
		"matmul":       starlark.NewBuiltin("matmul", matmulBuiltin),
		"max_abs_diff": starlark.NewBuiltin("max_abs_diff", maxAbsDiffBuiltin),
	},
}

// dtypeArg reads an optional dtype argument; None or absent means def.
func dtypeArg(v starlark.Value, def dtype.DType) (dtype.DType, error) {
	if v == nil || v == starlark.None {
		return def, nil
	}
	return ParseDType(v)
}

// zeros(shape, dtype=FLOAT32)
func zeros(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var shapeV, dtV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "shape", &shapeV, "dtype?", &dtV); err != nil {
		return nil, typeError(err)
	}
	shape, err := parseShape(shapeV, false)
	if err != nil {
		return nil, err
	}
	dt, err := dtypeArg(dtV, dtype.Float32)
	if err != nil {
		return nil, err
	}
	return alloc(dt, shape), nil
}

// full(shape, v, dtype=FLOAT32)
func full(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var shapeV, v, dtV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "shape", &shapeV, "v", &v, "dtype?", &dtV); err != nil {
		return nil, typeError(err)
	}
	shape, err := parseShape(shapeV, false)
	if err != nil {
		return nil, err
	}
	dt, err := dtypeArg(dtV, dtype.Float32)
	if err != nil {
		return nil, err
	}
	if _, ok := numberOperand(v); !ok {
		return nil, fmt.Errorf("TypeError: full: fill value must be a number (int, float or bool), got %s %s", v.Type(), v.String())
	}
	a := alloc(dt, shape)
	if err := a.fill(v); err != nil {
		return nil, err
	}
	return a, nil
}

// arange(n, dtype=INT32) or arange(start, stop, step=1, dtype=INT32); the
// dtype may also be the last positional argument.
func arange(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var dtV starlark.Value
	for _, kv := range kwargs {
		if kv[0] != starlark.String("dtype") {
			return nil, fmt.Errorf("TypeError: arange: unexpected keyword argument %s", kv[0])
		}
		dtV = kv[1]
	}
	if n := len(args); n > 0 && dtV == nil {
		switch args[n-1].(type) {
		case *DTypeValue, starlark.String:
			dtV, args = args[n-1], args[:n-1]
		}
	}
	if len(args) < 1 || len(args) > 3 {
		return nil, fmt.Errorf("TypeError: arange: want 1 to 3 int bounds (n, or start, stop[, step]), got %d", len(args))
	}
	var bounds [3]int64
	for i, v := range args {
		x, ok := v.(starlark.Int)
		if !ok {
			return nil, fmt.Errorf("TypeError: arange: bounds must be ints, got %s %s", v.Type(), v.String())
		}
		if bounds[i], ok = x.Int64(); !ok {
			return nil, fmt.Errorf("ValueError: arange: bound %s does not fit in int64", x)
		}
	}
	start, stop, step := int64(0), bounds[0], int64(1)
	if len(args) >= 2 {
		start, stop = bounds[0], bounds[1]
	}
	if len(args) == 3 {
		step = bounds[2]
	}
	if step == 0 {
		return nil, fmt.Errorf("ValueError: arange: step must not be zero")
	}
	dt, err := dtypeArg(dtV, dtype.Int32)
	if err != nil {
		return nil, err
	}
	count := rangeLen(start, stop, step)
	if count > maxElems {
		return nil, fmt.Errorf("ValueError: arange(%d, %d, %d) has %d elements, more than %d", start, stop, step, count, maxElems)
	}
	a := alloc(dt, []int{int(count)})
	for i := range int(count) {
		v := start + int64(i)*step
		if a.f != nil {
			a.f[i] = float32(v)
		} else {
			a.n[i] = v
		}
	}
	if a.f != nil {
		roundSlice(dt, a.f)
	} else {
		wrapSlice(dt, a.n)
	}
	return a, nil
}

// rangeLen counts start, start+step, ... before stop without overflowing.
func rangeLen(start, stop, step int64) uint64 {
	var span, st uint64
	switch {
	case step > 0 && stop > start:
		span, st = uint64(stop)-uint64(start), uint64(step)
	case step < 0 && stop < start:
		span, st = uint64(start)-uint64(stop), uint64(-(step+1))+1
	default:
		return 0
	}
	n := span / st
	if span%st != 0 {
		n++
	}
	return n
}

// from_list(list, dtype=None)
func fromListBuiltin(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var l, dtV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "list", &l, "dtype?", &dtV); err != nil {
		return nil, typeError(err)
	}
	if !isSeq(l) {
		return nil, fmt.Errorf("TypeError: from_list: want a list or tuple of numbers, got %s", l.Type())
	}
	dt, err := dtypeArg(dtV, dtype.Invalid)
	if err != nil {
		return nil, err
	}
	return fromList(l, dt, nil)
}

// frombytes(b, dtype)
func frombytes(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var data starlark.Bytes
	var dtV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "b", &data, "dtype", &dtV); err != nil {
		return nil, typeError(err)
	}
	dt, err := ParseDType(dtV)
	if err != nil {
		return nil, err
	}
	return FromValue(nil, data, dt, nil)
}

// matmul(a, b)
func matmulBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var x, y *Array
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "a", &x, "b", &y); err != nil {
		return nil, typeError(err)
	}
	return matmul(x, y, halt.Of(th))
}

// stopWork is how many multiply-adds matmul does between two polls of
// the stop signal: about a millisecond of work, against one atomic load.
const stopWork = 1 << 20

// stopPoll polls a stop signal once every so many steps of work.
type stopPoll struct {
	stop        *halt.Signal
	every, left int
}

// newStopPoll polls stop about once per stopWork units of work, in steps
// of stepWork units each.
func newStopPoll(stop *halt.Signal, stepWork int) stopPoll {
	every := max(1, stopWork/max(1, stepWork))
	return stopPoll{stop: stop, every: every, left: every}
}

// step counts one step and reports whether stop has fired, looking only
// every so many steps.
func (p *stopPoll) step() bool {
	if p.left--; p.left > 0 {
		return false
	}
	p.left = p.every
	return p.stop.Stopped()
}

// matmul multiplies 2-D arrays of one dtype, accumulating in float64 (float
// kinds) or int64 and storing each result element once. It polls stop
// between steps of n multiply-adds, about once per stopWork of them, and
// returns its error once it fired (a kernel past its deadline, say).
func matmul(x, y *Array, stop *halt.Signal) (*Array, error) {
	if x.ndim() != 2 || y.ndim() != 2 {
		return nil, fmt.Errorf("ValueError: matmul needs 2-D arrays, got shapes %s and %s", shapeString(x.shape), shapeString(y.shape))
	}
	if x.dt != y.dt {
		return nil, fmt.Errorf("TypeError: array dtype mismatch: %s vs %s (use .astype)", x.dt, y.dt)
	}
	m, k, n := x.shape[0], x.shape[1], y.shape[1]
	if y.shape[0] != k {
		return nil, fmt.Errorf("ValueError: matmul shape mismatch: %s @ %s (inner dimensions %d and %d differ)",
			shapeString(x.shape), shapeString(y.shape), k, y.shape[0])
	}
	z := alloc(x.dt, []int{m, n})
	poll := newStopPoll(stop, n)
	if z.f != nil {
		acc := make([]float64, n)
		for i := range m {
			clear(acc)
			for p := range k {
				if poll.step() {
					return nil, stop.Err("matmul")
				}
				xv := float64(x.f[i*k+p])
				for j, yv := range y.f[p*n : (p+1)*n] {
					acc[j] += xv * float64(yv)
				}
			}
			for j, v := range acc {
				z.f[i*n+j] = float32(v)
			}
		}
		roundSlice(z.dt, z.f)
		return z, nil
	}
	for i := range m {
		row := z.n[i*n : (i+1)*n]
		for p := range k {
			if poll.step() {
				return nil, stop.Err("matmul")
			}
			xv := x.n[i*k+p]
			for j, yv := range y.n[p*n : (p+1)*n] {
				row[j] += xv * yv
			}
		}
	}
	wrapSlice(z.dt, z.n)
	return z, nil
}

// max_abs_diff(a, b): the largest |a[i] - b[i]| as a float (NaN if any
// difference is NaN); a and b may differ in dtype, and either may be a
// number, which compares against every element.
func maxAbsDiffBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var x, y starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "a", &x, "b", &y); err != nil {
		return nil, typeError(err)
	}
	xa, ya, err := pair(th, x, y)
	if err != nil {
		return nil, err
	}
	sx, sy, ok := strides(xa, ya)
	if !ok {
		return nil, fmt.Errorf("ValueError: array shape mismatch: %s vs %s", shapeString(xa.shape), shapeString(ya.shape))
	}
	d := 0.0
	for i := range max(xa.Size(), ya.Size()) {
		diff := math.Abs(xa.Float(i*sx) - ya.Float(i*sy))
		if diff != diff {
			return starlark.Float(math.NaN()), nil
		}
		d = max(d, diff)
	}
	return starlark.Float(d), nil
}

// pair converts both values with FromValue(th, v, dtype.Invalid, nil), except
// that a bare number becomes a 0-d array.
func pair(th *starlark.Thread, x, y starlark.Value) (*Array, *Array, error) {
	conv := func(v starlark.Value) (*Array, error) {
		var shape []int
		if _, isNum := numberOperand(v); isNum {
			shape = []int{}
		}
		return FromValue(th, v, dtype.Invalid, shape)
	}
	xa, err := conv(x)
	if err != nil {
		return nil, nil, err
	}
	ya, err := conv(y)
	if err != nil {
		return nil, nil, err
	}
	return xa, ya, nil
}

// strides returns the flat strides for comparing x and y elementwise: 1 and
// 1 for equal shapes, 0 for a 0-d side against any shape; ok is false for
// other shape pairs.
func strides(x, y *Array) (sx, sy int, ok bool) {
	switch {
	case sameShape(x.shape, y.shape):
		return 1, 1, true
	case x.ndim() == 0:
		return 0, 1, true
	case y.ndim() == 0:
		return 1, 0, true
	}
	return 0, 0, false
}

// AllClose compares actual and expected (arrays, lists, numbers or anything
// FromValue accepts) elementwise with numpy's rule
// |a - e| <= atol + rtol*|e|: NaN is close to nothing, an infinity only to
// itself, and a number compares against every element. ok is false with a
// message when the shapes differ or an element is not close; err reports
// values that are not arrays.
func AllClose(th *starlark.Thread, actual, expected starlark.Value, rtol, atol float64) (ok bool, msg string, err error) {
	a, e, err := pair(th, actual, expected)
	if err != nil {
		return false, "", err
	}
	sa, se, ok := strides(a, e)
	if !ok {
		return false, fmt.Sprintf("shape mismatch: actual %s vs expected %s", shapeString(a.shape), shapeString(e.shape)), nil
	}
	shape := a.shape
	if sa == 0 {
		shape = e.shape
	}
	n := numel(shape)
	bad, first, maxDiff := 0, -1, 0.0
	for i := range n {
		av, ev := a.Float(i*sa), e.Float(i*se)
		if av == ev {
			continue
		}
		diff := math.Abs(av - ev)
		if !math.IsInf(ev, 0) && diff <= atol+rtol*math.Abs(ev) {
			continue
		}
		bad++
		if first < 0 {
			first = i
		}
		if diff > maxDiff || diff != diff {
			maxDiff = diff
		}
	}
	if bad == 0 {
		return true, "", nil
	}
	return false, fmt.Sprintf("%d of %d elements not close (rtol=%g, atol=%g): first at index %s: actual %s vs expected %s; max abs diff %g",
		bad, n, rtol, atol, indexString(unflatten(shape, first)), a.elemString(first*sa), e.elemString(first*se), maxDiff), nil
}
