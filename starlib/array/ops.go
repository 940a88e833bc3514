package array

import (
	"fmt"
	"math"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/hal/dtype"
)

// operand is one side of an elementwise operation: an array, or a number.
type operand struct {
	arr     *Array
	isFloat bool    // the number is a float
	f       float64 // the number as a float
	i       int64   // the number's 64 bits (int or bool)
	u       bool    // i holds a uint64 above the int64 range
	iErr    error   // the int does not fit in 64 bits
}

func numberOperand(v starlark.Value) (operand, bool) {
	switch v := v.(type) {
	case starlark.Float:
		return operand{isFloat: true, f: float64(v)}, true
	case starlark.Int:
		i, err := intBits(v)
		_, fits := v.Int64()
		return operand{f: float64(v.Float()), i: i, u: err == nil && !fits, iErr: err}, true
	case starlark.Bool:
		if v {
			return operand{f: 1, i: 1}, true
		}
		return operand{}, true
	}
	return operand{}, false
}

// Binary implements + - * / // % between arrays of the same dtype and
// shape, or between an array and a number on either side.
func (a *Array) Binary(op syntax.Token, y starlark.Value, side starlark.Side) (starlark.Value, error) {
	switch op {
	case syntax.PLUS, syntax.MINUS, syntax.STAR, syntax.SLASH, syntax.SLASHSLASH, syntax.PERCENT:
	default:
		return nil, nil
	}
	other, ok := numberOperand(y)
	if b, isArr := y.(*Array); isArr {
		other, ok = operand{arr: b}, true
	}
	if !ok {
		if _, hasBinary := y.(starlark.HasBinary); hasBinary {
			return nil, nil // let y try
		}
		l, r := a.Type(), y.Type()
		if side == starlark.Right {
			l, r = r, l
		}
		return nil, fmt.Errorf("TypeError: unsupported operand types for %s: %s and %s (want an array or a number)", op, l, r)
	}
	l, r := operand{arr: a}, other
	if side == starlark.Right {
		l, r = r, l
	}
	return arith(op, l, r)
}

// arith computes l op r elementwise; at least one side is an array.
func arith(op syntax.Token, l, r operand) (*Array, error) {
	arr := l.arr
	if arr == nil {
		arr = r.arr
	}
	if l.arr != nil && r.arr != nil {
		if l.arr.dt != r.arr.dt {
			return nil, fmt.Errorf("TypeError: array dtype mismatch: %s vs %s (use .astype)", l.arr.dt, r.arr.dt)
		}
		if !sameShape(l.arr.shape, r.arr.shape) {
			return nil, fmt.Errorf("ValueError: array shape mismatch: %s vs %s", shapeString(l.arr.shape), shapeString(r.arr.shape))
		}
	}
	if arr.isFloat() || l.isFloat || r.isFloat {
		out := arr.dt
		if !arr.isFloat() {
			out = dtype.Float32
		}
		z := alloc(out, arr.shape)
		x, sx := l.floats(out)
		y, sy := r.floats(out)
		binFloat(op, z.f, x, y, sx, sy)
		roundSlice(out, z.f)
		return z, nil
	}
	x, sx, err := l.ints()
	if err != nil {
		return nil, err
	}
	y, sy, err := r.ints()
	if err != nil {
		return nil, err
	}
	if op == syntax.SLASH || op == syntax.SLASHSLASH || op == syntax.PERCENT {
		for _, v := range y {
			if v == 0 {
				return nil, fmt.Errorf("ValueError: integer division by zero in %s %s %s", l.describe(), op, r.describe())
			}
		}
	}
	if op == syntax.SLASH {
		z := alloc(dtype.Float32, arr.shape)
		intTrueDiv(z.f, x, y, sx, sy, l.unsigned(), r.unsigned())
		return z, nil
	}
	z := alloc(arr.dt, arr.shape)
	binInt(op, z.n, x, y, sx, sy, arr.dt == dtype.UInt64)
	wrapSlice(arr.dt, z.n)
	return z, nil
}

// floats returns the operand as float32 elements for a result of float kind
// out, with stride 0 for a number (rounded to out first, as a store would).
func (o operand) floats(out dtype.DType) ([]float32, int) {
	switch {
	case o.arr == nil:
		return []float32{roundF32(out, float32(o.f))}, 0
	case o.arr.isFloat():
		return o.arr.f, 1
	}
	return o.arr.astype(dtype.Float32).f, 1
}

// ints returns the operand as int64 elements, with stride 0 for a number.
func (o operand) ints() ([]int64, int, error) {
	if o.arr != nil {
		return o.arr.n, 1, nil
	}
	if o.iErr != nil {
		return nil, 0, o.iErr
	}
	return []int64{o.i}, 0, nil
}

// unsigned reports whether the operand's int64 bits are a uint64.
func (o operand) unsigned() bool {
	if o.arr != nil {
		return o.arr.dt == dtype.UInt64
	}
	return o.u
}

func (o operand) describe() string {
	if o.arr != nil {
		return o.arr.dt.String() + " array"
	}
	return "number"
}

// binFloat computes z[i] = x[i*sx] op y[i*sy]; a stride of 0 repeats a
// number.
func binFloat(op syntax.Token, z, x, y []float32, sx, sy int) {
	switch op {
	case syntax.PLUS:
		for i := range z {
			z[i] = x[i*sx] + y[i*sy]
		}
	case syntax.MINUS:
		for i := range z {
			z[i] = x[i*sx] - y[i*sy]
		}
	case syntax.STAR:
		for i := range z {
			z[i] = x[i*sx] * y[i*sy]
		}
	case syntax.SLASH:
		for i := range z {
			z[i] = x[i*sx] / y[i*sy]
		}
	case syntax.SLASHSLASH:
		for i := range z {
			z[i] = float32(floorDivFloat(float64(x[i*sx]), float64(y[i*sy])))
		}
	case syntax.PERCENT:
		for i := range z {
			z[i] = float32(modFloat(float64(x[i*sx]), float64(y[i*sy])))
		}
	}
}

// binInt computes z[i] = x[i*sx] op y[i*sy] in 64 bits (the caller wraps);
// // and % floor like Python, or divide unsigned for uint64.
func binInt(op syntax.Token, z, x, y []int64, sx, sy int, unsigned bool) {
	switch op {
	case syntax.PLUS:
		for i := range z {
			z[i] = x[i*sx] + y[i*sy]
		}
	case syntax.MINUS:
		for i := range z {
			z[i] = x[i*sx] - y[i*sy]
		}
	case syntax.STAR:
		for i := range z {
			z[i] = x[i*sx] * y[i*sy]
		}
	case syntax.SLASHSLASH:
		if unsigned {
			for i := range z {
				z[i] = int64(uint64(x[i*sx]) / uint64(y[i*sy]))
			}
			return
		}
		for i := range z {
			z[i] = floorDivInt(x[i*sx], y[i*sy])
		}
	case syntax.PERCENT:
		if unsigned {
			for i := range z {
				z[i] = int64(uint64(x[i*sx]) % uint64(y[i*sy]))
			}
			return
		}
		for i := range z {
			z[i] = modInt(x[i*sx], y[i*sy])
		}
	}
}

// intTrueDiv computes z[i] = x[i*sx] / y[i*sy] in float64, stored as
// float32; xu and yu say which side holds uint64 bits.
func intTrueDiv(z []float32, x, y []int64, sx, sy int, xu, yu bool) {
	for i := range z {
		a, b := float64(x[i*sx]), float64(y[i*sy])
		if xu {
			a = float64(uint64(x[i*sx]))
		}
		if yu {
			b = float64(uint64(y[i*sy]))
		}
		z[i] = float32(a / b)
	}
}

func floorDivInt(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func modInt(a, b int64) int64 {
	r := a % b
	if r != 0 && (r < 0) != (b < 0) {
		r += b
	}
	return r
}

// floorDivFloat is Python's float //, except that a zero divisor gives an
// IEEE infinity or NaN as numpy does.
func floorDivFloat(a, b float64) float64 {
	if b == 0 {
		return a / b
	}
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 && (b < 0) != (mod < 0) {
		div--
	}
	if div == 0 {
		return math.Copysign(0, a/b)
	}
	fl := math.Floor(div)
	if div-fl > 0.5 {
		fl++
	}
	return fl
}

// modFloat is Python's float %: the result takes the divisor's sign (NaN
// for a zero divisor, as numpy gives).
func modFloat(a, b float64) float64 {
	r := math.Mod(a, b)
	if r != 0 && (r < 0) != (b < 0) {
		r += b
	}
	if r == 0 {
		r = math.Copysign(0, b)
	}
	return r
}

// Unary implements -a and +a.
func (a *Array) Unary(op syntax.Token) (starlark.Value, error) {
	switch op {
	case syntax.PLUS:
		return a.copy(), nil
	case syntax.MINUS:
		c := alloc(a.dt, a.shape)
		if c.f != nil {
			for i, v := range a.f {
				c.f[i] = -v
			}
			return c, nil
		}
		for i, v := range a.n {
			c.n[i] = -v
		}
		wrapSlice(a.dt, c.n)
		return c, nil
	}
	return nil, nil
}
