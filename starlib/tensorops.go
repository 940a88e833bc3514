package starlib

import (
	"unsafe"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/starlib/array"
)

// Tensor-to-tensor operations work on memory in place, at memcpy speed,
// without building Arrays: collectives move and reduce whole windows with
// them.

// copyTensor copies src's bytes into dst (same dtype and element count).
func copyTensor(op string, dst, src *Tensor) error {
	if dst.t.DType != src.t.DType || dst.t.Elems() != src.t.Elems() {
		return errorf(engine.ValueError, "%s: %d %s elements into a tensor of %d %s", op, src.t.Elems(), src.t.DType, dst.t.Elems(), dst.t.DType)
	}
	sb, err := src.bytes(op)
	if err != nil {
		return err
	}
	db, err := dst.bytes(op)
	if err != nil {
		return err
	}
	copy(db, sb)
	return nil
}

// accumulate implements t.accumulate(src, op="sum"|"max"|"min"): t = t op
// src, elementwise, in t's dtype.
func tensorAccumulate(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var srcV starlark.Value
	op := "sum"
	if err := starlark.UnpackArgs("accumulate", args, kw, "src", &srcV, "op?", &op); err != nil {
		return nil, err
	}
	dst := b.Receiver().(*Tensor)
	src, ok := srcV.(*Tensor)
	if !ok {
		return nil, errorf(engine.TypeError, "accumulate: want a Tensor, got %s", srcV.Type())
	}
	if op != "sum" && op != "max" && op != "min" {
		return nil, errorf(engine.ValueError, "accumulate: op must be \"sum\", \"max\" or \"min\", got %q", op)
	}
	if dst.t.DType != src.t.DType || dst.t.Elems() != src.t.Elems() {
		return nil, errorf(engine.ValueError, "accumulate: %d %s elements into a tensor of %d %s", src.t.Elems(), src.t.DType, dst.t.Elems(), dst.t.DType)
	}
	sb, err := src.bytes("accumulate")
	if err != nil {
		return nil, err
	}
	db, err := dst.bytes("accumulate")
	if err != nil {
		return nil, err
	}
	switch dst.t.DType {
	case dtype.Float32:
		reduce(asSlice[float32](db), asSlice[float32](sb), op)
	case dtype.Int32:
		reduce(asSlice[int32](db), asSlice[int32](sb), op)
	case dtype.Int64:
		reduce(asSlice[int64](db), asSlice[int64](sb), op)
	default: // other kinds round through an Array in their own dtype
		return starlark.None, accumulateSlow(dst, db, sb, op)
	}
	return starlark.None, nil
}

type number interface{ ~float32 | ~int32 | ~int64 }

func reduce[T number](dst, src []T, op string) {
	switch op {
	case "sum":
		for i, v := range src {
			dst[i] += v
		}
	case "max":
		for i, v := range src {
			dst[i] = max(dst[i], v)
		}
	case "min":
		for i, v := range src {
			dst[i] = min(dst[i], v)
		}
	}
}

// asSlice views little-endian bytes as elements; the simulator's memory is
// host memory and the host is little-endian.
func asSlice[T any](b []byte) []T {
	var zero T
	n := len(b) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

func accumulateSlow(dst *Tensor, db, sb []byte, op string) error {
	x, err := array.FromBytes(dst.t.DType, dst.t.Shape, db)
	if err != nil {
		return err
	}
	y, err := array.FromBytes(dst.t.DType, dst.t.Shape, sb)
	if err != nil {
		return err
	}
	for i := 0; i < x.Size(); i++ {
		a, b := x.Float(i), y.Float(i)
		switch op {
		case "sum":
			a += b
		case "max":
			a = max(a, b)
		case "min":
			a = min(a, b)
		}
		x.SetFloat(i, a)
	}
	copy(db, x.Bytes())
	return nil
}
