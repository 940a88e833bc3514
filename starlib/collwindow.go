package starlib

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/hal/dtype"
	"simpler/internal/halt"
	"simpler/internal/race"
	"simpler/starlib/inplace"
)

// The window kernels of collective_kernels.star (BARRIER, ONEPHASE,
// TWOPHASE, RING, FAN) in Go, as runDirect is _k_direct's Go body. A small
// collective through a window was mostly the interpreter: the views, the
// index arithmetic and the loops around a few copies and waits.
//
// The contract is runDirect's and more, because these kernels talk to
// each other through their windows:
//
//   - A Go body accepts only a task it can prove well formed (the scalar
//     layout, the tensors, the window large enough for every view the
//     Starlark body would make) and hands anything else back, having done
//     nothing: the Starlark body runs and words the error.
//   - It makes the same views, in the same order, and moves bytes with
//     the builtins' own cores (copyTensor, reduceTensors, notifyTensor,
//     waitTensor, barrierWait): the same window layout, signals and waits,
//     the same bytes written, the same reduction order. The ring, whose
//     steps move segments of an element or a few, uses those cores past
//     the checks it proved once per task (segCopy and segReduce in
//     collseg.go, notifyWord, waitWord): the same touches, waits and
//     notifies, without re-resolving each view.
//   - Those cores are what the Starlark builtins run after parsing their
//     arguments, so --race sees every window access and every notify,
//     wait and barrier exactly as the Starlark body's, and --seed yields
//     at the same scheduling points (each tensor access, each notify, each
//     blocking wait). The one thing missing is the interpreter's step
//     count: a Go body never yields for "steps", which only a loop that
//     reaches no other point needs. A race report names the kernel's
//     function (nativeFrameKey), not a line of it.
//   - An error after the body accepted the task (a wait that timed out, a
//     stop) carries the same message as the builtin's, without the
//     Starlark line it would have been raised at.

// windowKernel is a window kernel's Go body: it runs the task on th, the
// endpoint's thread (bound to the task's race context and stop signal),
// with chip the kernel's chip, and returns false, having touched nothing,
// for a task it does not accept.
type windowKernel func(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (bool, error)

// windowKernels maps the Starlark kernels of collective_kernels.star to
// their Go bodies.
var windowKernels = map[string]windowKernel{
	"_k_barrier":  runBarrier,
	"_k_onephase": runOnephase,
	"_k_twophase": runTwophase,
	"_k_ring":     runRing,
	"_k_fan":      runFan,
}

// nativeWindows counts the window kernels the Go bodies ran, for tests.
var nativeWindows atomic.Int64

// windowFor returns the Go body of a library window kernel, if it has one.
func windowFor(fn *starlark.Function) windowKernel {
	if fn.Position().Filename() != directKernelModule {
		return nil
	}
	return windowKernels[fn.Name()]
}

// Constants of collective_kernels.star.
const (
	kernelLine    = 64               // LINE
	kernelTimeout = 60 * time.Second // _TIMEOUT
	minSlots      = 2                // MIN_SLOTS
)

// nativeFrameKey is the thread-local holding the race.Stack a Go body's
// accesses are reported with (stackOf): the kernel's function.
const nativeFrameKey = "simpler.nativeFrame"

// windowScalars returns a task's scalars when there are exactly count of
// them and every one after device_ctx is small (what the Starlark body's
// arithmetic would take as an int without surprises).
func windowScalars(args *engine.TaskArgs, count int) ([]int, bool) {
	sc := args.Scalars
	if len(sc) != count {
		return nil, false
	}
	out := make([]int, count)
	for i, s := range sc[1:] {
		if s > 1<<31 {
			return nil, false
		}
		out[i+1] = int(s)
	}
	return out, true
}

// winTask is what the Go bodies share: the comm, the flat input and
// output (_flat of tensors 0 and 1), their element type and count.
type winTask struct {
	th       *starlark.Thread
	c        *Comm
	src, dst *Tensor
	dt       dtype.DType
	L, isz   int
	n, r     int
	stop     *halt.Signal // halt.Of(th): the task's, looked up once
}

// openWindow opens the domain at device_ctx as chip.comm does, false if it
// would fail (the Starlark body then says why).
func openWindow(chip *Chip, ctx uint64) (*Comm, bool) {
	if ctx == 0 {
		return nil, false
	}
	v, err := comm.Open(chip.ctx.Chip, ctx)
	if err != nil {
		return nil, false
	}
	return &Comm{v: v, chip: chip}, true
}

// start tells the race detector the rank, as chip.comm does, and counts
// the run: the task was accepted.
func (k *winTask) start() {
	if rc := raceOf(k.th); rc != nil {
		rc.SetRank(fmt.Sprintf("rank %d of domain %q", k.c.v.Rank(), k.c.v.Name()))
	}
	nativeWindows.Add(1)
}

// readPair reads a kernel's two tensors as the Starlark bodies use them:
// contiguous, one dtype of a whole number of bytes, at least one element
// in the input; it does not check the output's size, which differs.
func readPair(th *starlark.Thread, chip *Chip, args *engine.TaskArgs, ctx uint64) (*winTask, bool) {
	if len(args.Tensors) != 2 {
		return nil, false
	}
	in, out := args.Tensors[0], args.Tensors[1]
	if in.Strides != nil || out.Strides != nil || in.DType != out.DType || in.Addr == 0 || out.Addr == 0 {
		return nil, false
	}
	isz := in.DType.Size()
	L := in.Elems()
	if isz == 0 || L == 0 || in.NBytes() != L*isz || out.NBytes() != out.Elems()*isz {
		return nil, false
	}
	c, ok := openWindow(chip, ctx)
	if !ok {
		return nil, false
	}
	k := &winTask{th: th, c: c, dt: in.DType, L: L, isz: isz, n: c.v.Size(), r: c.v.Rank(), stop: halt.Of(th)}
	k.src = flatTensor(in, chip)
	k.dst = flatTensor(out, chip)
	return k, true
}

// flatTensor is _flat(args.tensor(i)): a 1-D view of a contiguous tensor.
func flatTensor(et engine.Tensor, chip *Chip) *Tensor {
	t := newTensor(et, chip.ctx.Chip)
	t.t.Shape = []int{et.Elems()}
	return t
}

// part is t.view(shape = [count], offset = off*isz): elements [off,
// off+count) of a flat tensor.
func (k *winTask) part(t *Tensor, off, count int) *Tensor {
	v := *t
	v.t.Addr = t.t.Addr + uint64(off*k.isz)
	v.t.Shape = []int{count}
	return &v
}

// window is comm.window(rank).view(shape = [count], dtype = dt, offset =
// off): count elements of the kernel's dtype at byte off of rank's
// window; the caller proved they fit.
func (k *winTask) window(rank, count, off int, dt dtype.DType) *Tensor {
	base, _ := k.c.v.Base(rank)
	return k.c.tensor(base+uint64(off), []int{count}, dt, base, k.c.v.WindowSize())
}

// copy is dst.copy_(src).
func (k *winTask) copy(dst, src *Tensor) error {
	return copyTensor(k.th, "copy_", dst, src)
}

// reduce is comm.reduce_into(dsts, srcs, op = op).
func (k *winTask) reduce(op inplace.Op, dsts, srcs []*Tensor) error {
	return reduceTensors(k.th, "comm.reduce_into", op, dsts, srcs)
}

// runBarrier is _k_barrier.
func runBarrier(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (bool, error) {
	if _, ok := windowScalars(args, 1); !ok {
		return false, nil
	}
	c, ok := openWindow(chip, args.Scalars[0])
	if !ok {
		return false, nil
	}
	k := &winTask{th: th, c: c}
	k.start()
	return true, c.barrierWait(th, kernelTimeout)
}

// readStage reads the task of ONEPHASE or TWOPHASE: scalars [device_ctx,
// op], an output of the input's size, a window holding the whole input
// (stage_window).
func readStage(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (*winTask, inplace.Op, bool) {
	sc, ok := windowScalars(args, 2)
	if !ok || sc[1] >= len(directOps) {
		return nil, 0, false
	}
	k, ok := readPair(th, chip, args, args.Scalars[0])
	if !ok || k.dst.t.Elems() != k.L || k.c.v.WindowSize() < k.L*k.isz {
		return nil, 0, false
	}
	return k, inplace.Op(sc[1]), true
}

// stage is both stage kernels' first step: the input into the own
// window, then a barrier, so every window holds its rank's input.
func (k *winTask) stage(th *starlark.Thread) error {
	k.start()
	if err := k.copy(k.window(k.r, k.L, 0, k.dt), k.src); err != nil {
		return err
	}
	return k.c.barrierWait(th, kernelTimeout)
}

// runOnephase is _k_onephase: stage, barrier, reduce every window in rank
// order into the output.
func runOnephase(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (bool, error) {
	k, op, ok := readStage(th, chip, args)
	if !ok {
		return false, nil
	}
	if err := k.stage(th); err != nil {
		return true, err
	}
	wins := make([]*Tensor, k.n)
	for j := range wins {
		wins[j] = k.window(j, k.L, 0, k.dt)
	}
	return true, k.reduce(op, []*Tensor{k.dst}, wins)
}

// runTwophase is _k_twophase: stage, barrier, reduce-scatter into the own
// window's chunk, barrier, allgather every rank's chunk into the output.
func runTwophase(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (bool, error) {
	k, op, ok := readStage(th, chip, args)
	if !ok {
		return false, nil
	}
	if err := k.stage(th); err != nil {
		return true, err
	}
	if start, count := chunk(0, k.L, k.n, k.r); count > 0 {
		// chunk r of the own window, then of every peer in ring order
		order := make([]*Tensor, k.n)
		for i := range order {
			order[i] = k.window((k.r+i)%k.n, count, start*k.isz, k.dt)
		}
		if err := k.reduce(op, order[:1], order); err != nil {
			return true, err
		}
	}
	if err := k.c.barrierWait(th, kernelTimeout); err != nil {
		return true, err
	}
	for j := range k.n {
		if start, count := chunk(0, k.L, k.n, j); count > 0 {
			if err := k.copy(k.part(k.dst, start, count), k.window(j, count, start*k.isz, k.dt)); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// nativeStack is the stack a Go body's accesses are reported with: the
// kernel's function, at its definition.
func nativeStack(fn *starlark.Function) race.Stack {
	return race.Stack{{Func: fn.Name(), Pos: fn.Position().String()}}
}
