package engine

import (
	"fmt"
	"time"

	"simpler/engine/internal/core"
	"simpler/internal/race"
)

// Run is one submission: the DAG an orchestration function built, its
// fence, and the cleanups that follow the fence. It is also the RunHandle
// callers wait on.
type Run struct {
	core      core.Run // its tasks, order, fence, cancel and first failure: the core's
	w         *Worker
	id        uint64
	buildErr  error
	result    any
	root      *scope
	rootScope scope                     // root's storage: one allocation less per run
	cleanups  []Cleanup                 // run after the fence, last registered first
	fence     [nFencePhases][]fenceHook // roles' work after the fence (hooks.go)
	domains   []*Domain                 // allocated by this run, in allocation order
	captured  []*RemoteBuffer           // remote buffers this run's tasks hold (rbuf.go)
	retired   bool                      // past the fence: a release frees at once
	failSeen  bool                      // the orchestrator has seen a failure (drain): later submits are refused
	stop      Stopper                   // stops the orchestration function while it runs (Cancel)
	done      chan struct{}
	waitErr   error    // set before done is closed
	race      *raceRun // nil without --race
}

// Cleanup is work that must happen after a run's fence (freeing a domain,
// say). A cleanup that fails poisons the Worker.
type Cleanup struct {
	Name string
	Fn   func() error
}

// Submit calls build to construct a run's DAG on the calling goroutine and
// returns the run once build has returned. An error from build is returned
// after the tasks it had already submitted have retired, so nothing of the
// run is still running when the caller sees it.
func (w *Worker) Submit(build func(o *Orchestrator) (any, error)) (*Run, error) {
	return w.SubmitStoppable(build, nil)
}

// SubmitStoppable is Submit for a run that parent may stop: stopping
// parent cancels the run. It is how a parent's task runs as this worker's
// run: a child Worker's, a process-mode node's, a remote session's.
func (w *Worker) SubmitStoppable(build func(o *Orchestrator) (any, error), parent *Stopper) (*Run, error) {
	return w.submit(build, parent, nil)
}

// submit is SubmitStoppable for a run built by the race detector's
// context ctx (nil: the process's orchestration).
func (w *Worker) submit(build func(o *Orchestrator) (any, error), parent *Stopper, ctx *race.Ctx) (*Run, error) {
	w.mu.Lock()
	if err := w.ready("submit"); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	if w.cfg.Level < 3 {
		w.mu.Unlock()
		return nil, Errorf(ValueError, "submit: a level-2 worker is one chip; use run(kernel, args)")
	}
	w.runSeq++
	r := &Run{w: w, id: w.runSeq, done: make(chan struct{})}
	r.core.Payload = r
	r.root = &r.rootScope
	w.core.Begin(&r.core, r.id, w.events.on())
	w.race.begin(r, ctx)
	w.runs[r] = struct{}{}
	w.mu.Unlock()
	if parent != nil {
		parent.OnStop(func(string) { r.Cancel() })
	}

	o := &Orchestrator{w: w, run: r, scope: r.root}
	w.building.Add(1)
	res, panicked, err := callBuild(build, o)
	w.building.Add(-1)

	w.mu.Lock()
	r.result, r.buildErr = res, err
	if err == nil && o.scope != r.root {
		r.buildErr = Errorf(RuntimeError, "orchestration returned with %d open scope(s): every scope_begin() needs a scope_end()", o.depth())
	}
	for o.scope != r.root { // end what was left open so its blocks are freed
		o.scope.end(w.heap)
		o.scope = o.scope.parent
	}
	var eff Effects
	w.core.Built(&r.core, &eff)
	w.mu.Unlock()
	if eff.Fenced != nil {
		r.finish()
	}
	if r.buildErr != nil {
		r.Wait(-1)
		if panicked != nil { // re-raised only now that the run is fenced and cleaned up
			panic(panicked.value)
		}
		return nil, r.buildErr
	}
	return r, nil
}

// buildPanic carries the value an orchestration function panicked with.
type buildPanic struct{ value any }

// callBuild runs build, catching a panic so that Submit can still end the
// run (otherwise it stays "being built" forever and Close refuses); Submit
// re-raises the panic once the run is done.
func callBuild(build func(o *Orchestrator) (any, error), o *Orchestrator) (res any, panicked *buildPanic, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = &buildPanic{p}
			err = Errorf(RuntimeError, "orchestration function panicked: %v", p)
		}
	}()
	res, err = build(o)
	return res, nil, err
}

// Run is Submit then Wait.
func (w *Worker) Run(build func(o *Orchestrator) (any, error)) (any, error) {
	r, err := w.Submit(build)
	if err != nil {
		return nil, err
	}
	if err := r.Wait(-1); err != nil {
		return nil, err
	}
	return r.result, nil
}

// Cancel ends the run: tasks not started retire without running, running
// ones are asked to stop (a Starlark kernel at its next step; a child
// process that does not stop is killed), and the orchestration function,
// if it still runs, is stopped. Each task then ends as its endpoint
// reports: not started, stopped while it ran, or run to its end. If the
// cancel cut anything short, Wait returns "RuntimeError: run N cancelled:
// ..." naming which tasks (a *CancelReport inside says the same as
// values); if every task ran to its end all the same, Wait returns what
// they did. It does not wait; cancelling again, or a run that is done,
// does nothing.
func (r *Run) Cancel() {
	driver{r.w}.cancel(r, Errorf(RuntimeError, "run %d cancelled", r.id))
}

// ID is the run's number within its Worker.
func (r *Run) ID() uint64 { return r.id }

// Done reports whether the run has passed its fence and cleaned up.
func (r *Run) Done() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the run is done, or for at most timeout (negative
// means no limit; zero polls: done or a TimeoutError at once), and returns
// the first root task failure.
func (r *Run) Wait(timeout time.Duration) error {
	if d := r.w.cfg.Det; d != nil && d.S.Running() != nil {
		return r.detWait(timeout)
	}
	// A short run is done soon: poll first (spin.go), in thread mode only,
	// where the run's kernels are this process's goroutines.
	spin := (timeout < 0 || timeout > spinFor) && r.w.tree.spin
	if r.Done() || spin && spinDone(r.done, r.w.tree.waitPlaces()) || timeout < 0 {
		<-r.done
		return r.waitErr
	}
	if timeout == 0 {
		return r.notDone(timeout)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
		return r.waitErr
	case <-t.C:
		return r.notDone(timeout)
	}
}

// detWait is Wait under the schedule: the running Proc blocks, for at
// most timeout of virtual time.
func (r *Run) detWait(timeout time.Duration) error {
	if r.Done() {
		return r.waitErr
	}
	if timeout == 0 {
		return r.notDone(timeout)
	}
	timedOut, err := r.w.cfg.Det.Block(fmt.Sprintf("run %d", r.id), r.Done, max(timeout, 0))
	switch {
	case err != nil:
		return Wrap(err, fmt.Sprintf("waiting for run %d", r.id))
	case timedOut:
		return r.notDone(timeout)
	}
	return r.waitErr
}

// notDone is Wait's TimeoutError: how many tasks the run has left.
func (r *Run) notDone(timeout time.Duration) error {
	r.w.mu.Lock()
	left, tasks := r.core.Inflight(), r.core.Tasks()
	r.w.mu.Unlock()
	return Errorf(TimeoutError, "run %d not done after %v (%d of %d tasks still unfinished)", r.id, timeout, left, tasks)
}

// Result is the orchestration function's return value once the run is
// done; it returns Wait's error if the run failed.
func (r *Run) Result() (any, error) {
	if err := r.Wait(-1); err != nil {
		return nil, err
	}
	return r.result, nil
}

// Tasks is the number of tasks the run submitted.
func (r *Run) Tasks() int {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return r.core.Tasks()
}

// finishesLocally reports whether finishing r needs no reply from a remote
// node: no fence hook (remote buffers its tasks hold, a global domain to
// free, say) and no cleanup. Caller holds w.mu.
func (r *Run) finishesLocally() bool {
	return len(r.cleanups) == 0 && !r.hasFenceWork()
}

// fenceOnly reports whether r's fence has nothing to do outside w.mu: it
// finishes locally and allocated no domain. Such a run (most runs) takes
// the lock once to pass its fence. Caller holds w.mu.
func (r *Run) fenceOnly() bool { return r.finishesLocally() && len(r.domains) == 0 }

// finish runs after the fence without w.mu: it ends the root scope, runs
// the cleanups last-registered first (also after a failure), then releases
// waiters.
func (r *Run) finish() {
	w := r.w
	w.mu.Lock()
	r.root.end(w.heap)
	cleanups := r.cleanups
	r.cleanups = nil
	r.waitErr = r.core.FirstErr()
	if r.core.Cut() {
		r.waitErr = r.cancelError()
	}
	if len(cleanups) == 0 && r.fenceOnly() {
		r.retired = true
		eff := r.close()
		w.mu.Unlock()
		driver{w}.route(eff.Assign)
		return
	}
	w.mu.Unlock()
	r.runFence(FenceRemote)
	for i := len(cleanups) - 1; i >= 0; i-- {
		if err := cleanups[i].Fn(); err != nil {
			w.Poison(Wrap(err, cleanups[i].Name))
			if r.waitErr == nil {
				r.waitErr = Wrap(err, cleanups[i].Name)
			}
		}
	}
	r.runFence(FenceGlobal)
	if err := w.domains.freeAtFence(r); err != nil && r.waitErr == nil {
		r.waitErr = err
	}
	r.runFence(FenceLocal)
	w.mu.Lock()
	eff := r.close()
	w.mu.Unlock()
	driver{w}.route(eff.Assign)
}

// close ends r once its fence work is done: waiters are released and
// the runs after it may dispatch (the returned assignments). Caller holds
// w.mu.
func (r *Run) close() Effects {
	w := r.w
	delete(w.runs, r)
	w.race.runDone(r)
	w.events.emit(Event{Kind: RunFenced, Run: r.id, Err: r.waitErr})
	close(r.done)
	var eff Effects
	w.core.Done(&r.core, &eff)
	driver{w}.wake(eff)
	return eff
}

// AddCleanup registers work to run after the run's fence.
func (r *Run) AddCleanup(c Cleanup) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.cleanups = append(r.cleanups, c)
}

// scope holds the heap blocks allocated while it was innermost.
type scope struct {
	parent *scope
	blocks []*heapBlock
	ended  bool
}

func (s *scope) end(h *runHeap) {
	if s.ended {
		return
	}
	s.ended = true
	for _, b := range s.blocks {
		h.unref(b)
	}
	s.blocks = nil
}
