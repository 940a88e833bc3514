package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"simpler/engine/internal/core"
)

func init() {
	// failOrSpin: member 0 (scalar 0) fails at once; the others mark
	// tensor 0 and run until they are asked to stop.
	namedKernels["failOrSpin"] = func(a *TaskArgs, c *ChipCtx, stop *Stopper) error {
		if a.Scalars[0] == 0 {
			return Errorf(ValueError, "rank 0 gives up")
		}
		return namedKernels["spin"](a, c, stop)
	}
}

// A cancel in thread mode reports each task as it ended: the running one
// stopped, the pending one not started; a task that ended before the
// cancel is not named.
func TestRunCancelReportsEachTask(t *testing.T) {
	sp := newSpace(t)
	w := liveWorker(t)
	x, xb := hostI64(t, sp, 1)
	y, yb := hostI64(t, sp, 1)
	r := must(w.Submit(asBuild(func(o *Orchestrator) error {
		must(o.SubmitNext(kernel(t, w, "add1"), mkArgs(y, InOut), nil, 1))
		must(o.SubmitNext(kernel(t, w, "spin"), mkArgs(x, OutputExisting), nil, 0))
		_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 1)
		return err
	})))
	poll(t, "the first task to end and the spin to start", func() bool { return get64(yb) == 1 && get64(xb) == 1 })
	r.Cancel()
	err := r.Wait(5 * time.Second)
	var rep *CancelReport
	if !errors.As(err, &rep) || !slices.Equal(rep.Stopped, []int{2}) || !slices.Equal(rep.NotStarted, []int{3}) || rep.Tasks != 3 {
		t.Fatalf("wait after cancel: %v (%+v)", err, rep)
	}
	if !strings.Contains(err.Error(), "1 other task ran to the end") || get64(xb) != 1 {
		t.Errorf("the report %q; x = %d", err, get64(xb))
	}
}

// Cancels racing short tasks, at once after the submit: each task is
// reported as it ended, and one reported not started or stopped did not
// write (add1 heeds no stop, so it is run whole or not at all); one that
// ran is not reported as cancelled. Bounded in count and time.
func TestRunCancelRacingShortTasks(t *testing.T) {
	sp := newSpace(t)
	w := liveWorker(t)
	x, xb := hostI64(t, sp, 1)
	y, yb := hostI64(t, sp, 1)
	bufs := [][]byte{xb, yb}
	outcomes := map[string]int{}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < 200 && time.Now().Before(deadline); i++ {
		before := []int64{get64(xb), get64(yb)}
		r := must(w.Submit(asBuild(func(o *Orchestrator) error {
			must(o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 0))
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(y, InOut), nil, 1)
			return err
		})))
		r.Cancel()
		err := r.Wait(5 * time.Second)
		var rep *CancelReport
		if err != nil && !errors.As(err, &rep) {
			t.Fatalf("cancel %d: %v", i, err)
		}
		for k, b := range bufs {
			what, want := "ran", before[k]+1
			if rep != nil && (slices.Contains(rep.NotStarted, k+1) || slices.Contains(rep.Stopped, k+1)) {
				what, want = "cancelled", before[k]
			}
			outcomes[what]++
			if get64(b) != want {
				t.Fatalf("cancel %d: task %d reported %s, its tensor went %d -> %d (%v)", i, k+1, what, before[k], get64(b), err)
			}
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// A member of a group that fails stops its siblings: the run fails with
// its error at once, not when a sibling's own deadline passes.
func TestGroupMemberFailureStopsSiblings(t *testing.T) {
	sp := newSpace(t)
	w := liveWorker(t)
	register(t, w, namedKernel{"failOrSpin"})
	x, xb := hostI64(t, sp, 1)
	y, _ := hostI64(t, sp, 1)
	start := time.Now()
	err := runDone(t, w, func(o *Orchestrator) error {
		_, err := o.SubmitNextGroup(kernel(t, w, "failOrSpin"), []*TaskArgs{mkArgs(y, OutputExisting, uint64(0)), mkArgs(x, OutputExisting, uint64(1))}, nil, []int{0, 1})
		return err
	})
	if KindOf(err) != ValueError || !strings.Contains(err.Error(), "rank 0 gives up") || !strings.Contains(err.Error(), "chip_worker 0") {
		t.Errorf("the group's error: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("the run ended %v after it started", el)
	}
	t.Logf("member 1 started: %v", get64(xb) == 1)
}

// Wait's error for a run a cancel cut short names each task by how it
// ended, from the core's report, and carries that report as values.
func TestCancelErrorNamesEachTask(t *testing.T) {
	c := core.New(core.Config{Next: 2, Window: 16, NotStarted: ErrNotStarted})
	r := &Run{id: 1}
	c.Begin(&r.core, 1, false)
	var eff Effects
	add := func(worker int, producer *Task) *Task {
		tk := &Task{}
		c.Submit(&r.core, &tk.Task, core.Job{Pool: NextLevel, Worker: worker}, 1)
		r.core.Access(&tk.Task, core.SpaceKey{Space: hostSpace, Buf: uint64(tk.ID())}, 0, 8, false, true)
		if producer != nil { // reads what producer wrote
			r.core.Access(&tk.Task, core.SpaceKey{Space: hostSpace, Buf: uint64(producer.ID())}, 0, 8, true, false)
		}
		c.Add(&tk.Task, false, &eff)
		return tk
	}
	t1, t2 := add(0, nil), add(1, nil)
	add(0, nil) // queued behind task 1
	add(1, t2)  // pending on task 2
	c.Built(&r.core, &eff)
	c.Cancel(&r.core, Errorf(RuntimeError, "run 1 cancelled"), &eff)
	c.Complete(Assignment{Task: &t1.Task, Pool: NextLevel, Target: 0}, nil, &eff)
	c.Complete(Assignment{Task: &t2.Task, Pool: NextLevel, Target: 1}, Errorf(RuntimeError, "stopped"), &eff)
	if !r.core.Fenced() || !r.core.Cut() {
		t.Fatalf("after the last report: fenced %v, cut %v", r.core.Fenced(), r.core.Cut())
	}
	err := r.cancelError()
	var rep *CancelReport
	if !errors.As(err, &rep) || !slices.Equal(rep.NotStarted, []int{3, 4}) || !slices.Equal(rep.Stopped, []int{2}) || KindOf(err) != RuntimeError {
		t.Fatalf("the report: %v (%+v)", err, rep)
	}
	if want := "RuntimeError: run 1 cancelled: tasks 3-4 did not start; task 2 stopped while running; 1 other task ran to the end"; err.Error() != want {
		t.Errorf("the error:\n got %s\nwant %s", err, want)
	}
}
