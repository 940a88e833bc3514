package engine

import (
	"slices"
	"strings"
	"testing"

	"simpler/hal/dtype"
)

// Runs are ordered: run 2's tasks wait until run 1 has retired, even on an
// idle endpoint and without a tensor in common, so a reader in run 2 sees
// what run 1 wrote. Building run 2 while run 1 runs is still allowed.
func TestRunsAreOrdered(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{})
	x, mem := hostI64(t, sp, 1)
	gate := make(chan struct{})
	var rec recorder
	hw := register(t, w, chipK("write", func(c *ChipCtx, a *TaskArgs) error {
		if err := await(gate, "gate"); err != nil {
			return err
		}
		put64(mem, 7)
		rec.add("run 1 wrote")
		return nil
	}))
	hr := register(t, w, chipK("read", func(c *ChipCtx, a *TaskArgs) error {
		rec.add("run 2 read %d", get64(mem))
		return nil
	}))
	r1 := must(w.Submit(asBuild(func(o *Orchestrator) error {
		_, err := o.SubmitNext(hw, mkArgs(x, NoDep), nil, 0)
		return err
	})))
	// Run 2 is built while run 1's task waits at its gate, on the other
	// chip, which is idle.
	r2 := must(w.Submit(asBuild(func(o *Orchestrator) error {
		_, err := o.SubmitNext(hr, mkArgs(x, NoDep), nil, 1)
		return err
	})))
	if r2.Done() || len(rec.get()) != 0 {
		t.Fatalf("run 2 ran before run 1: %v", rec.get())
	}
	close(gate)
	for _, r := range []*Run{r1, r2} {
		if err := r.Wait(deadline); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.get(); !slices.Equal(got, []string{"run 1 wrote", "run 2 read 7"}) {
		t.Errorf("order %v", got)
	}
}

// A run whose orchestration has seen a failure (drain) refuses later
// submits with the first error, naming worker and callable, and adds
// nothing.
func TestFailFastAfterDrain(t *testing.T) {
	w := newWorker(t, Config{})
	ran := 0
	hf := register(t, w, chipK("boom", func(*ChipCtx, *TaskArgs) error { return Errorf(ValueError, "boom") }))
	hn := register(t, w, chipK("late", func(*ChipCtx, *TaskArgs) error { ran++; return nil }))
	var late error
	err := submitRun(t, w, func(o *Orchestrator) error {
		must(o.SubmitNext(hf, nil, nil, 0))
		if err := o.Drain(); err == nil {
			t.Error("drain saw no failure")
		}
		_, late = o.SubmitNext(hn, nil, nil, 1)
		return nil
	})
	if late == nil || KindOf(late) != RuntimeError || !strings.Contains(late.Error(), `chip_worker 0 (device 0): task 1 running "boom" failed: boom`) {
		t.Errorf("a submit after the failure was seen: %v", late)
	}
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("run: %v", err)
	}
	if ran != 0 {
		t.Errorf("the late task ran %d times", ran)
	}
}

// A host buffer used by tasks in flight is not freed: the free is refused
// and the buffer stays whole; once the run is done it frees.
func TestHostBufferInFlightIsNotFreed(t *testing.T) {
	w := newWorker(t, Config{})
	b := must(w.HostBuffers().Create(64))
	gate := make(chan struct{})
	h := register(t, w, chipK("hold", func(c *ChipCtx, a *TaskArgs) error { return await(gate, "gate") }))
	view := Tensor{Addr: b.Addr() + 8, Shape: []int{2}, DType: dtype.Int64}
	r := must(w.Submit(asBuild(func(o *Orchestrator) error {
		_, err := o.SubmitNext(h, mkArgs(view, Input), nil, 0)
		return err
	})))
	err := w.HostBuffers().Free(b)
	wantKind(t, "free while in flight", err, RuntimeError)
	if err == nil || !strings.Contains(err.Error(), "still in flight") || b.Freed() {
		t.Errorf("free while in flight: %v (freed %v)", err, b.Freed())
	}
	close(gate)
	if err := r.Wait(deadline); err != nil {
		t.Fatal(err)
	}
	if err := w.HostBuffers().Free(b); err != nil || !b.Freed() {
		t.Errorf("free after the run: %v", err)
	}
	if err := w.HostBuffers().Free(b); err != nil {
		t.Errorf("a second free: %v", err)
	}
}

// A task's args are bounded at submit the same way in every mode: what a
// thread-mode worker takes, a process-mode one takes too (engine/proc's
// test checks process mode's).
func TestArgBoundsAtSubmit(t *testing.T) {
	sp := newSpace(t)
	for mode, w := range map[string]*Worker{"thread": newWorker(t, Config{})} {
		h := register(t, w, namedKernel{"noop"})
		x, _ := hostI64(t, sp, 1)
		many := &TaskArgs{}
		for range 5000 {
			must(0, many.AddTensor(x, Input))
		}
		deep := mkArgs(Tensor{Addr: x.Addr, Shape: make([]int, 17), DType: dtype.Int64}, Input)
		for i := range deep.Tensors[0].Shape {
			deep.Tensors[0].Shape[i] = 1
		}
		for what, a := range map[string]*TaskArgs{"5000 tensors": many, "17 dimensions": deep} {
			err := submitRun(t, w, func(o *Orchestrator) error { _, err := o.SubmitNext(h, a, nil, 0); return err })
			if KindOf(err) != ValueError || !strings.Contains(err.Error(), "at most") {
				t.Errorf("%s mode, %s: %v", mode, what, err)
			}
		}
	}
}
