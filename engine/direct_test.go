package engine

import (
	"strings"
	"testing"
	"time"

	"simpler/engine/internal/core"
	"simpler/hal/dtype"
)

// The direct-control rule, stepped directly: outside any run it goes only
// when no run is in flight, and names how many are; inside a run it waits
// while the run is not first, and is refused after a submit, after the
// function returned, once cancelled, and for another Worker's run.
func TestDirectRuleSteps(t *testing.T) {
	w := newWorker(t, Config{})
	other := newWorker(t, Config{})
	step := func(r *Run) (directStep, error) {
		return locked(w, func() directStep { s, _ := w.DirectIn(r).rule("op"); return s }), locked(w, func() error { _, err := w.DirectIn(r).rule("op"); return err })
	}
	if s, err := step(nil); s != directGo || err != nil {
		t.Fatalf("idle worker: %v %v", s, err)
	}
	r1 := &Run{w: w, id: 1}
	r2 := &Run{w: w, id: 2}
	r3 := &Run{w: w, id: 3}
	locked(w, func() int {
		for _, r := range []*Run{r1, r2, r3} {
			w.runs[r] = struct{}{}
			w.core.Begin(&r.core, r.id, false)
		}
		return 0
	})
	defer locked(w, func() int {
		for _, r := range []*Run{r1, r2, r3} {
			delete(w.runs, r)
			var eff Effects
			w.core.Done(&r.core, &eff)
		}
		return 0
	})
	if s, err := step(nil); s != directRefused || err == nil || !strings.Contains(err.Error(), "op: 3 run(s) still in flight") {
		t.Errorf("outside a run with two in flight: %v %v", s, err)
	} else {
		wantKind(t, "outside a run", err, RuntimeError)
	}
	if s, err := step(r1); s != directGo || err != nil {
		t.Errorf("first run: %v %v", s, err)
	}
	if s, err := step(r2); s != directWait || err != nil {
		t.Errorf("second run: %v %v", s, err)
	}
	locked(w, func() int { w.core.Submit(&r2.core, &(&Task{}).Task, core.Job{}, 1); return 0 })
	if s, err := step(r2); s != directRefused || err == nil || !strings.Contains(err.Error(), "op: direct control cannot follow a task submission in the same run (run 2") {
		t.Errorf("after a submit: %v %v", s, err)
	}
	locked(w, func() int {
		var eff Effects
		w.core.Cancel(&r3.core, Errorf(RuntimeError, "run 3 cancelled"), &eff)
		return 0
	})
	if s, err := step(r3); s != directRefused || err == nil || !strings.Contains(err.Error(), "run 3 cancelled") {
		t.Errorf("cancelled: %v %v", s, err)
	}
	locked(w, func() int { var eff Effects; w.core.Built(&r1.core, &eff); return 0 })
	if s, err := step(r1); s != directRefused || err == nil || !strings.Contains(err.Error(), "no longer being built") {
		t.Errorf("after the function returned: %v %v", s, err)
	}
	if s, err := locked(other, func() directStep { s, _ := other.DirectIn(r2).rule("op"); return s }), locked(other, func() error { _, err := other.DirectIn(r2).rule("op"); return err }); s != directRefused || err == nil {
		t.Errorf("another Worker's run: %v %v", s, err)
	}
}

// Run 2's CopyFrom before its first submit waits for run 1's kernel, which
// writes only once a gate opens: it reads what the kernel wrote. Today's
// kernel is held by the gate, so an unordered read would see 0.
func TestDirectControlInRunWaitsForEarlierRuns(t *testing.T) {
	w := newWorker(t, Config{})
	gate := make(chan struct{})
	write := register(t, w, chipK("write", func(c *ChipCtx, a *TaskArgs) error {
		if err := await(gate, "gate"); err != nil {
			return err
		}
		put64(devBytes(c, a, 0), 7)
		return nil
	}))
	p := must(w.Devices().Malloc(0, 8))
	d := Tensor{Addr: p, Shape: []int{1}, DType: dtype.Int64, ChildMemory: true}
	r1 := must(w.Submit(asBuild(func(o *Orchestrator) error {
		_, err := o.SubmitNext(write, mkArgs(d, OutputExisting), nil, 0)
		return err
	})))
	building := make(chan *Run, 1)
	read := make(chan int64, 1)
	submitted := make(chan error, 1)
	go func() {
		_, err := w.Submit(asBuild(func(o *Orchestrator) error {
			building <- o.Run()
			b := make([]byte, 8)
			if err := o.CopyFrom(0, b, p); err != nil {
				return err
			}
			read <- get64(b)
			return nil
		}))
		submitted <- err
	}()
	r2 := <-building
	// Run 2 is waiting in CopyFrom: it is in flight and holds no task.
	poll(t, "run 2 to wait for run 1", func() bool { return locked(w, func() int { return w.waiters }) > 0 })
	if len(read) != 0 {
		t.Fatal("run 2 read before run 1 was done")
	}
	close(gate)
	if err := r1.Wait(deadline); err != nil {
		t.Fatal(err)
	}
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	if got := <-read; got != 7 {
		t.Errorf("run 2 read %d, want run 1's 7", got)
	}
	if err := r2.Wait(deadline); err != nil {
		t.Fatal(err)
	}
	if err := w.Devices().Free(0, p); err != nil {
		t.Fatal(err)
	}
}

// The wait for earlier runs is cancellable: cancelling run 2 while its
// CopyTo waits for a run 1 that cannot finish ends it at once with the
// cancel, and the device memory is unchanged.
func TestDirectControlWaitEndsWithCancel(t *testing.T) {
	w := newWorker(t, Config{})
	gate := make(chan struct{})
	hold := register(t, w, chipK("hold", func(c *ChipCtx, a *TaskArgs) error { return await(gate, "gate") }))
	p := must(w.Devices().Malloc(0, 8))
	d := Tensor{Addr: p, Shape: []int{1}, DType: dtype.Int64, ChildMemory: true}
	r1 := must(w.Submit(asBuild(func(o *Orchestrator) error {
		_, err := o.SubmitNext(hold, mkArgs(d, Input), nil, 0)
		return err
	})))
	building := make(chan *Run, 1)
	submitted := make(chan error, 1)
	go func() {
		_, err := w.Submit(asBuild(func(o *Orchestrator) error {
			building <- o.Run()
			return o.CopyTo(0, p, []byte{9, 0, 0, 0, 0, 0, 0, 0})
		}))
		submitted <- err
	}()
	r2 := <-building
	poll(t, "run 2 to wait for run 1", func() bool { return locked(w, func() int { return w.waiters }) > 0 })
	r2.Cancel()
	select {
	case err := <-submitted:
		if err == nil || !strings.Contains(err.Error(), "orch.copy_to: run 2 cancelled") {
			t.Errorf("cancelled wait: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("the cancel did not end run 2's wait")
	}
	close(gate)
	if err := r1.Wait(deadline); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	if err := w.Devices().CopyFrom(0, b, p); err != nil || get64(b) != 0 {
		t.Errorf("device memory after the refused copy: %d (%v), want 0", get64(b), err)
	}
	if err := w.Devices().Free(0, p); err != nil {
		t.Fatal(err)
	}
}

// Wait(0) polls: a TimeoutError at once while the run is in flight, the
// run's outcome once it is done.
func TestWaitZeroPolls(t *testing.T) {
	w := newWorker(t, Config{})
	gate := make(chan struct{})
	hold := register(t, w, chipK("hold", func(c *ChipCtx, a *TaskArgs) error { return await(gate, "gate") }))
	r := must(w.Submit(asBuild(func(o *Orchestrator) error {
		_, err := o.SubmitNext(hold, mkArgs(), nil, 0)
		return err
	})))
	err := r.Wait(0)
	wantKind(t, "wait(0) in flight", err, TimeoutError)
	close(gate)
	poll(t, "the run to finish", r.Done)
	if err := r.Wait(0); err != nil {
		t.Errorf("wait(0) once done: %v", err)
	}
}
