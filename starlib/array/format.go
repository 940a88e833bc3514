package array

import (
	"math"
	"strconv"
	"strings"

	"simpler/hal/dtype"
)

// Arrays of more than elideOver elements print only the first and last
// elideEdge entries of every dimension longer than 2*elideEdge.
const (
	elideOver = 64
	elideEdge = 3
)

// String formats the array like numpy's repr, e.g.
// array([[1, 2], [3, 4]], dtype=int32).
func (a *Array) String() string {
	var b strings.Builder
	b.WriteString("array(")
	if a.ndim() == 0 {
		b.WriteString(a.elemString(0))
	} else {
		a.writeDim(&b, 0, 0, a.Size() > elideOver)
	}
	b.WriteString(", dtype=")
	b.WriteString(a.dt.String())
	b.WriteByte(')')
	return b.String()
}

// writeDim writes the sub-array of dimension dim that starts at flat offset
// off.
func (a *Array) writeDim(b *strings.Builder, dim, off int, elide bool) {
	n := a.shape[dim]
	stride := numel(a.shape[dim+1:])
	last := dim == len(a.shape)-1
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		if elide && n > 2*elideEdge && i == elideEdge {
			b.WriteString("..., ")
			i = n - elideEdge
		}
		if last {
			b.WriteString(a.elemString(off + i))
		} else {
			a.writeDim(b, dim+1, off+i*stride, elide)
		}
	}
	b.WriteByte(']')
}

// elemString formats flat element i: floats as Python reprs of the float32
// value, ints in decimal (uint64 unsigned), bools as True/False.
func (a *Array) elemString(i int) string {
	switch {
	case a.f != nil:
		return formatFloat(a.f[i])
	case a.dt == dtype.Bool:
		if a.n[i] != 0 {
			return "True"
		}
		return "False"
	case a.dt == dtype.UInt64:
		return strconv.FormatUint(uint64(a.n[i]), 10)
	}
	return strconv.FormatInt(a.n[i], 10)
}

// formatFloat formats v as Python's repr would format float(v), with the
// shortest digits that identify v as a float32: "3.0", "0.1", "1e-05",
// "1e+16", "inf", "nan".
func formatFloat(v float32) string {
	switch {
	case v != v:
		return "nan"
	case math.IsInf(float64(v), 1):
		return "inf"
	case math.IsInf(float64(v), -1):
		return "-inf"
	}
	e := strconv.FormatFloat(float64(v), 'e', -1, 32)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if v != 0 && (exp < -4 || exp >= 16) {
		return e
	}
	s := strconv.FormatFloat(float64(v), 'f', -1, 32)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// shapeString formats a shape as a Python tuple: "()", "(4,)", "(2, 3)".
func shapeString(shape []int) string {
	if len(shape) == 1 {
		return "(" + strconv.Itoa(shape[0]) + ",)"
	}
	return "(" + joinInts(shape) + ")"
}

// indexString formats a multi-dimensional index: "[1, 2]".
func indexString(idx []int) string { return "[" + joinInts(idx) + "]" }

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// unflatten turns flat index i into an index per dimension of shape.
func unflatten(shape []int, i int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return idx
}
