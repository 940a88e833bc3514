package engine

import "errors"

// core is the decision logic of a Worker's runs, as a value: the order of
// the runs, each run's DAG (pending producers, poisoning, the first root
// failure, the fence), the task window and the scheduler. It has no
// goroutines, locks or I/O. Each step records in an Effects what follows
// from it (assignments to start, waiters to wake, a run that fenced), and
// the Worker applies that: it routes the assignments, broadcasts on its
// condition, finishes the fenced run. The Worker calls every step under
// its mutex; core_test.go steps a core directly.
//
// Runs are ordered: only the first run not yet done dispatches; ready
// tasks of the runs behind it are held in their run and released, in
// order, when it is done (its cleanups included).
type core struct {
	sched    *Sched
	heap     *runHeap // blocks a task holds, released when it retires (nil: none)
	window   int      // tasks in flight before a submit waits
	order    []*Run   // runs not yet done, in submit order
	inflight int      // tasks added and not retired, over all runs
	// active is every assignment started on an endpoint and not yet
	// reported back, by pool and endpoint, so a cancel knows what to
	// stop. An endpoint holds at most its scheduler depth of them, so a
	// short slice each beats a map on the dispatch path.
	active [2][][]member
	// name names an endpoint the way a task's error shows it.
	name func(p Pool, id int) string
}

// member is a task member running on an endpoint. settled records that
// its outcome is decided already (it passed its deadline): what its
// endpoint reports later does not count. stopAsked records that its
// endpoint was asked to stop it (its run was cancelled, or a member of its
// group failed): what the endpoint reports then says what really happened
// (stopOutcome). Only a running member has either, so the flags live here
// and not on every Task.
type member struct {
	task      *Task
	index     int
	settled   bool
	stopAsked bool
}

// memberKey names one member of one task.
type memberKey struct {
	t      *Task
	member int
}

// Effects is what one or more core steps ask of the Worker.
type Effects struct {
	Assign []Assignment // start these, in order
	Stop   []Assignment // ask these running ones to stop (cancelled, past their deadline, a group member failed)
	Wake   bool         // tasks retired or the first run changed: wake waiters
	Fenced *Run         // this run reached its fence: finish it
}

func newCore(s *Sched, h *runHeap, window int, name func(Pool, int) string) *core {
	c := &core{sched: s, heap: h, window: window, name: name}
	c.active[NextLevel] = make([][]member, len(s.next))
	c.active[Sub] = make([][]member, len(s.subBusy))
	return c
}

// find is a's entry among the members running on its endpoint (nil: it
// is not running).
func (c *core) find(a Assignment) *member {
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
func (c *core) drop(a Assignment, m *member) {
	list := &c.active[a.Pool][a.Target]
	last := len(*list) - 1
	*m = (*list)[last]
	(*list)[last] = member{} // no stale *Task in the spare capacity
	*list = (*list)[:last]
}

// dispatch asks the scheduler for what can start now and counts each
// assignment as running on its run until its endpoint reports it.
func (c *core) dispatch(eff *Effects) {
	n := len(eff.Assign)
	eff.Assign = c.sched.Dispatch(eff.Assign)
	for _, a := range eff.Assign[n:] {
		a.Task.run.running++
		list := &c.active[a.Pool][a.Target]
		*list = append(*list, member{task: a.Task, index: a.Member})
	}
}

// begin enters a new run, last in the order.
func (c *core) begin(r *Run) { c.order = append(c.order, r) }

// head reports whether r is the run whose tasks may dispatch now.
func (c *core) head(r *Run) bool { return len(c.order) > 0 && c.order[0] == r }

// windowFull reports whether r's next submit must wait for tasks to
// retire. The first run counts only its own tasks: tasks of later runs are
// held until it is done, so counting them could keep it from finishing.
func (c *core) windowFull(r *Run) bool {
	if c.head(r) {
		return r.inflight >= c.window
	}
	return c.inflight >= c.window
}

// heapStuck reports whether r waiting for heap space would wait for ever:
// only retiring tasks free space, and the first run's own tasks are the
// only ones sure to retire before it is done.
func (c *core) heapStuck(r *Run) bool {
	return c.inflight == 0 || c.head(r) && r.inflight == 0
}

// add counts a submitted task, already wired to its producers, and
// publishes it if none is pending.
func (c *core) add(t *Task, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	c.inflight++
	t.run.inflight++
	if t.pending == 0 {
		c.publish(t, eff)
	}
}

// unhold lets a task run that its submit held (while its heap blocks were
// zeroed outside the lock): the hold counted as one more pending producer.
// A task a cancel retired meanwhile is left alone.
func (c *core) unhold(t *Task, eff *Effects) {
	if t.done {
		return
	}
	if t.pending--; t.pending == 0 {
		c.publish(t, eff)
	}
}

// complete records that an endpoint has reported a member back: its
// endpoint is free again, and unless the member was settled already (past
// its deadline), its outcome counts: as it ran, or, for a member asked to
// stop, as what the report says happened (stopOutcome). The last member
// retires the task.
func (c *core) complete(a Assignment, err error, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	t := a.Task
	c.sched.Finish(a.Pool, a.Target)
	early, asked := false, false
	if m := c.find(a); m != nil {
		early, asked = m.settled, m.stopAsked
		c.drop(a, m)
	}
	t.run.running--
	switch {
	case early:
	case asked:
		c.recordStopped(a, err, eff)
	default:
		c.record(a, err, eff)
	}
	c.dispatch(eff)
	c.checkFence(t.run, eff)
}

// settle records the outcome of a (m its entry) now, once, ahead of its
// endpoint's report.
func (c *core) settle(a Assignment, m *member, err error, eff *Effects) {
	if m.settled {
		return
	}
	m.settled = true
	c.record(a, err, eff)
}

// record counts the outcome of a member that ran to its end on its task;
// the last member retires it. The first failure is the task's error, and
// asks the members of its group still running to stop: they cannot finish
// a group whose member is gone (a sibling waiting on its signal would wait
// for its own deadline).
func (c *core) record(a Assignment, err error, eff *Effects) {
	t := a.Task
	t.ended |= memberRan
	if err != nil && t.err == nil {
		t.err = taskError(t.ID, c.name(a.Pool, a.Target), t.handle.Name(), err)
		t.root = true
		c.stopSiblings(a, eff)
	}
	c.countMember(t, eff)
}

// recordStopped counts a member whose endpoint was asked to stop it, by
// what its endpoint reported: it ran to its end all the same (nil), did
// not start (ErrNotStarted), or was stopped while it ran (any other
// error). Its error is not the task's: the task's is its first member's
// failure, or its run's cancel.
func (c *core) recordStopped(a Assignment, err error, eff *Effects) {
	a.Task.ended |= stopOutcome(err)
	c.countMember(a.Task, eff)
}

// stopOutcome is what a report of a member asked to stop says happened.
func stopOutcome(err error) memberEnd {
	switch {
	case err == nil:
		return memberRan
	case errors.Is(err, ErrNotStarted):
		return memberNotStarted
	}
	return memberStopped
}

// countMember counts one more member of t reported; the last retires t.
func (c *core) countMember(t *Task, eff *Effects) {
	t.remaining--
	if t.remaining == 0 {
		c.retire(t, eff)
	}
}

// stopSiblings asks the endpoints of a's task's other running members to
// stop them (a has been reported, or settled, and failed).
func (c *core) stopSiblings(a Assignment, eff *Effects) {
	if a.Task.remaining <= 1 {
		return // a single task, or a's report is the last one due
	}
	for p := range c.active {
		for e := range c.active[p] {
			for i := range c.active[p][e] {
				m := &c.active[p][e][i]
				if m.task != a.Task || m.index == a.Member || m.settled || m.stopAsked {
					continue
				}
				m.stopAsked = true
				eff.Stop = append(eff.Stop, Assignment{Task: m.task, Member: m.index, Pool: Pool(p), Target: e})
			}
		}
	}
}

// expire fails a running member with err now (its deadline passed) and
// asks its endpoint to stop it; the endpoint stays busy until it reports
// the member back.
func (c *core) expire(a Assignment, err error, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	m := c.find(a)
	if m == nil {
		return // reported back already
	}
	c.settle(a, m, err, eff)
	eff.Stop = append(eff.Stop, a)
	c.dispatch(eff)
}

// cancel ends r: its held and queued tasks retire without running, its
// pending ones retire when they become ready, its running ones are asked
// to stop and retire by what their endpoints report (recordStopped): a
// member that ran to its end all the same counts as it ran. r fences once
// every endpoint has reported its members back. Cancelling again does
// nothing.
func (c *core) cancel(r *Run, why error, eff *Effects) {
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
	for p := range c.active {
		for e := range c.active[p] {
			for i := range c.active[p][e] {
				m := &c.active[p][e][i]
				if m.task.run != r || m.settled || m.stopAsked {
					continue
				}
				m.stopAsked = true
				eff.Stop = append(eff.Stop, Assignment{Task: m.task, Member: m.index, Pool: Pool(p), Target: e})
			}
		}
	}
	c.dispatch(eff)
	c.checkFence(r, eff)
}

// retireUnstarted retires t, of a cancelled run, without running it.
func (c *core) retireUnstarted(t *Task, eff *Effects) {
	t.ended = memberNotStarted
	c.retire(t, eff)
}

// built records that r's orchestration function has returned.
func (c *core) built(r *Run, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	r.building = false
	c.checkFence(r, eff)
}

// checkFence reports, once, that r's function has returned, every task of
// it has retired and every endpoint has reported its members back.
func (c *core) checkFence(r *Run, eff *Effects) {
	if r.fenced || r.building || r.inflight > 0 || r.running > 0 {
		return
	}
	r.fenced = true
	eff.Fenced = r
}

// done takes a finished run (fenced and cleaned up) out of the order; if it
// was the first, the next run's held tasks are released.
func (c *core) done(r *Run, eff *Effects) {
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
func (c *core) publish(t *Task, eff *Effects) {
	if t.run.cancelled != nil {
		c.retireUnstarted(t, eff)
		return
	}
	if t.poison != nil {
		t.err = t.poison
		c.retire(t, eff)
		return
	}
	if !c.head(t.run) {
		t.run.held = append(t.run.held, t)
		return
	}
	c.sched.Push(t)
	c.dispatch(eff)
}

// retire marks t done, releases what it held, and publishes its consumers
// that became ready, poisoning them if t failed.
func (c *core) retire(t *Task, eff *Effects) {
	t.done = true
	r := t.run
	if r.cancelled != nil {
		r.noteCancelled(t)
	}
	if t.root && (r.firstErr == nil || t.ID < r.firstErr.ID) {
		r.firstErr = t
	}
	for _, b := range t.heap {
		c.heap.unref(b)
	}
	t.heap = nil
	for _, b := range t.hostBufs {
		b.refs--
	}
	t.hostBufs = nil
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
