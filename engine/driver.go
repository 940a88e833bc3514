package engine

import (
	"fmt"

	"simpler/engine/internal/core"
)

// driver is a Worker's task path from submit to completion, and the only
// place on it that takes w.mu. (Two steps beside it do too: a submit with
// runtime OUTPUTs first checks for its heap ring (ensureRing, heap.go),
// and a run that fenced takes it to end (Run.finish, run.go).) Each of
// its steps has one shape: lock, step the core (a submit, a start, a
// completion, a deadline, a cancel), take what the step asks for as
// core.Effects and wake the waiters it names, unlock, then carry the
// effects out with no lock held — start and stop members on their
// endpoints, finish a run that fenced. A driver is only a view of its
// Worker (no state of its own: the core, the timer and the waiters are the
// Worker's), made where it is used; it costs nothing to make.
type driver struct{ w *Worker }

// submit is a submit's locked section and what follows it: after the
// checks that need w.mu, wait for room in the task window, make the task
// (newTask: its arguments, heap blocks, edges and holds), publish it,
// then, with w.mu released, route what became ready, zero the heap blocks
// the submit took and let the task run. fresh says whether its runtime
// OUTPUTs take heap blocks (prepare made their ring).
func (d driver) submit(o *Orchestrator, op string, h *Handle, job core.Job, argsList []*TaskArgs, cfg *CallConfig, fresh bool) (*Task, error) {
	w := d.w
	w.mu.Lock()
	if err := d.admit(o, op, h); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	for w.core.WindowFull(&o.run.core) {
		d.wait()
	}
	t, err := o.newTask(op, h, job, cfg, argsList, fresh)
	if err != nil {
		o.zeroing = o.zeroing[:0] // taken by the scope, which frees them
		w.mu.Unlock()
		return nil, err
	}
	hold := len(o.zeroing) > 0 // held until its heap blocks are zeroed, outside the lock
	eff := Effects{Assign: o.dispatch[:0]}
	w.core.Add(&t.Task, hold, &eff)
	d.wake(eff)
	o.dispatch = eff.Assign[:0]
	w.mu.Unlock()
	d.route(eff.Assign)
	if hold {
		for _, b := range o.zeroing {
			b.zero() // a 16 MiB OUTPUT is a millisecond no completion should wait behind
		}
		clear(o.zeroing)
		o.zeroing = o.zeroing[:0]
		d.unhold(t)
	}
	return t, nil
}

// admit is the part of a submit's checks that needs w.mu: the run is
// still being built and has not failed fast, and h is still registered.
// Caller holds w.mu.
func (d driver) admit(o *Orchestrator, op string, h *Handle) error {
	if err := o.building(op); err != nil {
		return err
	}
	if err := d.w.registered(op, h); err != nil {
		return err
	}
	return o.failedFast(op)
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

// registered checks, under w.mu, that h is still registered here.
func (w *Worker) registered(op string, h *Handle) error {
	if cur, ok := w.reg.byDigest[h.Digest()]; !ok || cur != h {
		return Errorf(ValueError, "%s: %q is not registered on this worker; register it with w.register(fn) first", op, h.Name())
	}
	return nil
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

// unhold lets t, whose heap blocks are now zeroed, run.
func (d driver) unhold(t *Task) {
	w := d.w
	w.mu.Lock()
	var eff Effects
	w.core.Unhold(&t.Task, &eff)
	d.wake(eff)
	w.mu.Unlock()
	d.route(eff.Assign)
}

// started records that a starts on its endpoint, and gives it its
// deadline in the core (deadline.go).
func (d driver) started(a Assignment) {
	w, t := d.w, taskOf(a.Task)
	if w.events.on() {
		w.events.emit(Event{Kind: TaskStarted, Run: runOf(t.Run()).id, Task: t.ID(), Member: a.Member, Worker: w.workerName(a.Pool, a.Target), Callable: t.handle.Name()})
	}
	if limit := memberTimeout(t, w.cfg.TaskTimeout); limit > 0 {
		w.mu.Lock()
		var eff Effects
		w.core.Arm(a, w.deadlines.now()+int64(limit), int64(limit), &eff)
		w.deadlines.set(eff.Deadline)
		w.mu.Unlock()
	}
}

// completed applies a finished assignment: the core's step, then what it
// asks for. scratch, if not nil, is reused for the assignments that
// follow. Finishing a run that fenced may need replies from remote nodes,
// so when its cleanups are not all local it is returned, for the caller
// to run where it may block.
func (d driver) completed(a Assignment, err error, scratch *[]Assignment) (after func()) {
	w, t := d.w, taskOf(a.Task)
	if w.events.on() {
		w.events.emit(Event{Kind: TaskFinished, Run: runOf(t.Run()).id, Task: t.ID(), Member: a.Member, Worker: w.workerName(a.Pool, a.Target), Callable: t.handle.Name(), Err: err})
	}
	var eff Effects
	if scratch != nil {
		eff.Assign = (*scratch)[:0]
	}
	w.mu.Lock()
	w.core.Complete(a, err, &eff)
	w.deadlines.set(eff.Deadline) // news only when a had a deadline
	d.wake(eff)
	var r *Run
	if eff.Fenced != nil {
		r = runOf(eff.Fenced)
	}
	local := r != nil && r.finishesLocally()
	w.mu.Unlock()
	if scratch != nil {
		*scratch = eff.Assign
	}
	if len(eff.Stop) > 0 { // the other members of a failed group
		d.stopMembers(eff.Stop, fmt.Sprintf("member %d of its group failed", a.Member))
	}
	d.route(eff.Assign)
	if r == nil {
		return nil
	}
	if local {
		r.finish()
		return nil
	}
	return r.finish
}

// deadlinesDue advances the core to now: the members past their deadline
// fail, poisoning what depends on them, and their endpoints are asked to
// stop them, each with its own deadline as the reason; then the timer is
// set for the next deadline.
func (d driver) deadlinesDue() {
	w := d.w
	w.mu.Lock()
	w.deadlines.at = 0
	var eff Effects
	w.core.Advance(w.deadlines.now(), &eff)
	w.deadlines.set(eff.Deadline)
	d.wake(eff)
	w.mu.Unlock()
	for i, a := range eff.Stop {
		limit := memberTimeout(taskOf(a.Task), w.cfg.TaskTimeout)
		d.stopMembers(eff.Stop[i:i+1], lateError(a, int64(limit)).Error())
	}
	eff.Stop = nil
	d.apply(eff, "")
}

// cancel cancels run r with why: the core retires what has not started,
// and the members running are asked to stop.
func (d driver) cancel(r *Run, why error) {
	w := d.w
	w.mu.Lock()
	var eff Effects
	w.core.Cancel(&r.core, why, &eff)
	eff.Wake = true // r's orchestration may wait for earlier runs in direct control (direct.go)
	d.wake(eff)
	w.mu.Unlock()
	r.stop.Stop(why.Error())
	d.apply(eff, why.Error())
}

// apply carries out what core steps asked for, outside w.mu: stop the
// members to be stopped, start the assignments, finish a fenced run. It
// serves deadlines and cancels, which may come while close stops the
// endpoints: once they are stopped there is nothing to stop or start.
func (d driver) apply(eff Effects, reason string) {
	w := d.w
	d.stopMembers(eff.Stop, reason)
	w.tree.epMu.RLock()
	if !w.tree.epStopped {
		d.route(eff.Assign)
	}
	w.tree.epMu.RUnlock()
	if eff.Fenced != nil {
		runOf(eff.Fenced).finish()
	}
}

// stopMembers asks the endpoints of members to stop them, unless close
// has stopped the endpoints already.
func (d driver) stopMembers(members []Assignment, reason string) {
	w := d.w
	w.tree.epMu.RLock()
	defer w.tree.epMu.RUnlock()
	if w.tree.epStopped {
		return
	}
	for _, a := range members {
		d.endpoint(a).Cancel(a, reason)
	}
}

// route hands assignments to their endpoints.
func (d driver) route(out []Assignment) {
	w := d.w
	w.race.queue(len(out))
	w.det.spawn(out)
	for _, a := range out {
		d.endpoint(a).Start(a)
	}
}

func (d driver) endpoint(a Assignment) Endpoint {
	if a.Pool == Sub {
		return d.w.tree.subEP[a.Target]
	}
	return d.w.tree.nextEP[a.Target]
}

// wake wakes the goroutines waiting on the task window, a drain or heap
// space when a core step says something they wait for changed. Caller
// holds w.mu.
func (d driver) wake(eff Effects) {
	w := d.w
	if eff.Wake && w.det != nil {
		w.det.wakes++ // what det.wait's Procs wait for
	}
	if eff.Wake && w.waiters > 0 {
		w.cond.Broadcast()
	}
}

// wait blocks until a core step wakes the waiters. Caller holds w.mu,
// which is released while it waits.
func (d driver) wait() {
	w := d.w
	if w.det != nil {
		w.det.wait()
		return
	}
	w.waiters++
	w.cond.Wait()
	w.waiters--
}

// workerName names an endpoint the way errors show it.
func (w *Worker) workerName(p Pool, id int) string {
	switch {
	case p == Sub:
		return fmt.Sprintf("sub_worker %d", id)
	case w.tree.isRemote(id):
		return fmt.Sprintf("remote_worker %d", id)
	case w.cfg.Level >= 4:
		return fmt.Sprintf("child_worker %d", id)
	default:
		return fmt.Sprintf("chip_worker %d (device %d)", id, w.cfg.DeviceIDs[id])
	}
}
