package array

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/hal/dtype"
)

// DTypeValue is the Starlark value of a dtype. It prints as its constant
// name ("FLOAT32"), has type "DataType", is hashable and compares by dtype.
// Attributes: .name ("float32") and .itemsize (bytes per element).
type DTypeValue struct{ dtype.DType }

var (
	_ starlark.Value      = (*DTypeValue)(nil)
	_ starlark.HasAttrs   = (*DTypeValue)(nil)
	_ starlark.Comparable = (*DTypeValue)(nil)
)

// dtypeConsts holds the canonical value of every valid dtype, by DType.
var dtypeConsts = func() []*DTypeValue {
	var c []*DTypeValue
	for d := dtype.Invalid; d.Size() != 0 || d == dtype.Invalid; d++ {
		c = append(c, &DTypeValue{d})
	}
	return c
}()

// DTypeConst returns the shared Starlark value of d.
func DTypeConst(d dtype.DType) *DTypeValue {
	if int(d) < len(dtypeConsts) {
		return dtypeConsts[d]
	}
	return &DTypeValue{d}
}

// ParseDType accepts a *DTypeValue or a dtype name such as "float32" or
// "FLOAT32".
func ParseDType(v starlark.Value) (dtype.DType, error) {
	switch v := v.(type) {
	case *DTypeValue:
		if err := checkDType(v.DType); err != nil {
			return dtype.Invalid, err
		}
		return v.DType, nil
	case starlark.String:
		d, err := dtype.Parse(string(v))
		if err != nil {
			return dtype.Invalid, fmt.Errorf("ValueError: %v", err)
		}
		return d, nil
	}
	return dtype.Invalid, fmt.Errorf("TypeError: dtype must be a DataType (such as FLOAT32) or a string (such as \"float32\"), got %s %s",
		v.Type(), v.String())
}

// String returns the constant name, e.g. "FLOAT32".
func (d *DTypeValue) String() string {
	if int(d.DType) < len(dtypeConsts) {
		return d.ConstName()
	}
	return d.DType.String()
}

// Type returns "DataType".
func (d *DTypeValue) Type() string { return "DataType" }

// Freeze does nothing: a DTypeValue is immutable.
func (d *DTypeValue) Freeze() {}

// Truth is always true.
func (d *DTypeValue) Truth() starlark.Bool { return true }

// Hash returns a hash of the dtype.
func (d *DTypeValue) Hash() (uint32, error) { return 0x9e3779b9 ^ uint32(d.DType)*0x01000193, nil }

// CompareSameType supports == and !=.
func (d *DTypeValue) CompareSameType(op syntax.Token, y starlark.Value, depth int) (bool, error) {
	e := y.(*DTypeValue)
	switch op {
	case syntax.EQL:
		return d.DType == e.DType, nil
	case syntax.NEQ:
		return d.DType != e.DType, nil
	}
	return false, fmt.Errorf("TypeError: DataType supports only == and !=, not %s", op)
}

// Attr returns .name or .itemsize.
func (d *DTypeValue) Attr(name string) (starlark.Value, error) {
	switch name {
	case "name":
		return starlark.String(d.DType.String()), nil
	case "itemsize":
		return starlark.MakeInt(d.Size()), nil
	}
	return nil, nil
}

// AttrNames lists the attributes.
func (d *DTypeValue) AttrNames() []string { return []string{"itemsize", "name"} }
