// Package core is the decision logic of a Worker's runs, as a value that
// owns its state: the order of the runs, each run's tasks and their
// dependency map, poisoning, the first failure, the fence, cancels, the
// task window, the members running on endpoints and the scheduler.
//
// It has no goroutines, locks, timers or I/O, and imports nothing of the
// engine. The engine calls each step (Add, Complete, Arm, Advance,
// Cancel, Built, Done) under its own lock; the step records in an Effects what
// follows from it (assignments to start, running members to stop, waiters
// to wake, a run that fenced), and the engine carries that out after
// unlocking. Tasks and runs are the core's; the engine hangs what it
// needs to run them (callables, arguments, heap blocks) on their Payload.
//
// Time is logical: a member started with a deadline (Arm) fails once the
// core is advanced past it (Advance), whatever clock the engine counts
// ticks on (the wall clock, or the virtual clock of a deterministic
// schedule). The Effects of Arm and Advance say when the next deadline
// falls, so the engine keeps one timer, not one per member.
//
// Hooks reach back into the engine, each called inside a step, under the
// engine's lock: Config.Release, as a task retires, lets go of what it
// held (heap blocks, host buffers, guarded by that same lock), and
// Config.Fail and Config.Late name a failed member's error the way the
// engine shows it.
//
// With the invariants build tag (on under -race) every step checks the
// runs' counts, the held tasks and the scheduler's loads.
package core

import (
	"errors"
	"fmt"
)

// Config is what a core is made with.
type Config struct {
	Next, Sub    int  // NEXT_LEVEL and SUB endpoints
	Window       int  // tasks in flight before a submit waits
	OrderHazards bool // writes wait for earlier readers and writers too
	// NotStarted is what an endpoint reports (errors.Is) for a member it
	// was asked to stop before the member started.
	NotStarted error
	// Fail is the error a task gets when member a failed with err (nil:
	// err itself).
	Fail func(a Assignment, err error) error
	// Late is the error of member a, past its deadline of limit ticks
	// (nil: a plain one).
	Late func(a Assignment, limit int64) error
	// Release is called as t retires, to let go of what it held (nil:
	// nothing).
	Release func(t *Task)
	// Check, if set, checks the engine's own invariants after each step
	// under the invariants build tag (the heap's, say).
	Check func(fail func(format string, args ...any))
}

// Core is the decision logic as a value. The zero value is not usable:
// make one with New.
//
// Runs are ordered: only the first run not yet done dispatches; ready
// tasks of the runs behind it are held in their run and released, in
// order, when it is done (its cleanups included).
type Core struct {
	cfg      Config
	sched    *Sched
	order    []*Run // runs not yet done, in submit order
	inflight int    // tasks added and not retired, over all runs
	// active is every assignment started on an endpoint and not yet
	// reported back, by pool and endpoint, so a cancel knows what to
	// stop. An endpoint holds at most its scheduler depth of them, so a
	// short slice each beats a map on the dispatch path.
	active [2][][]member
}

// member is a task member running on an endpoint. settled records that
// its outcome is decided already (it passed its deadline): what its
// endpoint reports later does not count. stopAsked records that its
// endpoint was asked to stop it (its run was cancelled, or a member of its
// group failed): what the endpoint reports then says what really happened
// (stopOutcome). Only a running member has either, so the flags live here
// and not on every Task.
//
// deadline is the tick past which the member fails (0: it has none) and
// limit the ticks it was given, which its error says (deadline.go).
type member struct {
	task            *Task
	index           int
	settled         bool
	stopAsked       bool
	deadline, limit int64
}

// Effects is what one or more core steps ask of the engine.
type Effects struct {
	Assign []Assignment // start these, in order
	Stop   []Assignment // ask these running ones to stop (cancelled, past their deadline, a group member failed)
	Wake   bool         // tasks retired or the first run changed: wake waiters
	Fenced *Run         // this run reached its fence: finish it
	// Deadline, when not 0, is news of the members' deadlines for the
	// driver's one timer: the tick of the earliest one, when the timer
	// should fire and Advance the core, or NoDeadline when none is left
	// (Arm and Advance set it, and Complete when a member with a deadline
	// comes back).
	Deadline int64
}

// NoDeadline is Effects.Deadline when no running member has a deadline
// left: the driver's timer may stop.
const NoDeadline int64 = -1

// New makes a core.
func New(cfg Config) *Core {
	c := &Core{cfg: cfg, sched: NewSched(cfg.Next, cfg.Sub)}
	c.active[NextLevel] = make([][]member, cfg.Next)
	c.active[Sub] = make([][]member, cfg.Sub)
	return c
}

// SetDepth lets NEXT_LEVEL endpoint w hold up to n single tasks at once.
func (c *Core) SetDepth(w, n int) { c.sched.SetDepth(w, n) }

// find is a's entry among the members running on its endpoint (nil: it
// is not running).
func (c *Core) find(a Assignment) *member {
	list := c.active[a.Pool][a.Target]
	for i := range list {
		if list[i].task == a.Task && list[i].index == a.Member {
			return &list[i]
		}
	}
	return nil
}

// drop takes m, found by find for a, off its endpoint's list; order does
// not matter, so the last entry moves into its place.
func (c *Core) drop(a Assignment, m *member) {
	list := &c.active[a.Pool][a.Target]
	last := len(*list) - 1
	*m = (*list)[last]
	(*list)[last] = member{} // no stale *Task in the spare capacity
	*list = (*list)[:last]
}

// dispatch asks the scheduler for what can start now and counts each
// assignment as running on its run until its endpoint reports it.
func (c *Core) dispatch(eff *Effects) {
	n := len(eff.Assign)
	eff.Assign = c.sched.Dispatch(eff.Assign)
	for _, a := range eff.Assign[n:] {
		a.Task.run.running++
		list := &c.active[a.Pool][a.Target]
		*list = append(*list, member{task: a.Task, index: a.Member})
	}
}

// Begin enters r, numbered id, last in the order of runs, being built.
// observed keeps each task's producers' ids (Task.Deps).
func (c *Core) Begin(r *Run, id uint64, observed bool) {
	r.id, r.building, r.observed, r.ordered = id, true, observed, c.cfg.OrderHazards
	r.spaces = map[SpaceKey]*rangeMap{}
	c.order = append(c.order, r)
}

// Head reports whether r is the run whose tasks may dispatch now.
func (c *Core) Head(r *Run) bool { return len(c.order) > 0 && c.order[0] == r }

// WindowFull reports whether r's next submit must wait for tasks to
// retire. The first run counts only its own tasks: tasks of later runs are
// held until it is done, so counting them could keep it from finishing.
func (c *Core) WindowFull(r *Run) bool {
	if c.Head(r) {
		return r.inflight >= c.cfg.Window
	}
	return c.inflight >= c.cfg.Window
}

// HeapStuck reports whether r waiting for heap space would wait for ever:
// only retiring tasks free space, and the first run's own tasks are the
// only ones sure to retire before it is done.
func (c *Core) HeapStuck(r *Run) bool {
	return c.inflight == 0 || c.Head(r) && r.inflight == 0
}

// Submit numbers t, the next task of r, running job with members members.
// The engine then records its accesses (Run.Access, Run.AccessStrided),
// which wire it to its producers, and adds it (Add).
func (c *Core) Submit(r *Run, t *Task, job Job, members int) {
	r.tasks++
	t.id, t.run, t.job, t.remaining = int32(r.tasks), r, job, int32(members)
}

// Add counts a submitted task, already wired to its producers, and
// publishes it if none is pending. A held task (its heap blocks are
// being zeroed outside the engine's lock) counts one more pending
// producer until Unhold.
func (c *Core) Add(t *Task, held bool, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	c.inflight++
	t.run.inflight++
	if held {
		t.pending++
	}
	if t.pending == 0 {
		c.publish(t, eff)
	}
}

// Unhold lets a task run that Add held. A task a cancel retired meanwhile
// is left alone.
func (c *Core) Unhold(t *Task, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	if t.done {
		return
	}
	if t.pending--; t.pending == 0 {
		c.publish(t, eff)
	}
}

// Complete records that an endpoint has reported a member back: its
// endpoint is free again, and unless the member was settled already (past
// its deadline), its outcome counts: as it ran, or, for a member asked to
// stop, as what the report says happened (stopOutcome). The last member
// retires the task.
func (c *Core) Complete(a Assignment, err error, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	t := a.Task
	c.sched.Finish(a.Pool, a.Target)
	early, asked, timed := false, false, false
	if m := c.find(a); m != nil {
		early, asked, timed = m.settled, m.stopAsked, m.deadline != 0
		c.drop(a, m)
	}
	if timed {
		eff.Deadline = c.nextDeadline()
	}
	t.run.running--
	switch {
	case early:
	case asked:
		t.ended |= c.stopOutcome(err)
		c.countMember(t, eff)
	default:
		c.record(a, err, eff)
	}
	c.dispatch(eff)
	c.checkFence(t.run, eff)
}

// record counts the outcome of a member that ran to its end on its task;
// the last member retires it. The first failure is the task's error, and
// asks the members of its group still running to stop: they cannot finish
// a group whose member is gone (a sibling waiting on its signal would wait
// for its own deadline).
func (c *Core) record(a Assignment, err error, eff *Effects) {
	t := a.Task
	t.ended |= memberRan
	if err != nil && t.err == nil {
		t.err = err
		if c.cfg.Fail != nil {
			t.err = c.cfg.Fail(a, err)
		}
		t.root = true
		c.stopSiblings(a, eff)
	}
	c.countMember(t, eff)
}

// stopOutcome is what a report of a member asked to stop says happened:
// it ran to its end all the same (nil), did not start (NotStarted), or
// was stopped while it ran (any other error). Its error is not the
// task's: the task's is its first member's failure, or its run's cancel.
func (c *Core) stopOutcome(err error) memberEnd {
	switch {
	case err == nil:
		return memberRan
	case c.cfg.NotStarted != nil && errors.Is(err, c.cfg.NotStarted):
		return memberNotStarted
	}
	return memberStopped
}

// countMember counts one more member of t reported; the last retires t.
func (c *Core) countMember(t *Task, eff *Effects) {
	t.remaining--
	if t.remaining == 0 {
		c.retire(t, eff)
	}
}

// stopRunning asks the endpoints of the running members that match to
// stop them, once each: a member settled or asked already is left alone.
func (c *Core) stopRunning(match func(m *member) bool, eff *Effects) {
	for p := range c.active {
		for e := range c.active[p] {
			for i := range c.active[p][e] {
				m := &c.active[p][e][i]
				if m.settled || m.stopAsked || !match(m) {
					continue
				}
				m.stopAsked = true
				eff.Stop = append(eff.Stop, Assignment{Task: m.task, Member: m.index, Pool: Pool(p), Target: e})
			}
		}
	}
}

// stopSiblings asks the endpoints of a's task's other running members to
// stop them (a has been reported, or settled, and failed).
func (c *Core) stopSiblings(a Assignment, eff *Effects) {
	if a.Task.remaining <= 1 {
		return // a single task, or a's report is the last one due
	}
	c.stopRunning(func(m *member) bool { return m.task == a.Task && m.index != a.Member }, eff)
}

// expire fails a running member with err now (its deadline passed) and
// asks its endpoint to stop it; the endpoint stays busy until it reports
// the member back.
func (c *Core) expire(a Assignment, err error, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	m := c.find(a)
	if m == nil {
		return // reported back already
	}
	if !m.settled {
		m.settled = true
		c.record(a, err, eff)
	}
	eff.Stop = append(eff.Stop, a)
	c.dispatch(eff)
}

// Cancel ends r: its held and queued tasks retire without running, its
// pending ones retire when they become ready, its running ones are asked
// to stop and retire by what their endpoints report (stopOutcome): a
// member that ran to its end all the same counts as it ran. r fences once
// every endpoint has reported its members back. Cancelling again does
// nothing.
func (c *Core) Cancel(r *Run, why error, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	if r.cancelled != nil || r.fenced {
		return
	}
	r.cancelled = why
	for _, t := range r.held {
		c.retireUnstarted(t, eff)
	}
	r.held = nil
	for _, t := range c.sched.Remove(func(t *Task) bool { return t.run == r }) {
		c.retireUnstarted(t, eff)
	}
	c.stopRunning(func(m *member) bool { return m.task.run == r }, eff)
	c.dispatch(eff)
	c.checkFence(r, eff)
}

// retireUnstarted retires t, of a cancelled run, without running it.
func (c *Core) retireUnstarted(t *Task, eff *Effects) {
	t.ended = memberNotStarted
	c.retire(t, eff)
}

// Built records that r's orchestration function has returned.
func (c *Core) Built(r *Run, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	r.building = false
	c.checkFence(r, eff)
}

// checkFence reports, once, that r's function has returned, every task of
// it has retired and every endpoint has reported its members back.
func (c *Core) checkFence(r *Run, eff *Effects) {
	if r.fenced || r.building || r.inflight > 0 || r.running > 0 {
		return
	}
	r.fenced = true
	eff.Fenced = r
}

// Done takes a finished run (fenced and cleaned up) out of the order; if
// it was the first, the next run's held tasks are released. Its range
// maps go with it.
func (c *Core) Done(r *Run, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	i := -1
	for k, x := range c.order {
		if x == r {
			i = k
			break
		}
	}
	if i < 0 {
		return
	}
	c.order = append(c.order[:i], c.order[i+1:]...)
	if i != 0 || len(c.order) == 0 {
		return
	}
	next := c.order[0]
	for _, t := range next.held {
		c.sched.Push(t)
	}
	next.held = nil
	eff.Wake = true // a submit of the new first run counts its window anew
	c.dispatch(eff)
}

// publish makes a task whose producers have all retired ready: a poisoned
// one, or one of a cancelled run, retires at once without running; one of
// a run behind another is held until that run is done.
func (c *Core) publish(t *Task, eff *Effects) {
	if t.run.cancelled != nil {
		c.retireUnstarted(t, eff)
		return
	}
	if t.poison != nil {
		t.err = t.poison
		c.retire(t, eff)
		return
	}
	if !c.Head(t.run) {
		t.run.held = append(t.run.held, t)
		return
	}
	c.sched.Push(t)
	c.dispatch(eff)
}

// retire marks t done, releases what it held, and publishes its consumers
// that became ready, poisoning them if t failed.
func (c *Core) retire(t *Task, eff *Effects) {
	t.done = true
	r := t.run
	if r.cancelled != nil {
		r.noteCancelled(t)
	}
	if t.root && (r.firstErr == nil || t.id < r.firstErr.id) {
		r.firstErr = t
	}
	if c.cfg.Release != nil {
		c.cfg.Release(t)
	}
	c.inflight--
	r.inflight--
	eff.Wake = true
	consumers := t.consumers
	t.consumers = nil
	for _, k := range consumers {
		if t.err != nil && k.poison == nil {
			k.poison = t.err
		}
		k.pending--
		if k.pending == 0 {
			c.publish(k, eff)
		}
	}
}

// Inflight is how many tasks, over all runs, have been added and not
// retired.
func (c *Core) Inflight() int { return c.inflight }

// checkInvariants verifies what every step must leave true; it runs only
// when the invariants constant is on (invariants_on.go). It is the
// expensive cross-check that keeps the bookkeeping of the runs, the
// scheduler and the engine's own state (Config.Check) from drifting apart
// unnoticed.
func (c *Core) checkInvariants() {
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("core invariant broken: "+format, args...))
	}
	total := 0
	for i, r := range c.order {
		if r.inflight < 0 {
			fail("run %d has %d tasks in flight", r.id, r.inflight)
		}
		total += r.inflight
		if i == 0 && len(r.held) > 0 {
			fail("run %d is first but holds %d ready tasks", r.id, len(r.held))
		}
		for _, t := range r.held {
			if t.done || t.pending != 0 {
				fail("run %d holds task %d (done %v, %d producers pending)", r.id, t.id, t.done, t.pending)
			}
		}
	}
	if total != c.inflight {
		fail("%d tasks in flight, the runs count %d", c.inflight, total)
	}
	running := map[*Run]int{}
	for p := range c.active {
		for e := range c.active[p] {
			for _, m := range c.active[p][e] {
				running[m.task.run]++
			}
		}
	}
	for _, r := range c.order {
		if running[r] != r.running {
			fail("run %d counts %d members running, its endpoints hold %d", r.id, r.running, running[r])
		}
	}
	c.sched.checkInvariants(fail)
	if c.cfg.Check != nil {
		c.cfg.Check(fail)
	}
}

// nextDeadline is the earliest deadline of a running member not yet
// settled, or NoDeadline.
func (c *Core) nextDeadline() int64 {
	next := NoDeadline
	for p := range c.active {
		for e := range c.active[p] {
			for _, m := range c.active[p][e] {
				if m.deadline != 0 && !m.settled && (next == NoDeadline || m.deadline < next) {
					next = m.deadline
				}
			}
		}
	}
	return next
}
