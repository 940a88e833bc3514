package starlib

// Buffers, as upstream names them: w.create_buffer(nbytes, access=) is
// host shared memory with an access mode, orch.alloc_child_tensor(worker,
// shape, dtype) device memory on one chip. Both hand out tensors through
// buf.tensor(shape, dtype, strides, byte_offset). A view of a "read"
// buffer may be an argument only under a tag that does not write it:
// add_tensor and set_tag refuse a write tag, and so does every submit,
// whatever the tag became in between.

import (
	"fmt"
	"sync/atomic"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/starlib/array"
)

// Access modes of a Buffer.
const (
	accessRead      = "read"
	accessReadWrite = "readwrite"
)

// Buffer is a Starlark Buffer: either host shared memory (host set) or
// device memory of NEXT_LEVEL worker `worker` at ptr.
type Buffer struct {
	nbytes   int
	access   string
	host     *HostBuffer // create_buffer's memory; nil for device memory
	worker   int         // alloc_child_tensor's chip
	ptr      uint64      // alloc_child_tensor's device address
	seq      uint64      // alloc_child_tensor's number, for errors
	released bool
}

func (b *Buffer) String() string {
	return fmt.Sprintf("Buffer(%s, nbytes=%d, access=%q)", b.name(), b.nbytes, b.access)
}
func (b *Buffer) Type() string          { return "Buffer" }
func (b *Buffer) Freeze()               {}
func (b *Buffer) Truth() starlark.Bool  { return true }
func (b *Buffer) Hash() (uint32, error) { return 0, fmt.Errorf("TypeError: unhashable type: Buffer") }
func (b *Buffer) AttrNames() []string {
	return []string{"access", "child_memory", "nbytes", "released", "tensor", "worker_id"}
}

// name says which buffer this is, for errors.
func (b *Buffer) name() string {
	if b.host != nil {
		return fmt.Sprintf("host buffer %d", b.host.b.Token)
	}
	return fmt.Sprintf("device buffer %d of worker %d", b.seq, b.worker)
}

// isReleased reports whether the memory is gone: released, or (a host
// buffer) freed when its worker closed.
func (b *Buffer) isReleased() bool {
	return b.released || b.host != nil && b.host.b.Freed()
}

func (b *Buffer) Attr(name string) (starlark.Value, error) {
	switch name {
	case "nbytes":
		return starlark.MakeInt(b.nbytes), nil
	case "access":
		return starlark.String(b.access), nil
	case "released":
		return starlark.Bool(b.isReleased()), nil
	case "child_memory":
		return starlark.Bool(b.host == nil), nil
	case "worker_id":
		if b.host != nil {
			return starlark.None, nil
		}
		return starlark.MakeInt(b.worker), nil
	case "tensor":
		return builtin("tensor", b.tensor), nil
	}
	return nil, nil
}

// writes reports whether a tag lets a task write the tensor's bytes.
func writes(tag engine.Tag) bool {
	return tag == engine.Output || tag == engine.InOut || tag == engine.OutputExisting
}

// grants refuses argument i tagged tag when the buffer does not grant the
// write the tag asks for.
func (b *Buffer) grants(op string, i int, tag engine.Tag) error {
	if b.access == accessReadWrite || !writes(tag) {
		return nil
	}
	return errorf(engine.ValueError, "%s: tensor %d is tagged %s, but it is a view of %s, which grants %q access only", op, i, tag, b.name(), b.access)
}

// tensor implements buf.tensor(shape, dtype=FLOAT32, strides=None,
// byte_offset=0): a view of the buffer, contiguous unless strides (in
// elements) say otherwise. Every byte it reaches must lie in the buffer,
// and byte_offset must be a multiple of the dtype's size, as upstream.
func (b *Buffer) tensor(th *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var shapeV starlark.Value
	var dtV starlark.Value = array.DTypeConst(dtype.Float32)
	var stridesV starlark.Value = starlark.None
	offset := 0
	if err := starlark.UnpackArgs("tensor", args, kw, "shape", &shapeV, "dtype?", &dtV, "strides?", &stridesV, "byte_offset?", &offset); err != nil {
		return nil, err
	}
	if b.isReleased() {
		return nil, errorf(engine.RuntimeError, "tensor: %s was released", b.name())
	}
	shape, err := toShape("tensor", shapeV)
	if err != nil {
		return nil, err
	}
	dt, err := array.ParseDType(dtV)
	if err != nil {
		return nil, engine.Wrap(err, "tensor")
	}
	if offset < 0 || offset > b.nbytes || offset%dt.Size() != 0 {
		return nil, errorf(engine.ValueError, "tensor: byte_offset %d must be a multiple of %s's %d bytes inside %s of %d bytes", offset, dt, dt.Size(), b.name(), b.nbytes)
	}
	base := b.ptr
	if b.host != nil {
		base = b.host.b.Addr()
	}
	t := engine.Tensor{Addr: base + uint64(offset), Shape: shape, DType: dt, ChildMemory: b.host == nil}
	if stridesV != starlark.None {
		st, err := viewStrides(shape, stridesV)
		if err != nil {
			return nil, engine.Wrap(err, "tensor")
		}
		t.Strides = engine.NormalStrides(shape, st)
	}
	if n, ok := t.Span(); !ok || offset+n > b.nbytes {
		return nil, errorf(engine.ValueError, "tensor: shape %v reaches %d bytes from byte_offset %d, past the end of %s of %d bytes", shape, n, offset, b.name(), b.nbytes)
	}
	v := &Tensor{t: t, base: base, size: b.nbytes, owner: b}
	if b.host != nil {
		v.buf = b.host
	}
	return v, nil
}

// deviceBufSeq numbers alloc_child_tensor's buffers in this process, so
// an error names one without its device address.
var deviceBufSeq atomic.Uint64

// createBuffer implements w.create_buffer(nbytes, access="readwrite").
func (w *Worker) createBuffer(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var nbytes int
	access := accessReadWrite
	if err := starlark.UnpackArgs("create_buffer", args, kw, "nbytes", &nbytes, "access?", &access); err != nil {
		return nil, err
	}
	if access != accessRead && access != accessReadWrite {
		return nil, errorf(engine.ValueError, "create_buffer: access must be %q or %q, got %q", accessRead, accessReadWrite, access)
	}
	if nbytes <= 0 {
		return nil, errorf(engine.ValueError, "create_buffer: nbytes must be > 0, got %d", nbytes)
	}
	h, err := w.w.HostBuffers().Create(nbytes)
	if err != nil {
		return nil, err
	}
	return &Buffer{nbytes: nbytes, access: access, host: &HostBuffer{w: w, b: h}}, nil
}

// releaseBuffer implements w.release_buffer(buf): the memory goes at once,
// or, while a queued or running task uses it, not at all (RuntimeError).
// Releasing it again does nothing.
func (w *Worker) releaseBuffer(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var bv starlark.Value
	if err := starlark.UnpackPositionalArgs("release_buffer", args, kw, 1, &bv); err != nil {
		return nil, err
	}
	b, ok := bv.(*Buffer)
	if !ok {
		return nil, errorf(engine.TypeError, "release_buffer: want a Buffer, got %s", bv.Type())
	}
	if b.host == nil {
		return nil, errorf(engine.ValueError, "release_buffer: %s is device memory; free it with orch.free(buf)", b.name())
	}
	if b.host.w != w {
		return nil, errorf(engine.ValueError, "release_buffer: %s belongs to another worker", b.name())
	}
	if err := w.w.HostBuffers().Release("release_buffer", b.host.b); err != nil {
		return nil, err
	}
	b.released = true
	return starlark.None, nil
}

// allocChildTensor implements orch.alloc_child_tensor(worker, shape,
// dtype): device memory for shape x dtype on NEXT_LEVEL worker `worker`,
// as a Buffer (direct control: before the run's first submit).
func (o *Orchestrator) allocChildTensor(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var worker int
	var shapeV starlark.Value
	var dtV starlark.Value = array.DTypeConst(dtype.Float32)
	if err := starlark.UnpackArgs("alloc_child_tensor", args, kw, "worker", &worker, "shape", &shapeV, "dtype?", &dtV); err != nil {
		return nil, err
	}
	shape, err := toShape("alloc_child_tensor", shapeV)
	if err != nil {
		return nil, err
	}
	dt, err := array.ParseDType(dtV)
	if err != nil {
		return nil, engine.Wrap(err, "alloc_child_tensor")
	}
	n := engine.Tensor{Shape: shape, DType: dt}.NBytes()
	if n <= 0 {
		return nil, errorf(engine.ValueError, "alloc_child_tensor: shape %v holds no bytes", shape)
	}
	p, err := o.o.Malloc(worker, n)
	if err != nil {
		return nil, engine.Wrap(err, "alloc_child_tensor")
	}
	return &Buffer{nbytes: n, access: accessReadWrite, worker: worker, ptr: p, seq: deviceBufSeq.Add(1)}, nil
}

// freeBuffer is orch.free(buf) for alloc_child_tensor's Buffer; freeing
// it again does nothing.
func (o *Orchestrator) freeBuffer(b *Buffer) error {
	if b.host != nil {
		return errorf(engine.ValueError, "orch.free: %s is host memory; release it with w.release_buffer(buf)", b.name())
	}
	if b.released {
		return nil
	}
	if err := o.o.Free(b.worker, b.ptr); err != nil {
		return err
	}
	b.released = true
	return nil
}
