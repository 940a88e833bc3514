package engine

import (
	"simpler/engine/internal/core"
	"simpler/hal/dtype"
)

// Orchestrator is what an orchestration function builds its run with. It
// is used from the goroutine that called Submit, while the function runs.
type Orchestrator struct {
	w     *Worker
	run   *Run
	scope *scope
	// dispatch is scratch for submit's Dispatch results. It is per
	// Orchestrator, not per Worker: submit routes them after unlocking, when
	// a concurrent run's submit could otherwise reuse the same array.
	dispatch []Assignment
	// zeroing is the heap blocks the submit in progress took, which it
	// zeroes once it has released w.mu.
	zeroing []*heapBlock
}

// OnStop registers how to stop the orchestration function (its
// interpreter) if the run is cancelled while it runs.
func (o *Orchestrator) OnStop(fn func(reason string)) { o.run.stop.OnStop(fn) }

// Worker is the worker this orchestrator submits to.
func (o *Orchestrator) Worker() *Worker { return o.w }

// Run is the run being built.
func (o *Orchestrator) Run() *Run { return o.run }

// SubmitNext submits one task on NEXT_LEVEL worker `worker`.
func (o *Orchestrator) SubmitNext(h *Handle, args *TaskArgs, cfg *CallConfig, worker int) (*Task, error) {
	return o.submit("submit_next_level", h, core.Job{Pool: NextLevel, Worker: worker}, []*TaskArgs{args}, cfg)
}

// SubmitNextGroup submits one DAG node that runs member i with
// argsList[i] on workers[i], all at once.
func (o *Orchestrator) SubmitNextGroup(h *Handle, argsList []*TaskArgs, cfg *CallConfig, workers []int) (*Task, error) {
	const op = "submit_next_level_group"
	if len(workers) == 0 {
		return nil, Errorf(ValueError, "%s: workers must not be empty", op)
	}
	if len(argsList) != len(workers) {
		return nil, Errorf(ValueError, "%s: %d args for %d workers; give one TaskArgs per worker", op, len(argsList), len(workers))
	}
	return o.submit(op, h, core.Job{Pool: NextLevel, Worker: -1, Group: append([]int(nil), workers...)}, argsList, cfg)
}

// SubmitSub submits one task to the shared SUB pool.
func (o *Orchestrator) SubmitSub(h *Handle, args *TaskArgs) (*Task, error) {
	return o.submit("submit_sub", h, core.Job{Pool: Sub}, []*TaskArgs{args}, nil)
}

// SubmitSubGroup submits one DAG node run on len(argsList) SUB workers at
// once.
func (o *Orchestrator) SubmitSubGroup(h *Handle, argsList []*TaskArgs) (*Task, error) {
	const op = "submit_sub_group"
	if len(argsList) == 0 {
		return nil, Errorf(ValueError, "%s: args_list must not be empty", op)
	}
	return o.submit(op, h, core.Job{Pool: Sub, SubGroup: len(argsList)}, argsList, nil)
}

// submit is the submit path, in order: the checks and the heap ring,
// before w.mu (prepare, args.go), then the driver's locked section (take a
// slot, waiting while the task window is full; make the task: allocate
// runtime OUTPUTs, wire dependencies, hold what it uses; publish it READY
// or PENDING) and the routing of ready work to endpoints (driver.go).
func (o *Orchestrator) submit(op string, h *Handle, job core.Job, argsList []*TaskArgs, cfg *CallConfig) (*Task, error) {
	heap, err := o.prepare(op, h, job, argsList)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &DefaultCallConfig
	}
	return driver{o.w}.submit(o, op, h, job, argsList, cfg, heap)
}

// Alloc returns an intermediate host tensor from the run heap, freed when
// the current scope ends and every task using it has retired.
func (o *Orchestrator) Alloc(shape []int, dt dtype.DType) (Tensor, error) {
	t := Tensor{Shape: append([]int(nil), shape...), DType: dt}
	if err := o.ensureRing(); err != nil {
		return Tensor{}, Wrap(err, "alloc")
	}
	o.w.mu.Lock()
	defer o.w.mu.Unlock()
	if err := o.building("alloc"); err != nil {
		return Tensor{}, err
	}
	b, err := o.heapAlloc("alloc", t.NBytes())
	if err != nil {
		return Tensor{}, err
	}
	o.w.mu.Unlock()
	b.zero() // outside the lock; no task has the block before a submit names it
	o.w.mu.Lock()
	t.Addr = b.addr
	return t, nil
}

// ScopeBegin opens a nested scope.
func (o *Orchestrator) ScopeBegin() error {
	o.w.mu.Lock()
	defer o.w.mu.Unlock()
	if err := o.building("scope_begin"); err != nil {
		return err
	}
	o.scope = &scope{parent: o.scope}
	return nil
}

// ScopeEnd closes the innermost scope: its heap blocks are freed as soon as
// the tasks using them retire.
func (o *Orchestrator) ScopeEnd() error {
	o.w.mu.Lock()
	defer o.w.mu.Unlock()
	if err := o.building("scope_end"); err != nil {
		return err
	}
	if o.scope == o.run.root {
		return Errorf(RuntimeError, "scope_end: no open scope (scope_end without scope_begin)")
	}
	o.scope.end(o.w.heap)
	o.scope = o.scope.parent
	return nil
}

// Drain waits until every task submitted so far in this run has retired
// and returns the first root failure.
func (o *Orchestrator) Drain() error {
	w := o.w
	defer o.run.RaceWait(o.RaceCtx())()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := o.building("drain"); err != nil {
		return err
	}
	for o.run.core.Inflight() > 0 {
		driver{w}.wait()
	}
	err := o.run.core.FirstErr()
	if err != nil {
		o.run.failSeen = true
	}
	return err
}

// direct refuses direct control once the run has submitted a task:
// staging must finish before any task can observe device memory.
func (o *Orchestrator) direct(op string) error {
	o.w.mu.Lock()
	defer o.w.mu.Unlock()
	if err := o.building(op); err != nil {
		return err
	}
	if o.run.core.Tasks() > 0 {
		return afterSubmit(op, o.run)
	}
	return nil
}

// Direct checks that op may do direct control now; bindings call it for
// their own direct-control builtins (domains, say).
func (o *Orchestrator) Direct(op string) error { return o.direct(op) }

// Malloc reserves device memory on chip `worker`.
func (o *Orchestrator) Malloc(worker, size int) (uint64, error) {
	return o.w.DirectIn(o.run).Malloc("orch.malloc", worker, size)
}

// Free releases device memory on chip `worker`.
func (o *Orchestrator) Free(worker int, ptr uint64) error {
	return o.w.DirectIn(o.run).Free("orch.free", worker, ptr)
}

// CopyTo copies host bytes into device memory of chip `worker`.
func (o *Orchestrator) CopyTo(worker int, dst uint64, src []byte) error {
	return o.w.DirectIn(o.run).CopyTo("orch.copy_to", worker, dst, src)
}

// CopyFrom copies device memory of chip `worker` into host bytes.
func (o *Orchestrator) CopyFrom(worker int, dst []byte, src uint64) error {
	return o.w.DirectIn(o.run).CopyFrom("orch.copy_from", worker, dst, src)
}
