package starlib

import (
	"fmt"
	"sync/atomic"

	"go.starlark.net/starlark"

	"simpler/engine"
)

// The window algorithms' submit in Go: collectives.star's allreduce with
// algo "onephase", "twophase", "ring" or "bidirectional_ring",
// reduce_scatter with "ring", allgather, broadcast and all_to_all with
// "fan", over host tensors, and barrier, from the checks to the launch (the
// domain's name, the domain, the group task of the kernel, the release),
// as _direct_fast is for the direct algorithm (collfast.go), under the
// same contract: a call it cannot prove well formed goes back to the
// Starlark code, which stays the reference and words every error; a call
// it takes gets the same domain (name, workers, window size), the same
// members (tensors, tags, scalars) and the same release. A small window
// call was mostly this code, interpreted: the checks, the segment and
// slot arithmetic, the name, the TaskArgs of every rank.
//
// The library's domain names come from one counter, its state["seq"],
// which both paths advance: the library hands its state dict to
// _direct_fast, and this path takes no call when the dict is frozen (a
// library made at a module's top level), where the Starlark code fails.

// windowSubmit switches this path alone (nativeOn switches it with the
// rest); a test turns it off to compare the tasks the Starlark launch
// submits with this path's.
var windowSubmit atomic.Bool

func init() { windowSubmit.Store(true) }

// windowFast is one library's window path: its worker's counter and its
// kernels.
type windowFast struct {
	state                                  *starlark.Dict
	onephase, twophase, ring, fan, barrier *starlark.Function
}

// Collectives.star's segment constants.
const (
	segBytes  = 1 << 20 // _SEG_BYTES
	pipeSlots = 4       // _SLOTS
)

// windowCall is a checked window call: what launch receives.
type windowCall struct {
	ws        []int
	ins, outs []*Tensor
	kernel    *starlark.Function
	window    int
	values    []uint64
}

// call takes fn(o, inputs, outputs, workers, op, algo, root) of the
// library when algo names one of fn's window algorithms and every
// argument is well formed; false hands it back.
func (f *windowFast) call(w *Worker, o *Orchestrator, fn string, a starlark.Tuple) (starlark.Value, error) {
	if !windowSubmit.Load() {
		return starlark.False, nil
	}
	c, ok := f.check(w, fn, a)
	if !ok {
		return starlark.False, nil
	}
	cur := f.stateSeq()
	seq, ok := smallInt(cur)
	// Storing the value it holds tells whether the dict can be written
	// (not frozen, not being iterated), changing nothing.
	if !ok || f.state.SetKey(starlark.String("seq"), cur) != nil {
		return starlark.False, nil
	}
	list, ok := c.members()
	if !ok {
		return starlark.False, nil
	}
	fastCalls.Add(1)
	return starlark.True, f.launch(w, o, fn, seq, c, list)
}

// stateSeq is state["seq"], or None.
func (f *windowFast) stateSeq() starlark.Value {
	v, found, err := f.state.Get(starlark.String("seq"))
	if err != nil || !found {
		return starlark.None
	}
	return v
}

// check is the checks and choices of the library's functions for a
// window algorithm named by algo over host tensors: _check_workers,
// _check_pair, the sizes, _check_op (allreduce, reduce_scatter), root
// (broadcast), and the kernel's window and values as the Starlark code
// computes them.
func (f *windowFast) check(w *Worker, fn string, a starlark.Tuple) (*windowCall, bool) {
	algo, ok := a[4].(starlark.String)
	if !ok {
		return nil, false
	}
	ws, ok := fastWorkers(a[2], len(w.devices))
	if !ok {
		return nil, false
	}
	n := len(ws)
	c := &windowCall{ws: ws}
	if fn == "barrier" {
		// no tensors: a window of LINE bytes, no values
		c.kernel, c.window = f.barrier, kernelLine
		return c, true
	}
	var icount, ocount int
	if c.ins, icount, ok = fastTensors(a[0], n); !ok || icount == 0 {
		return nil, false
	}
	if c.outs, ocount, ok = fastTensors(a[1], n); !ok || c.outs[0].t.DType != c.ins[0].t.DType {
		return nil, false
	}
	isz := c.ins[0].t.DType.Size()
	switch {
	case fn == "allreduce" && ocount == icount:
		return c, f.allreduceCall(c, string(algo), a[3], n, icount, isz)
	case fn == "reduce_scatter" && algo == "ring" && icount == n*ocount:
		opi, ok := opIndex(a[3])
		E, segb := segment(ocount, isz)
		K := pipelineSlots(ceilDiv(ocount, E) * (n - 1))
		c.kernel, c.window = f.ring, kernelLine+K*segb
		c.values = []uint64{uint64(opi), 1, 1, uint64(E), uint64(K), uint64(segb)}
		return c, ok
	case algo == "fan":
		return c, f.fanCall(c, fn, a[5], n, icount, ocount, isz)
	}
	return nil, false
}

// allreduceCall is allreduce's choice of kernel, window and values.
func (f *windowFast) allreduceCall(c *windowCall, algo string, op starlark.Value, n, count, isz int) bool {
	opi, ok := opIndex(op)
	if !ok {
		return false
	}
	switch algo {
	case "onephase", "twophase":
		c.kernel, c.window, c.values = f.onephase, count*isz, []uint64{uint64(opi)}
		if algo == "twophase" {
			c.kernel = f.twophase
		}
		return true
	case "ring", "bidirectional_ring":
		dirs := 1
		if algo == "bidirectional_ring" {
			dirs = 2
		}
		per := ceilDiv(ceilDiv(count, dirs), n)
		E, segb := segment(per, isz)
		K := pipelineSlots(ceilDiv(per, E) * 2 * (n - 1))
		c.kernel, c.window = f.ring, kernelLine+dirs*K*segb
		c.values = []uint64{uint64(opi), 0, uint64(dirs), uint64(E), uint64(K), uint64(segb)}
		return true
	}
	return false
}

// fanCall is allgather's, broadcast's and all_to_all's choice of window
// and values for the fan kernel, after their size (and root) checks.
func (f *windowFast) fanCall(c *windowCall, fn string, rootV starlark.Value, n, icount, ocount, isz int) bool {
	mode, root, m := 0, 0, icount
	switch {
	case fn == "allgather" && ocount == n*icount:
		mode = fanAllgather
	case fn == "broadcast" && ocount == icount:
		x, ok := smallInt(rootV)
		if !ok || x < 0 || x >= n {
			return false
		}
		mode, root = fanBroadcast, x
	case fn == "all_to_all" && ocount == icount && icount%n == 0:
		mode, m = fanAllToAll, icount/n
	default:
		return false
	}
	E, segb := segment(m, isz)
	slotb := segb
	if mode == fanAllToAll {
		// n sub-slots share a segment's bytes
		E = max(1, min(m, segBytes/(isz*n)))
		segb = roundUp(E*isz, kernelLine)
		slotb = segb * n
	}
	K := pipelineSlots(ceilDiv(m, E))
	c.kernel, c.window = f.fan, roundUp(16*n, kernelLine)+K*slotb
	c.values = []uint64{uint64(mode), uint64(root), uint64(E), uint64(K), uint64(segb)}
	return true
}

// segment is collectives.star's _segment: elements per segment of a
// stream of count elements, and the bytes of its slot.
func segment(count, isz int) (int, int) {
	E := max(1, min(count, segBytes/isz))
	return E, roundUp(E*isz, kernelLine)
}

// pipelineSlots is _pipeline_slots.
func pipelineSlots(items int) int { return max(minSlots, min(pipeSlots, items)) }

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// members packs each rank's task args as launch does, device_ctx (scalar
// 0) left to fill once the domain exists: [(input, INPUT), (output,
// OUTPUT)] (none for the barrier), scalars [device_ctx] + values.
func (c *windowCall) members() ([]*TaskArgs, bool) {
	n := len(c.ws)
	if c.ins == nil {
		list := make([]*TaskArgs, n)
		for i := range list {
			list[i] = &TaskArgs{a: &engine.TaskArgs{Scalars: []uint64{0}}}
		}
		return list, true
	}
	list := make([]*TaskArgs, n)
	args := make([]windowArgs, n)
	tensors, tags, bufs := make([]engine.Tensor, 0, 2*n), make([]engine.Tag, 0, 2*n), make([]*Tensor, 0, 2*n)
	scalars := make([]uint64, 0, n*(1+len(c.values)))
	for i := range list {
		d := &args[i]
		lo, slo := 2*i, i*(1+len(c.values))
		d.e = engine.TaskArgs{Tensors: tensors[lo : lo : lo+2], Tags: tags[lo : lo : lo+2], Scalars: scalars[slo : slo : slo+1+len(c.values)]}
		d.s = TaskArgs{a: &d.e, bufs: bufs[lo : lo : lo+2]}
		if d.s.addTensor(c.ins[i], TagValue(engine.Input)) != nil || d.s.addTensor(c.outs[i], TagValue(engine.Output)) != nil {
			return nil, false
		}
		d.e.AddScalar(0)
		for _, v := range c.values {
			d.e.AddScalar(v)
		}
		list[i] = &d.s
	}
	return list, true
}

// windowArgs is one member's args of a window call, made together.
type windowArgs struct {
	s TaskArgs
	e engine.TaskArgs
}

// launch is collectives.star's launch: a name no live domain has (from
// the library's counter), the domain, the group task, the release, with
// the builtins' errors.
func (f *windowFast) launch(w *Worker, o *Orchestrator, fn string, seq int, c *windowCall, list []*TaskArgs) error {
	live := w.w.LocalDomains().Live()
	name := ""
	for range len(live) + 1 {
		seq++
		name = fmt.Sprintf("collectives.%s.%d", fn, seq)
		if _, taken := live[name]; !taken {
			break
		}
	}
	if err := f.state.SetKey(starlark.String("seq"), starlark.MakeInt(seq)); err != nil {
		return err
	}
	d, err := o.o.AllocateDomain(engine.DomainSpec{Name: name, Workers: c.ws, WindowSize: c.window, TaskOnly: true})
	if err != nil {
		return err
	}
	all := make([]*engine.TaskArgs, len(list))
	pin := make(starlark.Tuple, len(list))
	for i, a := range list {
		rv, err := d.Rank(c.ws[i])
		if err != nil {
			return err
		}
		a.a.Scalars[0] = rv.DeviceCtx
		all[i], pin[i] = a.a, a
	}
	const op = "submit_next_level_group"
	h, err := o.handle(op, c.kernel, engine.NextLevel)
	if err != nil {
		return err
	}
	if _, err := o.o.SubmitNextGroup(h, all, nil, c.ws); err != nil {
		return err
	}
	o.pinArgs(pin)
	return d.Release()
}
