package array

import (
	"math"
	"math/rand/v2"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/hal/dtype"
	"simpler/internal/halt"
	"simpler/kind"
)

// apply runs x op y through Starlark's Binary, so both the array-array path
// and the reflected number-on-the-left path are exercised.
func apply(t *testing.T, op syntax.Token, x, y starlark.Value) *Array {
	t.Helper()
	z, err := starlark.Binary(op, x, y)
	if err != nil {
		t.Fatalf("%s %s %s: %v", x.Type(), op, y.Type(), err)
	}
	return z.(*Array)
}

func TestFloatOpsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ops := []syntax.Token{syntax.PLUS, syntax.MINUS, syntax.STAR, syntax.SLASH}
	ref := func(op syntax.Token, a, b float64) float64 {
		switch op {
		case syntax.PLUS:
			return a + b
		case syntax.MINUS:
			return a - b
		case syntax.STAR:
			return a * b
		}
		return a / b
	}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16, dtype.Float8E4M3} {
		x, y := New(dt, []int{4, 8}), New(dt, []int{4, 8})
		for i := range x.Size() {
			x.SetFloat(i, r.NormFloat64()*10)
			y.SetFloat(i, r.NormFloat64()*10+0.5)
		}
		s := starlark.Float(dt.RoundFloat(1.7))
		for _, op := range ops {
			vv, vs, sv := apply(t, op, x, y), apply(t, op, x, s), apply(t, op, s, y)
			for i := range x.Size() {
				want := dt.RoundFloat(float64(float32(ref(op, x.Float(i), y.Float(i)))))
				if got := vv.Float(i); got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
					t.Errorf("%s: %v %s %v = %v, want %v", dt, x.Float(i), op, y.Float(i), got, want)
				}
				want = dt.RoundFloat(float64(float32(ref(op, x.Float(i), float64(s)))))
				if got := vs.Float(i); got != want {
					t.Errorf("%s: %v %s %v = %v, want %v", dt, x.Float(i), op, s, got, want)
				}
				want = dt.RoundFloat(float64(float32(ref(op, float64(s), y.Float(i)))))
				if got := sv.Float(i); got != want {
					t.Errorf("%s: %v %s %v = %v, want %v", dt, s, op, y.Float(i), got, want)
				}
			}
			if vv.DType() != dt || vs.DType() != dt || sv.DType() != dt {
				t.Errorf("%s %s: result dtypes %s %s %s", dt, op, vv.DType(), vs.DType(), sv.DType())
			}
		}
	}
}

func TestIntOpsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ops := []syntax.Token{syntax.PLUS, syntax.MINUS, syntax.STAR, syntax.SLASHSLASH, syntax.PERCENT}
	ref := func(op syntax.Token, a, b int64) int64 {
		switch op {
		case syntax.PLUS:
			return a + b
		case syntax.MINUS:
			return a - b
		case syntax.STAR:
			return a * b
		}
		q := int64(math.Floor(float64(a) / float64(b))) // exact for these small values
		if op == syntax.SLASHSLASH {
			return q
		}
		return a - b*q
	}
	for _, dt := range []dtype.DType{dtype.Int8, dtype.Int32, dtype.Int64, dtype.UInt8} {
		x, y := New(dt, []int{40}), New(dt, []int{40})
		for i := range x.Size() {
			x.SetFloat(i, float64(r.IntN(200)-100))
			d := r.IntN(30) - 15
			if d == 0 {
				d = 7
			}
			y.SetFloat(i, float64(d))
		}
		s := starlark.MakeInt(-3)
		for _, op := range ops {
			vv, vs, sv := apply(t, op, x, y), apply(t, op, x, s), apply(t, op, s, y)
			for i := range x.Size() {
				a, b := int64(x.Float(i)), int64(y.Float(i))
				if got, want := vv.n[i], wrapInt(dt, ref(op, a, b)); got != want {
					t.Errorf("%s: %d %s %d = %d, want %d", dt, a, op, b, got, want)
				}
				if got, want := vs.n[i], wrapInt(dt, ref(op, a, -3)); got != want {
					t.Errorf("%s: %d %s -3 = %d, want %d", dt, a, op, got, want)
				}
				if got, want := sv.n[i], wrapInt(dt, ref(op, -3, b)); got != want {
					t.Errorf("%s: -3 %s %d = %d, want %d", dt, op, b, got, want)
				}
			}
		}
	}
}

func TestUint64DividesUnsigned(t *testing.T) {
	x, _ := FromValue(nil, list(starlark.MakeUint64(math.MaxUint64), starlark.MakeUint64(1<<63+7)), dtype.UInt64, nil)
	y, _ := FromValue(nil, list(starlark.MakeUint64(1<<63), starlark.MakeInt(10)), dtype.UInt64, nil)
	q := apply(t, syntax.SLASHSLASH, x, y)
	m := apply(t, syntax.PERCENT, x, y)
	if uint64(q.n[0]) != 1 || uint64(q.n[1]) != (1<<63+7)/10 {
		t.Errorf("// = %d %d", uint64(q.n[0]), uint64(q.n[1]))
	}
	if uint64(m.n[0]) != 1<<63-1 || uint64(m.n[1]) != (1<<63+7)%10 {
		t.Errorf("%% = %d %d", uint64(m.n[0]), uint64(m.n[1]))
	}
	d := apply(t, syntax.SLASH, x, y)
	if d.DType() != dtype.Float32 || d.Float(0) != float64(float32(2)) {
		t.Errorf("/ = %s", d)
	}
}

func TestIntWithFloatIsFloat32(t *testing.T) {
	x, _ := FromValue(nil, ints(1, 2, 3), dtype.Int8, nil)
	z := apply(t, syntax.STAR, starlark.Float(0.5), x)
	if z.DType() != dtype.Float32 || z.String() != "array([0.5, 1.0, 1.5], dtype=float32)" {
		t.Errorf("0.5 * int8 = %s", z)
	}
	z = apply(t, syntax.SLASH, x, starlark.MakeInt(4))
	if z.String() != "array([0.25, 0.5, 0.75], dtype=float32)" {
		t.Errorf("int8 / 4 = %s", z)
	}
	// A float number is rounded to a float16 array's kind before the op.
	h := New(dtype.Float16, []int{1})
	h.SetFloat(0, 1)
	z = apply(t, syntax.STAR, h, starlark.Float(0.1))
	if z.Float(0) != 0.0999755859375 {
		t.Errorf("float16 1 * 0.1 = %v, want 0.0999755859375", z.Float(0))
	}
}

func TestMatmulFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m, k, n := 3, 5, 4
	x, y := New(dtype.Float32, []int{m, k}), New(dtype.Float32, []int{k, n})
	for i := range x.Size() {
		x.SetFloat(i, r.Float64())
	}
	for i := range y.Size() {
		y.SetFloat(i, r.Float64())
	}
	z, err := matmul(x, y, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := z.Shape(); got[0] != m || got[1] != n {
		t.Fatalf("shape %v", got)
	}
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += x.Float(i*k+p) * y.Float(p*n+j)
			}
			if got := z.Float(i*n + j); got != float64(float32(s)) {
				t.Errorf("[%d, %d] = %v, want %v", i, j, got, float64(float32(s)))
			}
		}
	}
}

func TestUnaryAndIteration(t *testing.T) {
	x, _ := FromValue(nil, list(starlark.MakeInt(-128), starlark.MakeInt(5)), dtype.Int8, nil)
	neg, err := starlark.Unary(syntax.MINUS, x)
	if err != nil || neg.String() != "array([-128, -5], dtype=int8)" {
		t.Errorf("-x = %v, %v", neg, err)
	}
	scalar, _ := FromValue(nil, starlark.Float(2.5), dtype.Float32, []int{})
	var got []string
	for v := range starlark.Elements(scalar) {
		got = append(got, v.String())
	}
	if len(got) != 1 || got[0] != "2.5" {
		t.Errorf("iterating a 0-d array gave %v, want [2.5]", got)
	}
	m := New(dtype.Int32, []int{3, 0})
	count := 0
	for v := range starlark.Elements(m) {
		if v.(*Array).Size() != 0 {
			t.Errorf("row of a (3, 0) array has %d elements", v.(*Array).Size())
		}
		count++
	}
	if count != 3 {
		t.Errorf("a (3, 0) array yields %d rows, want 3", count)
	}
}

// A matmul under a stopped signal returns the stop's error after at most
// stopWork multiply-adds, not after the whole product; under a signal
// that never fires it computes the product.
func TestMatmulStops(t *testing.T) {
	x := New(dtype.Float32, []int{1024, 1024})
	var s halt.Signal
	if _, err := matmul(New(dtype.Float32, []int{4, 4}), New(dtype.Float32, []int{4, 4}), &s); err != nil {
		t.Fatal(err)
	}
	s.Stop("TimeoutError: past its deadline of 1s")
	for _, dt := range []dtype.DType{dtype.Float32, dtype.Int32} {
		x = New(dt, []int{1024, 1024})
		z, err := matmul(x, x, &s)
		if z != nil || kind.Of(err) != kind.TimeoutError || err.Error() != "TimeoutError: matmul: stopped: past its deadline of 1s" {
			t.Errorf("%s: a stopped matmul gave %v, %v", dt, z, err)
		}
	}
}

// BenchmarkMatmul is a 256 x 256 float32 product with no stop signal and
// with one that is checked and never fires: the two should not differ.
func BenchmarkMatmul(b *testing.B) {
	x := New(dtype.Float32, []int{256, 256})
	for _, c := range []struct {
		name string
		stop *halt.Signal
	}{{"nostop", nil}, {"stop", new(halt.Signal)}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := matmul(x, x, c.stop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
