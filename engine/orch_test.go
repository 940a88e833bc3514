package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"simpler/hal/dtype"
)

// Orchestrator facilities: scopes and the heap, drain, direct control.

func heapUsed(w *Worker) int { return locked(w, func() int { return w.heap.used() }) }

func TestScopeFreesAllocations(t *testing.T) {
	w := newWorker(t, Config{})
	var saw atomic.Int64
	hW := register(t, w, chipK("write", func(c *ChipCtx, a *TaskArgs) error {
		put64(devBytes(c, a, 0), 5)
		return nil
	}))
	hR := register(t, w, chipK("read", func(c *ChipCtx, a *TaskArgs) error {
		saw.Store(get64(devBytes(c, a, 0)))
		return nil
	}))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		must(0, o.ScopeBegin())
		tmp := must(o.Alloc([]int{4}, dtype.Int64))
		if tmp.Addr == 0 || heapUsed(w) != heapAlign {
			t.Errorf("alloc: addr %#x, heap used %d", tmp.Addr, heapUsed(w))
		}
		must(o.SubmitNext(hW, mkArgs(tmp, Output), nil, 0))
		must(o.SubmitNext(hR, mkArgs(tmp, Input), nil, 1))
		must(0, o.ScopeEnd())
		// Freed once its readers retire, not before.
		poll(t, "the scope's block to be freed", func() bool { return heapUsed(w) == 0 })
		must(o.Alloc([]int{1}, dtype.Int64)) // root scope: freed at the fence
	}))
	if saw.Load() != 5 {
		t.Fatalf("reader saw %d through the scope's tensor, want 5", saw.Load())
	}
	if n := heapUsed(w); n != 0 {
		t.Fatalf("heap used %d after the run", n)
	}
}

func TestScopeErrors(t *testing.T) {
	w := newWorker(t, Config{})
	err := submitRun(t, w, func(o *Orchestrator) error {
		wantKind(t, "scope_end without scope_begin", o.ScopeEnd(), RuntimeError)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Submit(asBuild(buildErr(func(o *Orchestrator) {
		must(0, o.ScopeBegin())
		must(0, o.ScopeBegin())
		must(o.Alloc([]int{8}, dtype.Int64))
		must(0, o.ScopeEnd())
	})))
	wantKind(t, "return with an open scope", err, RuntimeError)
	if err == nil || !strings.Contains(err.Error(), "1 open scope") {
		t.Errorf("got %v", err)
	}
	if n := heapUsed(w); n != 0 {
		t.Fatalf("heap used %d after an unbalanced run", n)
	}
	mustRun(t, w, func(o *Orchestrator) error { return nil })
}

func TestBuildErrorWaitsForSubmittedTasks(t *testing.T) {
	w := newWorker(t, Config{})
	var ran atomic.Bool
	h := register(t, w, chipK("k", func(*ChipCtx, *TaskArgs) error { ran.Store(true); return nil }))
	_, err := w.Submit(func(o *Orchestrator) (any, error) {
		if _, err := o.SubmitNext(h, nil, nil, 0); err != nil {
			return nil, err
		}
		return nil, errors.New("build failed")
	})
	if err == nil || err.Error() != "build failed" || !ran.Load() {
		t.Fatalf("submit returned %v with the task ran=%v", err, ran.Load())
	}
}

func TestDrain(t *testing.T) {
	w := newWorker(t, Config{NumSubWorkers: 2})
	var done atomic.Int32
	h := register(t, w, subK("count", func(*SubCtx, *TaskArgs) error { done.Add(1); return nil }))
	hf := register(t, w, subK("fail", func(*SubCtx, *TaskArgs) error { return errors.New("drained failure") }))
	err := submitRun(t, w, buildErr(func(o *Orchestrator) {
		for range 10 {
			must(o.SubmitSub(h, nil))
		}
		must(0, o.Drain())
		if n := done.Load(); n != 10 {
			t.Errorf("drain returned with %d of 10 tasks done", n)
		}
		must(o.SubmitSub(hf, nil))
		err := o.Drain()
		if te := taskErr(t, err); te.TaskID != 11 || te.Callable != "fail" {
			t.Errorf("drain: %v", err)
		}
		// The run has seen its failure: it takes nothing more.
		if _, err := o.SubmitSub(h, nil); KindOf(err) != RuntimeError || !strings.Contains(err.Error(), "drained failure") {
			t.Errorf("a submit after the failed drain: %v", err)
		}
	}))
	if te := taskErr(t, err); te.TaskID != 11 || !strings.Contains(err.Error(), "drained failure") {
		t.Fatalf("run: %v", err)
	}
	if done.Load() != 10 {
		t.Fatalf("%d tasks ran, want 10", done.Load())
	}
}

func TestDirectControlOnlyBeforeFirstSubmit(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{})
	x, xmem := hostI64(t, sp, 1)
	h := register(t, w, chipK("load", func(c *ChipCtx, a *TaskArgs) error {
		v, err := c.Chip.Bytes(a.Scalars[0], 8)
		if err == nil {
			copy(devBytes(c, a, 0), v)
		}
		return err
	}))
	var p uint64
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		p = must(o.Malloc(1, 64))
		must(0, o.CopyTo(1, p, []byte{9, 0, 0, 0, 0, 0, 0, 0}))
		must(o.SubmitNext(h, mkArgs(x, Output, p), nil, 1))
		for op, err := range map[string]error{
			"malloc":    func() error { _, err := o.Malloc(1, 64); return err }(),
			"copy_to":   o.CopyTo(1, p, []byte{1}),
			"copy_from": o.CopyFrom(1, make([]byte, 1), p),
			"free":      o.Free(1, p),
		} {
			wantKind(t, op+" after submit", err, RuntimeError)
			if err != nil && !strings.Contains(err.Error(), "stage every rank") {
				t.Errorf("%s after submit: %v", op, err)
			}
		}
	}))
	if get64(xmem) != 9 {
		t.Fatalf("kernel read %d from the staged device memory, want 9", get64(xmem))
	}
	if err := w.Devices().Free(1, p); err != nil {
		t.Fatal(err)
	}
}

// A panicking orchestration function still ends its run (tasks retired,
// heap freed, worker closable) before the panic reaches the caller.
func TestBuildPanicReraisedAfterCleanup(t *testing.T) {
	w := newWorker(t, Config{})
	var ran atomic.Bool
	h := register(t, w, chipK("k", func(*ChipCtx, *TaskArgs) error { ran.Store(true); return nil }))
	p := func() (p any) {
		defer func() { p = recover() }()
		w.Submit(func(o *Orchestrator) (any, error) {
			o.SubmitNext(h, mkArgs(must(o.Alloc([]int{2}, dtype.Int64)), Output), nil, 0)
			panic("build blew up")
		})
		return nil
	}()
	if p != "build blew up" || !ran.Load() {
		t.Fatalf("recovered %v, task ran %v", p, ran.Load())
	}
	if n, runs := heapUsed(w), locked(w, func() int { return len(w.runs) }); n != 0 || runs != 0 {
		t.Fatalf("after the panic: heap used %d, %d live runs", n, runs)
	}
	stillWorks(t, w, h)
}

// A small heap: allocations wait for tasks to free space, and fail only
// when nothing in flight could free any.
func TestHeapRingThroughOrchestrator(t *testing.T) {
	w := newWorker(t, Config{HeapRingSize: heapAlign})
	var sum atomic.Int64
	h := register(t, w, chipK("fill", func(c *ChipCtx, a *TaskArgs) error {
		put64(devBytes(c, a, 0), int64(a.Scalars[0]))
		sum.Add(get64(devBytes(c, a, 0)))
		return nil
	}))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		for i := range 10 { // each needs the whole ring: it waits for the last
			must(0, o.ScopeBegin())
			tmp := must(o.Alloc([]int{heapAlign / 8}, dtype.Int64))
			must(o.SubmitNext(h, mkArgs(tmp, Output, uint64(i)), nil, i%2))
			must(0, o.ScopeEnd())
		}
		must(0, o.Drain())
		must(o.Alloc([]int{heapAlign / 8}, dtype.Int64))
		_, err := o.Alloc([]int{1}, dtype.Int64)
		wantKind(t, "alloc with the ring held by a live scope", err, RuntimeError)
		_, err = o.Alloc([]int{heapAlign/8 + 1}, dtype.Int64)
		wantKind(t, "alloc larger than the ring", err, ValueError)
	}))
	if sum.Load() != 45 || heapUsed(w) != 0 {
		t.Fatalf("sum %d, heap used %d", sum.Load(), heapUsed(w))
	}
	odd := newWorker(t, Config{HeapRingSize: heapAlign + heapAlign/2})
	mustRun(t, odd, func(o *Orchestrator) error {
		_, err := o.Alloc([]int{heapAlign + 100}, dtype.UInt8) // two units once aligned
		wantKind(t, "alloc that fits only unaligned", err, ValueError)
		return nil
	})
}

func TestWaitTimeoutAndResult(t *testing.T) {
	w := newWorker(t, Config{})
	gate := make(chan struct{})
	h := register(t, w, chipK("gated", func(*ChipCtx, *TaskArgs) error { return await(gate, "gate") }))
	r, err := w.Submit(func(o *Orchestrator) (any, error) {
		_, err := o.SubmitNext(h, nil, nil, 0)
		return "result", err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Wait(time.Millisecond)
	wantKind(t, "wait on a blocked run", err, TimeoutError)
	if r.Done() || err == nil || !strings.Contains(err.Error(), "1 of 1 tasks still unfinished") {
		t.Fatalf("done %v, %v", r.Done(), err)
	}
	close(gate)
	if res, err := r.Result(); res != "result" || err != nil || r.Tasks() != 1 {
		t.Fatalf("result %v, %v", res, err)
	}
}

// Cleanups run after the fence, last registered first; one that fails
// fails the run and makes the worker refuse further work.
func TestCleanupsRunAfterFence(t *testing.T) {
	w := newWorker(t, Config{})
	var rec recorder
	h := register(t, w, chipK("k", func(*ChipCtx, *TaskArgs) error { rec.add("task"); return nil }))
	cleanup := func(name string, err error) Cleanup {
		return Cleanup{Name: name, Fn: func() error { rec.add("%s", name); return err }}
	}
	err := submitRun(t, w, buildErr(func(o *Orchestrator) {
		o.Run().AddCleanup(cleanup("first", nil))
		o.Run().AddCleanup(cleanup("second", errors.New("cannot free")))
		must(o.SubmitNext(h, nil, nil, 0))
	}))
	if got := strings.Join(rec.get(), " "); got != "task second first" {
		t.Errorf("order %q", got)
	}
	if err == nil || !strings.Contains(err.Error(), "second: cannot free") {
		t.Errorf("run: %v", err)
	}
	_, err = w.Submit(func(*Orchestrator) (any, error) { return nil, nil })
	wantKind(t, "submit on a poisoned worker", err, RuntimeError)
	if err == nil || !strings.Contains(err.Error(), "failed cleanup") {
		t.Errorf("got %v", err)
	}
}
