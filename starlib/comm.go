package starlib

import (
	"fmt"
	"time"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/hal/dtype"
	"simpler/internal/halt"
)

// Comm is what chip.comm(device_ctx) returns inside a kernel: this rank's
// view of a domain.
type Comm struct {
	v    *comm.View
	chip *Chip
}

func (c *Comm) String() string {
	return fmt.Sprintf("Comm(%q, rank %d of %d)", c.v.Name(), c.v.Rank(), c.v.Size())
}
func (c *Comm) Type() string          { return "Comm" }
func (c *Comm) Freeze()               {}
func (c *Comm) Truth() starlark.Bool  { return true }
func (c *Comm) Hash() (uint32, error) { return 0, errorf(engine.TypeError, "unhashable type: Comm") }

var commMethods = map[string]func(c *Comm, th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error){
	"window":  (*Comm).window,
	"peer":    (*Comm).peer,
	"notify":  (*Comm).notify,
	"wait":    (*Comm).wait,
	"barrier": (*Comm).barrier,
	"reduce_into": func(c *Comm, th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		return reduceInto(th, "comm.reduce_into", args, kw)
	},
}

func (c *Comm) AttrNames() []string {
	return append(sortedKeys(commMethods), "rank", "size", "window_size")
}

func (c *Comm) Attr(name string) (starlark.Value, error) {
	switch name {
	case "rank":
		return starlark.MakeInt(c.v.Rank()), nil
	case "size":
		return starlark.MakeInt(c.v.Size()), nil
	case "window_size":
		return starlark.MakeInt(c.v.WindowSize()), nil
	}
	if m, ok := commMethods[name]; ok {
		return builtin("comm."+name, func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			return m(c, th, args, kw)
		}), nil
	}
	return nil, nil
}

// openComm implements chip.comm(device_ctx).
func (c *Chip) openComm(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var ctxV starlark.Value
	if err := starlark.UnpackPositionalArgs("chip.comm", args, kw, 1, &ctxV); err != nil {
		return nil, err
	}
	addr, err := toAddr("chip.comm", ctxV)
	if err != nil {
		return nil, err
	}
	v, err := comm.Open(c.ctx.Chip, addr)
	if err != nil {
		return nil, err
	}
	if rc := raceOf(th); rc != nil {
		rc.SetRank(fmt.Sprintf("rank %d of domain %q", v.Rank(), v.Name()))
	}
	return &Comm{v: v, chip: c}, nil
}

func (c *Comm) tensor(addr uint64, shape []int, dt dtype.DType, base uint64, size int) *Tensor {
	return &Tensor{t: engine.Tensor{Addr: addr, Shape: shape, DType: dt, ChildMemory: true}, base: base, size: size, chip: c.chip.ctx.Chip}
}

func (c *Comm) window(_ *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var rank int
	if err := starlark.UnpackPositionalArgs("comm.window", args, kw, 1, &rank); err != nil {
		return nil, err
	}
	base, err := c.base("comm.window", rank)
	if err != nil {
		return nil, err
	}
	n := c.v.WindowSize()
	return c.tensor(base, []int{n}, dtype.UInt8, base, n), nil
}

// base is rank's window base, with the error naming op.
func (c *Comm) base(op string, rank int) (uint64, error) {
	if rank < 0 || rank >= c.v.Size() {
		return 0, errorf(engine.IndexError, "%s: rank %d out of range (domain %q has ranks 0..%d)", op, rank, c.v.Name(), c.v.Size()-1)
	}
	return c.v.Base(rank)
}

// offset returns t's byte offset in this rank's window, checking that t
// lies inside it.
func (c *Comm) offset(op string, t *Tensor) (uint64, error) {
	own, _ := c.v.Base(c.v.Rank())
	off := t.t.Addr - own
	if !t.t.ChildMemory || t.t.Addr < own || off+uint64(t.t.NBytes()) > uint64(c.v.WindowSize()) {
		return 0, errorf(engine.ValueError, "%s: the tensor at %#x (%d bytes) is not inside this rank's window [%#x, %#x)", op, t.t.Addr, t.t.NBytes(), own, own+uint64(c.v.WindowSize()))
	}
	return off, nil
}

func (c *Comm) peer(_ *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var tv starlark.Value
	var rank int
	if err := starlark.UnpackPositionalArgs("comm.peer", args, kw, 2, &tv, &rank); err != nil {
		return nil, err
	}
	t, ok := tv.(*Tensor)
	if !ok {
		return nil, errorf(engine.TypeError, "comm.peer: want a Tensor, got %s", tv.Type())
	}
	off, err := c.offset("comm.peer", t)
	if err != nil {
		return nil, err
	}
	base, err := c.base("comm.peer", rank)
	if err != nil {
		return nil, err
	}
	return c.tensor(base+off, t.t.Shape, t.t.DType, base, c.v.WindowSize()), nil
}

// signalWidth is the word size of a signal tensor.
func signalWidth(op string, t *Tensor) (int, error) {
	switch t.t.DType {
	case dtype.Int32, dtype.UInt32:
		return 4, nil
	case dtype.Int64, dtype.UInt64:
		return 8, nil
	}
	return 0, errorf(engine.TypeError, "%s: a signal is an INT32 or INT64 word, got %s", op, t.t.DType.ConstName())
}

func (c *Comm) notify(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var rank int
	var tv starlark.Value
	var value int64
	op := "set"
	if err := starlark.UnpackArgs("comm.notify", args, kw, "rank", &rank, "t", &tv, "value", &value, "op?", &op); err != nil {
		return nil, err
	}
	t, ok := tv.(*Tensor)
	if !ok {
		return nil, errorf(engine.TypeError, "comm.notify: want a Tensor, got %s", tv.Type())
	}
	return starlark.None, c.notifyTensor(th, rank, t, value, op)
}

// notifyTensor is comm.notify(rank, t, value, op) past its argument
// parsing: the native window kernels (collwindow.go) call it, so that
// --race and --seed see their notifies as the builtin's.
func (c *Comm) notifyTensor(th *starlark.Thread, rank int, t *Tensor, value int64, op string) error {
	width, err := signalWidth("comm.notify", t)
	if err != nil {
		return err
	}
	off, err := c.offset("comm.notify", t)
	if err != nil {
		return err
	}
	base, err := c.base("comm.notify", rank)
	if err != nil {
		return err
	}
	return c.notifyWord(th, rank, base+off, width, value, op)
}

// notifyWord is notifyTensor past its checks: addr is the word in rank's
// window, width its size. A native kernel whose signal words are fixed
// for the task checks them once and calls this per notify (the same
// scheduling point and race report as the builtin's).
func (c *Comm) notifyWord(th *starlark.Thread, rank int, addr uint64, width int, value int64, op string) error {
	detPoint("comm.notify")
	if rc := raceOf(th); rc != nil {
		return c.raceNotify(th, rc, rank, addr, width, value, op)
	}
	return c.v.Notify(rank, addr, width, value, op)
}

func (c *Comm) wait(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var tv starlark.Value
	var value int64
	cmp := ">="
	var timeoutV starlark.Value = starlark.MakeInt(30)
	if err := starlark.UnpackArgs("comm.wait", args, kw, "t", &tv, "value", &value, "cmp?", &cmp, "timeout_s?", &timeoutV); err != nil {
		return nil, err
	}
	t, ok := tv.(*Tensor)
	if !ok {
		return nil, errorf(engine.TypeError, "comm.wait: want a Tensor, got %s", tv.Type())
	}
	// The word's checks come before the timeout's, as they always did
	// (waitTensor repeats them: they cost a compare or two).
	if _, err := signalWidth("comm.wait", t); err != nil {
		return nil, err
	}
	if _, err := c.offset("comm.wait", t); err != nil {
		return nil, err
	}
	timeout, err := seconds("comm.wait", "timeout_s", timeoutV)
	if err != nil {
		return nil, err
	}
	got, err := c.waitTensor(th, t, value, cmp, timeout)
	if err != nil {
		return nil, err
	}
	return starlark.MakeInt64(got), nil
}

// waitTensor is comm.wait(t, value, cmp, timeout_s) past its argument
// parsing (see notifyTensor).
func (c *Comm) waitTensor(th *starlark.Thread, t *Tensor, value int64, cmp string, timeout time.Duration) (int64, error) {
	width, err := signalWidth("comm.wait", t)
	if err != nil {
		return 0, err
	}
	if _, err := c.offset("comm.wait", t); err != nil {
		return 0, err
	}
	return c.waitWord(th, t.t.Addr, width, value, cmp, timeout, halt.Of(th))
}

// waitWord is waitTensor past its checks: addr is the word in this rank's
// window, width its size (see notifyWord), stop th's stop signal (a
// native kernel looks it up once per task).
func (c *Comm) waitWord(th *starlark.Thread, addr uint64, width int, value int64, cmp string, timeout time.Duration, stop *halt.Signal) (int64, error) {
	done := c.raceWait(th, addr, width, value, cmp)
	var got int64
	var err error
	if d := activeDet.Load(); d != nil {
		got, err = c.detWait(d, th, addr, width, value, cmp, timeout)
	} else {
		got, err = c.v.WaitStop(addr, width, value, cmp, timeout, stop)
	}
	done(got, err)
	return got, err
}

func (c *Comm) barrier(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var timeoutV starlark.Value = starlark.MakeInt(30)
	if err := starlark.UnpackArgs("comm.barrier", args, kw, "timeout_s?", &timeoutV); err != nil {
		return nil, err
	}
	timeout, err := seconds("comm.barrier", "timeout_s", timeoutV)
	if err != nil {
		return nil, err
	}
	return starlark.None, c.barrierWait(th, timeout)
}

// barrierWait is comm.barrier(timeout_s) past its argument parsing (see
// notifyTensor).
func (c *Comm) barrierWait(th *starlark.Thread, timeout time.Duration) error {
	done := c.raceBarrier(th)
	var err error
	if d := activeDet.Load(); d != nil {
		err = c.detBarrier(d, th, timeout)
	} else {
		err = c.v.BarrierStop(timeout, halt.Of(th))
	}
	done(err)
	return err
}
