// Package dtype names the element types simpler moves between host and
// device memory, with their sizes and the conversions between a stored
// element and a Go number.
//
// Floating kinds decode to float64 and encode with rounding to the kind's
// precision (float16 and bfloat16 round to nearest even, as the hardware
// does). Integer kinds wrap to their width on encode. FP8 and FP4 kinds exist
// only on a5 architectures; hal's architecture table says which platform
// accepts which kinds.
package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// DType is an element type.
type DType uint8

const (
	Invalid DType = iota
	Float32
	Float16
	BFloat16
	Int8
	Int16
	Int32
	Int64
	UInt8
	UInt16
	UInt32
	UInt64
	Bool
	Float8E4M3 // a5 only
	Float8E5M2 // a5 only
	Float4E2M1 // a5 only; stored one element per byte in simulation
)

type info struct {
	name  string // canonical lower-case name, as accepted from scripts
	upper string // the Starlark constant name
	size  int
	float bool
	sign  bool
}

var infos = [...]info{
	Invalid:    {"invalid", "INVALID", 0, false, false},
	Float32:    {"float32", "FLOAT32", 4, true, true},
	Float16:    {"float16", "FLOAT16", 2, true, true},
	BFloat16:   {"bfloat16", "BFLOAT16", 2, true, true},
	Int8:       {"int8", "INT8", 1, false, true},
	Int16:      {"int16", "INT16", 2, false, true},
	Int32:      {"int32", "INT32", 4, false, true},
	Int64:      {"int64", "INT64", 8, false, true},
	UInt8:      {"uint8", "UINT8", 1, false, false},
	UInt16:     {"uint16", "UINT16", 2, false, false},
	UInt32:     {"uint32", "UINT32", 4, false, false},
	UInt64:     {"uint64", "UINT64", 8, false, false},
	Bool:       {"bool", "BOOL", 1, false, false},
	Float8E4M3: {"float8_e4m3", "FLOAT8_E4M3", 1, true, true},
	Float8E5M2: {"float8_e5m2", "FLOAT8_E5M2", 1, true, true},
	Float4E2M1: {"float4_e2m1", "FLOAT4_E2M1", 1, true, true},
}

// Common lists the kinds every platform accepts, in API order.
var Common = []DType{Float32, Float16, BFloat16, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64, Bool}

// Narrow lists the FP8/FP4 kinds of the a5 architecture.
var Narrow = []DType{Float8E4M3, Float8E5M2, Float4E2M1}

// All is Common followed by Narrow.
var All = append(append([]DType(nil), Common...), Narrow...)

func (d DType) valid() bool { return d > Invalid && int(d) < len(infos) }

// String returns the canonical lower-case name, e.g. "float32".
func (d DType) String() string {
	if !d.valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return infos[d].name
}

// ConstName returns the Starlark constant name, e.g. "FLOAT32".
func (d DType) ConstName() string { return infos[d].upper }

// Size is the number of bytes of one element.
func (d DType) Size() int {
	if !d.valid() {
		return 0
	}
	return infos[d].size
}

// IsFloat reports whether d is a floating kind.
func (d DType) IsFloat() bool { return d.valid() && infos[d].float }

// IsSigned reports whether d holds negative values.
func (d DType) IsSigned() bool { return d.valid() && infos[d].sign }

// Parse accepts a canonical name ("float32") or a constant name ("FLOAT32"),
// plus the common aliases "fp32", "fp16", "bf16", "half" and "float".
func Parse(s string) (DType, error) {
	l := strings.ToLower(s)
	switch l {
	case "fp32", "float":
		return Float32, nil
	case "fp16", "half":
		return Float16, nil
	case "bf16":
		return BFloat16, nil
	}
	for i := range infos {
		if DType(i).valid() && infos[i].name == l {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want one of %s)", s, names())
}

func names() string {
	var b []string
	for _, d := range All {
		b = append(b, d.String())
	}
	return strings.Join(b, ", ")
}

// Float decodes the element at the start of b as a float64.
func (d DType) Float(b []byte) float64 {
	switch d {
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case Float16:
		return float64(HalfToFloat(binary.LittleEndian.Uint16(b)))
	case BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case Float8E4M3:
		return float64(e4m3ToFloat(b[0]))
	case Float8E5M2:
		return float64(HalfToFloat(uint16(b[0]) << 8))
	case Float4E2M1:
		return float64(e2m1ToFloat(b[0]))
	case UInt64:
		return float64(binary.LittleEndian.Uint64(b))
	}
	return float64(d.Int(b))
}

// Int decodes the element at the start of b as an int64 (uint64 values keep
// their bits; floats truncate toward zero).
func (d DType) Int(b []byte) int64 {
	switch d {
	case Int8:
		return int64(int8(b[0]))
	case Int16:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case Int32:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	case Int64, UInt64:
		return int64(binary.LittleEndian.Uint64(b))
	case UInt8, Bool:
		return int64(b[0])
	case UInt16:
		return int64(binary.LittleEndian.Uint16(b))
	case UInt32:
		return int64(binary.LittleEndian.Uint32(b))
	}
	return int64(d.Float(b))
}

// PutFloat encodes v into b with d's rounding (floats) or truncation and
// wrapping (integers; bool stores v != 0).
func (d DType) PutFloat(b []byte, v float64) {
	switch d {
	case Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case Float16:
		binary.LittleEndian.PutUint16(b, FloatToHalf(float32(v)))
	case BFloat16:
		binary.LittleEndian.PutUint16(b, FloatToBF16(float32(v)))
	case Float8E4M3:
		b[0] = floatToE4M3(float32(v))
	case Float8E5M2:
		b[0] = floatToE5M2(float32(v))
	case Float4E2M1:
		b[0] = floatToE2M1(float32(v))
	case Bool:
		if v != 0 {
			b[0] = 1
		} else {
			b[0] = 0
		}
	case UInt64:
		if v < 0 {
			d.PutInt(b, int64(v))
		} else {
			binary.LittleEndian.PutUint64(b, uint64(v))
		}
	default:
		d.PutInt(b, int64(v))
	}
}

// PutInt encodes v into b, wrapping to d's width (floats convert; bool
// stores v != 0).
func (d DType) PutInt(b []byte, v int64) {
	switch d {
	case Int8, UInt8:
		b[0] = byte(v)
	case Bool:
		if v != 0 {
			b[0] = 1
		} else {
			b[0] = 0
		}
	case Int16, UInt16:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case Int32, UInt32:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case Int64, UInt64:
		binary.LittleEndian.PutUint64(b, uint64(v))
	default:
		d.PutFloat(b, float64(v))
	}
}

// RoundFloat returns v as it reads back after a store in d.
func (d DType) RoundFloat(v float64) float64 {
	var b [8]byte
	d.PutFloat(b[:], v)
	return d.Float(b[:])
}
