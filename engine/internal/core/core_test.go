package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The core stepped directly, in the style of sched_test.go: no Worker, no
// goroutines, no I/O. Each step's Effects are checked.

// errNotStarted is what the tests' endpoints report for a member stopped
// before it started.
var errNotStarted = errors.New("cancelled before it started")

type coreT struct {
	t  *testing.T
	c  *Core
	id uint64
}

// newCoreT makes a core of 2 NEXT_LEVEL endpoints and 1 SUB endpoint whose
// failures read as the engine's do: where, which task, why.
func newCoreT(t *testing.T, window int) *coreT {
	fail := func(a Assignment, err error) error {
		return fmt.Errorf("%s %d: task %d running %q failed: %w", a.Pool, a.Target, a.Task.id, fmt.Sprintf("k%d", a.Task.id), err)
	}
	return &coreT{t: t, c: New(Config{Next: 2, Sub: 1, Window: window, NotStarted: errNotStarted, Fail: fail})}
}

// run begins a run that is being built.
func (ct *coreT) run() *Run {
	ct.id++
	r := &Run{}
	ct.c.Begin(r, ct.id, false)
	return r
}

// task adds a single task of r on NEXT_LEVEL worker w, waiting on deps.
func (ct *coreT) task(r *Run, w int, deps ...*Task) (*Task, Effects) {
	t := &Task{}
	ct.c.Submit(r, t, Job{Pool: NextLevel, Worker: w}, 1)
	for _, d := range deps {
		t.dependOn(d)
	}
	var eff Effects
	ct.c.Add(t, false, &eff)
	return t, eff
}

// finish completes the assignment of t with err.
func (ct *coreT) finish(t *Task, err error) Effects {
	var eff Effects
	ct.c.Complete(Assignment{Task: t, Pool: t.job.Pool, Target: t.job.Worker}, err, &eff)
	return eff
}

func assigned(eff Effects) []int {
	var ids []int
	for _, a := range eff.Assign {
		ids = append(ids, a.Task.ID())
	}
	return ids
}

func TestCoreSubmitCompleteFence(t *testing.T) {
	ct := newCoreT(t, 16)
	r := ct.run()
	t1, eff := ct.task(r, 0)
	if got := assigned(eff); !slices.Equal(got, []int{1}) {
		t.Fatalf("a ready task: assigned %v", got)
	}
	t2, eff := ct.task(r, 1, t1)
	if len(eff.Assign) != 0 || t2.pending != 1 {
		t.Fatalf("a task waiting on task 1: assigned %v, pending %d", assigned(eff), t2.pending)
	}
	eff = ct.finish(t1, nil)
	if got := assigned(eff); !slices.Equal(got, []int{2}) || !eff.Wake || eff.Fenced != nil {
		t.Fatalf("task 1 done: assigned %v, wake %v, fenced %v", got, eff.Wake, eff.Fenced)
	}
	eff = ct.finish(t2, nil)
	if eff.Fenced != nil {
		t.Fatal("fenced while the orchestration function still runs")
	}
	var built Effects
	ct.c.Built(r, &built)
	if built.Fenced != r || r.firstErr != nil || ct.c.inflight != 0 {
		t.Fatalf("built: fenced %v, first error %v, in flight %d", built.Fenced, r.firstErr, ct.c.inflight)
	}
	var again Effects
	ct.c.checkFence(r, &again)
	if again.Fenced != nil {
		t.Error("a run fenced twice")
	}
}

// A failed task poisons its consumers, which retire without running; the
// run's first error is the root failure with the lowest task id.
func TestCorePoisonAndFirstError(t *testing.T) {
	ct := newCoreT(t, 16)
	r := ct.run()
	t1, _ := ct.task(r, 0)
	t2, _ := ct.task(r, 1)
	t3, _ := ct.task(r, 0, t1)
	t4, _ := ct.task(r, 1, t3)
	ct.finish(t2, fmt.Errorf("second"))
	eff := ct.finish(t1, fmt.Errorf("first"))
	if len(eff.Assign) != 0 {
		t.Errorf("a poisoned consumer was assigned: %v", assigned(eff))
	}
	if !t3.done || !t4.done || t3.root || t4.root {
		t.Fatalf("consumers: done %v %v, root %v %v", t3.done, t4.done, t3.root, t4.root)
	}
	if !strings.Contains(t4.err.Error(), "first") || !strings.Contains(t4.err.Error(), `task 1 running "k1"`) {
		t.Errorf("the poisoned task's error: %v", t4.err)
	}
	if r.firstErr != t1 {
		t.Errorf("first error is task %d's, want task 1's (the lowest id)", r.firstErr.id)
	}
	var eff2 Effects
	ct.c.Built(r, &eff2)
	if eff2.Fenced != r {
		t.Error("a run of retired tasks did not fence")
	}
}

// Runs are ordered: a later run's ready tasks are held, even on an idle
// worker, until the earlier run is done; its window counts all tasks.
func TestCoreRunOrder(t *testing.T) {
	ct := newCoreT(t, 2)
	r1, r2 := ct.run(), ct.run()
	a, _ := ct.task(r1, 0)
	b, eff := ct.task(r2, 1)
	if len(eff.Assign) != 0 || !slices.Contains(r2.held, b) {
		t.Fatalf("run 2's task on idle worker 1: assigned %v, held %v", assigned(eff), r2.held)
	}
	if ct.c.WindowFull(r1) || !ct.c.WindowFull(r2) {
		t.Errorf("window: the first run counts its own 1 task, the second all 2: full %v, %v", ct.c.WindowFull(r1), ct.c.WindowFull(r2))
	}
	ct.finish(a, nil)
	var fence Effects
	ct.c.Built(r1, &fence)
	if fence.Fenced != r1 {
		t.Fatal("run 1 did not fence")
	}
	var done Effects
	ct.c.Done(r1, &done)
	if got := assigned(done); !slices.Equal(got, []int{1}) || done.Assign[0].Task != b || !done.Wake || len(r2.held) != 0 {
		t.Fatalf("run 1 done: assigned %v, wake %v, held %v", got, done.Wake, r2.held)
	}
	if !ct.c.Head(r2) {
		t.Error("run 2 is not first")
	}
}

// A run that is done while not first (it had no tasks) leaves the order
// without releasing anything.
func TestCoreDoneOutOfOrder(t *testing.T) {
	ct := newCoreT(t, 16)
	r1, r2 := ct.run(), ct.run()
	var eff Effects
	ct.c.Built(r2, &eff)
	if eff.Fenced != r2 {
		t.Fatal("an empty run did not fence")
	}
	ct.c.Done(r2, &eff)
	if !ct.c.Head(r1) || len(ct.c.order) != 1 || len(eff.Assign) != 0 {
		t.Errorf("order %v, assigned %v", ct.c.order, assigned(eff))
	}
}

// Heap waiting is stuck only when nothing that will retire first is in
// flight.
func TestCoreHeapStuck(t *testing.T) {
	ct := newCoreT(t, 16)
	r1, r2 := ct.run(), ct.run()
	if !ct.c.HeapStuck(r1) {
		t.Error("nothing in flight, yet not stuck")
	}
	ct.task(r2, 1)
	if !ct.c.HeapStuck(r1) || ct.c.HeapStuck(r2) {
		t.Errorf("only run 2's held task in flight: first run stuck %v, second %v", ct.c.HeapStuck(r1), ct.c.HeapStuck(r2))
	}
}

// The invariant check (on under -race and -tags invariants) catches the
// bookkeeping drifting apart.
func TestCoreInvariantsCatchDrift(t *testing.T) {
	ct := newCoreT(t, 16)
	r := ct.run()
	ct.task(r, 0)
	ct.c.checkInvariants() // consistent: no panic
	for name, corrupt := range map[string]func(){
		"in-flight count":  func() { ct.c.inflight++ },
		"scheduler load":   func() { ct.c.sched.nextLoad[1] = 5 },
		"SUB idle count":   func() { ct.c.sched.subIdle = 7 },
		"held by the head": func() { r.held = append(r.held, &Task{id: 9, run: r}) },
		"running count":    func() { r.running++ },
	} {
		saved := *ct.c.sched
		savedInflight, savedHeld, savedRunning := ct.c.inflight, r.held, r.running
		corrupt()
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "core invariant broken") {
					t.Errorf("%s: check did not panic (%v)", name, p)
				}
			}()
			ct.c.checkInvariants()
		}()
		*ct.c.sched, ct.c.inflight, r.held, r.running = saved, savedInflight, savedHeld, savedRunning
	}
}

// group adds a NEXT_LEVEL group task of r, member i on worker ws[i].
func (ct *coreT) group(r *Run, ws ...int) (*Task, Effects) {
	t := &Task{}
	ct.c.Submit(r, t, Job{Pool: NextLevel, Worker: -1, Group: ws}, len(ws))
	var eff Effects
	ct.c.Add(t, false, &eff)
	return t, eff
}

// report completes member m of t, which runs on NEXT_LEVEL worker w.
func (ct *coreT) report(t *Task, m, w int, err error) Effects {
	var eff Effects
	ct.c.Complete(Assignment{Task: t, Member: m, Pool: NextLevel, Target: w}, err, &eff)
	return eff
}

func stopped(eff Effects) []string {
	var s []string
	for _, a := range eff.Stop {
		s = append(s, fmt.Sprintf("%d.%d@%d", a.Task.id, a.Member, a.Target))
	}
	return s
}

// A cancel settles nothing itself: it asks the running members to stop,
// retires the queued and pending tasks as not started, and each running
// task ends as its endpoint reports. One that ran to its end all the same
// keeps its outcome; one stopped, or reported not started, is the
// cancel's. Wait's error names each.
func TestCoreCancelSettlesByReport(t *testing.T) {
	ct := newCoreT(t, 16)
	r := ct.run()
	t1, _ := ct.task(r, 0)
	t2, _ := ct.task(r, 1)
	t3, _ := ct.task(r, 0)     // queued behind task 1
	t4, _ := ct.task(r, 1, t2) // pending on task 2
	why := fmt.Errorf("run 1 cancelled")
	var built, eff Effects
	ct.c.Built(r, &built)
	ct.c.Cancel(r, why, &eff)
	if got := stopped(eff); !slices.Equal(got, []string{"1.0@0", "2.0@1"}) || eff.Fenced != nil {
		t.Fatalf("cancel: asked to stop %v, fenced %v", got, eff.Fenced)
	}
	if !t3.done || t1.done || t2.done {
		t.Fatalf("after the cancel: done %v %v %v; only the queued task 3 retires", t1.done, t2.done, t3.done)
	}
	ct.finish(t1, nil)                         // it ran to its end before the stop reached it
	eff = ct.finish(t2, fmt.Errorf("stopped")) // stopped while it ran
	if !t4.done || t1.err != nil || t2.err != why || t3.err != why || t4.err != why {
		t.Fatalf("errors: %v, %v, %v, %v", t1.err, t2.err, t3.err, t4.err)
	}
	if eff.Fenced != r || !r.Cut() {
		t.Fatalf("the last report: fenced %v, cut %v", eff.Fenced, r.Cut())
	}
	notStarted, stopped := r.CancelReport()
	if !slices.Equal(notStarted, []int{3, 4}) || !slices.Equal(stopped, []int{2}) {
		t.Fatalf("the report: not started %v, stopped %v", notStarted, stopped)
	}
}

// A run whose every running task ran to its end while the cancel was on
// its way was not cut short: its outcome is its tasks', a failure
// included; a member reported not started counts as such.
func TestCoreCancelOfWorkThatRan(t *testing.T) {
	ct := newCoreT(t, 16)
	r := ct.run()
	t1, _ := ct.task(r, 0)
	var built, eff Effects
	ct.c.Built(r, &built)
	ct.c.Cancel(r, fmt.Errorf("run 1 cancelled"), &eff)
	eff = ct.finish(t1, nil)
	if eff.Fenced != r || r.Cut() || t1.err != nil {
		t.Fatalf("a task that ran to its end: fenced %v, cut %v, error %v", eff.Fenced, r.Cut(), t1.err)
	}
	ct.c.Done(r, &eff)

	r2 := ct.run()
	t2, _ := ct.task(r2, 1)
	ct.c.Built(r2, &built)
	ct.c.Cancel(r2, fmt.Errorf("run 2 cancelled"), &eff)
	if got := stopped(eff); !slices.Equal(got, []string{"1.0@1"}) {
		t.Fatalf("run 2's cancel: asked to stop %v", got)
	}
	ct.finish(t2, errNotStarted)
	if !slices.Equal(r2.notStarted, []int{1}) || len(r2.stopped) != 0 {
		t.Errorf("reported not started: not started %v, stopped %v", r2.notStarted, r2.stopped)
	}
}

// A failed member of a group asks its running siblings to stop; they
// retire the task when they report, with the first member's error,
// whatever they report.
func TestCoreGroupMemberFailureStopsSiblings(t *testing.T) {
	ct := newCoreT(t, 16)
	r := ct.run()
	g, eff := ct.group(r, 0, 1)
	if len(eff.Assign) != 2 {
		t.Fatalf("the group: assigned %v", assigned(eff))
	}
	eff = ct.report(g, 0, 0, fmt.Errorf("rank 0 failed"))
	if got := stopped(eff); !slices.Equal(got, []string{"1.1@1"}) || g.done {
		t.Fatalf("member 0 failed: asked to stop %v, task done %v", got, g.done)
	}
	ct.report(g, 1, 1, fmt.Errorf("stopped: member 0 of its group failed"))
	var built Effects
	ct.c.Built(r, &built)
	if !g.done || built.Fenced != r || r.firstErr != g || !strings.Contains(g.err.Error(), "rank 0 failed") {
		t.Fatalf("the group: done %v, fenced %v, error %v", g.done, built.Fenced, g.err)
	}
}

// A member past its deadline stops its siblings too.
func TestCoreGroupMemberDeadlineStopsSiblings(t *testing.T) {
	ct := newCoreT(t, 16)
	r := ct.run()
	g, _ := ct.group(r, 0, 1)
	var eff Effects
	ct.c.Arm(Assignment{Task: g, Member: 1, Pool: NextLevel, Target: 1}, 100, 100, &eff)
	if eff.Deadline != 100 {
		t.Fatalf("armed at 100: next deadline %d", eff.Deadline)
	}
	ct.c.Advance(99, &eff)
	if len(eff.Stop) != 0 || eff.Deadline != 100 {
		t.Fatalf("at 99: asked to stop %v, next deadline %d", stopped(eff), eff.Deadline)
	}
	ct.c.Advance(100, &eff)
	if got := stopped(eff); !slices.Equal(got, []string{"1.0@0", "1.1@1"}) || eff.Deadline != NoDeadline {
		t.Fatalf("member 1 past its deadline: asked to stop %v, next deadline %d", got, eff.Deadline)
	}
}

// Deadlines are kept per member: the earliest one is reported, one
// reported back before it falls costs nothing, and each expires at its
// own tick.
func TestCoreDeadlinesInLogicalTime(t *testing.T) {
	ct := newCoreT(t, 16)
	r := ct.run()
	t1, _ := ct.task(r, 0)
	t2, _ := ct.task(r, 1)
	a1 := Assignment{Task: t1, Pool: NextLevel, Target: 0}
	a2 := Assignment{Task: t2, Pool: NextLevel, Target: 1}
	var eff Effects
	ct.c.Arm(a2, 50, 50, &eff)
	ct.c.Arm(a1, 30, 30, &eff)
	if eff.Deadline != 30 {
		t.Fatalf("deadlines at 50 and 30: next %d", eff.Deadline)
	}
	eff = ct.finish(t1, nil) // back before its deadline: the next one is task 2's
	if eff.Deadline != 50 {
		t.Fatalf("task 1 back: next deadline %d", eff.Deadline)
	}
	ct.c.Advance(40, &eff)
	if len(eff.Stop) != 0 || t1.err != nil || eff.Deadline != 50 {
		t.Fatalf("at 40: stop %v, task 1's error %v, next %d", stopped(eff), t1.err, eff.Deadline)
	}
	eff = Effects{}
	ct.c.Advance(60, &eff)
	if got := stopped(eff); !slices.Equal(got, []string{"2.0@1"}) || !t2.done || !errors.Is(t2.err, errLate) || eff.Deadline != NoDeadline {
		t.Fatalf("at 60: stop %v, task 2 done %v with %v, next %d", got, t2.done, t2.err, eff.Deadline)
	}
	eff = ct.finish(t2, errors.New("stopped"))
	var built Effects
	ct.c.Built(r, &built)
	if built.Fenced != r || !errors.Is(r.FirstErr(), errLate) {
		t.Fatalf("the run: fenced %v, first error %v", built.Fenced, r.FirstErr())
	}
}
