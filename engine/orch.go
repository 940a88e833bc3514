package engine

import (
	"fmt"

	"simpler/engine/hostmem"
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

func (o *Orchestrator) depth() int {
	n := 0
	for s := o.scope; s != o.run.root; s = s.parent {
		n++
	}
	return n
}

// building refuses use of an orchestrator whose function has returned.
// Caller holds w.mu.
func (o *Orchestrator) building(op string) error {
	if err := o.w.usable(op); err != nil {
		return err
	}
	if !o.run.core.Building() {
		return Errorf(RuntimeError, "%s: run %d is no longer being built; submit only from inside its orchestration function", op, o.run.id)
	}
	return nil
}

// SubmitNext submits one task on NEXT_LEVEL worker `worker`.
func (o *Orchestrator) SubmitNext(h *Handle, args *TaskArgs, cfg *CallConfig, worker int) (*Task, error) {
	const op = "submit_next_level"
	if err := o.checkNext(op, h, worker); err != nil {
		return nil, err
	}
	return o.submit(op, h, core.Job{Pool: NextLevel, Worker: worker}, []*TaskArgs{args}, cfg)
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
	seen := map[int]bool{}
	for _, id := range workers {
		if seen[id] {
			return nil, Errorf(ValueError, "%s: worker %d listed twice", op, id)
		}
		seen[id] = true
		if err := o.checkNext(op, h, id); err != nil {
			return nil, err
		}
	}
	return o.submit(op, h, core.Job{Pool: NextLevel, Worker: -1, Group: append([]int(nil), workers...)}, argsList, cfg)
}

// SubmitSub submits one task to the shared SUB pool.
func (o *Orchestrator) SubmitSub(h *Handle, args *TaskArgs) (*Task, error) {
	const op = "submit_sub"
	if err := o.checkSub(op, h, 1); err != nil {
		return nil, err
	}
	return o.submit(op, h, core.Job{Pool: Sub}, []*TaskArgs{args}, nil)
}

// SubmitSubGroup submits one DAG node run on len(argsList) SUB workers at
// once.
func (o *Orchestrator) SubmitSubGroup(h *Handle, argsList []*TaskArgs) (*Task, error) {
	const op = "submit_sub_group"
	if len(argsList) == 0 {
		return nil, Errorf(ValueError, "%s: args_list must not be empty", op)
	}
	if err := o.checkSub(op, h, len(argsList)); err != nil {
		return nil, err
	}
	return o.submit(op, h, core.Job{Pool: Sub, SubGroup: len(argsList)}, argsList, nil)
}

func (o *Orchestrator) checkHandle(op string, h *Handle) error {
	if h == nil {
		return Errorf(TypeError, "%s: a callable handle is required", op)
	}
	return nil
}

// registered checks, under w.mu, that h is still registered here.
func (w *Worker) registered(op string, h *Handle) error {
	if cur, ok := w.reg.byDigest[h.Digest()]; !ok || cur != h {
		return Errorf(ValueError, "%s: %q is not registered on this worker; register it with w.register(fn) first", op, h.Name())
	}
	return nil
}

func (o *Orchestrator) checkNext(op string, h *Handle, worker int) error {
	if err := o.checkHandle(op, h); err != nil {
		return err
	}
	n := o.w.nextCount()
	if worker < 0 || worker >= n {
		return Errorf(ValueError, "%s: worker %d out of range (%s)", op, worker, idRange(n, "NEXT_LEVEL workers are", "this worker has no NEXT_LEVEL workers"))
	}
	if !h.allows(worker) {
		return Errorf(ValueError, "%s: %q is registered for workers %v, not worker %d", op, h.Name(), h.Workers, worker)
	}
	if o.w.cfg.Level == 3 {
		if _, ok := h.Callable.(ChipKernel); !ok {
			return Errorf(TypeError, "%s: %q cannot run as a chip kernel", op, h.Name())
		}
	} else if _, ok := h.Callable.(OrchCallable); !ok {
		return Errorf(TypeError, "%s: %q cannot run as an orchestration function", op, h.Name())
	}
	return nil
}

func (o *Orchestrator) checkSub(op string, h *Handle, n int) error {
	if err := o.checkHandle(op, h); err != nil {
		return err
	}
	if _, ok := h.Callable.(SubCallable); !ok {
		return Errorf(TypeError, "%s: %q cannot run as a SUB callable", op, h.Name())
	}
	if pool := o.w.cfg.NumSubWorkers; n > pool {
		if pool == 0 {
			return Errorf(ValueError, "%s: this worker has no SUB workers (num_sub_workers=0)", op)
		}
		return Errorf(ValueError, "%s: group of %d is larger than the SUB pool (%d workers)", op, n, pool)
	}
	return nil
}

// checkTensors validates every tensor of one member before anything is
// allocated: host tensors must be in shared memory; device tensors must
// lie in a live region of the chip the member runs on.
func (o *Orchestrator) checkTensors(op string, job core.Job, m int, a *TaskArgs) error {
	worker := job.Worker
	if job.Group != nil {
		worker = job.Group[m]
	}
	remote := job.Pool == NextLevel && o.w.IsRemote(worker)
	if remote {
		if err := o.w.remotes[worker].Lost(); err != nil {
			return &Error{Kind: RuntimeError, Msg: fmt.Sprintf("%s: remote_worker %d can take no more work: %v", op, worker, err), Cause: err}
		}
	}
	for i, t := range a.Tensors {
		if err := checkStrided(op, i, t, a.Tags[i], remote); err != nil {
			return err
		}
		if t.Remote != nil || t.Inline != nil || remote {
			if err := checkRemoteTensor(op, i, t, a.Tags[i], worker, remote); err != nil {
				return err
			}
			continue
		}
		if t.DType.Size() == 0 {
			return Errorf(ValueError, "%s: tensor %d has no dtype", op, i)
		}
		span, ok := t.Span()
		if !ok {
			return Errorf(ValueError, "%s: tensor %d: shape %v of %s is more than %d bytes", op, i, t.Shape, t.DType, maxBytes)
		}
		if t.Addr == 0 {
			if a.Tags[i] != Output || t.ChildMemory {
				return Errorf(ValueError, "%s: tensor %d has address 0; only a host OUTPUT tensor may leave its address to the runtime", op, i)
			}
			continue
		}
		if !t.ChildMemory {
			if _, err := hostmem.Resolve(t.Addr, span); err != nil {
				return Wrap(err, fmt.Sprintf("%s: tensor %d", op, i))
			}
			continue
		}
		if job.Pool == Sub {
			return Errorf(ValueError, "%s: tensor %d is device memory (child_memory); SUB workers see host memory only", op, i)
		}
		if o.w.cfg.Level >= 4 {
			return Errorf(ValueError, "%s: tensor %d is device memory; a level-%d task takes host tensors", op, i, o.w.cfg.Level)
		}
		if _, err := o.w.chips[worker].Bytes(t.Addr, span); err != nil {
			return Wrap(err, fmt.Sprintf("%s: tensor %d (child_memory on worker %d)", op, i, worker))
		}
	}
	return checkWriteOverlap(op, a)
}

// checkStrided refuses a strided view that cannot be laid out
// (checkLayout), and one bound for a remote node: a TASK carries a shape,
// not strides (a local child's mailbox carries both).
func checkStrided(op string, i int, t Tensor, tag Tag, remote bool) error {
	if t.Strides == nil {
		return nil
	}
	if err := checkLayout(op, i, t, tag); err != nil {
		return err
	}
	if remote || t.Remote != nil || t.Inline != nil {
		return Errorf(ValueError, "%s: tensor %d is a strided view; a remote node takes contiguous tensors only", op, i)
	}
	return nil
}

// checkArgBounds applies, in every mode, the bounds a task's args have
// where they must cross a process (maxArgs tensors and scalars, maxDims
// dimensions), so a task a thread-mode worker takes is one a process-mode
// worker takes too, and both refuse it at submit.
func checkArgBounds(op string, a *TaskArgs) error {
	if len(a.Tensors) > maxArgs || len(a.Scalars) > maxArgs {
		return Errorf(ValueError, "%s: %d tensors and %d scalars; a task takes at most %d of each", op, len(a.Tensors), len(a.Scalars), maxArgs)
	}
	for i, t := range a.Tensors {
		if len(t.Shape) > maxDims {
			return Errorf(ValueError, "%s: tensor %d has %d dimensions; at most %d", op, i, len(t.Shape), maxDims)
		}
	}
	return nil
}

// submit is the submit path, in order: validate, make the heap's ring
// if a runtime OUTPUT needs one, then the driver's locked section (take a
// slot, waiting while the task window is full; allocate runtime OUTPUTs;
// wire dependencies; hold heap blocks; publish READY or PENDING) and
// routing ready work to endpoints.
func (o *Orchestrator) submit(op string, h *Handle, job core.Job, argsList []*TaskArgs, cfg *CallConfig) (*Task, error) {
	for m, a := range argsList {
		if a == nil {
			continue // no tensors to check; clone makes it empty
		}
		if err := checkArgBounds(op, a); err != nil {
			return nil, err
		}
		if err := o.checkTensors(op, job, m, a); err != nil {
			return nil, err
		}
	}
	if cfg == nil {
		cfg = &DefaultCallConfig
	}
	heap := needsHeap(argsList) // one walk of the tensors answers it for the whole submit
	if heap {
		if err := o.w.ensureRing(o.depth()); err != nil {
			return nil, Wrap(err, op)
		}
	}
	return driver{o.w}.submit(o, op, h, job, argsList, cfg, heap)
}

// admit is the part of a submit's checks that needs w.mu: the run is
// still being built and has not failed fast, and h is still registered.
// Caller holds w.mu.
func (o *Orchestrator) admit(op string, h *Handle) error {
	if err := o.building(op); err != nil {
		return err
	}
	if err := o.w.registered(op, h); err != nil {
		return err
	}
	return o.failedFast(op)
}

// newTask is a task of h with a copy of each member's arguments.
func newTask(h *Handle, cfg *CallConfig, argsList []*TaskArgs) *Task {
	t := &Task{handle: h, cfg: *cfg}
	t.Payload = t
	if len(argsList) == 1 {
		t.args = t.one[:]
	} else {
		t.args = make([]TaskArgs, len(argsList))
	}
	for m, a := range argsList {
		t.args[m] = a.clone()
	}
	return t
}

// zeroHeld zeroes the heap blocks the submit in progress took, outside
// w.mu (a 16 MiB OUTPUT is a millisecond no completion should wait
// behind); the driver then lets its task run.
func (o *Orchestrator) zeroHeld() {
	for _, b := range o.zeroing {
		b.zero()
	}
	clear(o.zeroing)
	o.zeroing = o.zeroing[:0]
}

// allocOutputs gives every host OUTPUT without an address a block of the
// run heap and writes the address back into the caller's TaskArgs, so a
// later submit can consume it. Caller holds w.mu.
func (o *Orchestrator) allocOutputs(op string, argsList []*TaskArgs) error {
	for _, a := range argsList {
		if a == nil {
			continue
		}
		for i := range a.Tensors {
			t := &a.Tensors[i]
			if t.Addr != 0 || t.ChildMemory || t.Remote != nil || t.Inline != nil {
				continue
			}
			b, err := o.heapAlloc(op, t.spanBytes())
			if err != nil {
				return err
			}
			o.zeroing = append(o.zeroing, b)
			t.Addr = b.addr
		}
	}
	return nil
}

// needsHeap reports whether a submit of argsList takes heap blocks: a
// host OUTPUT with no address yet.
func needsHeap(argsList []*TaskArgs) bool {
	for _, a := range argsList {
		if a == nil {
			continue
		}
		for i := range a.Tensors {
			t := &a.Tensors[i]
			if t.Addr == 0 && !t.ChildMemory && t.Remote == nil && t.Inline == nil {
				return true
			}
		}
	}
	return false
}

// heapAlloc takes a block for the current scope from the ring of its
// depth, waiting for running tasks to free space when that ring is full.
// Caller holds w.mu.
func (o *Orchestrator) heapAlloc(op string, n int) (*heapBlock, error) {
	w := o.w
	depth := o.depth()
	for {
		b, err := w.heap.alloc(depth, n)
		if err != nil {
			return nil, Wrap(err, op)
		}
		if b != nil {
			w.race.nameHeap(b, op)
			o.scope.blocks = append(o.scope.blocks, b)
			return b, nil
		}
		if w.core.HeapStuck(&o.run.core) {
			r := w.heap.rings[ringForDepth(depth)]
			return nil, Errorf(RuntimeError, "%s: heap ring exhausted: %d bytes wanted at scope depth %d, %d of ring %d's heap_ring_size=%d held by live scopes", op, n, depth, r.used, r.index, r.size)
		}
		driver{w}.wait()
	}
}

// refHeap holds every heap block t touches until t retires.
func (o *Orchestrator) refHeap(t *Task) {
	for m := range t.args {
		for _, ten := range t.args[m].Tensors {
			if ten.ChildMemory {
				continue
			}
			if b := o.w.heap.find(ten.Addr, ten.spanBytes()); b != nil {
				b.refs++
				t.heap = append(t.heap, b)
			}
		}
	}
}

// Alloc returns an intermediate host tensor from the run heap, freed when
// the current scope ends and every task using it has retired.
func (o *Orchestrator) Alloc(shape []int, dt dtype.DType) (Tensor, error) {
	t := Tensor{Shape: append([]int(nil), shape...), DType: dt}
	if err := o.w.ensureRing(o.depth()); err != nil {
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

// failedFast refuses a submit once the orchestration has seen its run
// fail (drain returned the failure): the run will fail whatever follows,
// and upstream stops adding to it. Caller holds w.mu.
func (o *Orchestrator) failedFast(op string) error {
	r := o.run
	if why := r.core.Cancelled(); why != nil {
		return Wrap(why, op)
	}
	first := r.core.FirstErr()
	if !r.failSeen || first == nil {
		return nil
	}
	return &Error{Kind: RuntimeError, Msg: fmt.Sprintf("%s: run %d has already failed, so nothing more is added to it: %v", op, r.id, first), Cause: first}
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

// checkRemoteTensor applies the remote rules: a remote node takes only
// RemoteTensorRef and host_inline tensors, each usable there; a local
// worker takes none.
func checkRemoteTensor(op string, i int, t Tensor, tag Tag, worker int, remote bool) error {
	switch {
	case !remote && (t.Remote != nil || t.Inline != nil):
		return Errorf(ValueError, "%s: tensor %d is remote data; worker %d is not a remote node", op, i, worker)
	case t.Inline != nil:
		if tag != Input {
			return Errorf(ValueError, "%s: tensor %d is host_inline, which is an INPUT, but is tagged %s", op, i, tag)
		}
		if len(t.Inline) != t.NBytes() {
			return Errorf(ValueError, "%s: tensor %d carries %d inline bytes for %d", op, i, len(t.Inline), t.NBytes())
		}
		return nil
	case t.Remote == nil && tag.Writes() && t.Addr == 0:
		return Errorf(ValueError, "%s: tensor %d: a remote OUTPUT needs a RemoteTensorRef (remote_malloc the output first)", op, i)
	case t.Remote == nil:
		return Errorf(ValueError, "%s: tensor %d is a host tensor; remote worker %d takes RemoteTensorRef tensors (remote_malloc + remote_copy_to, or RemoteTensorRef.host_inline)", op, i, worker)
	}
	b := t.Remote.Buf
	switch {
	case b.Released():
		return UsedAfterRelease(op, fmt.Sprintf("tensor %d's remote buffer", i))
	case b.Worker != worker:
		return Errorf(ValueError, "%s: tensor %d's buffer is usable on worker %d, not worker %d (remote_import it there)", op, i, b.Worker, worker)
	case t.Remote.Offset < 0 || t.Remote.Offset+t.NBytes() > b.NBytes:
		return Errorf(ValueError, "%s: tensor %d (%d bytes at offset %d) overruns its %d-byte buffer", op, i, t.NBytes(), t.Remote.Offset, b.NBytes)
	case tag.Needs()&^b.Access != 0:
		return Errorf(ValueError, "%s: tensor %d is %s, which needs %s access; the handle has %s", op, i, tag, tag.Needs(), b.Access)
	}
	return nil
}
