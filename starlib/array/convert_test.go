package array

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"simpler/hal/dtype"
)

func list(vs ...starlark.Value) *starlark.List { return starlark.NewList(vs) }

func ints(vs ...int) *starlark.List {
	l := make([]starlark.Value, len(vs))
	for i, v := range vs {
		l[i] = starlark.MakeInt(v)
	}
	return starlark.NewList(l)
}

func TestFromValueInfersDType(t *testing.T) {
	big := starlark.MakeInt64(1 << 40)
	for _, c := range []struct {
		v    starlark.Value
		want string
	}{
		{ints(1, 2, 3), "array([1, 2, 3], dtype=int32)"},
		{list(starlark.True, starlark.False), "array([True, False], dtype=bool)"},
		{list(starlark.MakeInt(1), starlark.Float(2.5)), "array([1.0, 2.5], dtype=float32)"},
		{list(starlark.MakeInt(1), starlark.True), "array([1, 1], dtype=int32)"},
		{list(starlark.MakeInt(-1), big), "array([-1, 1099511627776], dtype=int64)"},
		{list(starlark.MakeUint64(math.MaxUint64)), "array([18446744073709551615], dtype=uint64)"},
		{list(ints(1, 2), ints(3, 4), ints(5, 6)), "array([[1, 2], [3, 4], [5, 6]], dtype=int32)"},
		{starlark.Tuple{starlark.Tuple{}, starlark.Tuple{}}, "array([[], []], dtype=float32)"},
		{list(), "array([], dtype=float32)"},
	} {
		a, err := FromValue(nil, c.v, dtype.Invalid, nil)
		if err != nil {
			t.Errorf("FromValue(nil, %s): %v", c.v, err)
			continue
		}
		if got := a.String(); got != c.want {
			t.Errorf("FromValue(nil, %s) = %s, want %s", c.v, got, c.want)
		}
	}
}

func TestFromValueWithDTypeAndShape(t *testing.T) {
	a, err := FromValue(nil, ints(1, 2, 3, 4, 5, 6), dtype.Float16, []int{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.String(); got != "array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=float16)" {
		t.Errorf("got %s", got)
	}
	// A number fills the shape.
	a, err = FromValue(nil, starlark.Float(0.1), dtype.Float16, []int{3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if a.Float(i) != 0.0999755859375 {
			t.Errorf("element %d = %v, want float16(0.1) = 0.0999755859375", i, a.Float(i))
		}
	}
	// A number without a dtype is INT32, FLOAT32 or BOOL.
	a, err = FromValue(nil, starlark.MakeInt(7), dtype.Invalid, []int{})
	if err != nil || a.String() != "array(7, dtype=int32)" {
		t.Errorf("FromValue(nil, 7, Invalid, []) = %v, %v", a, err)
	}
	// Bytes need a dtype; without a shape they are 1-D.
	a, err = FromValue(nil, starlark.Bytes("\x01\x00\xff\xff"), dtype.Int16, nil)
	if err != nil || a.String() != "array([1, -1], dtype=int16)" {
		t.Errorf("FromValue(nil, bytes, INT16) = %v, %v", a, err)
	}
	// Ints stored into a narrow kind wrap; floats truncate.
	a, err = FromValue(nil, list(starlark.MakeInt(300), starlark.Float(-2.7)), dtype.Int8, nil)
	if err != nil || a.String() != "array([44, -2], dtype=int8)" {
		t.Errorf("FromValue(nil, [300, -2.7], INT8) = %v, %v", a, err)
	}
}

func TestFromValueArrayIsCopiedConvertedReshaped(t *testing.T) {
	src, _ := FromValue(nil, ints(1, 2, 3, 4), dtype.Invalid, nil)
	same, err := FromValue(nil, src, dtype.Invalid, nil)
	if err != nil {
		t.Fatal(err)
	}
	same.SetFloat(0, 100)
	if src.Float(0) != 1 {
		t.Errorf("FromValue shares storage: source element 0 became %v", src.Float(0))
	}
	c, err := FromValue(nil, src, dtype.Float32, []int{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.String(); got != "array([[1.0, 2.0], [3.0, 4.0]], dtype=float32)" {
		t.Errorf("converted = %s", got)
	}
	_, err = FromValue(nil, src, dtype.Invalid, []int{3})
	wantErr(t, err, "ValueError: cannot reshape an array of shape (4,) (4 elements) into shape (3,) (3 elements)")
}

type fakeTensor struct {
	a   *Array
	err error
}

func (f *fakeTensor) String() string        { return "fake" }
func (f *fakeTensor) Type() string          { return "Tensor" }
func (f *fakeTensor) Freeze()               {}
func (f *fakeTensor) Truth() starlark.Bool  { return true }
func (f *fakeTensor) Hash() (uint32, error) { return 0, nil }
func (f *fakeTensor) ReadArray(*starlark.Thread) (*Array, error) {
	return f.a, f.err
}

func TestFromValueReader(t *testing.T) {
	src, _ := FromValue(nil, ints(5, 6), dtype.Invalid, nil)
	a, err := FromValue(nil, &fakeTensor{a: src}, dtype.Int8, nil)
	if err != nil || a.String() != "array([5, 6], dtype=int8)" {
		t.Errorf("FromValue(nil, reader) = %v, %v", a, err)
	}
	_, err = FromValue(nil, &fakeTensor{err: fmt.Errorf("RuntimeError: device gone")}, dtype.Invalid, nil)
	wantErr(t, err, "RuntimeError: device gone")
}

func TestFromValueErrors(t *testing.T) {
	for _, c := range []struct {
		v     starlark.Value
		dt    dtype.DType
		shape []int
		want  string
	}{
		{list(ints(1, 2), ints(3)), dtype.Invalid, nil, "ValueError: ragged nested list: element [1] has length 1, want 2"},
		{list(ints(1, 2), starlark.MakeInt(3)), dtype.Invalid, nil, "ValueError: ragged nested list: element [1] is a int, want a list of 2"},
		{list(starlark.MakeInt(1), ints(2)), dtype.Invalid, nil, "ValueError: ragged nested list: element [1] is a list, want a number"},
		{list(ints(1), list(starlark.String("x"))), dtype.Invalid, nil, `TypeError: array element [1, 0] must be a number (int, float or bool), got string "x"`},
		{ints(1, 2, 3), dtype.Invalid, []int{2, 2}, "ValueError: a list of 3 elements does not fill shape (2, 2) (4 elements)"},
		{starlark.MakeInt(1), dtype.Invalid, nil, "ValueError: an array from the number 1 needs a shape"},
		{starlark.Bytes("abc"), dtype.Invalid, nil, "ValueError: an array from bytes needs a dtype"},
		{starlark.Bytes("abc"), dtype.Int16, nil, "ValueError: 3 bytes are not a whole number of int16 elements (2 bytes each)"},
		{starlark.String("abc"), dtype.Invalid, nil, "TypeError: cannot make an array from string"},
		{list(starlark.MakeInt(1).Lsh(70)), dtype.Invalid, nil, "ValueError: int 1180591620717411303424 does not fit in 64 bits"},
	} {
		_, err := FromValue(nil, c.v, c.dt, c.shape)
		wantErr(t, err, c.want)
	}
}

func TestParseDType(t *testing.T) {
	for _, c := range []struct {
		v    starlark.Value
		want dtype.DType
	}{
		{starlark.String("float32"), dtype.Float32},
		{starlark.String("FLOAT16"), dtype.Float16},
		{starlark.String("bf16"), dtype.BFloat16},
		{DTypeConst(dtype.UInt64), dtype.UInt64},
	} {
		got, err := ParseDType(c.v)
		if err != nil || got != c.want {
			t.Errorf("ParseDType(%s) = %s, %v; want %s", c.v, got, err, c.want)
		}
	}
	_, err := ParseDType(starlark.String("float64"))
	wantErr(t, err, `ValueError: unknown dtype "float64"`)
	_, err = ParseDType(starlark.MakeInt(3))
	wantErr(t, err, "TypeError: dtype must be a DataType (such as FLOAT32) or a string (such as \"float32\"), got int 3")
}

func TestDTypeConst(t *testing.T) {
	for _, d := range dtype.All {
		v := DTypeConst(d)
		if v != DTypeConst(d) || v.DType != d {
			t.Errorf("DTypeConst(%s) is not canonical", d)
		}
		if v.String() != d.ConstName() || v.Type() != "DataType" {
			t.Errorf("DTypeConst(%s) prints %s of type %s", d, v, v.Type())
		}
		eq, err := starlark.Equal(v, &DTypeValue{d})
		if err != nil || !eq {
			t.Errorf("%s != a fresh DTypeValue of the same kind", d)
		}
	}
	h1, _ := DTypeConst(dtype.Int8).Hash()
	h2, _ := DTypeConst(dtype.UInt8).Hash()
	if h1 == h2 {
		t.Errorf("INT8 and UINT8 hash alike")
	}
}

func TestAllClose(t *testing.T) {
	f := func(vs ...float64) *starlark.List {
		l := make([]starlark.Value, len(vs))
		for i, v := range vs {
			l[i] = starlark.Float(v)
		}
		return starlark.NewList(l)
	}
	ok, msg, err := AllClose(nil, f(1, 2, 3), f(1, 2.00001, 3), 1e-5, 1e-8)
	if !ok || msg != "" || err != nil {
		t.Errorf("close lists: %v %q %v", ok, msg, err)
	}
	// An int array against a float list compares values, not dtypes.
	a, _ := FromValue(nil, ints(1, 2, 3, 4), dtype.Int32, []int{2, 2})
	ok, _, err = AllClose(nil, a, list(f(1, 2), f(3, 4)), 0, 0)
	if !ok || err != nil {
		t.Errorf("int array vs equal float list: %v %v", ok, err)
	}
	ok, msg, _ = AllClose(nil, a, list(f(1, 2), f(3.5, 5)), 0.1, 0)
	want := "2 of 4 elements not close (rtol=0.1, atol=0): first at index [1, 0]: actual 3 vs expected 3.5; max abs diff 1"
	if ok || msg != want {
		t.Errorf("mismatch: ok=%v msg=%q, want %q", ok, msg, want)
	}
	ok, msg, _ = AllClose(nil, a, f(1, 2, 3, 4), 1, 1)
	if ok || msg != "shape mismatch: actual (2, 2) vs expected (4,)" {
		t.Errorf("shape mismatch: ok=%v msg=%q", ok, msg)
	}
	ok, msg, _ = AllClose(nil, f(math.NaN()), f(math.NaN()), 1, 1)
	if ok || !strings.Contains(msg, "actual nan vs expected nan") {
		t.Errorf("NaN is close to NaN: ok=%v msg=%q", ok, msg)
	}
	ok, _, _ = AllClose(nil, f(math.Inf(1)), f(math.Inf(1)), 0, 0)
	if !ok {
		t.Errorf("inf is not close to inf")
	}
	// atol alone admits small differences; rtol scales with |expected|.
	if ok, _, _ = AllClose(nil, f(0.5), f(0), 0, 0.5); !ok {
		t.Errorf("|0.5-0| <= atol 0.5 rejected")
	}
	if ok, _, _ = AllClose(nil, f(110), f(100), 0.1, 0); !ok {
		t.Errorf("|110-100| <= 0.1*100 rejected")
	}
	if ok, _, _ = AllClose(nil, f(100), f(110), 0.05, 0); ok {
		t.Errorf("|100-110| > 0.05*110 accepted")
	}
	if ok, _, _ = AllClose(nil, f(1e30), f(math.Inf(1)), 1, 1); ok {
		t.Errorf("a finite value is close to inf")
	}
	// A number compares against every element.
	if ok, msg, _ = AllClose(nil, f(0, 0.5), starlark.Float(0), 0, 0.1); ok || msg !=
		"1 of 2 elements not close (rtol=0, atol=0.1): first at index [1]: actual 0.5 vs expected 0.0; max abs diff 0.5" {
		t.Errorf("list vs number: ok=%v msg=%q", ok, msg)
	}
	if ok, _, _ = AllClose(nil, starlark.MakeInt(2), f(2, 2), 0, 0); !ok {
		t.Errorf("2 is not close to [2.0, 2.0]")
	}
	_, _, err = AllClose(nil, starlark.String("x"), f(1), 0, 0)
	wantErr(t, err, "TypeError: cannot make an array from string")
}
