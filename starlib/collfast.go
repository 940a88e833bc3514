package starlib

import (
	"os"
	"sync/atomic"

	"go.starlark.net/starlark"

	"simpler/engine"
)

// The direct collectives' hot path in Go (issue 16). A small collective
// is all overhead, and interpreted Starlark was most of it: the checks,
// the choice and the packing of the task on the orchestration side, and
// the direct kernel's own bookkeeping around one reduce.
//
// Both halves are accelerators, not replacements: each accepts only a
// call it can prove well formed and hands anything else back to the
// Starlark code, which stays the reference and the one place that words
// an error. So a bad call fails exactly as before, and a good one does
// what the Starlark would have done: the same kernel, the same tensors
// and tags, the same scalars, the same members, the same bytes written.
//
//   - collectives.star's library calls _direct_fast(DIRECT.fn, w, ...)
//     once and, at the top of every function, the builtin it returns
//     (directFast.call): True means the call was checked and submitted.
//     It takes the window allreduces too (collwinfast.go).
//   - The direct kernel's callable (collective_kernels.star, _k_direct)
//     runs runDirect instead of its Starlark body (callable.native); the
//     digest, name and module are the Starlark function's, so a child
//     process resolves it the same way and runs the Go body too.

// nativeOn switches the Go paths (these two and the window kernels' Go
// bodies, collwindow.go); tests turn it off to compare with the Starlark
// ones. SIMPLER_NATIVE=off in the environment turns it off in a process
// and the chip processes it starts: the reference, for a comparison
// across processes or when a Go body is in doubt.
var nativeOn atomic.Bool

func init() { nativeOn.Store(os.Getenv("SIMPLER_NATIVE") != "off") }

// fastCalls and nativeKernels count the calls and kernel runs the Go
// paths took, for tests.
var fastCalls, nativeKernels atomic.Int64

// directModes and directOps are DIRECT_MODES and OPS of
// collective_kernels.star, in their order: the kernel's mode and op
// scalars index them.
const (
	modeAllreduce = iota
	modeReduceScatter
	modeAllgather
	modeBroadcast
	modeAllToAll
	numModes
)

var directOps = []string{"sum", "max", "min"}

// directPartBytes is collectives.star's _DIRECT_PART_BYTES.
const directPartBytes = 4 << 20

// directKernelModule and directKernelName name the Starlark kernel whose
// callable runs runDirect.
const (
	directKernelModule = stdPrefix + "collective_kernels.star"
	directKernelName   = "_k_direct"
)

// nativeFor returns the Go body of a library function, if it has one.
func nativeFor(fn *starlark.Function) func(*engine.ChipCtx, *engine.TaskArgs) (bool, error) {
	if fn.Name() == directKernelName && fn.Position().Filename() == directKernelModule {
		return runDirect
	}
	return nil
}

// directFastBuiltin implements _direct_fast(kernel, w[, state, onephase,
// twophase, ring, fan, barrier]) for collectives.star: the builtin its library calls
// first. With the library's state dict and window kernels it takes the
// window algorithms' calls too (collwinfast.go).
func directFastBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var kernel *starlark.Function
	var w *Worker
	var state *starlark.Dict
	var one, two, ring, fan, bar *starlark.Function
	if err := starlark.UnpackPositionalArgs("_direct_fast", args, kw, 2, &kernel, &w, &state, &one, &two, &ring, &fan, &bar); err != nil {
		return nil, err
	}
	f := &directFast{kernel: kernel, w: w}
	if state != nil && one != nil && two != nil && ring != nil && fan != nil && bar != nil {
		f.win = &windowFast{state: state, onephase: one, twophase: two, ring: ring, fan: fan, barrier: bar}
	}
	return builtin("collectives.direct_fast", f.call), nil
}

// directFast is one library's fast path: its direct kernel and worker,
// and its window path, if it has one.
type directFast struct {
	kernel *starlark.Function
	w      *Worker
	win    *windowFast
}

// directCall is a checked direct call: the kernel's tensors and scalars.
type directCall struct {
	ws        []int
	ins, outs []*Tensor
	mode, op  int
	root      int
	nbytes    int // bytes the call moves: how many members it is worth
}

// call is fast(o, fn, inputs, outputs, workers, op, algo, root): True
// when the call was checked and submitted here, False when the Starlark
// code must take it (anything unusual, every error included).
func (f *directFast) call(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if !nativeOn.Load() || len(args) != 8 || len(kw) != 0 {
		return starlark.False, nil
	}
	o, ok := args[0].(*Orchestrator)
	fn, ok2 := args[1].(starlark.String)
	if !ok || !ok2 {
		return starlark.False, nil
	}
	c, ok := f.check(string(fn), args[2:])
	if !ok && f.win != nil {
		return f.win.call(f.w, o, string(fn), args[2:])
	}
	if !ok {
		return starlark.False, nil
	}
	list, ok := c.taskArgs()
	if !ok {
		return starlark.False, nil
	}
	fastCalls.Add(1)
	return starlark.True, f.submit(o, c.ws, list)
}

// check accepts (inputs, outputs, workers, op, algo, root) of function fn
// when the Starlark code would run the direct algorithm on them.
func (f *directFast) check(fn string, a starlark.Tuple) (*directCall, bool) {
	mode, ok := modeOf(fn)
	if !ok || !directAlgo(a[4]) {
		return nil, false
	}
	ws, ok := fastWorkers(a[2], len(f.w.devices))
	if !ok {
		return nil, false
	}
	n := len(ws)
	c := &directCall{ws: ws, mode: mode}
	var icount, ocount int
	if c.ins, icount, ok = fastTensors(a[0], n); !ok {
		return nil, false
	}
	if c.outs, ocount, ok = fastTensors(a[1], n); !ok || c.outs[0].t.DType != c.ins[0].t.DType {
		return nil, false
	}
	if mode == modeAllreduce || mode == modeReduceScatter {
		if c.op, ok = opIndex(a[3]); !ok {
			return nil, false
		}
	}
	if mode == modeBroadcast {
		r, ok := smallInt(a[5])
		if !ok || r < 0 || r >= n {
			return nil, false
		}
		c.root = r
	}
	data, ok := directSizes(mode, n, icount, ocount)
	if !ok {
		return nil, false
	}
	c.nbytes = data * c.ins[0].t.DType.Size()
	return c, true
}

// directSizes checks the element counts of a call of mode over n ranks
// and returns the elements it moves (collectives.star's nbytes over the
// itemsize); false for a call the Starlark code refuses or that does
// nothing (no elements).
func directSizes(mode, n, icount, ocount int) (int, bool) {
	switch mode {
	case modeAllreduce:
		return 2 * n * icount, ocount == icount && icount > 0
	case modeReduceScatter:
		return (n + 1) * icount, icount == n*ocount && ocount > 0
	case modeAllgather:
		return (n + 1) * ocount, ocount == n*icount && icount > 0
	case modeBroadcast:
		return (n + 1) * icount, ocount == icount && icount > 0
	case modeAllToAll:
		return 2 * n * icount, ocount == icount && icount%n == 0 && icount > 0
	}
	return 0, false
}

func modeOf(fn string) (int, bool) {
	for i, m := range []string{"allreduce", "reduce_scatter", "allgather", "broadcast", "all_to_all"} {
		if m == fn {
			return i, true
		}
	}
	return 0, false
}

// directAlgo is whether algo picks direct ("auto" does for host tensors,
// which fastTensors requires).
func directAlgo(v starlark.Value) bool {
	s, ok := v.(starlark.String)
	return ok && (s == "auto" || s == "direct")
}

func opIndex(v starlark.Value) (int, bool) {
	s, ok := v.(starlark.String)
	if !ok {
		return 0, false
	}
	for i, name := range directOps {
		if string(s) == name {
			return i, true
		}
	}
	return 0, false
}

func smallInt(v starlark.Value) (int, bool) {
	x, ok := v.(starlark.Int)
	if !ok {
		return 0, false
	}
	i, ok := x.Int64()
	if !ok || i < -1<<31 || i > 1<<31-1 {
		return 0, false
	}
	return int(i), true
}

// fastWorkers is _check_workers for a well-formed value only: None (every
// chip) or a non-empty list or tuple of distinct chip ids.
func fastWorkers(v starlark.Value, chips int) ([]int, bool) {
	if v == starlark.None {
		ws := make([]int, chips)
		for i := range ws {
			ws[i] = i
		}
		return ws, chips > 0
	}
	seq, ok := listOrTuple(v)
	if !ok || seq.Len() == 0 {
		return nil, false
	}
	ws := make([]int, seq.Len())
	for i := range ws {
		x, ok := smallInt(seq.Index(i))
		if !ok || x < 0 || x >= chips {
			return nil, false
		}
		for _, y := range ws[:i] {
			if y == x {
				return nil, false
			}
		}
		ws[i] = x
	}
	return ws, true
}

func listOrTuple(v starlark.Value) (starlark.Indexable, bool) {
	switch x := v.(type) {
	case *starlark.List:
		return x, true
	case starlark.Tuple:
		return x, true
	}
	return nil, false
}

// fastTensors is _check_tensors and _host_only for a well-formed value
// only: n live host tensors of one dtype and element count. It returns
// the tensors and the count (nbytes over the itemsize, as there).
func fastTensors(v starlark.Value, n int) ([]*Tensor, int, bool) {
	seq, ok := listOrTuple(v)
	if !ok || seq.Len() != n {
		return nil, 0, false
	}
	ts := make([]*Tensor, n)
	count := 0
	for i := range ts {
		t, ok := seq.Index(i).(*Tensor)
		if !ok || t.t.ChildMemory || t.live("") != nil {
			return nil, 0, false
		}
		size := t.t.DType.Size()
		if size == 0 || (i > 0 && (t.t.DType != ts[0].t.DType || t.t.NBytes()/size != count)) {
			return nil, 0, false
		}
		count = t.t.NBytes() / size
		ts[i] = t
	}
	return ts, count, true
}

// taskArgs packs the direct task's members as collectives.star's direct()
// does: every input (INPUT) then every output (OUTPUT), and the scalars
// [0, mode, op, root, part, parts].
func (c *directCall) taskArgs() ([]*TaskArgs, bool) {
	parts := max(1, min(len(c.ws), c.nbytes/directPartBytes))
	nt := len(c.ins) + len(c.outs)
	// Every member's args in a few allocations: a small call is
	// allocation-bound.
	list := make([]*TaskArgs, parts)
	args := make([]directArgs, parts)
	tensors, tags, bufs := make([]engine.Tensor, 0, nt*parts), make([]engine.Tag, 0, nt*parts), make([]*Tensor, 0, nt*parts)
	for p := range list {
		d := &args[p]
		lo := p * nt
		d.e = engine.TaskArgs{Tensors: tensors[lo : lo : lo+nt], Tags: tags[lo : lo : lo+nt], Scalars: d.scalars[:0]}
		d.s = TaskArgs{a: &d.e, bufs: bufs[lo : lo : lo+nt]}
		a := &d.s
		for _, ts := range [2]struct {
			ts  []*Tensor
			tag engine.Tag
		}{{c.ins, engine.Input}, {c.outs, engine.Output}} {
			for _, t := range ts.ts {
				if a.addTensor(t, TagValue(ts.tag)) != nil {
					return nil, false
				}
			}
		}
		for _, s := range [...]int{0, c.mode, c.op, c.root, p, parts} {
			a.a.AddScalar(uint64(s))
		}
		list[p] = a
	}
	return list, true
}

// directArgs is one member's args of a direct call, made together.
type directArgs struct {
	s       TaskArgs
	e       engine.TaskArgs
	scalars [6]uint64 // the six scalars taskArgs adds
}

// submit is collectives.star's o.submit_next_level (one member, on the
// first rank's chip) or o.submit_next_level_group (members on the first
// ranks' chips), with their names in any error.
func (f *directFast) submit(o *Orchestrator, ws []int, list []*TaskArgs) error {
	op := "submit_next_level"
	if len(list) > 1 {
		op = "submit_next_level_group"
	}
	h, err := o.handle(op, f.kernel, engine.NextLevel)
	if err != nil {
		return err
	}
	if len(list) == 1 {
		if _, err := o.o.SubmitNext(h, list[0].a, nil, ws[0]); err != nil {
			return err
		}
		o.pinArgs(list[0])
		return nil
	}
	all := make([]*engine.TaskArgs, len(list))
	pin := make(starlark.Tuple, len(list))
	for i, a := range list {
		all[i], pin[i] = a.a, a
	}
	if _, err := o.o.SubmitNextGroup(h, all, nil, ws[:len(list)]); err != nil {
		return err
	}
	o.pinArgs(pin)
	return nil
}
