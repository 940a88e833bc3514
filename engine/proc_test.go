package engine

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"simpler/engine/hostmem"
)

// Process-mode tests re-run this test binary as the child: TestMain sees
// childEnv and serves the mailbox named by the last argument, resolving
// callables from procKernels by name.
const childEnv = "SIMPLER_ENGINE_TEST_CHILD"

// procKernel is a Go callable a child process can find by name.
type procKernel struct{ name string }

func (k procKernel) Name() string   { return k.name }
func (k procKernel) Digest() string { return "sha256:test-" + k.name }
func (k procKernel) Module() string { return "engine_test" }

func (k procKernel) RunChip(c *ChipCtx, a *TaskArgs) error { return procKernels[k.name](a, c, c.Stop) }
func (k procKernel) RunSub(c *SubCtx, a *TaskArgs) error   { return procKernels[k.name](a, nil, c.Stop) }

var procKernels = map[string]func(a *TaskArgs, c *ChipCtx, stop *Stopper) error{
	// add1 adds one to the int64 in tensor 0, in place.
	"add1": func(a *TaskArgs, c *ChipCtx, stop *Stopper) error {
		b := taskBytes(a, c, 0)
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)+1)
		return nil
	},
	// hang marks tensor 0 and then never returns.
	"hang": func(a *TaskArgs, c *ChipCtx, stop *Stopper) error {
		binary.LittleEndian.PutUint64(taskBytes(a, c, 0), 1)
		select {}
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
	"fail": func(a *TaskArgs, c *ChipCtx, stop *Stopper) error { return Errorf(IndexError, "child says no") },
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

type testResolver struct{}

func (testResolver) Resolve(digest, module, name string) (Callable, error) {
	k := procKernel{name}
	if _, ok := procKernels[name]; !ok || k.Digest() != digest {
		return nil, fmt.Errorf("RuntimeError: no test kernel %s (%s)", name, digest)
	}
	return k, nil
}

func runTestChild() int {
	if err := RunChild(os.Args[len(os.Args)-1], func([]byte) (Resolver, error) { return testResolver{}, nil }); err != nil {
		fmt.Fprintln(os.Stderr, "test child:", err)
		return 1
	}
	return 0
}

func procWorker(t *testing.T, chips, subs int) *Worker {
	t.Helper()
	ids := make([]int, chips)
	for i := range ids {
		ids[i] = i
	}
	return newWorker(t, Config{Level: 3, DeviceIDs: ids, NumSubWorkers: subs, Mode: "process", Launcher: testLauncher()})
}

// testLauncher starts child processes of this test binary.
func testLauncher() *Launcher {
	exe, _ := os.Executable()
	return &Launcher{Path: exe, Env: []string{childEnv + "=1"}}
}

func TestProcessModeRunsTasksInChildren(t *testing.T) {
	w := procWorker(t, 2, 1)
	h := register(t, w, procKernel{"add1"})
	sp := newSpace(t)
	ten, b := hostI64(t, sp, 1)
	put64(b, 40)
	mustRun(t, w, func(o *Orchestrator) error {
		for _, worker := range []int{0, 1} {
			if _, err := o.SubmitNext(h, mkArgs(ten, InOut), nil, worker); err != nil {
				return err
			}
		}
		_, err := o.SubmitSub(h, mkArgs(ten, InOut))
		return err
	})
	if got := get64(b); got != 43 {
		t.Fatalf("three chained increments in child processes gave %d, want 43", got)
	}
	// Device memory lives in the chip's process: malloc and copies go there.
	p, err := w.Malloc(1, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.CopyTo(1, p, b); err != nil {
		t.Fatal(err)
	}
	put64(b, 0)
	if err := w.CopyFrom(1, b, p); err != nil || get64(b) != 43 {
		t.Fatalf("copy round trip: %v, %d", err, get64(b))
	}
	if err := w.Free(1, p+8); err == nil || !strings.Contains(err.Error(), "free takes the start address") {
		t.Fatalf("interior free in the child: %v", err)
	}
}

func TestProcessModeKernelErrorKeepsItsKind(t *testing.T) {
	w := procWorker(t, 1, 0)
	h := register(t, w, procKernel{"fail"})
	err := submitRun(t, w, func(o *Orchestrator) error {
		_, err := o.SubmitNext(h, nil, nil, 0)
		return err
	})
	if KindOf(err) != IndexError || !strings.Contains(err.Error(), "child says no") || !strings.Contains(err.Error(), "chip_worker 0") {
		t.Fatalf("got %v", err)
	}
}

// A chip child killed mid-task completes its task as an endpoint failure;
// the run ends, the child is started again (with the registrations) for
// the slot's next task, and close is clean.
func TestProcessModeChildKilledMidTask(t *testing.T) {
	w := procWorker(t, 2, 0)
	hang := register(t, w, procKernel{"hang"})
	add := register(t, w, procKernel{"add1"})
	sp := newSpace(t)
	flag, fb := hostI64(t, sp, 1)
	r, err := w.Submit(asBuild(func(o *Orchestrator) error {
		_, err := o.SubmitNext(hang, mkArgs(flag, OutputExisting), nil, 0)
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "the kernel to start in the child", func() bool { return get64(fb) == 1 })
	w.chipProcs[0].kill()
	err = r.Wait(10 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "chip_worker 0 (device 0): child process") || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("run error %v", err)
	}
	mustRun(t, w, func(o *Orchestrator) error { // chip 0 again, in a new process
		_, err := o.SubmitNext(add, mkArgs(flag, InOut), nil, 0)
		return err
	})
	mustRun(t, w, func(o *Orchestrator) error { // the other chip still works
		_, err := o.SubmitNext(add, mkArgs(flag, InOut), nil, 1)
		return err
	})
	if get64(fb) != 3 {
		t.Fatalf("flag %d", get64(fb))
	}
}

func TestProcessModeChildThatCannotStart(t *testing.T) {
	_, err := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, Mode: "process",
		Launcher: &Launcher{Path: "/nonexistent/simpler"}})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, Mode: "process",
		Launcher: &Launcher{Path: "/nonexistent/simpler"}})
	err = w.Init()
	if err == nil || !strings.Contains(err.Error(), "cannot start a child process") {
		t.Fatalf("got %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, Mode: "process"}); err == nil {
		t.Fatal("process mode without a launcher was accepted")
	}
}
