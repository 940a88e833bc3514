package starlib

import (
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/internal/race"
	"simpler/starlib/array"
)

// Orchestrator is the `orch` an orchestration function receives.
type Orchestrator struct {
	s       *Session
	o       *engine.Orchestrator
	worker  *Worker // nil when running as a child's orchestration
	methods map[string]*starlark.Builtin
	handles []resolved   // resolved for this run: a run uses a handful, so a slice beats a map
	pinned  []*hostAlloc // host tensors the run's tasks use, unpinned at its fence
}

// pinArgs keeps the host tensors of submitted args (a TaskArgs or a list
// of them) from being reclaimed while the run is in flight, however soon
// the script drops them.
func (o *Orchestrator) pinArgs(v starlark.Value) {
	first := len(o.pinned) == 0
	switch x := v.(type) {
	case *TaskArgs:
		o.pin(x)
	case starlark.Indexable:
		for i := range x.Len() {
			if a, ok := x.Index(i).(*TaskArgs); ok {
				o.pin(a)
			}
		}
	}
	if first && len(o.pinned) > 0 {
		o.o.Run().AddCleanup(engine.Cleanup{Name: "host tensors", Fn: o.unpinAll})
	}
}

// pin pins a's host tensors for the run.
func (o *Orchestrator) pin(a *TaskArgs) {
	for _, t := range a.bufs {
		if t.host == nil {
			continue
		}
		if o.pinned == nil { // room for a collective's tensors at once
			o.pinned = make([]*hostAlloc, 0, max(8, len(a.bufs)))
		}
		t.host.pin()
		o.pinned = append(o.pinned, t.host)
	}
}

// unpinAll is the run's cleanup: its host tensors may go once it is done.
func (o *Orchestrator) unpinAll() error {
	for _, h := range o.pinned {
		h.unpin()
	}
	return nil
}

// handleKey is a function or handle value as submitted, with the pool it
// was checked for.
type handleKey struct {
	v    starlark.Value
	pool engine.Pool
}

func (o *Orchestrator) String() string       { return "Orchestrator" }
func (o *Orchestrator) Type() string         { return "Orchestrator" }
func (o *Orchestrator) Freeze()              {}
func (o *Orchestrator) Truth() starlark.Bool { return true }
func (o *Orchestrator) Hash() (uint32, error) {
	return 0, errorf(engine.TypeError, "unhashable type: Orchestrator")
}

type orchMethod func(o *Orchestrator, th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error)

var orchMethods = map[string]orchMethod{
	"submit_next_level":       (*Orchestrator).submitNext,
	"submit_next_level_group": (*Orchestrator).submitNextGroup,
	"submit_sub":              (*Orchestrator).submitSub,
	"submit_sub_group":        (*Orchestrator).submitSubGroup,
	"scope_begin":             (*Orchestrator).scopeBegin,
	"scope_end":               (*Orchestrator).scopeEnd,
	"scope":                   (*Orchestrator).scope,
	"alloc":                   (*Orchestrator).alloc,
	"malloc":                  (*Orchestrator).malloc,
	"free":                    (*Orchestrator).free,
	"alloc_child_tensor":      (*Orchestrator).allocChildTensor,
	"copy_to":                 (*Orchestrator).copyTo,
	"copy_from":               (*Orchestrator).copyFrom,
	"drain":                   (*Orchestrator).drain,
	"allocate_domain":         (*Orchestrator).allocateDomain,
	"release_domain":          (*Orchestrator).releaseDomain,

	"allocate_global_domain":  (*Orchestrator).allocateGlobalDomain,
	"release_global_domain":   (*Orchestrator).releaseGlobalDomain,
	"get_global_domain":       (*Orchestrator).getGlobalDomain,
	"copy_to_global_domain":   (*Orchestrator).copyToGlobal,
	"copy_from_global_domain": (*Orchestrator).copyFromGlobal,
}

// Attr returns a method bound to o; methods are made once per
// orchestrator, since a loop that submits thousands of tasks looks them
// up each time.
func (o *Orchestrator) Attr(name string) (starlark.Value, error) {
	if b, ok := o.methods[name]; ok {
		return b, nil
	}
	m, ok := orchMethods[name]
	if !ok {
		return nil, nil
	}
	b := builtin(name, func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		return m(o, th, args, kw)
	})
	if o.methods == nil {
		o.methods = map[string]*starlark.Builtin{}
	}
	o.methods[name] = b
	return b, nil
}

func (o *Orchestrator) AttrNames() []string { return sortedKeys(orchMethods) }

// handle resolves v on the orchestrator's worker and checks that it can
// take the arguments of the pool it is submitted to.
func (o *Orchestrator) handle(op string, v starlark.Value, pool engine.Pool) (*engine.Handle, error) {
	key := handleKey{v, pool}
	_, isFunc := v.(*starlark.Function)
	cacheable := isFunc || isHandle(v) // comparable, and the same callable each time
	if cacheable {
		for _, r := range o.handles {
			if r.key == key {
				return r.h, nil
			}
		}
	}
	h, err := o.resolve(op, v, pool)
	if err == nil && cacheable {
		o.handles = append(o.handles, resolved{key, h})
	}
	return h, err
}

// resolved is a callable resolved on the run's worker.
type resolved struct {
	key handleKey
	h   *engine.Handle
}

func isHandle(v starlark.Value) bool {
	_, ok := v.(*Handle)
	return ok
}

func (o *Orchestrator) resolve(op string, v starlark.Value, pool engine.Pool) (*engine.Handle, error) {
	h, err := o.s.handleFor(op, v, o.o.Worker())
	if err != nil {
		return nil, err
	}
	switch {
	case pool == engine.Sub:
		err = checkArity(op, h, 1, roleSub)
	case o.o.Worker().Level() == 3:
		err = checkArity(op, h, 2, roleKernel)
	default:
		err = checkArity(op, h, 3, roleOrch)
	}
	return h, err
}

func callConfig(op string, v starlark.Value) (*engine.CallConfig, error) {
	switch x := v.(type) {
	case starlark.NoneType:
		return nil, nil
	case *CallConfig:
		c := x.c
		return &c, nil
	}
	return nil, errorf(engine.TypeError, "%s: config must be a CallConfig, got %s", op, v.Type())
}

func argsList(op string, v starlark.Value) ([]*engine.TaskArgs, error) {
	it, ok := v.(starlark.Indexable)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: args_list must be a list of TaskArgs, got %s", op, v.Type())
	}
	out := make([]*engine.TaskArgs, it.Len())
	for i := range out {
		a, ok := it.Index(i).(*TaskArgs)
		if !ok {
			return nil, errorf(engine.TypeError, "%s: args_list[%d] must be a TaskArgs, got %s", op, i, it.Index(i).Type())
		}
		if err := a.live(op); err != nil {
			return nil, err
		}
		out[i] = a.a
	}
	return out, nil
}

// workerArg reads the required worker= keyword.
func workerArg(op string, v starlark.Value) (int, error) {
	if v == nil || v == starlark.None {
		return 0, errorf(engine.ValueError, "%s: worker= is required (a NEXT_LEVEL worker id)", op)
	}
	x, ok := v.(starlark.Int)
	if !ok {
		return 0, errorf(engine.TypeError, "%s: worker must be an int, got %s", op, v.Type())
	}
	n, ok := x.Int64()
	if !ok || n < -1<<31 || n > 1<<31-1 {
		return 0, errorf(engine.ValueError, "%s: worker %s out of range", op, x)
	}
	return int(n), nil
}

// submitNext is the hot path of every orchestration loop, so it reads its
// arguments by hand rather than through UnpackArgs.
func (o *Orchestrator) submitNext(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "submit_next_level"
	var p [4]starlark.Value // h, args, config, worker
	if len(args) > len(p) {
		return nil, errorf(engine.TypeError, "%s: got %d positional arguments, want at most 4 (h, args, config, worker)", op, len(args))
	}
	copy(p[:], args)
	for _, pair := range kw {
		i := -1
		switch pair[0].(starlark.String) {
		case "h":
			i = 0
		case "args":
			i = 1
		case "config":
			i = 2
		case "worker":
			i = 3
		}
		if i < 0 {
			return nil, errorf(engine.TypeError, "%s: unexpected keyword argument %s", op, pair[0])
		}
		if p[i] != nil {
			return nil, errorf(engine.TypeError, "%s: got multiple values for %s", op, pair[0])
		}
		p[i] = pair[1]
	}
	if p[0] == nil {
		return nil, errorf(engine.TypeError, "%s: missing argument h (a CallableHandle or registered function)", op)
	}
	worker, err := workerArg(op, p[3])
	if err != nil {
		return nil, err
	}
	h, err := o.handle(op, p[0], engine.NextLevel)
	if err != nil {
		return nil, err
	}
	var a *engine.TaskArgs
	if p[1] != nil {
		if a, err = taskArgs(op, p[1]); err != nil {
			return nil, err
		}
	}
	var cfg *engine.CallConfig
	if p[2] != nil {
		if cfg, err = callConfig(op, p[2]); err != nil {
			return nil, err
		}
	}
	if _, err = o.o.SubmitNext(h, a, cfg, worker); err == nil && p[1] != nil {
		o.pinArgs(p[1])
	}
	return starlark.None, err
}

func (o *Orchestrator) submitNextGroup(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "submit_next_level_group"
	var hv, lv starlark.Value
	var cv starlark.Value = starlark.None
	var workersV starlark.Value = starlark.None
	if err := starlark.UnpackArgs(op, args, kw, "h", &hv, "args_list", &lv, "config?", &cv, "workers?", &workersV); err != nil {
		return nil, err
	}
	if workersV == starlark.None {
		return nil, errorf(engine.ValueError, "%s: workers= is required (a list of NEXT_LEVEL worker ids)", op)
	}
	workers, err := intList(op, "workers", workersV)
	if err != nil {
		return nil, err
	}
	h, err := o.handle(op, hv, engine.NextLevel)
	if err != nil {
		return nil, err
	}
	list, err := argsList(op, lv)
	if err != nil {
		return nil, err
	}
	cfg, err := callConfig(op, cv)
	if err != nil {
		return nil, err
	}
	if _, err = o.o.SubmitNextGroup(h, list, cfg, workers); err == nil {
		o.pinArgs(lv)
	}
	return starlark.None, err
}

func (o *Orchestrator) submitSub(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "submit_sub"
	var hv starlark.Value
	var av starlark.Value = starlark.None
	if err := starlark.UnpackArgs(op, args, kw, "h", &hv, "args?", &av); err != nil {
		return nil, err
	}
	h, err := o.handle(op, hv, engine.Sub)
	if err != nil {
		return nil, err
	}
	a, err := taskArgs(op, av)
	if err != nil {
		return nil, err
	}
	if _, err = o.o.SubmitSub(h, a); err == nil {
		o.pinArgs(av)
	}
	return starlark.None, err
}

func (o *Orchestrator) submitSubGroup(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "submit_sub_group"
	var hv, lv starlark.Value
	if err := starlark.UnpackArgs(op, args, kw, "h", &hv, "args_list", &lv); err != nil {
		return nil, err
	}
	h, err := o.handle(op, hv, engine.Sub)
	if err != nil {
		return nil, err
	}
	list, err := argsList(op, lv)
	if err != nil {
		return nil, err
	}
	if _, err = o.o.SubmitSubGroup(h, list); err == nil {
		o.pinArgs(lv)
	}
	return starlark.None, err
}

func (o *Orchestrator) scopeBegin(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := noArgs("scope_begin", args, kw); err != nil {
		return nil, err
	}
	return starlark.None, o.o.ScopeBegin()
}

func (o *Orchestrator) scopeEnd(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := noArgs("scope_end", args, kw); err != nil {
		return nil, err
	}
	return starlark.None, o.o.ScopeEnd()
}

// scope runs fn() between scope_begin and scope_end, ending the scope
// even when fn fails.
func (o *Orchestrator) scope(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(args) == 0 {
		return nil, errorf(engine.TypeError, "scope: want a function to call")
	}
	fn, ok := args[0].(starlark.Callable)
	if !ok {
		return nil, errorf(engine.TypeError, "scope: want a function to call, got %s", args[0].Type())
	}
	if err := o.o.ScopeBegin(); err != nil {
		return nil, err
	}
	res, err := starlark.Call(th, fn, args[1:], kw)
	if endErr := o.o.ScopeEnd(); err == nil && endErr != nil {
		return nil, endErr
	}
	return res, err
}

func (o *Orchestrator) alloc(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var shapeV starlark.Value
	var dtV starlark.Value = array.DTypeConst(dtype.Float32)
	if err := starlark.UnpackArgs("alloc", args, kw, "shape", &shapeV, "dtype?", &dtV); err != nil {
		return nil, err
	}
	shape, err := toShape("alloc", shapeV)
	if err != nil {
		return nil, err
	}
	dt, err := array.ParseDType(dtV)
	if err != nil {
		return nil, engine.Wrap(err, "alloc")
	}
	t, err := o.o.Alloc(shape, dt)
	if err != nil {
		return nil, err
	}
	return newTensor(t, nil), nil
}

func (o *Orchestrator) malloc(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var worker, size int
	if err := starlark.UnpackArgs("orch.malloc", args, kw, "worker_id", &worker, "size", &size); err != nil {
		return nil, err
	}
	if err := refuseDirectInside(th, "orch.malloc", o.o.Worker(), o.o.Run().ID()); err != nil {
		return nil, err
	}
	p, err := o.o.Malloc(worker, size)
	if err != nil {
		return nil, err
	}
	return starlark.MakeUint64(p), nil
}

func (o *Orchestrator) free(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(args) == 1 && len(kw) == 0 {
		if b, ok := args[0].(*Buffer); ok { // orch.free(buf): alloc_child_tensor's memory
			return starlark.None, o.freeBuffer(b)
		}
	}
	var worker int
	var ptrV starlark.Value
	if err := starlark.UnpackArgs("orch.free", args, kw, "worker_id", &worker, "ptr", &ptrV); err != nil {
		return nil, err
	}
	ptr, err := toAddr("orch.free", ptrV)
	if err != nil {
		return nil, err
	}
	if err := refuseDirectInside(th, "orch.free", o.o.Worker(), o.o.Run().ID()); err != nil {
		return nil, err
	}
	return starlark.None, o.o.Free(worker, ptr)
}

func (o *Orchestrator) copyTo(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var worker, size int
	var dstV, srcV starlark.Value
	if err := starlark.UnpackArgs("orch.copy_to", args, kw, "worker_id", &worker, "dst", &dstV, "src", &srcV, "size", &size); err != nil {
		return nil, err
	}
	dst, src, err := deviceAndHost("orch.copy_to", dstV, srcV, size)
	if err != nil {
		return nil, err
	}
	if err := refuseDirectInside(th, "orch.copy_to", o.o.Worker(), o.o.Run().ID()); err != nil {
		return nil, err
	}
	if err := o.o.CopyTo(worker, dst, src); err != nil {
		return nil, err
	}
	raceCopy(th, o.o.Worker(), worker, dst, src, race.Write, "orch.copy_to")
	return starlark.None, nil
}

func (o *Orchestrator) copyFrom(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var worker, size int
	var dstV, srcV starlark.Value
	if err := starlark.UnpackArgs("orch.copy_from", args, kw, "worker_id", &worker, "dst", &dstV, "src", &srcV, "size", &size); err != nil {
		return nil, err
	}
	src, dst, err := deviceAndHost("orch.copy_from", srcV, dstV, size)
	if err != nil {
		return nil, err
	}
	if err := refuseDirectInside(th, "orch.copy_from", o.o.Worker(), o.o.Run().ID()); err != nil {
		return nil, err
	}
	if err := o.o.CopyFrom(worker, dst, src); err != nil {
		return nil, err
	}
	raceCopy(th, o.o.Worker(), worker, src, dst, race.Read, "orch.copy_from")
	return starlark.None, nil
}

// raceCopy reports a copy, once it was made (direct control waits for the
// earlier runs first), between the host bytes host (read by copy_to,
// written by copy_from) and worker's device memory at dev (what k does to
// it), where this process can see that memory.
func raceCopy(th *starlark.Thread, w *engine.Worker, worker int, dev uint64, host []byte, k race.Kind, op string) {
	if raceOf(th) == nil {
		return
	}
	hk := race.Read
	if k == race.Read {
		hk = race.Write
	}
	touch(th, host, hk, op)
	if key := w.RaceDeviceKey(worker, dev); key != 0 {
		raceOf(th).AccessAt(key, len(host), k, op, stackOf(th))
	}
}

func (o *Orchestrator) drain(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := noArgs("drain", args, kw); err != nil {
		return nil, err
	}
	return starlark.None, o.o.Drain()
}
