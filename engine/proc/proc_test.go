package proc

import (
	"strings"
	"testing"
	"time"

	"simpler/engine"
)

func TestProcessModeRunsTasksInChildren(t *testing.T) {
	w, _ := procWorker(t, 2, 1)
	h := register(t, w, procKernel{"add1"})
	sp := newSpace(t)
	ten, b := hostI64(t, sp, 1)
	put64(b, 40)
	mustRun(t, w, func(o *engine.Orchestrator) error {
		for _, worker := range []int{0, 1} {
			if _, err := o.SubmitNext(h, mkArgs(ten, engine.InOut), nil, worker); err != nil {
				return err
			}
		}
		_, err := o.SubmitSub(h, mkArgs(ten, engine.InOut))
		return err
	})
	if got := get64(b); got != 43 {
		t.Fatalf("three chained increments in child processes gave %d, want 43", got)
	}
	// Device memory lives in the chip's process: malloc and copies go there.
	p, err := w.Devices().Malloc(1, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Devices().CopyTo(1, p, b); err != nil {
		t.Fatal(err)
	}
	put64(b, 0)
	if err := w.Devices().CopyFrom(1, b, p); err != nil || get64(b) != 43 {
		t.Fatalf("copy round trip: %v, %d", err, get64(b))
	}
	if err := w.Devices().Free(1, p+8); err == nil || !strings.Contains(err.Error(), "free takes the start address") {
		t.Fatalf("interior free in the child: %v", err)
	}
}

// A level-2 worker in process mode runs its kernel in its chip's process.
func TestProcessModeLevel2RunsInItsChip(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, engine.Config{Level: 2, DeviceIDs: []int{0}})
	h := register(t, w, procKernel{"add1"})
	x, xb := hostI64(t, sp, 1)
	put64(xb, 6)
	if err := w.Devices().RunKernel(h, mkArgs(x, engine.InOut)); err != nil || get64(xb) != 7 {
		t.Fatalf("run: %v, %d", err, get64(xb))
	}
	err := w.Devices().RunKernel(register(t, w, procKernel{"fail"}), nil)
	if engine.KindOf(err) != engine.IndexError || !strings.Contains(err.Error(), "child says no") {
		t.Errorf("a failing kernel: %v", err)
	}
}

func TestProcessModeKernelErrorKeepsItsKind(t *testing.T) {
	w, _ := procWorker(t, 1, 0)
	h := register(t, w, procKernel{"fail"})
	err := submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(h, nil, nil, 0)
		return err
	})
	if engine.KindOf(err) != engine.IndexError || !strings.Contains(err.Error(), "child says no") || !strings.Contains(err.Error(), "chip_worker 0") {
		t.Fatalf("got %v", err)
	}
}

// A chip child killed mid-task completes its task as an endpoint failure;
// the run ends, the child is started again (with the registrations) for
// the slot's next task, and close is clean.
func TestProcessModeChildKilledMidTask(t *testing.T) {
	w, log := procWorker(t, 2, 0)
	hang := register(t, w, procKernel{"hang"})
	add := register(t, w, procKernel{"add1"})
	sp := newSpace(t)
	flag, fb := hostI64(t, sp, 1)
	r, err := w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(hang, mkArgs(flag, engine.OutputExisting), nil, 0)
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "the kernel to start in the child", func() bool { return get64(fb) == 1 })
	log.get(t, "chip_worker 0 (device 0)").Kill()
	err = r.Wait(10 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "chip_worker 0 (device 0): child process") || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("run error %v", err)
	}
	mustRun(t, w, func(o *engine.Orchestrator) error { // chip 0 again, in a new process
		_, err := o.SubmitNext(add, mkArgs(flag, engine.InOut), nil, 0)
		return err
	})
	mustRun(t, w, func(o *engine.Orchestrator) error { // the other chip still works
		_, err := o.SubmitNext(add, mkArgs(flag, engine.InOut), nil, 1)
		return err
	})
	if get64(fb) != 3 {
		t.Fatalf("flag %d", get64(fb))
	}
}

func TestProcessModeChildThatCannotStart(t *testing.T) {
	cfg := engine.Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, Mode: "process",
		Launcher: &engine.Launcher{Path: "/nonexistent/simpler"}, Spawn: Spawner{}}
	w, err := engine.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Init()
	if err == nil || !strings.Contains(err.Error(), "cannot start a child process") {
		t.Fatalf("got %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Launcher = nil
	if _, err := engine.NewWorker(cfg); err == nil {
		t.Fatal("process mode without a launcher was accepted")
	}
	// The Spawner refuses a request without one too, naming it.
	_, err = Spawner{}.SpawnSub(engine.SpawnRequest{Name: "sub_worker 0", Platform: sim(t)})
	wantKindText(t, "a spawn without a launcher", err, engine.RuntimeError, "sub_worker 0: no launcher to start a child process with")
}
