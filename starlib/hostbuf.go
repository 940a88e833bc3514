package starlib

import (
	"fmt"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/starlib/array"
)

// HostBuffer is the Starlark value of an engine.HostBuffer.
type HostBuffer struct {
	w *Worker
	b *engine.HostBuffer
}

func (h *HostBuffer) String() string {
	return fmt.Sprintf("HostBuffer(token=%d, nbytes=%d)", h.b.Token, h.b.NBytes)
}
func (h *HostBuffer) Type() string          { return "HostBuffer" }
func (h *HostBuffer) Freeze()               {}
func (h *HostBuffer) Truth() starlark.Bool  { return true }
func (h *HostBuffer) Hash() (uint32, error) { return starlark.MakeUint64(h.b.Token).Hash() }
func (h *HostBuffer) AttrNames() []string   { return []string{"data_ptr", "nbytes", "tensor", "token"} }

func (h *HostBuffer) Attr(name string) (starlark.Value, error) {
	switch name {
	case "token":
		return starlark.MakeUint64(h.b.Token), nil
	case "data_ptr":
		return starlark.MakeUint64(h.b.Addr()), nil
	case "nbytes":
		return starlark.MakeInt(h.b.NBytes), nil
	case "tensor":
		return builtin("tensor", h.tensor), nil
	}
	return nil, nil
}

// tensor is a view of the buffer; one that overruns it is refused here,
// before anything can be dispatched with it.
func (h *HostBuffer) tensor(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var shapeV starlark.Value
	var dtV starlark.Value = array.DTypeConst(dtype.Float32)
	offset := 0
	if err := starlark.UnpackArgs("tensor", args, kw, "shape", &shapeV, "dtype?", &dtV, "offset?", &offset); err != nil {
		return nil, err
	}
	if h.b.Freed() {
		return nil, errorf(engine.RuntimeError, "tensor: host buffer %d was freed", h.b.Token)
	}
	shape, err := toShape("tensor", shapeV)
	if err != nil {
		return nil, err
	}
	dt, err := array.ParseDType(dtV)
	if err != nil {
		return nil, engine.Wrap(err, "tensor")
	}
	t := engine.Tensor{Addr: h.b.Addr() + uint64(offset), Shape: shape, DType: dt}
	if offset < 0 || offset+t.NBytes() > h.b.NBytes {
		return nil, errorf(engine.ValueError, "tensor: %d bytes at offset %d overrun host buffer %d of %d bytes", t.NBytes(), offset, h.b.Token, h.b.NBytes)
	}
	return &Tensor{t: t, base: h.b.Addr(), size: h.b.NBytes, buf: h}, nil
}

func (w *Worker) createHostBuffer(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var nbytes int
	if err := starlark.UnpackPositionalArgs("create_host_buffer", args, kw, 1, &nbytes); err != nil {
		return nil, err
	}
	b, err := w.w.HostBuffers().Create(nbytes)
	if err != nil {
		return nil, err
	}
	return &HostBuffer{w: w, b: b}, nil
}

func (w *Worker) freeHostBuffer(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var bv starlark.Value
	if err := starlark.UnpackPositionalArgs("free_host_buffer", args, kw, 1, &bv); err != nil {
		return nil, err
	}
	b, ok := bv.(*HostBuffer)
	if !ok {
		return nil, errorf(engine.TypeError, "free_host_buffer: want a HostBuffer, got %s", bv.Type())
	}
	if b.w != w {
		return nil, errorf(engine.ValueError, "free_host_buffer: buffer %d belongs to another worker", b.b.Token)
	}
	return starlark.None, w.w.HostBuffers().Free(b.b)
}
