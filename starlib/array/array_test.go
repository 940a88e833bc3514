package array

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/hal/dtype"
)

func TestFloat16StoreRounds(t *testing.T) {
	a := New(dtype.Float16, []int{2})
	a.SetFloat(0, 1.0/3)
	a.SetFloat(1, 2049) // halfway between 2048 and 2050: ties to even
	if got := a.Float(0); got != 0.333251953125 {
		t.Errorf("float16 1/3 reads back %v, want 0.333251953125", got)
	}
	if got := a.Float(1); got != 2048 {
		t.Errorf("float16 2049 reads back %v, want 2048", got)
	}
	if got, want := a.Bytes(), []byte{0x55, 0x35, 0x00, 0x68}; !bytes.Equal(got, want) {
		t.Errorf("float16 bytes = % x, want % x", got, want)
	}
	a.SetFloat(0, 70000)
	if !math.IsInf(a.Float(0), 1) {
		t.Errorf("float16 70000 reads back %v, want +Inf", a.Float(0))
	}
}

func TestBFloat16StoreRounds(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{1.0 / 3, 0.333984375},
		{1 + 1.0/256, 1},                // tie: rounds to the even 1.0
		{1 + 3.0/256, 1 + 1.0/64},       // tie: rounds up to the even code
		{1 + 1.0/256 + 1e-6, 1.0078125}, // just above the tie
		{-2.5, -2.5},
	} {
		a := New(dtype.BFloat16, []int{1})
		a.SetFloat(0, c.in)
		if got := a.Float(0); got != c.want {
			t.Errorf("bfloat16 %v reads back %v, want %v", c.in, got, c.want)
		}
		want := make([]byte, 2)
		dtype.BFloat16.PutFloat(want, c.want)
		if got := a.Bytes(); !bytes.Equal(got, want) {
			t.Errorf("bfloat16 %v bytes = % x, want % x", c.in, got, want)
		}
	}
}

func TestIntStoreWraps(t *testing.T) {
	for _, c := range []struct {
		dt   dtype.DType
		in   float64
		want float64
	}{
		{dtype.Int8, 128, -128},
		{dtype.Int8, -129, 127},
		{dtype.UInt8, -1, 255},
		{dtype.UInt8, 256.9, 0},
		{dtype.Int16, 32768, -32768},
		{dtype.UInt16, 65537, 1},
		{dtype.Int32, 1 << 31, -(1 << 31)},
		{dtype.UInt32, 1<<32 + 5, 5},
		{dtype.Int32, -7.9, -7},
		{dtype.Bool, 0.25, 1},
		{dtype.Bool, 0, 0},
		{dtype.Int64, math.NaN(), 0},
		{dtype.Int64, 1e300, math.MaxInt64},
	} {
		a := New(c.dt, []int{1})
		a.SetFloat(0, c.in)
		if got := a.Float(0); got != c.want {
			t.Errorf("%s: store %v reads back %v, want %v", c.dt, c.in, got, c.want)
		}
	}
	// 127 + 1 in int8 arithmetic.
	x := New(dtype.Int8, []int{3})
	x.SetFloat(0, 127)
	x.SetFloat(1, -128)
	x.SetFloat(2, 5)
	z, err := x.Binary(syntax.PLUS, starlark.MakeInt(1), starlark.Left)
	if err != nil {
		t.Fatal(err)
	}
	if got := z.(*Array).n; got[0] != -128 || got[1] != -127 || got[2] != 6 {
		t.Errorf("int8 [127, -128, 5] + 1 = %v, want [-128 -127 6]", got)
	}
}

func TestUint64KeepsBits(t *testing.T) {
	b := make([]byte, 24)
	le.PutUint64(b, math.MaxUint64)
	le.PutUint64(b[8:], 1<<63)
	le.PutUint64(b[16:], 3)
	a, err := FromBytes(dtype.UInt64, []int{3}, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Float(0); got != 18446744073709551615.0 {
		t.Errorf("Float(0) = %v, want 1.8446744073709552e19", got)
	}
	if got := a.String(); got != "array([18446744073709551615, 9223372036854775808, 3], dtype=uint64)" {
		t.Errorf("String() = %s", got)
	}
	if !bytes.Equal(a.Bytes(), b) {
		t.Errorf("Bytes() = % x, want % x", a.Bytes(), b)
	}
	if m, _ := a.extreme("max", 1); m.String() != "18446744073709551615" {
		t.Errorf("max = %s, want 18446744073709551615", m)
	}
	if m, _ := a.extreme("min", -1); m.String() != "3" {
		t.Errorf("min = %s, want 3", m)
	}
	if got := a.sum().String(); got != "9223372036854775810" { // wraps mod 2^64
		t.Errorf("sum = %s, want 9223372036854775810", got)
	}
	a.SetFloat(2, 1e19)
	if got := uint64(a.n[2]); got != 10000000000000000000 {
		t.Errorf("SetFloat(1e19) stored %d", got)
	}
	z, err := a.Binary(syntax.SLASHSLASH, starlark.MakeInt(2), starlark.Left)
	if err != nil {
		t.Fatal(err)
	}
	if got := uint64(z.(*Array).n[0]); got != math.MaxUint64/2 {
		t.Errorf("uint64 max // 2 = %d, want %d", got, uint64(math.MaxUint64/2))
	}
}

func TestBytesRoundTripEveryDType(t *testing.T) {
	vals := []float64{0, 1, -2, 0.5, 1.5, 3, 4, -6}
	for _, dt := range dtype.All {
		b := make([]byte, len(vals)*dt.Size())
		for i, v := range vals {
			if !dt.IsFloat() && !dt.IsSigned() {
				v = math.Abs(v)
			}
			dt.PutFloat(b[i*dt.Size():], v)
		}
		a, err := FromBytes(dt, []int{2, 4}, b)
		if err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		if !bytes.Equal(a.Bytes(), b) {
			t.Errorf("%s: Bytes() = % x, want % x", dt, a.Bytes(), b)
		}
		for i := range vals {
			if got, want := a.Float(i), dt.Float(b[i*dt.Size():]); got != want {
				t.Errorf("%s: Float(%d) = %v, want %v", dt, i, got, want)
			}
		}
		if got := a.Shape(); len(got) != 2 || got[0] != 2 || got[1] != 4 || a.Size() != 8 || a.DType() != dt {
			t.Errorf("%s: shape %v len %d dtype %s", dt, got, a.Size(), a.DType())
		}
	}
}

func TestFromBytesErrors(t *testing.T) {
	_, err := FromBytes(dtype.Float32, []int{2, 2}, make([]byte, 10))
	wantErr(t, err, "ValueError: 10 bytes do not hold an array of shape (2, 2) and dtype float32 (need 16 bytes)")
	_, err = FromBytes(dtype.Invalid, []int{1}, nil)
	wantErr(t, err, "ValueError: invalid dtype")
	_, err = FromBytes(dtype.Int8, []int{-1}, nil)
	wantErr(t, err, "ValueError: negative dimension -1 in shape (-1,)")
}

func TestShapeIsCopied(t *testing.T) {
	s := []int{2, 3}
	a := New(dtype.Int32, s)
	s[0] = 9
	got := a.Shape()
	got[1] = 7
	if a.shape[0] != 2 || a.shape[1] != 3 {
		t.Errorf("shape aliased the caller's slices: %v", a.shape)
	}
}

func TestFormatFloat(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want string
	}{
		{3, "3.0"}, {0.1, "0.1"}, {-0.5, "-0.5"}, {1e-5, "1e-05"}, {0.0001, "0.0001"},
		{1e16, "1e+16"}, {123456789, "123456790.0"}, {float32(math.Inf(-1)), "-inf"},
		{float32(math.NaN()), "nan"}, {0, "0.0"}, {float32(math.Copysign(0, -1)), "-0.0"},
	} {
		if got := formatFloat(c.in); got != c.want {
			t.Errorf("formatFloat(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func wantErr(t *testing.T, err error, prefix string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error, want %q", prefix)
		return
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("error %q, want prefix %q", err, prefix)
	}
}
