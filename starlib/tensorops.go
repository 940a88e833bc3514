package starlib

import (
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/internal/halt"
	"simpler/internal/race"
	"simpler/starlib/inplace"
)

// Tensor-to-tensor operations work on memory in place, at memcpy speed,
// without building Arrays (package inplace): collectives move and reduce
// whole windows and host tensors with them.

// copyTensor copies src's bytes into dst (same dtype and element count),
// as th.
func copyTensor(th *starlark.Thread, op string, dst, src *Tensor) error {
	return applyTensor(th, op, inplace.Sum, dst, src, true)
}

// sameKind refuses a pair of tensors that differ in dtype or element
// count: in-place operations never convert.
func sameKind(op string, dst, src *Tensor) error {
	if dst.t.DType != src.t.DType || dst.t.Elems() != src.t.Elems() {
		return errorf(engine.ValueError, "%s: %d %s elements into a tensor of %d %s", op, src.t.Elems(), src.t.DType, dst.t.Elems(), dst.t.DType)
	}
	return nil
}

// applyTensor is dst = dst op src, or dst = src (copy), over the bytes, as
// th; a reduction ends early once th's stop signal fires.
func applyTensor(th *starlark.Thread, op string, o inplace.Op, dst, src *Tensor, copyOnly bool) error {
	if err := sameKind(op, dst, src); err != nil {
		return err
	}
	sb, err := src.bytes(op)
	if err != nil {
		return err
	}
	db, err := dst.bytes(op)
	if err != nil {
		return err
	}
	src.touch(th, sb, race.Read, op)
	if copyOnly {
		dst.touch(th, db, race.Write, op)
		copy(db, sb)
		return nil
	}
	dst.touch(th, db, race.Read, op)
	dst.touch(th, db, race.Write, op)
	return engine.Wrap(inplace.ReduceStop(dst.t.DType, o, [][]byte{db}, [][]byte{db, sb}, halt.Of(th)), op)
}

// inPlace makes the builtin t.<name>(u): t = t op u (or t = u for copy_),
// with no copy of either.
func inPlace(name string, o inplace.Op, copyOnly bool) *starlark.Builtin {
	return builtin(name, func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		var srcV starlark.Value
		if err := starlark.UnpackPositionalArgs(name, args, kw, 1, &srcV); err != nil {
			return nil, err
		}
		src, ok := srcV.(*Tensor)
		if !ok {
			return nil, errorf(engine.TypeError, "%s: want a Tensor, got %s", name, srcV.Type())
		}
		return starlark.None, applyTensor(th, name, o, b.Receiver().(*Tensor), src, copyOnly)
	})
}

// tensorAccumulate implements t.accumulate(src, op="sum"|"max"|"min"): t
// = t op src, elementwise, in t's dtype (t.add_, t.max_, t.min_ by name).
func tensorAccumulate(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var srcV starlark.Value
	opName := "sum"
	if err := starlark.UnpackArgs("accumulate", args, kw, "src", &srcV, "op?", &opName); err != nil {
		return nil, err
	}
	src, ok := srcV.(*Tensor)
	if !ok {
		return nil, errorf(engine.TypeError, "accumulate: want a Tensor, got %s", srcV.Type())
	}
	o, ok := inplace.ParseOp(opName)
	if !ok {
		return nil, errorf(engine.ValueError, "accumulate: op must be \"sum\", \"max\" or \"min\", got %q", opName)
	}
	return starlark.None, applyTensor(th, "accumulate", o, b.Receiver().(*Tensor), src, false)
}

// reduceInto implements reduce_into(dst, tensors, op="sum") of a kernel's
// comm (and chip): dst = tensors[0] op tensors[1] op ..., elementwise,
// each source read once and dst written once. dst may be a list of
// tensors: each gets the result, still from one read of the sources.
func reduceInto(th *starlark.Thread, name string, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var dstV, srcsV starlark.Value
	opName := "sum"
	if err := starlark.UnpackArgs(name, args, kw, "dst", &dstV, "tensors", &srcsV, "op?", &opName); err != nil {
		return nil, err
	}
	o, ok := inplace.ParseOp(opName)
	if !ok {
		return nil, errorf(engine.ValueError, "%s: op must be \"sum\", \"max\" or \"min\", got %q", name, opName)
	}
	dsts, err := tensorList(name, "dst", dstV, true)
	if err != nil {
		return nil, err
	}
	srcs, err := tensorList(name, "tensors", srcsV, false)
	if err != nil {
		return nil, err
	}
	if len(srcs) == 0 {
		return nil, errorf(engine.ValueError, "%s: tensors is empty; give at least one source", name)
	}
	return starlark.None, reduceTensors(th, name, o, dsts, srcs)
}

// reduceTensors is reduce_into(dsts, srcs, op) past its argument parsing,
// srcs not empty: the native window kernels (collwindow.go) call it, so
// that --race and --seed see their reductions as the builtin's.
func reduceTensors(th *starlark.Thread, name string, o inplace.Op, dsts, srcs []*Tensor) error {
	first := srcs[0]
	db, err := tensorBytes(name, first, dsts)
	if err != nil {
		return err
	}
	sb, err := tensorBytes(name, first, srcs)
	if err != nil {
		return err
	}
	for i, b := range sb {
		srcs[i].touch(th, b, race.Read, name)
	}
	for i, b := range db {
		dsts[i].touch(th, b, race.Write, name)
	}
	return engine.Wrap(inplace.ReduceStop(first.t.DType, o, db, sb, halt.Of(th)), name)
}

// tensorList accepts a list or tuple of Tensors (or, with one set, a
// single Tensor) for argument what of op.
func tensorList(op, what string, v starlark.Value, one bool) ([]*Tensor, error) {
	if t, ok := v.(*Tensor); ok && one {
		return []*Tensor{t}, nil
	}
	seq, ok := v.(starlark.Indexable)
	if _, isString := v.(starlark.String); !ok || isString {
		want := "a list of Tensors"
		if one {
			want = "a Tensor or a list of Tensors"
		}
		return nil, errorf(engine.TypeError, "%s: %s must be %s, got %s", op, what, want, v.Type())
	}
	out := make([]*Tensor, seq.Len())
	for i := range out {
		t, ok := seq.Index(i).(*Tensor)
		if !ok {
			return nil, errorf(engine.TypeError, "%s: %s[%d] must be a Tensor, got %s", op, what, i, seq.Index(i).Type())
		}
		out[i] = t
	}
	return out, nil
}

// tensorBytes checks every tensor against the first source and returns
// their memory.
func tensorBytes(op string, first *Tensor, ts []*Tensor) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		if err := sameKind(op, t, first); err != nil {
			return nil, err
		}
		b, err := t.bytes(op)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}
