package starlib

import (
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/internal/halt"
)

// callable is a top-level Starlark function that tasks can run: as a chip
// kernel fn(chip, args), a SUB callable fn(args), or a child's
// orchestration function fn(orch, args, config).
type callable struct {
	s      *Session
	fn     *starlark.Function
	digest string
	// native, for a library kernel with a Go body (nativeFor), runs the
	// task instead of fn when it returns true; false leaves it to fn.
	native func(*engine.ChipCtx, *engine.TaskArgs) (bool, error)
	// window, for a library window kernel (windowFor), runs the task on
	// the endpoint's thread instead of fn when it returns true; unlike
	// native it runs under --race too: it reports what fn would.
	window windowKernel
}

func (c *callable) Name() string   { return c.fn.Name() }
func (c *callable) Digest() string { return c.digest }

// endpointState is what a thread-mode endpoint keeps between tasks: its
// Starlark thread, the task's stop signal bound to it (halt), and the
// chip value kernels receive.
type endpointState struct {
	th   *starlark.Thread
	halt *halt.Signal
	stop func(reason string) // made once: a method value per task is an allocation
	chip *Chip
}

// state returns the endpoint's state, made on first use.
func (c *callable) state(local any, name string) *endpointState {
	slot, _ := local.(*any)
	if slot != nil {
		if st, ok := (*slot).(*endpointState); ok {
			return st
		}
	}
	st := &endpointState{th: c.s.newThread(name), halt: new(halt.Signal)}
	halt.Bind(st.th, st.halt)
	st.th.SetLocal(taskKey, taskRoles[name])
	// A stop ends the interpreter at its next step and, through the
	// signal, a builtin that blocks or runs long.
	st.stop = func(reason string) {
		st.th.Cancel(reason)
		st.halt.Stop(reason)
	}
	if slot != nil {
		*slot = st
	}
	return st
}

// thread returns the endpoint's thread for one more task: a step bound
// (--max-steps) counts per task, not over the endpoint's life, and one
// task past it, or stopped, does not fail the next.
func (st *endpointState) thread() *starlark.Thread {
	st.th.Steps = 0
	st.th.Uncancel()
	st.halt.Reset()
	return st.th
}

func (c *callable) RunChip(ctx *engine.ChipCtx, args *engine.TaskArgs) error {
	if c.native != nil && ctx.Race == nil { // under --race the Starlark body runs: its accesses are seen
		if done, err := c.native(ctx, args); done {
			return err
		}
	}
	st := c.state(ctx.Local, "chip")
	if st.chip == nil || st.chip.ctx.Chip != ctx.Chip || st.chip.ctx.WorkerID != ctx.WorkerID {
		st.chip = &Chip{ctx: &engine.ChipCtx{WorkerID: ctx.WorkerID, Chip: ctx.Chip}}
	}
	th := st.thread()
	bindRace(th, ctx.Race)
	stoppable(ctx.Stop, st.stop)
	if c.window != nil && nativeOn.Load() {
		if ctx.Race != nil {
			th.SetLocal(nativeFrameKey, nativeStack(c.fn))
		}
		if done, err := c.window(th, st.chip, args); done {
			return kernelError(err)
		}
	}
	_, err := starlark.Call(th, c.fn, starlark.Tuple{st.chip, &TaskArgs{a: args, chip: ctx.Chip}}, nil)
	return kernelError(err)
}

func (c *callable) RunSub(ctx *engine.SubCtx, args *engine.TaskArgs) error {
	st := c.state(ctx.Local, "sub")
	th := st.thread()
	bindRace(th, ctx.Race)
	stoppable(ctx.Stop, st.stop)
	_, err := starlark.Call(th, c.fn, starlark.Tuple{&TaskArgs{a: args}}, nil)
	return kernelError(err)
}

func (c *callable) RunOrch(o *engine.Orchestrator, args *engine.TaskArgs, cfg *engine.CallConfig) error {
	th := c.s.newThread("orch")
	th.SetLocal(taskKey, taskRoles["orch"])
	bindRace(th, o.RaceCtx())
	stop := new(halt.Signal)
	halt.Bind(th, stop)
	o.OnStop(func(reason string) {
		th.Cancel(reason)
		stop.Stop(reason)
	})
	_, err := starlark.Call(th, c.fn, starlark.Tuple{&Orchestrator{s: c.s, o: o}, &TaskArgs{a: args}, &CallConfig{c: *cfg}}, nil)
	return kernelError(err)
}

// taskKey is the thread-local that marks a thread running a task, with
// what the task is; builtins that only a host program may call
// (Worker()) refuse on such a thread (refuseInTask).
const taskKey = "simpler.task"

var taskRoles = map[string]string{
	"chip": "a chip kernel",
	"sub":  "a SUB callable",
	"orch": "a child worker's orchestration function",
}

// refuseInTask refuses what on a thread that runs a task, in every mode
// alike: a task runs on a worker and does not make one. A Worker made
// there would outlive the task (its chip and SUB processes, its
// sessions), one per task, and a child process has no launcher to start
// processes with anyway.
func refuseInTask(th *starlark.Thread, what string) error {
	role, _ := th.Local(taskKey).(string)
	if role == "" {
		return nil
	}
	return errorf(engine.RuntimeError, "%s inside %s: a task runs on a Worker and may not make one "+
		"(its processes and sessions would outlive the task); make Workers in main() and submit work to them", what, role)
}

// stoppable makes the engine's stop of a running kernel reach it: its
// interpreter fails at its next step, and a builtin it is in returns
// (endpointState.stop).
func stoppable(s *engine.Stopper, cancel func(reason string)) {
	if s != nil {
		s.OnStop(cancel)
	}
}

// callableFor returns the callable of a top-level function, refusing
// closures, lambdas and nested functions: only a module-level name can be
// found again by another process loading the same module.
func (s *Session) callableFor(op string, fn *starlark.Function) (*callable, error) {
	s.mu.Lock()
	c, ok := s.callables[fn]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	if g, ok := fn.Globals()[fn.Name()]; !ok || g != starlark.Value(fn) {
		return nil, errorf(engine.ValueError, "%s: %s (%s) is not a top-level function of its module; only module-level functions can be registered", op, fn.Name(), fn.Position())
	}
	c = &callable{s: s, fn: fn, digest: s.loader.digest(fn.Position().Filename(), fn.Name()), native: nativeFor(fn), window: windowFor(fn)}
	s.mu.Lock()
	s.callables[fn] = c
	s.mu.Unlock()
	return c, nil
}

// handleFor resolves a CallableHandle or a registered function to the
// handle registered on w.
func (s *Session) handleFor(op string, v starlark.Value, w *engine.Worker) (*engine.Handle, error) {
	var digest, name string
	switch x := v.(type) {
	case *Handle:
		digest, name = x.h.Digest(), x.h.Name()
	case *starlark.Function:
		c, err := s.callableFor(op, x)
		if err != nil {
			return nil, err
		}
		digest, name = c.digest, c.Name()
	default:
		return nil, errorf(engine.TypeError, "%s: want a CallableHandle or a registered function, got %s", op, v.Type())
	}
	h, ok := w.Registry().Lookup(digest)
	if !ok {
		return nil, errorf(engine.ValueError, "%s: %q is not registered on this worker; register it with w.register(%s) first", op, name, name)
	}
	return h, nil
}

// Handle is a CallableHandle.
type Handle struct{ h *engine.Handle }

func (h *Handle) String() string {
	return "CallableHandle(" + h.h.Name() + ", " + h.h.Digest()[:19] + "...)"
}
func (h *Handle) Type() string          { return "CallableHandle" }
func (h *Handle) Freeze()               {}
func (h *Handle) Truth() starlark.Bool  { return true }
func (h *Handle) Hash() (uint32, error) { return starlark.String(h.h.Digest()).Hash() }
func (h *Handle) AttrNames() []string   { return []string{"hashid", "name", "workers"} }

func (h *Handle) Attr(name string) (starlark.Value, error) {
	switch name {
	case "hashid":
		return starlark.String(h.h.Digest()), nil
	case "name":
		return starlark.String(h.h.Name()), nil
	case "workers":
		if h.h.Workers == nil {
			return starlark.None, nil
		}
		return starlark.NewList(intTuple(h.h.Workers)), nil
	}
	return nil, nil
}

// Chip is what a kernel's first parameter sees.
type Chip struct{ ctx *engine.ChipCtx }

func (c *Chip) String() string {
	return "Chip(device " + starlark.MakeInt(c.ctx.Chip.DeviceID()).String() + ")"
}
func (c *Chip) Type() string          { return "Chip" }
func (c *Chip) Freeze()               {}
func (c *Chip) Truth() starlark.Bool  { return true }
func (c *Chip) Hash() (uint32, error) { return 0, errorf(engine.TypeError, "unhashable type: Chip") }
func (c *Chip) AttrNames() []string {
	return []string{"comm", "device_id", "platform", "reduce_into", "worker_id"}
}

func (c *Chip) Attr(name string) (starlark.Value, error) {
	switch name {
	case "device_id":
		return starlark.MakeInt(c.ctx.Chip.DeviceID()), nil
	case "worker_id":
		return starlark.MakeInt(c.ctx.WorkerID), nil
	case "platform":
		return starlark.String(c.ctx.Chip.Platform().Name()), nil
	case "comm":
		return builtin("chip.comm", c.openComm), nil
	case "reduce_into":
		return chipReduceInto, nil
	}
	return nil, nil
}

// chipReduceInto is comm.reduce_into without a domain: the collectives
// that read every rank's tensors in place need none.
var chipReduceInto = builtin("chip.reduce_into", func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	return reduceInto(th, "chip.reduce_into", args, kw)
})

// checkArity refuses, at submit, a function that cannot take the n
// arguments its role passes (chip kernel 2, SUB callable 1, child
// orchestration 3), rather than failing later on a worker.
func checkArity(op string, h *engine.Handle, n int, role string) error {
	c, ok := h.Callable.(*callable)
	if !ok {
		return nil
	}
	fn := c.fn
	required := 0
	for i := 0; i < fn.NumParams()-fn.NumKwonlyParams(); i++ {
		if fn.ParamDefault(i) == nil {
			required++
		}
	}
	max := fn.NumParams() - fn.NumKwonlyParams()
	if fn.HasVarargs() {
		max = n
	}
	if n < required || n > max {
		return errorf(engine.TypeError, "%s: %s takes %d parameter(s); %s", op, fn.Name(), fn.NumParams(), role)
	}
	return nil
}

const (
	roleKernel = "a chip kernel is fn(chip, args)"
	roleSub    = "a SUB callable is fn(args)"
	roleOrch   = "a child orchestration is fn(orch, args, config)"
)
