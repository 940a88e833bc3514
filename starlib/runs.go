package starlib

import (
	"fmt"
	"math"
	"time"

	"go.starlark.net/starlark"

	"simpler/engine"
)

// Runs from a script: w.submit and w.run, the RunHandle they give, and
// the rules that keep a run's orchestration function from waiting on
// itself: a run records itself on the Starlark thread while its function
// builds it, so a wait on a later run of the same Worker, or direct
// control after the run's first submit, is refused instead of hanging.

// waitTimeout reads RunHandle.wait's timeout, as upstream has it: None
// waits without limit, 0 polls (a TimeoutError at once while the run is in
// flight), and anything else must be a non-negative finite number of
// seconds. A timeout too long for a time.Duration waits the longest one.
func waitTimeout(v starlark.Value) (time.Duration, error) {
	if v == starlark.None {
		return -1, nil
	}
	f, ok := starlark.AsFloat(v)
	if !ok {
		return 0, errorf(engine.TypeError, "wait: timeout must be a number of seconds, got %s", v.Type())
	}
	if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errorf(engine.ValueError, "wait: timeout must be a non-negative finite number of seconds, got %v", f)
	}
	if f >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64), nil
	}
	return time.Duration(f * float64(time.Second)), nil
}

// submit calls orch_fn(orch, args, config) on this thread to build a run.
func (w *Worker) submit(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	return w.submitAs("submit", th, args, kw)
}

// submitAs is submit, its errors named op (run calls it too).
func (w *Worker) submitAs(op string, th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (*RunHandle, error) {
	var fn starlark.Callable
	var av, cv starlark.Value = starlark.None, starlark.None
	if err := starlark.UnpackArgs(op, args, kw, "orch_fn", &fn, "args?", &av, "config?", &cv); err != nil {
		return nil, err
	}
	if w.w.Level() == 2 {
		return nil, errorf(engine.ValueError, "submit: a level-2 worker is one chip; use run(kernel, args)")
	}
	if err := runConfig(op, cv); err != nil {
		return nil, err
	}
	call := orchCall{w, th, fn, av, cv} // one allocation, not one per captured variable
	r, err := w.w.Submit(call.build)
	if err != nil {
		return nil, err
	}
	return &RunHandle{r: r, w: w.w}, nil
}

// runConfig checks run's and submit's config, which orch_fn receives as it
// is (any value: the function's own settings). A run has no deadline of
// its own, so a CallConfig's timeout_s there would bound nothing; it is
// refused rather than ignored.
func runConfig(op string, cv starlark.Value) error {
	c, ok := cv.(*CallConfig)
	if !ok || c.c.Timeout == 0 {
		return nil
	}
	return errorf(engine.ValueError, "%s: config has timeout_s=%v, but a run has no deadline: orch_fn receives config as it is. "+
		"Give the deadline to its tasks (o.submit_next_level(..., config = CallConfig(timeout_s = ...)) or Worker(task_timeout_s = ...)), "+
		"and bound the wait with submit(...).wait(timeout = ...)", op, c.c.Timeout.Seconds())
}

type buildingRuns []buildingRun

// buildingRun is a run being built: its worker and number.
type buildingRun struct {
	w   *engine.Worker
	id  uint64
	run *engine.Run
}

// building returns th's list, made on first use.
func building(th *starlark.Thread) *buildingRuns {
	b, _ := th.Local(buildingKey).(*buildingRuns)
	if b == nil {
		b = new(buildingRuns)
		th.SetLocal(buildingKey, b)
	}
	return b
}

// directFor is w's direct control as called on th for op: inside the
// innermost orchestration function of a run of w that th is in, the call
// belongs to that run (it waits for earlier runs, and follows no submit);
// elsewhere it is outside any run (refused while runs are in flight).
func directFor(th *starlark.Thread, op string, w *engine.Worker) (engine.DirectControl, error) {
	b, _ := th.Local(buildingKey).(*buildingRuns)
	if b == nil {
		return w.DirectIn(nil), nil
	}
	for i := len(*b) - 1; i >= 0; i-- {
		if r := (*b)[i]; r.w == w {
			return w.DirectIn(r.run), refuseDirectInside(th, op, w, r.id)
		}
	}
	return w.DirectIn(nil), nil
}

// refuseDirectInside refuses direct control in run id of w when th is
// also inside the orchestration function of an earlier run of w (run id
// was submitted from there): the call would wait for that run, which
// cannot finish before the function returns, so it would never return.
func refuseDirectInside(th *starlark.Thread, op string, w *engine.Worker, id uint64) error {
	b, _ := th.Local(buildingKey).(*buildingRuns)
	if b == nil {
		return nil
	}
	for _, r := range *b {
		if r.w == w && r.id < id {
			return errorf(engine.RuntimeError, "%s: run %d was submitted from inside the orchestration function of run %d of this Worker; "+
				"its direct control waits for run %d to finish, which cannot happen before that function returns: it would never return. "+
				"Do it in run %d's own function before its first submit, or after run %d", op, id, r.id, r.id, r.id, r.id)
		}
	}
	return nil
}

// refuseWaitInside refuses, on th, a wait for a run of worker w numbered
// id or later (id 0: a run not yet submitted) from inside the
// orchestration function of an earlier run of w. Runs of a Worker finish
// in order, so that run waits for the one being built, which cannot
// finish before its function returns: the wait would never end.
func refuseWaitInside(th *starlark.Thread, op string, w *engine.Worker, id uint64) error {
	b, _ := th.Local(buildingKey).(*buildingRuns)
	if b == nil {
		return nil
	}
	for _, r := range *b {
		if r.w == w && (id == 0 || r.id < id) {
			return errorf(engine.RuntimeError, "%s: called from inside the orchestration function of run %d of this Worker; "+
				"its runs finish in order, so this would wait for run %d, which cannot finish before that function returns: "+
				"it would never return. Submit the work to the orchestrator instead (o.submit_next_level, o.submit_sub)", op, r.id, r.id)
		}
	}
	return nil
}

// orchCall is one submit's call of its orchestration function.
type orchCall struct {
	w      *Worker
	th     *starlark.Thread
	fn     starlark.Callable
	av, cv starlark.Value
}

// build calls the function with the run's orchestrator. Its error reaches
// the caller of submit (and run) with its kind, and with its backtrace
// through the function.
func (c orchCall) build(o *engine.Orchestrator) (any, error) {
	b := building(c.th)
	*b = append(*b, buildingRun{o.Worker(), o.Run().ID(), o.Run()})
	defer func() { *b = (*b)[:len(*b)-1] }()
	v, err := starlark.Call(c.th, c.fn, starlark.Tuple{&Orchestrator{s: c.w.s, o: o, worker: c.w}, c.av, c.cv}, nil)
	return v, labelled(err)
}

func (w *Worker) run(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if w.w.Level() == 2 {
		var hv starlark.Value
		var av starlark.Value = starlark.None
		var cv starlark.Value = starlark.None
		if err := starlark.UnpackArgs("run", args, kw, "kernel", &hv, "args?", &av, "config?", &cv); err != nil {
			return nil, err
		}
		if err := kernelConfig(cv); err != nil {
			return nil, err
		}
		h, err := w.s.handleFor("run", hv, w.w)
		if err != nil {
			return nil, err
		}
		if err := checkArity("run", h, 2, roleKernel); err != nil {
			return nil, err
		}
		ta, err := taskArgs("run", av)
		if err != nil {
			return nil, err
		}
		return starlark.None, w.w.Devices().RunKernel(h, ta)
	}
	if err := refuseWaitInside(th, "run", w.w, 0); err != nil {
		return nil, err
	}
	rh, err := w.submitAs("run", th, args, kw)
	if err != nil {
		return nil, err
	}
	r := rh.r
	defer r.RaceWait(raceOf(th))()
	if err := r.Wait(-1); err != nil {
		return nil, err
	}
	res, _ := r.Result()
	return res.(starlark.Value), nil
}

// kernelConfig checks a level-2 run's config: None or a CallConfig, and
// no timeout_s, since a kernel run there has no deadline to honour it.
func kernelConfig(cv starlark.Value) error {
	switch c := cv.(type) {
	case starlark.NoneType:
		return nil
	case *CallConfig:
		if c.c.Timeout == 0 {
			return nil
		}
		return errorf(engine.ValueError, "run: config has timeout_s=%v, but a level-2 run(kernel, args) has no deadline; "+
			"run the kernel as a task of a level-3 Worker to give it one", c.c.Timeout.Seconds())
	}
	return errorf(engine.TypeError, "run: config must be a CallConfig, got %s", cv.Type())
}

// RunHandle is the Starlark value of a submitted run of w.
type RunHandle struct {
	r *engine.Run
	w *engine.Worker
}

func (h *RunHandle) String() string       { return fmt.Sprintf("RunHandle(run %d)", h.r.ID()) }
func (h *RunHandle) Type() string         { return "RunHandle" }
func (h *RunHandle) Freeze()              {}
func (h *RunHandle) Truth() starlark.Bool { return true }
func (h *RunHandle) Hash() (uint32, error) {
	return 0, errorf(engine.TypeError, "unhashable type: RunHandle")
}

func (h *RunHandle) AttrNames() []string { return []string{"cancel", "done", "result", "wait"} }

func (h *RunHandle) Attr(name string) (starlark.Value, error) {
	switch name {
	case "done":
		return starlark.Bool(h.r.Done()), nil
	case "cancel":
		return builtin("cancel", func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			if err := noArgs("cancel", args, kw); err != nil {
				return nil, err
			}
			h.r.Cancel()
			return starlark.None, nil
		}), nil
	case "wait":
		return builtin("wait", func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			var tv starlark.Value = starlark.None
			if err := starlark.UnpackArgs("wait", args, kw, "timeout?", &tv); err != nil {
				return nil, err
			}
			if err := refuseWaitInside(th, "wait", h.w, h.r.ID()); err != nil {
				return nil, err
			}
			d, err := waitTimeout(tv)
			if err != nil {
				return nil, err
			}
			defer h.r.RaceWait(raceOf(th))()
			return starlark.None, h.r.Wait(d)
		}), nil
	case "result":
		return builtin("result", func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			if err := noArgs("result", args, kw); err != nil {
				return nil, err
			}
			if err := refuseWaitInside(th, "result", h.w, h.r.ID()); err != nil {
				return nil, err
			}
			defer h.r.RaceWait(raceOf(th))()
			res, err := h.r.Result()
			if err != nil {
				return nil, err
			}
			return res.(starlark.Value), nil
		}), nil
	}
	return nil, nil
}
