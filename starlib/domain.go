package starlib

import (
	"fmt"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/starlib/array"
)

// BufferSpec is CommBufferSpec(name=, dtype=, count=, nbytes=).
type BufferSpec struct{ b engine.BufferSpec }

func (b *BufferSpec) String() string {
	return fmt.Sprintf("CommBufferSpec(name=%q, dtype=%s, count=%d, nbytes=%d)", b.b.Name, b.b.DType, b.b.Count, b.b.NBytes)
}
func (b *BufferSpec) Type() string          { return "CommBufferSpec" }
func (b *BufferSpec) Freeze()               {}
func (b *BufferSpec) Truth() starlark.Bool  { return true }
func (b *BufferSpec) Hash() (uint32, error) { return starlark.String(b.b.Name).Hash() }
func (b *BufferSpec) AttrNames() []string   { return []string{"count", "dtype", "name", "nbytes"} }

func (b *BufferSpec) Attr(name string) (starlark.Value, error) {
	switch name {
	case "name":
		return starlark.String(b.b.Name), nil
	case "dtype":
		return array.DTypeConst(b.b.DType), nil
	case "count":
		return starlark.MakeInt(b.b.Count), nil
	case "nbytes":
		return starlark.MakeInt(b.b.NBytes), nil
	}
	return nil, nil
}

// newBufferSpec: nbytes defaults to count × itemsize and count to
// nbytes / itemsize. Given both, nbytes may exceed count × itemsize (the
// buffer is padded, as ported upstream scripts align their buffers) but
// not fall short of it.
func newBufferSpec(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var name string
	var dtV starlark.Value = array.DTypeConst(dtype.UInt8)
	var countV, nbytesV starlark.Value = starlark.None, starlark.None
	if err := starlark.UnpackArgs("CommBufferSpec", args, kw, "name", &name, "dtype?", &dtV, "count?", &countV, "nbytes?", &nbytesV); err != nil {
		return nil, err
	}
	dt, err := array.ParseDType(dtV)
	if err != nil {
		return nil, engine.Wrap(err, "CommBufferSpec")
	}
	count, err := specSize(name, "count", countV, false)
	if err != nil {
		return nil, err
	}
	nbytes, err := specSize(name, "nbytes", nbytesV, true)
	if err != nil {
		return nil, err
	}
	size := dt.Size()
	switch {
	case count < 0 && nbytes < 0:
		return nil, errorf(engine.ValueError, "CommBufferSpec %q: give count or nbytes", name)
	case count > maxSpecBytes/size:
		return nil, errorf(engine.ValueError, "CommBufferSpec %q: count=%d of %s is more than %d bytes", name, count, dt, maxSpecBytes)
	case nbytes < 0:
		nbytes = count * size
		if nbytes == 0 {
			return nil, errorf(engine.ValueError, "CommBufferSpec %q: count=0 gives an empty buffer; nbytes must be > 0", name)
		}
	case count < 0:
		if nbytes%size != 0 {
			return nil, errorf(engine.ValueError, "CommBufferSpec %q: nbytes=%d is not a multiple of %s's %d bytes", name, nbytes, dt, size)
		}
		count = nbytes / size
	case count*size > nbytes:
		return nil, errorf(engine.ValueError, "CommBufferSpec %q: count=%d of %s is %d bytes, more than nbytes=%d", name, count, dt, count*size, nbytes)
	}
	return &BufferSpec{b: engine.BufferSpec{Name: name, DType: dt, Count: count, NBytes: nbytes}}, nil
}

// maxSpecBytes bounds a buffer's bytes, so that count × itemsize cannot
// wrap; no window is near it.
const maxSpecBytes = 1 << 48

// specSize reads CommBufferSpec's count= or nbytes=: -1 when not given,
// else an int >= 0, or > 0 if positive.
func specSize(name, key string, v starlark.Value, positive bool) (int, error) {
	if v == starlark.None {
		return -1, nil
	}
	x, ok := v.(starlark.Int)
	if !ok {
		return 0, errorf(engine.TypeError, "CommBufferSpec %q: %s must be an int, got %s", name, key, v.Type())
	}
	n, ok := x.Int64()
	switch {
	case !ok || n > maxSpecBytes:
		return 0, errorf(engine.ValueError, "CommBufferSpec %q: %s=%s is too large (at most %d)", name, key, x, int64(maxSpecBytes))
	case positive && n <= 0:
		return 0, errorf(engine.ValueError, "CommBufferSpec %q: %s must be > 0, got %d", name, key, n)
	case n < 0:
		return 0, errorf(engine.ValueError, "CommBufferSpec %q: %s must be >= 0, got %d", name, key, n)
	}
	return int(n), nil
}

// DomainHandle is a CommDomainHandle.
type DomainHandle struct{ d *engine.Domain }

func (h *DomainHandle) String() string {
	return fmt.Sprintf("CommDomainHandle(%q, workers=%s, allocation_id=%d)", h.d.Name(), engine.FormatInts(h.d.Workers()), h.d.AllocationID())
}
func (h *DomainHandle) Type() string          { return "CommDomainHandle" }
func (h *DomainHandle) Freeze()               {}
func (h *DomainHandle) Truth() starlark.Bool  { return true }
func (h *DomainHandle) Hash() (uint32, error) { return starlark.MakeUint64(h.d.AllocationID()).Hash() }
func (h *DomainHandle) AttrNames() []string {
	return []string{"allocation_id", "freed", "name", "release", "released", "workers"}
}

func (h *DomainHandle) Attr(name string) (starlark.Value, error) {
	switch name {
	case "name":
		return starlark.String(h.d.Name()), nil
	case "workers":
		return starlark.NewList(intTuple(h.d.Workers())), nil
	case "allocation_id":
		return starlark.MakeUint64(h.d.AllocationID()), nil
	case "released":
		return starlark.Bool(h.d.Released()), nil
	case "freed":
		return starlark.Bool(h.d.Freed()), nil
	case "release":
		return builtin("release", func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			if err := noArgs("release", args, kw); err != nil {
				return nil, err
			}
			return starlark.None, h.d.Release()
		}), nil
	}
	return nil, nil
}

// Get implements h[chip_idx].
func (h *DomainHandle) Get(k starlark.Value) (starlark.Value, bool, error) {
	i, err := starlark.AsInt32(k)
	if err != nil {
		return nil, false, errorf(engine.TypeError, "domain index must be a worker id (int), got %s", k.Type())
	}
	v, err := h.d.Rank(i)
	if err != nil {
		return nil, false, err
	}
	return &ChipDomain{v: v}, true, nil
}

// ChipDomain is a ChipDomainContext.
type ChipDomain struct{ v *engine.RankView }

func (c *ChipDomain) String() string {
	return fmt.Sprintf("ChipDomainContext(%q, rank %d of %d)", c.v.Name, c.v.Rank, c.v.Size)
}
func (c *ChipDomain) Type() string          { return "ChipDomainContext" }
func (c *ChipDomain) Freeze()               {}
func (c *ChipDomain) Truth() starlark.Bool  { return true }
func (c *ChipDomain) Hash() (uint32, error) { return starlark.MakeUint64(c.v.DeviceCtx).Hash() }
func (c *ChipDomain) AttrNames() []string {
	return []string{"actual_window_size", "buffer", "buffer_ptrs", "device_ctx", "domain_rank", "domain_size", "local_window_base", "name"}
}

func (c *ChipDomain) Attr(name string) (starlark.Value, error) {
	switch name {
	case "name":
		return starlark.String(c.v.Name), nil
	case "domain_rank":
		return starlark.MakeInt(c.v.Rank), nil
	case "domain_size":
		return starlark.MakeInt(c.v.Size), nil
	case "device_ctx":
		return starlark.MakeUint64(c.v.DeviceCtx), nil
	case "local_window_base":
		return starlark.MakeUint64(c.v.WindowBase), nil
	case "actual_window_size":
		return starlark.MakeInt(c.v.WindowSize), nil
	case "buffer_ptrs":
		d := starlark.NewDict(len(c.v.BufferSpecs))
		for _, b := range c.v.BufferSpecs {
			d.SetKey(starlark.String(b.Name), starlark.MakeUint64(c.v.BufferPtrs[b.Name]))
		}
		return d, nil
	case "buffer":
		return builtin("buffer", c.buffer), nil
	}
	return nil, nil
}

// buffer returns a child_memory Tensor over a named buffer; shape and
// dtype default to the buffer's count and dtype, and must fit inside it.
func (c *ChipDomain) buffer(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var name string
	var shapeV, dtV starlark.Value = starlark.None, starlark.None
	if err := starlark.UnpackArgs("buffer", args, kw, "name", &name, "shape?", &shapeV, "dtype?", &dtV); err != nil {
		return nil, err
	}
	var spec *engine.BufferSpec
	for i := range c.v.BufferSpecs {
		if c.v.BufferSpecs[i].Name == name {
			spec = &c.v.BufferSpecs[i]
		}
	}
	if spec == nil {
		return nil, errorf(engine.KeyError, "buffer: domain %q has no buffer %q", c.v.Name, name)
	}
	dt := spec.DType
	if dtV != starlark.None {
		d, err := array.ParseDType(dtV)
		if err != nil {
			return nil, engine.Wrap(err, "buffer")
		}
		dt = d
	}
	// The default view is the buffer's count elements, not its padded
	// bytes; in another dtype, as many elements as those bytes hold.
	shape := []int{spec.Count * spec.DType.Size() / dt.Size()}
	if shapeV != starlark.None {
		s, err := toShape("buffer", shapeV)
		if err != nil {
			return nil, err
		}
		shape = s
	}
	t := engine.Tensor{Addr: c.v.BufferPtrs[name], Shape: shape, DType: dt, ChildMemory: true}
	if t.NBytes() > spec.NBytes {
		return nil, errorf(engine.ValueError, "buffer: %d bytes of shape %v do not fit buffer %q of %d bytes", t.NBytes(), shape, name, spec.NBytes)
	}
	return &Tensor{t: t, base: t.Addr, size: spec.NBytes}, nil
}

// allocateDomain implements orch.allocate_domain(name=, workers=,
// window_size=, buffers=[...]).
func (o *Orchestrator) allocateDomain(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "allocate_domain"
	var name string
	var workersV starlark.Value = starlark.None
	var windowSize int
	var buffersV starlark.Value = starlark.None
	taskOnly := false
	if err := starlark.UnpackArgs(op, args, kw, "name", &name, "workers?", &workersV, "window_size", &windowSize, "buffers?", &buffersV, "task_only?", &taskOnly); err != nil {
		return nil, err
	}
	spec := engine.DomainSpec{Name: name, WindowSize: windowSize, TaskOnly: taskOnly}
	if workersV == starlark.None {
		for i := 0; i < o.o.Worker().NextCount(); i++ {
			spec.Workers = append(spec.Workers, i)
		}
	} else {
		ids, err := intList(op, "workers", workersV)
		if err != nil {
			return nil, err
		}
		spec.Workers = ids
	}
	bufs, err := bufferSpecs(op, buffersV)
	if err != nil {
		return nil, err
	}
	spec.Buffers = bufs
	d, err := o.o.AllocateDomain(spec)
	if err != nil {
		return nil, err
	}
	return &DomainHandle{d: d}, nil
}

func (o *Orchestrator) releaseDomain(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var hv starlark.Value
	if err := starlark.UnpackPositionalArgs("release_domain", args, kw, 1, &hv); err != nil {
		return nil, err
	}
	h, ok := hv.(*DomainHandle)
	if !ok {
		return nil, errorf(engine.TypeError, "release_domain: want a CommDomainHandle, got %s", hv.Type())
	}
	return starlark.None, h.d.Release()
}

// liveDomains is w.live_domains: name → live handle.
func (w *Worker) liveDomains() starlark.Value {
	live := w.w.LocalDomains().Live()
	d := starlark.NewDict(len(live))
	for _, name := range sortedKeys(live) {
		d.SetKey(starlark.String(name), &DomainHandle{d: live[name]})
	}
	return d
}

// bufferSpecs reads an optional list of CommBufferSpec.
func bufferSpecs(op string, v starlark.Value) ([]engine.BufferSpec, error) {
	if v == starlark.None {
		return nil, nil
	}
	it, ok := v.(starlark.Indexable)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: buffers must be a list of CommBufferSpec, got %s", op, v.Type())
	}
	var out []engine.BufferSpec
	for i := 0; i < it.Len(); i++ {
		b, ok := it.Index(i).(*BufferSpec)
		if !ok {
			return nil, errorf(engine.TypeError, "%s: buffers[%d] must be a CommBufferSpec, got %s", op, i, it.Index(i).Type())
		}
		out = append(out, b.b)
	}
	return out, nil
}
