package engine

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"simpler/engine/hostmem"
)

// The liveness of thread-mode workers. The same tests over child
// processes, and those of the processes themselves (a stopped child, an
// orphan, start-up and control deadlines), are engine/proc's.

// namedKernel is a Go callable found by name, for tests that register
// the same few kernels on several workers.
type namedKernel struct{ name string }

func (k namedKernel) Name() string   { return k.name }
func (k namedKernel) Digest() string { return "sha256:test-" + k.name }

func (k namedKernel) RunChip(c *ChipCtx, a *TaskArgs) error {
	return namedKernels[k.name](a, c, c.Stop)
}
func (k namedKernel) RunSub(c *SubCtx, a *TaskArgs) error {
	return namedKernels[k.name](a, nil, c.Stop)
}

var namedKernels = map[string]func(a *TaskArgs, c *ChipCtx, stop *Stopper) error{
	// add1 adds one to the int64 in tensor 0, in place.
	"add1": func(a *TaskArgs, c *ChipCtx, stop *Stopper) error {
		b := taskBytes(a, c, 0)
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)+1)
		return nil
	},
	"noop": func(a *TaskArgs, c *ChipCtx, stop *Stopper) error { return nil },
	// spin marks tensor 0 and runs until it is asked to stop.
	"spin": func(a *TaskArgs, c *ChipCtx, stop *Stopper) error {
		binary.LittleEndian.PutUint64(taskBytes(a, c, 0), 1)
		for {
			if stopped, why := stop.Stopped(); stopped {
				return Errorf(RuntimeError, "stopped: %s", why)
			}
			time.Sleep(time.Millisecond)
		}
	},
}

// taskBytes is tensor i's memory in a chip kernel (device) or SUB (host).
func taskBytes(a *TaskArgs, c *ChipCtx, i int) []byte {
	t := a.Tensors[i]
	if c != nil {
		b, err := c.Chip.Bytes(t.Addr, t.NBytes())
		if err != nil {
			panic(err)
		}
		return b
	}
	b, err := hostmem.Resolve(t.Addr, t.NBytes())
	if err != nil {
		panic(err)
	}
	return b
}

// liveWorker is a thread-mode level-3 worker of two chips with the test
// kernels registered.
func liveWorker(t *testing.T) *Worker {
	w := newWorker(t, Config{})
	for _, k := range []string{"spin", "add1"} {
		register(t, w, namedKernel{k})
	}
	return w
}

func kernel(t *testing.T, w *Worker, name string) *Handle {
	h, ok := w.Registry().Lookup(namedKernel{name}.Digest())
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	return h
}

// A task past its deadline fails with a TimeoutError naming worker,
// callable and deadline, soon after it; its consumer is poisoned; the
// chip works for the next run. A kernel that heeds the stop ends at once.
func TestTaskDeadline(t *testing.T) {
	sp := newSpace(t)
	w := liveWorker(t)
	x, xb := hostI64(t, sp, 1)
	start := time.Now()
	err := runDone(t, w, func(o *Orchestrator) error {
		must(o.SubmitNext(kernel(t, w, "spin"), mkArgs(x, OutputExisting), &CallConfig{Timeout: 200 * time.Millisecond}, 0))
		_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 1)
		return err
	})
	el := time.Since(start)
	if KindOf(err) != TimeoutError || !strings.Contains(err.Error(), `chip_worker 0 (device 0): task 1 running "spin"`) || !strings.Contains(err.Error(), "deadline of 200ms") {
		t.Errorf("%v", err)
	}
	if el > 200*time.Millisecond+2*time.Second {
		t.Errorf("the run ended %v after it started", el)
	}
	if get64(xb) != 1 {
		t.Errorf("the poisoned consumer ran")
	}
	mustRun(t, w, func(o *Orchestrator) error {
		_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 0)
		return err
	})
	if get64(xb) != 2 {
		t.Errorf("chip 0 after the deadline: %d", get64(xb))
	}
}

// Cancel retires pending tasks without running them, stops the running
// one, and wait raises "run N cancelled"; a second cancel, or cancelling a
// finished run, does nothing.
func TestRunCancel(t *testing.T) {
	sp := newSpace(t)
	w := liveWorker(t)
	x, xb := hostI64(t, sp, 1)
	r := must(w.Submit(asBuild(func(o *Orchestrator) error {
		must(o.SubmitNext(kernel(t, w, "spin"), mkArgs(x, OutputExisting), nil, 0))
		_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 1)
		return err
	})))
	poll(t, "the kernel to start", func() bool { return get64(xb) == 1 })
	start := time.Now()
	r.Cancel()
	r.Cancel()
	err := r.Wait(5 * time.Second)
	if KindOf(err) != RuntimeError || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("wait after cancel: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("cancel took %v", el)
	}
	if get64(xb) != 1 {
		t.Errorf("the pending task ran after the cancel")
	}
	r.Cancel() // a finished run: nothing happens
	if err := r.Wait(0); !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("a finished run changed: %v", err)
	}
	mustRun(t, w, func(o *Orchestrator) error {
		_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 0)
		return err
	})
}

// runDone submits build and waits for the run to be done (at most 20 s),
// returning its error, which may itself be a TimeoutError.
func runDone(t *testing.T, w *Worker, build func(o *Orchestrator) error) error {
	t.Helper()
	r, err := w.Submit(asBuild(build))
	if err != nil {
		return err
	}
	err = r.Wait(20 * time.Second)
	if !r.Done() {
		t.Fatalf("run hung: %v", err)
	}
	return err
}

// close is bounded: a run whose kernel does not finish is cancelled after
// close_timeout, and close says so; nothing is left behind. (A Go kernel
// that heeds no stop cannot be ended in this process: this one does.)
func TestCloseIsBounded(t *testing.T) {
	sp := newSpace(t)
	w, err := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, CloseTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	must(w.Registry().Register(namedKernel{"spin"}, nil))
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	x, xb := hostI64(t, sp, 1)
	must(w.Submit(asBuild(func(o *Orchestrator) error {
		_, err := o.SubmitNext(kernel(t, w, "spin"), mkArgs(x, OutputExisting), nil, 0)
		return err
	})))
	poll(t, "the kernel to start", func() bool { return get64(xb) == 1 })
	start := time.Now()
	err = w.Close()
	if el := time.Since(start); el > 300*time.Millisecond+5*time.Second {
		t.Errorf("close took %v", el)
	}
	if err == nil || !strings.Contains(err.Error(), "still running after close_timeout_s=300ms: cancelled") {
		t.Errorf("close: %v", err)
	}
}
