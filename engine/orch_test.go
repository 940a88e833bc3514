package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"simpler/hal/dtype"
)

// Orchestrator facilities: scopes and the heap, drain, direct control.

func heapUsed(w *Worker) int { return locked(w, func() int { return w.heap.used }) }

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
		if tmp.Addr == 0 || heapUsed(w) != 64 {
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

// asBuild adapts a test build to Worker.Submit's signature.
func asBuild(b func(o *Orchestrator) error) func(o *Orchestrator) (any, error) {
	return func(o *Orchestrator) (any, error) { return nil, b(o) }
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
		must(o.SubmitSub(h, nil)) // the run goes on after a failed drain
	}))
	if te := taskErr(t, err); te.TaskID != 11 || !strings.Contains(err.Error(), "drained failure") {
		t.Fatalf("run: %v", err)
	}
	if done.Load() != 11 {
		t.Fatalf("%d tasks ran, want 11", done.Load())
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
	if err := w.Free(1, p); err != nil {
		t.Fatal(err)
	}
}
