package array

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/hal/dtype"
)

var fileOpts = &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true}

func predeclared() starlark.StringDict {
	env := starlark.StringDict{"array": Module}
	for _, d := range dtype.All {
		env[d.ConstName()] = DTypeConst(d)
	}
	return env
}

func exec(t *testing.T, src string) (starlark.StringDict, error) {
	t.Helper()
	thread := &starlark.Thread{Name: t.Name()}
	return starlark.ExecFileOptions(fileOpts, thread, "test.star", src, predeclared())
}

// scriptCases run a script and compare globals, printed with str(), to
// the wanted text.
var scriptCases = []struct {
	name string
	src  string
	want map[string]string
}{
	{"repr", `
a = str(array.from_list([1.0, 2.0, 3.0]))
b = str(array.from_list([[1, 2], [3, 4]]))
c = str(array.arange(100))
d = str(array.zeros([2, 40], INT8))
e = str(array.from_list([0.1, 1e-05, 1e16, -2.5], dtype="float32"))
f = repr(array.full((), 3, BOOL))
g = str(array.zeros([2, 0]))
`, map[string]string{
		"a": "array([1.0, 2.0, 3.0], dtype=float32)",
		"b": "array([[1, 2], [3, 4]], dtype=int32)",
		"c": "array([0, 1, 2, ..., 97, 98, 99], dtype=int32)",
		"d": "array([[0, 0, 0, ..., 0, 0, 0], [0, 0, 0, ..., 0, 0, 0]], dtype=int8)",
		"e": "array([0.1, 1e-05, 1e+16, -2.5], dtype=float32)",
		"f": "array(True, dtype=bool)",
		"g": "array([[], []], dtype=float32)",
	}},
	{"attributes", `
a = array.zeros([2, 3], dtype=FLOAT16)
shape, dt, size, ndim, n = a.shape, a.dtype, a.size, a.ndim, len(array.zeros(5))
n2 = len(a)  # the first dimension, as in numpy
names = dir(a)
name, itemsize, same = a.dtype.name, a.dtype.itemsize, a.dtype == FLOAT16
t = type(a) + " " + type(FLOAT32)
d = {FLOAT32: 1, "float32": 2}[FLOAT32]
ne = FLOAT32 != INT8
`, map[string]string{
		"shape": "(2, 3)", "dt": "FLOAT16", "n2": "2",
		"names": `["abs", "astype", "copy", "dtype", "max", "mean", "min", "ndim", "reshape", "shape", "size", "sum", "tobytes", "tolist"]`, "size": "6", "ndim": "2", "n": "5",
		"name": "float16", "itemsize": "2", "same": "True", "t": "array DataType",
		"d": "1", "ne": "True",
	}},
	{"constructors", `
z = array.zeros(3).tolist()
f = array.full([2, 2], 7, INT16).tolist()
f2 = array.full(2, 1.5).dtype
r1 = array.arange(4).tolist()
r2 = array.arange(2, 10, 3).tolist()
r3 = array.arange(5, 0, -2).tolist()
r4 = array.arange(3, FLOAT32).tolist()
r5 = array.arange(3, dtype="int8").dtype
r6 = array.arange(5, 2).tolist()
r7 = array.arange(9223372036854775806, 9223372036854775807, 2, INT64).tolist()
r8 = array.arange(0, -7, -3).tolist()
b = array.frombytes(b"\x01\x00\x00\x00\xff\xff\xff\xff", INT32).tolist()
l = array.from_list([[1, 2]], dtype=FLOAT32).tolist()
`, map[string]string{
		"z": "[0.0, 0.0, 0.0]", "f": "[[7, 7], [7, 7]]", "f2": "FLOAT32",
		"r1": "[0, 1, 2, 3]", "r2": "[2, 5, 8]", "r3": "[5, 3, 1]", "r4": "[0.0, 1.0, 2.0]",
		"r5": "INT8", "r6": "[]", "r7": "[9223372036854775806]", "r8": "[0, -3, -6]", "b": "[1, -1]", "l": "[[1.0, 2.0]]",
	}},
	{"indexing", `
a = array.arange(4)
first, last, neg = a[0], a[-1], a[-4]
m = array.arange(6).reshape(2, 3)
row = m[1]
cell, cell2 = m[1, 2], m[-1, -3]
f = array.from_list([0.5, 1.5])[1]
b = array.from_list([True, False])[0]
items = [x for x in a]
rows = [r.tolist() for r in m]
has = (2 in a, 9 in a, 1.5 in array.from_list([1.5]))
`, map[string]string{
		"first": "0", "last": "3", "neg": "0", "row": "array([3, 4, 5], dtype=int32)",
		"cell": "5", "cell2": "3", "f": "1.5", "b": "True", "items": "[0, 1, 2, 3]",
		"rows": "[[0, 1, 2], [3, 4, 5]]", "has": "(True, False, True)",
	}},
	{"slicing", `
a = array.arange(6)
s1, s2, s3, s4 = a[1:4].tolist(), a[::-1].tolist(), a[::2].tolist(), a[-2:].tolist()
m = array.arange(6).reshape(3, 2)
r1, r2, r3, r4 = m[1:].tolist(), m[-1:].tolist(), m[::-1].tolist(), m[:-1].tolist()
r5 = m[1:2].shape
`, map[string]string{
		"s1": "[1, 2, 3]", "s2": "[5, 4, 3, 2, 1, 0]", "s3": "[0, 2, 4]", "s4": "[4, 5]",
		"r1": "[[2, 3], [4, 5]]", "r2": "[[4, 5]]", "r3": "[[4, 5], [2, 3], [0, 1]]",
		"r4": "[[0, 1], [2, 3]]", "r5": "(1, 2)",
	}},
	{"arithmetic", `
a = array.from_list([1, 2, 3, 4])
b = array.from_list([4, 3, 2, 1])
add, sub, mul = (a + b).tolist(), (a - b).tolist(), (a * b).tolist()
rsub, radd, rmul = (10 - a).tolist(), (1 + a).tolist(), (2 * a).tolist()
div = a / 2
rdiv = (8 / a).tolist()
fdiv = (array.from_list([-7, 7]) // 2).tolist()
mod = (array.from_list([-7, 7]) % 3).tolist()
rmod = (7 % a).tolist()
ff = (array.from_list([-7.0, 7.0]) // 2).tolist()
fm = (array.from_list([-7.0, 7.0]) % -3).tolist()
mixed = a * 0.5
neg, pos = (-a).tolist(), (+a).tolist()
neg_u8 = (-array.from_list([1], UINT8)).tolist()
wrap = (array.full(1, 127, INT8) + 1).tolist()
u32 = (array.full(1, 0, UINT32) - 1).tolist()
bools = (array.from_list([True, False]) + array.from_list([True, True])).tolist()
`, map[string]string{
		"add": "[5, 5, 5, 5]", "sub": "[-3, -1, 1, 3]", "mul": "[4, 6, 6, 4]",
		"rsub": "[9, 8, 7, 6]", "radd": "[2, 3, 4, 5]", "rmul": "[2, 4, 6, 8]",
		"div": "array([0.5, 1.0, 1.5, 2.0], dtype=float32)", "rdiv": "[8.0, 4.0, 2.6666667461395264, 2.0]",
		"fdiv": "[-4, 3]", "mod": "[2, 1]", "rmod": "[0, 1, 1, 3]",
		"ff": "[-4.0, 3.0]", "fm": "[-1.0, -2.0]",
		"mixed": "array([0.5, 1.0, 1.5, 2.0], dtype=float32)",
		"neg":   "[-1, -2, -3, -4]", "pos": "[1, 2, 3, 4]", "neg_u8": "[255]",
		"wrap": "[-128]", "u32": "[4294967295]", "bools": "[True, True]",
	}},
	{"float16 rounds after every op", `
h = array.full(1, 2048, FLOAT16)
step = (h + 1)[0]
tenth = array.full(1, 0.1, FLOAT16)[0]
third = (array.full(1, 1, FLOAT16) / 3)[0]
b = (array.full(1, 1, BFLOAT16) + 1.0 / 256)[0]
`, map[string]string{
		"step": "2048.0", "tenth": "0.0999755859375", "third": "0.333251953125", "b": "1.0",
	}},
	{"reductions", `
a = array.from_list([[1, -2], [3, -4]])
s, mx, mn, mean = a.sum(), a.max(), a.min(), a.mean()
ab = a.abs().tolist()
f = array.from_list([0.5, -1.5, 2.0])
fs, fmx, fmn, fmean = f.sum(), f.max(), f.min(), f.mean()
h = array.full(3, 0.1, FLOAT16).sum()
bs = array.from_list([True, True, False]).sum()
i8 = array.full(1, -128, INT8).abs().tolist()
`, map[string]string{
		"s": "-2", "mx": "3", "mn": "-4", "mean": "-0.5", "ab": "[[1, 2], [3, 4]]",
		"fs": "1.0", "fmx": "2.0", "fmn": "-1.5", "fmean": "0.3333333432674408",
		"h": "0.2998046875", "bs": "2", "i8": "[-128]",
	}},
	{"conversions", `
a = array.from_list([1.7, -1.7, 0.0])
i = a.astype(INT32).tolist()
b = a.astype("bool").tolist()
u = array.from_list([256, -1]).astype(UINT8).tolist()
h = array.from_list([1, 2049]).astype(FLOAT16).tolist()
r = array.arange(6).reshape([3, -1]).shape
r2 = array.arange(6).reshape(6).shape
bs = array.from_list([1, 258], INT16).tobytes()
c = array.arange(3)
cp = c.copy() == c
`, map[string]string{
		"i": "[1, -1, 0]", "b": "[True, True, False]", "u": "[0, 255]", "h": "[1.0, 2048.0]",
		"r": "(3, 2)", "r2": "(6,)", "bs": `b"\x01\x00\x02\x01"`, "cp": "True",
	}},
	{"equality", `
a = array.arange(3)
eq = a == array.from_list([0, 1, 2])
ne = a != array.from_list([0, 1, 3])
dt = a == a.astype(INT64)
sh = a.reshape(3, 1) == a
nan = array.from_list([float("nan")])
nn = nan == nan
lst = a == [0, 1, 2]
truth = (bool(a), bool(array.zeros(0)))
`, map[string]string{
		"eq": "True", "ne": "True", "dt": "False", "sh": "False", "nn": "False",
		"lst": "False", "truth": "(True, False)",
	}},
	{"matmul and max_abs_diff", `
a = array.from_list([[1, 2], [3, 4]])
b = array.from_list([[5, 6], [7, 8]])
m = array.matmul(a, b).tolist()
# float16 accumulates in float64: 2048 + 1 + 1 is 2050, not 2048.
h = array.matmul(array.from_list([[2048, 1, 1]], FLOAT16), array.from_list([[1], [1], [1]], FLOAT16))
d = array.max_abs_diff(array.from_list([1.0, 2.0]), [1.5, 2.0])
d2 = array.max_abs_diff(array.full(2, 1, INT8), array.full(2, 1.25, FLOAT16))
d3 = array.max_abs_diff(array.from_list([1, 4]), 2)
d4 = array.max_abs_diff([1.0, float("nan")], [1.0, 1.0])
`, map[string]string{
		"m": "[[19, 22], [43, 50]]", "h": "array([[2050.0]], dtype=float16)", "d": "0.5", "d2": "0.25", "d3": "2.0", "d4": "nan",
	}},
}

func TestScripts(t *testing.T) {
	for _, c := range scriptCases {
		t.Run(c.name, func(t *testing.T) {
			g, err := exec(t, c.src)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range c.want {
				v, ok := g[name]
				if !ok {
					t.Errorf("%s: not defined", name)
					continue
				}
				got := v.String()
				if s, ok := v.(starlark.String); ok {
					got = string(s)
				}
				if got != want {
					t.Errorf("%s = %s, want %s", name, got, want)
				}
			}
		})
	}
}

// errorCases run a one-line script that must fail with a message that
// starts with want.
var errorCases = []struct{ src, want string }{
	{`array.arange(4) + array.arange(4, FLOAT32)`, "TypeError: array dtype mismatch: int32 vs float32 (use .astype)"},
	{`array.zeros(4) + array.zeros([2, 2])`, "ValueError: array shape mismatch: (4,) vs (2, 2)"},
	{`array.arange(4)[5]`, "IndexError: array index 5 out of range for length 4"},
	{`array.arange(4)[-5]`, "IndexError: array index -5 out of range for length 4"},
	{`array.zeros([2, 3])[1, 3]`, "IndexError: array index 3 out of range for dimension 1 of length 3"},
	{`array.zeros([2, 3])[0, 0, 0]`, "IndexError: too many indices for array of shape (2, 3): 3"},
	{`array.zeros(2)["x"]`, `TypeError: array index must be an int, got string "x"`},
	{`array.arange(4) // 0`, "ValueError: integer division by zero in int32 array // number"},
	{`array.arange(4) % array.arange(4)`, "ValueError: integer division by zero"},
	{`1 / array.arange(4)`, "ValueError: integer division by zero"},
	{`array.arange(4) + [1]`, "TypeError: unsupported operand types for +: array and list"},
	{`"x" * array.arange(4)`, "TypeError: unsupported operand types for *: string and array"},
	{`array.arange(4) < array.arange(4)`, "TypeError: arrays support only == and !=, not <"},
	{`{array.arange(4): 1}`, "TypeError: unhashable type: array"},
	{`array.arange(6).reshape(4, -1)`, "ValueError: cannot reshape an array of size 6 into shape (4, -1)"},
	{`array.arange(6).reshape(-1, -1)`, "ValueError: shape (-1, -1) has more than one -1 dimension"},
	{`array.arange(6).reshape(5)`, "ValueError: cannot reshape an array of size 6 into shape (5,)"},
	{`array.zeros(2, dtype="float64")`, `ValueError: unknown dtype "float64"`},
	{`array.zeros(2, dtype=3)`, "TypeError: dtype must be a DataType"},
	{`array.zeros("3")`, `TypeError: shape must be an int or a list/tuple of ints, got string "3"`},
	{`array.zeros([2, -3])`, "ValueError: invalid dimension -3 in shape [2, -3]"},
	{`array.zeros([2, 2.0])`, "TypeError: shape dimensions must be ints, got float 2.0 in [2, 2.0]"},
	{`array.zeros()`, "TypeError: zeros: missing argument for shape"},
	{`array.full(2, "x")`, `TypeError: full: fill value must be a number (int, float or bool), got string "x"`},
	{`array.arange(1, 2, 0)`, "ValueError: arange: step must not be zero"},
	{`array.arange(-9223372036854775808, 9223372036854775807)`, "ValueError: arange(-9223372036854775808, 9223372036854775807, 1) has 18446744073709551615 elements, more than 268435456"},
	{`array.zeros([65536, 65536])`, "ValueError: shape (65536, 65536) has more than 268435456 elements"},
	{`array.arange(2.5)`, "TypeError: arange: bounds must be ints, got float 2.5"},
	{`array.arange(1, 2, 3, 4)`, "TypeError: arange: want 1 to 3 int bounds"},
	{`array.from_list([[1, 2], [3]])`, "ValueError: ragged nested list: element [1] has length 1, want 2"},
	{`array.from_list(3)`, "TypeError: from_list: want a list or tuple of numbers, got int"},
	{`array.frombytes(b"abc", FLOAT32)`, "ValueError: 3 bytes are not a whole number of float32 elements (4 bytes each)"},
	{`array.matmul(array.zeros(3), array.zeros([3, 1]))`, "ValueError: matmul needs 2-D arrays, got shapes (3,) and (3, 1)"},
	{`array.matmul(array.zeros([2, 3]), array.zeros([2, 3]))`, "ValueError: matmul shape mismatch: (2, 3) @ (2, 3) (inner dimensions 3 and 2 differ)"},
	{`array.matmul(array.zeros([1, 1]), array.zeros([1, 1], INT8))`, "TypeError: array dtype mismatch: float32 vs int8"},
	{`array.matmul([[1]], [[1]])`, "TypeError: matmul: for parameter a: got list, want array"},
	{`array.max_abs_diff(array.zeros(2), array.zeros(3))`, "ValueError: array shape mismatch: (2,) vs (3,)"},
	{`array.zeros(0).max()`, "ValueError: max() of an empty array (shape (0,))"},
	{`array.zeros(0).mean()`, "ValueError: mean() of an empty array (shape (0,))"},
	{`array.zeros(2).sum(1)`, "TypeError: sum: got 1 arguments, want 0"},
	{`array.zeros(2).astype("int3")`, `ValueError: unknown dtype "int3"`},
	{`FLOAT32 < INT8`, "TypeError: DataType supports only == and !=, not <"},
}

func TestScriptErrors(t *testing.T) {
	for _, c := range errorCases {
		_, err := exec(t, "x = "+c.src+"\n")
		var ee *starlark.EvalError
		if !errors.As(err, &ee) {
			t.Errorf("%s: got %v, want an evaluation error %q", c.src, err, c.want)
			continue
		}
		if !strings.HasPrefix(ee.Msg, c.want) {
			t.Errorf("%s:\n got  %q\n want %q...", c.src, ee.Msg, c.want)
		}
	}
}

// TestSliceMatchesPython checks N-D slicing on the first dimension against
// Python's slice rules for omitted bounds, bounds within [-d, d] or beyond,
// and every step, except mixed-sign bound pairs (see Array.Slice).
func TestSliceMatchesPython(t *testing.T) {
	env := predeclared()
	a, err := FromValue(nil, ints(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), dtype.Int32, []int{3, 4})
	if err != nil {
		t.Fatal(err)
	}
	env["m"] = a
	bounds := []string{"", "-3", "-2", "-1", "0", "1", "2", "3", "4", "5", "12", "100"}
	thread := &starlark.Thread{}
	for _, lo := range bounds {
		for _, hi := range bounds {
			if strings.HasPrefix(lo, "-") != strings.HasPrefix(hi, "-") && lo != "" && hi != "" {
				continue
			}
			for _, step := range []int{1, 2, -1, -2} {
				expr := fmt.Sprintf("m[%s:%s:%d]", lo, hi, step)
				v, err := starlark.EvalOptions(fileOpts, thread, "slice", expr, env)
				if err != nil {
					t.Fatalf("%s: %v", expr, err)
				}
				got := v.(*Array)
				rows := pySlice(3, lo, hi, step)
				if got.shape[0] != len(rows) || got.shape[1] != 4 {
					t.Errorf("%s has shape %v, want (%d, 4)", expr, got.shape, len(rows))
					continue
				}
				for k, r := range rows {
					if got.n[k*4] != int64(r*4) {
						t.Errorf("%s row %d starts with %d, want %d", expr, k, got.n[k*4], r*4)
					}
				}
			}
		}
	}
}

// pySlice lists the indices Python's range(n)[lo:hi:step] selects.
func pySlice(n int, lo, hi string, step int) []int {
	parse := func(s string, def int) (int, bool) {
		if s == "" {
			return def, false
		}
		var v int
		fmt.Sscan(s, &v)
		return v, true
	}
	resolve := func(v int, lower, upper int) int {
		if v < 0 {
			v += n
			if v < lower {
				v = lower
			}
		} else if v > upper {
			v = upper
		}
		return v
	}
	var out []int
	if step > 0 {
		start, ok := parse(lo, 0)
		if ok {
			start = resolve(start, 0, n)
		}
		end, ok := parse(hi, n)
		if ok {
			end = resolve(end, 0, n)
		}
		for i := start; i < end; i += step {
			out = append(out, i)
		}
		return out
	}
	start, ok := parse(lo, n-1)
	if ok {
		start = resolve(start, -1, n-1)
	}
	end, ok := parse(hi, -1)
	if ok {
		end = resolve(end, -1, n-1)
	}
	for i := start; i > end; i += step {
		out = append(out, i)
	}
	return out
}
