package starlib

import (
	"fmt"

	"go.starlark.net/starlark"

	"simpler/engine"
)

// The window algorithms' submit in Go: collectives.star's allreduce with
// algo "onephase", "twophase", "ring" or "bidirectional_ring" over host
// tensors, from its checks to its launch (the domain's name, the domain,
// the group task of the kernel, the release), as _direct_fast is for the
// direct algorithm (collfast.go), under the same contract: a call it
// cannot prove well formed goes back to the Starlark code, which stays
// the reference and words every error; a call it takes gets the same
// domain (name, workers, window size), the same members (tensors, tags,
// scalars) and the same release.
//
// The library's domain names come from one counter, its state["seq"],
// which both paths advance: the library hands its state dict to
// _direct_fast, and this path takes no call when the dict is frozen (a
// library made at a module's top level), where the Starlark code fails.

// windowFast is one library's window path: its worker's counter and its
// kernels.
type windowFast struct {
	state                    *starlark.Dict
	onephase, twophase, ring *starlark.Function
}

// Collectives.star's segment constants.
const (
	segBytes  = 1 << 20 // _SEG_BYTES
	pipeSlots = 4       // _SLOTS
)

// windowCall is a checked window allreduce: what launch receives.
type windowCall struct {
	ws        []int
	ins, outs []*Tensor
	kernel    *starlark.Function
	window    int
	values    []uint64
}

// call takes allreduce(o, inputs, outputs, workers, op, algo) when algo
// names a window algorithm and every argument is well formed; false hands
// it back.
func (f *windowFast) call(w *Worker, o *Orchestrator, fn string, a starlark.Tuple) (starlark.Value, error) {
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

// check is allreduce's checks and choices for a window algorithm over
// host tensors: _check_workers, _check_pair, the sizes, _check_op, the
// algorithm, and the kernel's window and values as the Starlark code
// computes them.
func (f *windowFast) check(w *Worker, fn string, a starlark.Tuple) (*windowCall, bool) {
	algo, ok := a[4].(starlark.String)
	if fn != "allreduce" || !ok {
		return nil, false
	}
	ws, ok := fastWorkers(a[2], len(w.devices))
	if !ok {
		return nil, false
	}
	n := len(ws)
	c := &windowCall{ws: ws}
	var icount, ocount int
	if c.ins, icount, ok = fastTensors(a[0], n); !ok {
		return nil, false
	}
	if c.outs, ocount, ok = fastTensors(a[1], n); !ok || c.outs[0].t.DType != c.ins[0].t.DType || ocount != icount || icount == 0 {
		return nil, false
	}
	opi, ok := opIndex(a[3])
	if !ok {
		return nil, false
	}
	isz := c.ins[0].t.DType.Size()
	switch algo {
	case "onephase", "twophase":
		c.kernel, c.window, c.values = f.onephase, icount*isz, []uint64{uint64(opi)}
		if algo == "twophase" {
			c.kernel = f.twophase
		}
	case "ring", "bidirectional_ring":
		dirs := 1
		if algo == "bidirectional_ring" {
			dirs = 2
		}
		per := ceilDiv(ceilDiv(icount, dirs), n)
		E := max(1, min(per, segBytes/isz))
		segb := (E*isz + kernelLine - 1) / kernelLine * kernelLine
		K := max(minSlots, min(pipeSlots, ceilDiv(per, E)*2*(n-1)))
		c.kernel, c.window = f.ring, kernelLine+dirs*K*segb
		c.values = []uint64{uint64(opi), 0, uint64(dirs), uint64(E), uint64(K), uint64(segb)}
	default:
		return nil, false
	}
	return c, true
}

// members packs each rank's task args as launch does, device_ctx (scalar
// 0) left to fill once the domain exists: [(input, INPUT), (output,
// OUTPUT)], scalars [device_ctx] + values.
func (c *windowCall) members() ([]*TaskArgs, bool) {
	n := len(c.ws)
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
	live := w.w.LiveDomains()
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
