package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"simpler/engine/hostmem"
	"simpler/hal/dtype"
)

// Worker lifecycle, bad input, level 2 and level 4.

func nop(name string) *chipFn { return chipK(name, func(*ChipCtx, *TaskArgs) error { return nil }) }

// stillWorks runs one task on w, proving an earlier refusal left it usable.
func stillWorks(t *testing.T, w *Worker, h *Handle) {
	t.Helper()
	mustRun(t, w, func(o *Orchestrator) error {
		_, err := o.SubmitNext(h, nil, nil, 0)
		return err
	})
}

func TestBadInputIsTypedAndHarmless(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{NumSubWorkers: 1})
	x, _ := hostI64(t, sp, 2)
	h := register(t, w, nop("k"))
	only0 := register(t, w, nop("only0"), 0)
	hs := register(t, w, subK("s", func(*SubCtx, *TaskArgs) error { return nil }))
	stranger := &Handle{Callable: nop("stranger")}
	dev := must(w.Devices().Malloc(0, 64))
	defer w.Devices().Free(0, dev)
	devT := func(addr uint64) Tensor {
		return Tensor{Addr: addr, Shape: []int{8}, DType: dtype.Int64, ChildMemory: true}
	}
	var scalarFirst TaskArgs
	scalarFirst.AddScalar(1)

	orchCases := []struct {
		name string
		kind Kind
		f    func(o *Orchestrator) error
	}{
		{"worker out of range", ValueError, func(o *Orchestrator) error { _, err := o.SubmitNext(h, nil, nil, 2); return err }},
		{"negative worker", ValueError, func(o *Orchestrator) error { _, err := o.SubmitNext(h, nil, nil, -1); return err }},
		{"unregistered handle", ValueError, func(o *Orchestrator) error { _, err := o.SubmitNext(stranger, nil, nil, 0); return err }},
		{"nil handle", TypeError, func(o *Orchestrator) error { _, err := o.SubmitNext(nil, nil, nil, 0); return err }},
		{"restricted handle", ValueError, func(o *Orchestrator) error { _, err := o.SubmitNext(only0, nil, nil, 1); return err }},
		{"SUB callable as kernel", TypeError, func(o *Orchestrator) error { _, err := o.SubmitNext(hs, nil, nil, 0); return err }},
		{"kernel as SUB callable", TypeError, func(o *Orchestrator) error { _, err := o.SubmitSub(h, nil); return err }},
		{"duplicate group workers", ValueError, func(o *Orchestrator) error {
			_, err := o.SubmitNextGroup(h, []*TaskArgs{{}, {}}, nil, []int{0, 0})
			return err
		}},
		{"args/workers mismatch", ValueError, func(o *Orchestrator) error {
			_, err := o.SubmitNextGroup(h, []*TaskArgs{{}}, nil, []int{0, 1})
			return err
		}},
		{"tensor after scalar", ValueError, func(o *Orchestrator) error { return scalarFirst.AddTensor(x, Input) }},
		{"host tensor outside shared memory", ValueError, func(o *Orchestrator) error {
			_, err := o.SubmitNext(h, mkArgs(Tensor{Addr: 0x1234, Shape: []int{4}, DType: dtype.Int64}, Input), nil, 0)
			return err
		}},
		{"INPUT with address 0", ValueError, func(o *Orchestrator) error {
			_, err := o.SubmitNext(h, mkArgs(Tensor{Shape: []int{4}, DType: dtype.Int64}, Input), nil, 0)
			return err
		}},
		{"child memory outside an allocation", ValueError, func(o *Orchestrator) error {
			_, err := o.SubmitNext(h, mkArgs(devT(dev+64), Input), nil, 0)
			return err
		}},
		{"child memory of another chip", ValueError, func(o *Orchestrator) error {
			_, err := o.SubmitNext(h, mkArgs(devT(dev), Input), nil, 1)
			return err
		}},
		{"SUB tensor in child memory", ValueError, func(o *Orchestrator) error {
			_, err := o.SubmitSub(hs, mkArgs(devT(dev), Input))
			return err
		}},
	}
	for _, c := range orchCases {
		mustRun(t, w, func(o *Orchestrator) error {
			wantKind(t, c.name, c.f(o), c.kind)
			if n := o.Run().Tasks(); n != 0 {
				t.Errorf("%s: %d task(s) queued", c.name, n)
			}
			return nil
		})
		stillWorks(t, w, h)
	}

	half := must(w.Devices().Malloc(1, 64))
	freed := must(w.Devices().Malloc(1, 64))
	must(0, w.Devices().Free(1, freed))
	directCases := []struct {
		name string
		kind Kind
		err  error
	}{
		{"free unknown", ValueError, w.Devices().Free(1, 0xdead0)},
		{"free interior", ValueError, w.Devices().Free(1, half+8)},
		{"double free", ValueError, w.Devices().Free(1, freed)},
		{"copy_to out of range", ValueError, w.Devices().CopyTo(1, half, make([]byte, 65))},
		{"copy_from out of range", ValueError, w.Devices().CopyFrom(1, make([]byte, 8), half+60)},
		{"malloc on a missing chip", IndexError, func() error { _, err := w.Devices().Malloc(2, 8); return err }()},
		{"register out of range", ValueError, func() error { _, err := w.Registry().Register(nop("r"), []int{2}); return err }()},
		{"re-register with other workers", ValueError, func() error { _, err := w.Registry().Register(only0.Callable, []int{1}); return err }()},
		{"add_worker on level 3", ValueError, func() error { _, err := w.AddWorker(&Worker{}); return err }()},
		{"init twice", RuntimeError, w.Init()},
		{"run(kernel) on level 3", ValueError, w.Devices().RunKernel(h, nil)},
	}
	for _, c := range directCases {
		wantKind(t, c.name, c.err, c.kind)
	}
	must(0, w.Devices().Free(1, half))
	stillWorks(t, w, h)
}

func TestConfigAndLifecycleErrors(t *testing.T) {
	p := sim(t)
	_, err := NewWorker(Config{Level: 4, Platform: p, DeviceIDs: []int{0}})
	wantKind(t, "level 4 with device ids", err, ValueError)
	_, err = NewWorker(Config{Level: 3, Platform: p, Mode: "process", DeviceIDs: []int{0}})
	wantKind(t, "process mode", err, ValueError)

	w, err := NewWorker(Config{Level: 3, Platform: p, DeviceIDs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	_, err = w.Submit(func(*Orchestrator) (any, error) { return nil, nil })
	wantKind(t, "submit before init", err, RuntimeError)
	_, err = w.Devices().Malloc(0, 8)
	wantKind(t, "malloc before init", err, RuntimeError)
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	h := register(t, w, nop("k"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	_, err = w.Submit(func(*Orchestrator) (any, error) { return nil, nil })
	wantKind(t, "submit after close", err, RuntimeError)
	_, err = w.Registry().Register(nop("late"), nil)
	wantKind(t, "register after close", err, RuntimeError)
	_, err = w.Devices().Malloc(0, 8)
	wantKind(t, "malloc after close", err, RuntimeError)
	wantKind(t, "init after close", w.Init(), RuntimeError)
	wantKind(t, "run after close", w.Devices().RunKernel(h, nil), RuntimeError)
}

func TestLevel2RunKernel(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{Level: 2, DeviceIDs: []int{3}})
	in, inMem := hostI64(t, sp, 2)
	out, outMem := hostI64(t, sp, 2)
	put64(inMem, 20)
	var calls int // RunKernel is synchronous: the kernel runs on this goroutine
	h := register(t, w, chipK("double", func(c *ChipCtx, a *TaskArgs) error {
		calls++
		if !a.Tensors[0].ChildMemory || !a.Tensors[1].ChildMemory || c.Chip.DeviceID() != 3 {
			return errors.New("kernel was given host tensors or the wrong chip")
		}
		put64(devBytes(c, a, 1), 2*get64(devBytes(c, a, 0))+int64(a.Scalars[0]))
		return nil
	}))
	if err := w.Devices().RunKernel(h, mkArgs(in, Input, out, Output, uint64(2))); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || get64(outMem) != 42 || get64(inMem) != 20 {
		t.Fatalf("calls %d, out %d, in %d; want 1, 42, 20", calls, get64(outMem), get64(inMem))
	}
	if allocs, windows := must(w.Devices().Chip(0)).Live(); allocs != 0 || windows != 0 {
		t.Fatalf("chip holds %d allocations and %d windows after the kernel", allocs, windows)
	}
	_, err := w.Submit(func(*Orchestrator) (any, error) { return nil, nil })
	wantKind(t, "submit on level 2", err, ValueError)
	hf := register(t, w, chipK("fails", func(*ChipCtx, *TaskArgs) error { return errors.New("l2 boom") }))
	err = w.Devices().RunKernel(hf, nil)
	if te := taskErr(t, err); te.Worker != "chip_worker 0 (device 3)" || !strings.Contains(err.Error(), "l2 boom") {
		t.Fatalf("got %v", err)
	}
	wantKind(t, "address 0 at level 2", w.Devices().RunKernel(h, mkArgs(Tensor{Shape: []int{1}, DType: dtype.Int64}, Output)), ValueError)
	if err := w.Devices().RunKernel(h, mkArgs(in, Input, out, Output, uint64(0))); err != nil || get64(outMem) != 40 {
		t.Fatalf("after a failure: %v, out %d", err, get64(outMem))
	}
}

// newL4 builds a level-4 worker over one level-3 child with one chip.
func newL4(t *testing.T) (l4, l3 *Worker) {
	t.Helper()
	p := sim(t)
	l3, err := NewWorker(Config{Level: 3, Platform: p, DeviceIDs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	l4, err = NewWorker(Config{Level: 4, Platform: p})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := l4.AddWorker(l3); err != nil || id != 0 {
		t.Fatalf("add_worker: %d, %v", id, err)
	}
	if err := l4.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l4.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return l4, l3
}

func TestLevel4RunsChildOrchestration(t *testing.T) {
	sp := newSpace(t)
	l4, l3 := newL4(t)
	x, xMem := hostI64(t, sp, 1)
	k := chipK("inc", func(c *ChipCtx, a *TaskArgs) error {
		if a.Scalars[0] == 0 {
			return errors.New("told to fail")
		}
		b := devBytes(c, a, 0)
		put64(b, get64(b)+int64(a.Scalars[0]))
		return nil
	})
	register(t, l4, k) // also registers it on the child
	orch := &orchFn{newFn("orch"), func(o *Orchestrator, a *TaskArgs, cfg *CallConfig) error {
		if o.Worker() != l3 || cfg.BlockDim != 4 {
			return errors.New("orchestration runs on the wrong worker or config")
		}
		hk, ok := o.Worker().Registry().Lookup(k.Digest())
		if !ok {
			return errors.New("kernel not registered on the child")
		}
		_, err := o.SubmitNext(hk, a, nil, 0)
		return err
	}}
	ho := register(t, l4, orch)
	submit := func(by uint64) error {
		return submitRun(t, l4, func(o *Orchestrator) error {
			_, err := o.SubmitNext(ho, mkArgs(x, InOut, by), &CallConfig{BlockDim: 4}, 0)
			return err
		})
	}
	if err := submit(5); err != nil || get64(xMem) != 5 {
		t.Fatalf("run: %v, x = %d", err, get64(xMem))
	}
	err := submit(0)
	te := taskErr(t, err)
	// The path names both levels; the callable is the one that failed.
	if te.Worker != "child_worker 0 > chip_worker 0 (device 0)" || te.Callable != "inc" || !strings.Contains(err.Error(), "told to fail") {
		t.Fatalf("got %v", err)
	}
	wantKind(t, "close of a child", l3.Close(), RuntimeError)
	wantKind(t, "init of a child", l3.Init(), RuntimeError)
	if err := submit(1); err != nil || get64(xMem) != 6 {
		t.Fatalf("run after failure: %v, x = %d", err, get64(xMem))
	}
}

func TestCloseDrainsUnwaitedRun(t *testing.T) {
	w := newWorker(t, Config{})
	var finished atomic.Bool
	h := register(t, w, chipK("slow", func(*ChipCtx, *TaskArgs) error {
		// Still running when Close has begun.
		err := until("close to begin", func() bool { return locked(w, func() bool { return w.state == stateClosed }) })
		finished.Store(true)
		return err
	}))
	r, err := w.Submit(func(o *Orchestrator) (any, error) { return o.SubmitNext(h, nil, nil, 0) })
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !finished.Load() || !r.Done() || r.Wait(-1) != nil {
		t.Fatalf("close returned before the run: finished=%v done=%v err=%v", finished.Load(), r.Done(), r.Wait(-1))
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestCloseInsideOrchestrationRefused(t *testing.T) {
	w := newWorker(t, Config{})
	mustRun(t, w, func(o *Orchestrator) error {
		err := w.Close()
		wantKind(t, "close inside orchestration", err, RuntimeError)
		if err == nil || !strings.Contains(err.Error(), "inside an orchestration function") {
			t.Errorf("got %v", err)
		}
		return nil
	})
	stillWorks(t, w, register(t, w, nop("k")))
}

// A panic in a child's orchestration function fails the parent's task and
// leaves the child usable and closable.
func TestLevel4OrchestrationPanic(t *testing.T) {
	l4, _ := newL4(t)
	k := register(t, l4, nop("k"))
	var n atomic.Int32
	ho := register(t, l4, &orchFn{newFn("orch_panics"), func(o *Orchestrator, a *TaskArgs, _ *CallConfig) error {
		hk, _ := o.Worker().Registry().Lookup(k.Digest())
		if _, err := o.SubmitNext(hk, nil, nil, 0); err != nil {
			return err
		}
		if n.Add(1) == 1 {
			panic("orchestration blew up")
		}
		return nil
	}})
	build := func(o *Orchestrator) error { _, err := o.SubmitNext(ho, nil, nil, 0); return err }
	err := submitRun(t, l4, build)
	if te := taskErr(t, err); te.Worker != "child_worker 0" || !strings.Contains(err.Error(), "orchestration blew up") {
		t.Fatalf("got %v", err)
	}
	mustRun(t, l4, build)
}

func TestRegisterRefcount(t *testing.T) {
	w := newWorker(t, Config{})
	k := nop("k")
	h1, h2 := register(t, w, k), register(t, w, k)
	if h1 != h2 {
		t.Fatal("registering a callable twice gave two handles")
	}
	must(0, w.Registry().Unregister(h1))
	stillWorks(t, w, h1) // one reference left
	must(0, w.Registry().Unregister(h1))
	wantKind(t, "unregister past zero", w.Registry().Unregister(h1), ValueError)
	mustRun(t, w, func(o *Orchestrator) error {
		_, err := o.SubmitNext(h1, nil, nil, 0)
		wantKind(t, "submit of an unregistered handle", err, ValueError)
		return nil
	})
}

// Several goroutines submit runs to one worker at once; each run's tasks
// form a chain through its own tensor, and every run gets its own result.
func TestConcurrentRuns(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{NumSubWorkers: 2, TaskWindow: 4})
	inc := func(b []byte) { put64(b, get64(b)+1) }
	hc := register(t, w, chipK("inc", func(c *ChipCtx, a *TaskArgs) error { inc(devBytes(c, a, 0)); return nil }))
	hs := register(t, w, subK("sub_inc", func(c *SubCtx, a *TaskArgs) error {
		b, err := hostmem.Resolve(a.Tensors[0].Addr, 8)
		if err == nil {
			inc(b)
		}
		return err
	}))
	const runs, steps = 4, 30
	mems := make([][]byte, runs)
	errs := make(chan error, runs)
	for i := range runs {
		var x Tensor
		x, mems[i] = hostI64(t, sp, 1)
		go func() {
			r, err := w.Submit(func(o *Orchestrator) (any, error) {
				for s := range steps {
					var err error
					if s%3 == 2 {
						_, err = o.SubmitSub(hs, mkArgs(x, InOut))
					} else {
						_, err = o.SubmitNext(hc, mkArgs(x, InOut), nil, s%2)
					}
					if err != nil {
						return nil, err
					}
				}
				return nil, nil
			})
			if err == nil {
				err = r.Wait(deadline)
			}
			errs <- err
		}()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range mems {
		if get64(m) != steps {
			t.Errorf("run %d counted %d, want %d", i, get64(m), steps)
		}
	}
}
