package starlib

import (
	"fmt"
	"math"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
	"simpler/internal/race"
	"simpler/starlib/array"
	"simpler/starlib/inplace"
)

// Tensor is the Starlark view of an engine.Tensor: memory named by address,
// shape and dtype. Host tensors resolve through shared memory; a device
// tensor is readable only where its chip is known (inside a kernel).
type Tensor struct {
	t    engine.Tensor
	base uint64      // start of the backing memory
	size int         // bytes of backing memory from base
	chip hal.Chip    // set for device tensors inside a kernel
	buf  *HostBuffer // the host buffer it is a view of, if any
	host *hostAlloc  // the host_tensor memory it is (a view of), if any
	// owner is the Buffer it is a view of, if any: its access is checked
	// against the tag wherever the tensor becomes an argument.
	owner *Buffer
	// atomic: the race detector checks accesses through this tensor as
	// atomic ones (t.as_atomic(): a flag polled on purpose).
	atomic bool
}

// live refuses a view of a host buffer that was freed: its memory may be
// another buffer's by now, so using it would alias that one.
func (t *Tensor) live(op string) error {
	if t.host != nil {
		if err := t.host.live(op); err != nil {
			return err
		}
	}
	if t.owner != nil && t.owner.isReleased() {
		return errorf(engine.RuntimeError, "%s: the tensor is a view of %s, which was released", op, t.owner.name())
	}
	if t.buf != nil && t.buf.b.Freed() {
		return errorf(engine.RuntimeError, "%s: the tensor is a view of host buffer %d, which was freed", op, t.buf.b.Token)
	}
	return nil
}

var (
	_ starlark.HasAttrs = (*Tensor)(nil)
	_ array.Reader      = (*Tensor)(nil)
)

func newTensor(t engine.Tensor, chip hal.Chip) *Tensor {
	n, _ := t.Span() // a strided view's backing is every byte it reaches
	return &Tensor{t: t, base: t.Addr, size: n, chip: chip}
}

func (t *Tensor) String() string        { return t.t.String() }
func (t *Tensor) Type() string          { return "Tensor" }
func (t *Tensor) Freeze()               {}
func (t *Tensor) Truth() starlark.Bool  { return true }
func (t *Tensor) Hash() (uint32, error) { return 0, fmt.Errorf("TypeError: unhashable type: Tensor") }

// Engine returns the engine tensor.
func (t *Tensor) Engine() engine.Tensor { return t.t }

var tensorMethods = map[string]*starlark.Builtin{
	"read":      builtin("read", tensorRead),
	"write":     builtin("write", tensorWrite),
	"fill":      builtin("fill", tensorFill),
	"tolist":    builtin("tolist", tensorToList),
	"view":      builtin("view", tensorView),
	"as_atomic": builtin("as_atomic", tensorAsAtomic),
	"free":      builtin("free", tensorFree),

	"accumulate": builtin("accumulate", tensorAccumulate),
	"copy_":      inPlace("copy_", inplace.Sum, true),
	"add_":       inPlace("add_", inplace.Sum, false),
	"max_":       inPlace("max_", inplace.Max, false),
	"min_":       inPlace("min_", inplace.Min, false),
}

func (t *Tensor) Attr(name string) (starlark.Value, error) {
	switch name {
	case "data":
		return starlark.MakeUint64(t.t.Addr), nil
	case "shape":
		return intTuple(t.t.Shape), nil
	case "dtype":
		return array.DTypeConst(t.t.DType), nil
	case "nbytes":
		return starlark.MakeInt(t.t.NBytes()), nil
	case "ndims":
		return starlark.MakeInt(len(t.t.Shape)), nil
	case "strides":
		if t.t.Strides == nil {
			return intTuple(engine.RowMajor(t.t.Shape)), nil
		}
		return intTuple(t.t.Strides), nil
	case "child_memory":
		return starlark.Bool(t.t.ChildMemory), nil
	}
	if m, ok := tensorMethods[name]; ok {
		return m.BindReceiver(t), nil
	}
	return nil, nil
}

// tensorFree gives a host_tensor's memory back now; any later use of it,
// or of a view of it, is a RuntimeError.
func tensorFree(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := noArgs("free", args, kw); err != nil {
		return nil, err
	}
	t := b.Receiver().(*Tensor)
	if t.host == nil {
		return nil, errorf(engine.ValueError, "free: only a host_tensor's memory can be freed (this tensor is a view of other memory)")
	}
	return starlark.None, t.host.free("free")
}

func (t *Tensor) AttrNames() []string {
	names := []string{"data", "shape", "dtype", "nbytes", "ndims", "child_memory", "strides"}
	for n := range tensorMethods {
		names = append(names, n)
	}
	return names
}

// bytes returns the memory of a contiguous tensor for reading and writing
// in place; a strided view is refused (read and write gather and scatter
// one, through span).
func (t *Tensor) bytes(op string) ([]byte, error) {
	if t.t.Strides != nil {
		return nil, errorf(engine.ValueError, "%s: the tensor is a strided view (strides %v); this operation needs contiguous memory (read() and write() take strided views)", op, t.t.Strides)
	}
	return t.span(op)
}

// span returns the memory from the tensor's first element to one past
// its last.
func (t *Tensor) span(op string) ([]byte, error) {
	if err := t.live(op); err != nil {
		return nil, err
	}
	n, ok := t.t.Span()
	if !ok {
		return nil, errorf(engine.ValueError, "%s: shape %v with strides %v reaches too many bytes", op, t.t.Shape, t.t.Strides)
	}
	if t.t.Addr == 0 {
		return nil, errorf(engine.ValueError, "%s: tensor has no memory yet (address 0)", op)
	}
	if t.t.ChildMemory {
		if t.chip == nil {
			return nil, errorf(engine.ValueError, "%s: device tensor at 0x%x is not readable from here; use copy_from to bring it to the host", op, t.t.Addr)
		}
		b, err := t.chip.Bytes(t.t.Addr, n)
		return b, engine.Wrap(err, op)
	}
	b, err := hostmem.Resolve(t.t.Addr, n)
	return b, engine.Wrap(err, op)
}

// ReadArray copies the tensor's contents into an Array, a read by th.
func (t *Tensor) ReadArray(th *starlark.Thread) (*array.Array, error) {
	b, err := t.span("read")
	if err != nil {
		return nil, err
	}
	t.touch(th, b, race.Read, "read")
	if t.t.Strides != nil {
		b = gather(b, t.t)
	}
	return array.FromBytes(t.t.DType, t.t.Shape, b)
}

// gather copies a strided view's elements out of mem (its span), in
// row-major order.
func gather(mem []byte, t engine.Tensor) []byte {
	es := t.DType.Size()
	out := make([]byte, 0, t.NBytes())
	eachElem(t.Shape, t.Strides, func(at int) {
		out = append(out, mem[at*es:at*es+es]...)
	})
	return out
}

// scatter copies row-major elements into a strided view's span.
func scatter(mem, src []byte, t engine.Tensor) {
	es, k := t.DType.Size(), 0
	eachElem(t.Shape, t.Strides, func(at int) {
		copy(mem[at*es:at*es+es], src[k:k+es])
		k += es
	})
}

// eachElem calls fn with the element offset of every index of shape in
// row-major order, under strides.
func eachElem(shape, strides []int, fn func(at int)) {
	for _, n := range shape {
		if n == 0 {
			return
		}
	}
	idx := make([]int, len(shape))
	at := 0
	for {
		fn(at)
		d := len(shape) - 1
		for ; d >= 0; d-- {
			idx[d]++
			at += strides[d]
			if idx[d] < shape[d] {
				break
			}
			at -= idx[d] * strides[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

func tensorRead(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackPositionalArgs("read", args, kw, 0); err != nil {
		return nil, err
	}
	return b.Receiver().(*Tensor).ReadArray(th)
}

func tensorToList(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackPositionalArgs("tolist", args, kw, 0); err != nil {
		return nil, err
	}
	a, err := b.Receiver().(*Tensor).ReadArray(th)
	if err != nil {
		return nil, err
	}
	return starlark.Call(th, mustAttr(a, "tolist"), nil, nil)
}

func mustAttr(v starlark.HasAttrs, name string) starlark.Value {
	x, err := v.Attr(name)
	if err != nil || x == nil {
		panic(fmt.Sprintf("starlib: %s has no attribute %s", v.Type(), name))
	}
	return x
}

func tensorWrite(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var x starlark.Value
	if err := starlark.UnpackPositionalArgs("write", args, kw, 1, &x); err != nil {
		return nil, err
	}
	t := b.Receiver().(*Tensor)
	return starlark.None, t.store(th, "write", x)
}

func tensorFill(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var x starlark.Value
	if err := starlark.UnpackPositionalArgs("fill", args, kw, 1, &x); err != nil {
		return nil, err
	}
	t := b.Receiver().(*Tensor)
	switch x.(type) {
	case starlark.Int, starlark.Float, starlark.Bool:
	default:
		return nil, errorf(engine.TypeError, "fill: want a number, got %s", x.Type())
	}
	return starlark.None, t.store(th, "fill", x)
}

// store writes a Tensor (a memory copy), an Array, a list or a number
// (filling) into the tensor, as th.
func (t *Tensor) store(th *starlark.Thread, op string, x starlark.Value) error {
	if t.t.Strides != nil {
		return t.storeStrided(th, op, x)
	}
	if src, ok := x.(*Tensor); ok && src.t.DType == t.t.DType && src.t.Strides == nil {
		return copyTensor(th, op, t, src)
	}
	mem, err := t.bytes(op)
	if err != nil {
		return err
	}
	a, err := array.FromValue(th, x, t.t.DType, t.t.Shape)
	if err != nil {
		return engine.Wrap(err, op)
	}
	if a.Size() != t.t.Elems() {
		return errorf(engine.ValueError, "%s: %d elements into a tensor of %d", op, a.Size(), t.t.Elems())
	}
	t.touch(th, mem, race.Write, op)
	copy(mem, a.Bytes())
	return nil
}

// storeStrided writes x into a strided view, element by element. A
// dimension of several elements with stride 0 is refused: its elements
// are the same bytes, and which value lands would be arbitrary.
func (t *Tensor) storeStrided(th *starlark.Thread, op string, x starlark.Value) error {
	for d, st := range t.t.Strides {
		if st == 0 && t.t.Shape[d] > 1 {
			return errorf(engine.ValueError, "%s: dimension %d (%d elements) of the view has stride 0; a written dimension needs a stride", op, d, t.t.Shape[d])
		}
	}
	if src, ok := x.(*Tensor); ok {
		a, err := src.ReadArray(th)
		if err != nil {
			return err
		}
		x = a
	}
	a, err := array.FromValue(th, x, t.t.DType, t.t.Shape)
	if err != nil {
		return engine.Wrap(err, op)
	}
	if a.Size() != t.t.Elems() {
		return errorf(engine.ValueError, "%s: %d elements into a tensor of %d", op, a.Size(), t.t.Elems())
	}
	mem, err := t.span(op)
	if err != nil {
		return err
	}
	t.touch(th, mem, race.Write, op)
	scatter(mem, a.Bytes(), t.t)
	return nil
}

// tensorView implements t.view(shape=None, strides=None, offset=0,
// dtype=None): the tensor's memory from byte offset `offset`, with its own
// shape, strides (in elements, as upstream counts them) and dtype. Every
// byte the view reaches must lie inside the memory behind the tensor.
func tensorView(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*Tensor)
	var shapeV, stridesV, dtV starlark.Value = starlark.None, starlark.None, starlark.None
	offset := 0
	if err := starlark.UnpackArgs("view", args, kw, "shape?", &shapeV, "strides?", &stridesV, "offset?", &offset, "dtype?", &dtV); err != nil {
		return nil, err
	}
	dt := t.t.DType
	if dtV != starlark.None {
		d, err := array.ParseDType(dtV)
		if err != nil {
			return nil, engine.Wrap(err, "view")
		}
		dt = d
	}
	start := t.t.Addr - t.base + uint64(offset)
	if offset < 0 || int(start) > t.size {
		return nil, errorf(engine.ValueError, "view: offset %d is outside the tensor's %d-byte backing", offset, t.size)
	}
	var shape []int
	if shapeV == starlark.None {
		if stridesV != starlark.None {
			return nil, errorf(engine.ValueError, "view: strides need a shape")
		}
		shape = []int{(t.size - int(start)) / dt.Size()}
	} else {
		s, err := toShape("view", shapeV)
		if err != nil {
			return nil, err
		}
		shape = s
	}
	et := engine.Tensor{Addr: t.t.Addr + uint64(offset), Shape: shape, DType: dt, ChildMemory: t.t.ChildMemory}
	if stridesV != starlark.None {
		st, err := viewStrides(shape, stridesV)
		if err != nil {
			return nil, err
		}
		et.Strides = engine.NormalStrides(shape, st)
	}
	n, ok := et.Span()
	if !ok || int(start)+n > t.size {
		if et.Strides != nil {
			return nil, errorf(engine.ValueError, "view: shape %v with strides %v reaches %d bytes from offset %d, leaving the tensor's %d-byte backing", shape, et.Strides, n, offset, t.size)
		}
		return nil, errorf(engine.ValueError, "view: %d bytes at offset %d overrun the tensor's %d-byte backing", et.NBytes(), offset, t.size)
	}
	v := &Tensor{t: et, base: t.base, size: t.size, chip: t.chip, buf: t.buf, host: t.host, owner: t.owner}
	if t.host != nil {
		t.host.hold(v)
	}
	return v, nil
}

// viewStrides reads view's strides: one int per dimension of shape, none
// negative (upstream's views walk memory forwards only).
func viewStrides(shape []int, v starlark.Value) ([]int, error) {
	it, ok := v.(starlark.Indexable)
	if _, isString := v.(starlark.String); !ok || isString {
		return nil, errorf(engine.TypeError, "view: strides must be a list of ints, got %s", v.Type())
	}
	if it.Len() != len(shape) {
		return nil, errorf(engine.ValueError, "view: %d strides for the %d dimensions of shape %v", it.Len(), len(shape), shape)
	}
	st := make([]int, it.Len())
	for i := range st {
		x, ok := it.Index(i).(starlark.Int)
		if !ok {
			return nil, errorf(engine.TypeError, "view: stride %d must be an int, got %s", i, it.Index(i).Type())
		}
		n, ok := x.Int64()
		switch {
		case ok && n < 0:
			return nil, errorf(engine.ValueError, "view: stride %d is %d; strides must be >= 0", i, n)
		case !ok || n > maxDim:
			return nil, errorf(engine.ValueError, "view: stride %d = %s is too large (at most %d)", i, x, maxDim)
		}
		st[i] = int(n)
	}
	return st, nil
}

// toShape accepts an int or a list/tuple of ints, each in 0..maxDim.
func toShape(op string, v starlark.Value) ([]int, error) {
	if _, ok := v.(starlark.Int); ok {
		n, err := dimension(op, v, v, 0)
		if err != nil {
			return nil, err
		}
		return []int{n}, nil
	}
	it, ok := v.(starlark.Indexable)
	if _, isString := v.(starlark.String); !ok || isString {
		return nil, errorf(engine.TypeError, "%s: shape must be an int or a list of ints, got %s", op, v.Type())
	}
	shape := make([]int, it.Len())
	for i := range shape {
		n, err := dimension(op, v, it.Index(i), i)
		if err != nil {
			return nil, err
		}
		shape[i] = n
	}
	return shape, nil
}

// maxDim bounds one dimension of a shape (the tensor's bytes are bounded
// again where memory is reserved for it).
const maxDim = math.MaxInt32

// dimension reads dimension i of shape.
func dimension(op string, shape, v starlark.Value, i int) (int, error) {
	x, ok := v.(starlark.Int)
	if !ok {
		return 0, errorf(engine.TypeError, "%s: bad shape %s: dimension %d must be an int, got %s", op, shape, i, v.Type())
	}
	n, ok := x.Int64()
	switch {
	case ok && n < 0:
		return 0, errorf(engine.ValueError, "%s: bad shape %s: dimension %d must be >= 0, got %d", op, shape, i, n)
	case !ok || n > maxDim:
		return 0, errorf(engine.ValueError, "%s: bad shape %s: dimension %d = %s is too large (at most %d)", op, shape, i, x, maxDim)
	}
	return int(n), nil
}

func intTuple(xs []int) starlark.Tuple {
	t := make(starlark.Tuple, len(xs))
	for i, x := range xs {
		t[i] = starlark.MakeInt(x)
	}
	return t
}

// hostTensor allocates a zeroed host tensor in shared memory, optionally
// filled from data.
func (s *Session) hostTensor(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := atRunTime(th, "host_tensor()"); err != nil {
		return nil, err
	}
	var shapeV, dtV, data starlark.Value = starlark.None, starlark.None, starlark.None
	if err := starlark.UnpackArgs("host_tensor", args, kw, "shape?", &shapeV, "dtype?", &dtV, "data?", &data); err != nil {
		return nil, err
	}
	dt := dtype.Invalid
	if dtV != starlark.None {
		d, err := array.ParseDType(dtV)
		if err != nil {
			return nil, engine.Wrap(err, "host_tensor")
		}
		dt = d
	}
	var shape []int
	if shapeV != starlark.None {
		sh, err := toShape("host_tensor", shapeV)
		if err != nil {
			return nil, err
		}
		shape = sh
	}
	var init *array.Array
	if data != starlark.None {
		a, err := array.FromValue(th, data, dt, nil)
		if err != nil {
			return nil, engine.Wrap(err, "host_tensor: data")
		}
		init = a
		if dt == dtype.Invalid {
			dt = a.DType()
		}
		if shape == nil {
			shape = a.Shape()
		} else if n := product(shape); n != a.Size() {
			return nil, errorf(engine.ValueError, "host_tensor: data has %d elements, shape %v needs %d", a.Size(), shape, n)
		}
	}
	if dt == dtype.Invalid {
		dt = dtype.Float32
	}
	if shape == nil {
		return nil, errorf(engine.ValueError, "host_tensor: give shape or data")
	}
	et := engine.Tensor{Shape: shape, DType: dt}
	n := max(et.NBytes(), 1)
	addr, mem, err := s.space.Alloc(n)
	if err != nil {
		return nil, engine.Wrap(err, "host_tensor")
	}
	s.allocated(n)
	et.Addr = addr
	if s.Race != nil {
		s.Race.Name(race.Addr(mem), n, fmt.Sprintf("host tensor at %#x (shape %v, %s)", addr, shape, dt.ConstName()), true)
	}
	if init != nil {
		touch(th, mem, race.Write, "host_tensor")
		copy(mem, init.Bytes())
	}
	t := newTensor(et, nil)
	t.host = &hostAlloc{space: s.space, addr: addr}
	t.host.hold(t)
	return t, nil
}

func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// makeTensor names memory by address: a device pointer, a window buffer,
// or 0 for an OUTPUT the runtime allocates.
func makeTensor(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var data, shapeV, dtV starlark.Value
	child := false
	if err := starlark.UnpackArgs("make_tensor", args, kw, "data", &data, "shape", &shapeV, "dtype", &dtV, "child_memory?", &child); err != nil {
		return nil, err
	}
	addr, err := toAddr("make_tensor", data)
	if err != nil {
		return nil, err
	}
	shape, err := toShape("make_tensor", shapeV)
	if err != nil {
		return nil, err
	}
	dt, err := array.ParseDType(dtV)
	if err != nil {
		return nil, engine.Wrap(err, "make_tensor")
	}
	return newTensor(engine.Tensor{Addr: addr, Shape: shape, DType: dt, ChildMemory: child}, nil), nil
}

// toAddr accepts a non-negative int address or a Tensor (its address).
func toAddr(op string, v starlark.Value) (uint64, error) {
	switch x := v.(type) {
	case *Tensor:
		return x.t.Addr, nil
	case starlark.Int:
		u, ok := x.Uint64()
		if !ok {
			return 0, errorf(engine.ValueError, "%s: address %s is not a valid pointer", op, x)
		}
		return u, nil
	}
	return 0, errorf(engine.TypeError, "%s: want an int address or a Tensor, got %s", op, v.Type())
}
