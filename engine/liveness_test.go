package engine

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/shm"
)

// liveWorkers are a thread-mode and a process-mode level-3 worker of two
// chips with the test kernels registered.
func liveWorkers(t *testing.T) map[string]*Worker {
	ws := map[string]*Worker{"thread": newWorker(t, Config{}), "process": procWorker(t, 2, 0)}
	for _, w := range ws {
		for _, k := range []string{"spin", "hang", "add1"} {
			register(t, w, procKernel{k})
		}
	}
	return ws
}

func kernel(t *testing.T, w *Worker, name string) *Handle {
	h, ok := w.Lookup(procKernel{name}.Digest())
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	return h
}

// A task past its deadline fails with a TimeoutError naming worker,
// callable and deadline, soon after it; its consumer is poisoned; the
// chip works for the next run. A kernel that heeds the stop ends at once;
// one that does not is killed with its child process (process mode), and
// the process is started again.
func TestTaskDeadline(t *testing.T) {
	sp := newSpace(t)
	for mode, w := range liveWorkers(t) {
		kernels := []string{"spin"}
		if mode == "process" {
			kernels = append(kernels, "hang")
		}
		for _, k := range kernels {
			x, xb := hostI64(t, sp, 1)
			ran := false
			start := time.Now()
			err := runDone(t, w, func(o *Orchestrator) error {
				must(o.SubmitNext(kernel(t, w, k), mkArgs(x, OutputExisting), &CallConfig{Timeout: 200 * time.Millisecond}, 0))
				_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 1)
				return err
			})
			el := time.Since(start)
			if KindOf(err) != TimeoutError || !strings.Contains(err.Error(), `chip_worker 0 (device 0): task 1 running "`+k+`"`) || !strings.Contains(err.Error(), "deadline of 200ms") {
				t.Errorf("%s mode, %s: %v", mode, k, err)
			}
			if el > 200*time.Millisecond+2*time.Second {
				t.Errorf("%s mode, %s: the run ended %v after it started", mode, k, el)
			}
			if got := get64(xb); got != 1 {
				ran = true
			}
			if ran {
				t.Errorf("%s mode, %s: the poisoned consumer ran", mode, k)
			}
			mustRun(t, w, func(o *Orchestrator) error {
				_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 0)
				return err
			})
			if get64(xb) != 2 {
				t.Errorf("%s mode, %s: chip 0 after the deadline: %d", mode, k, get64(xb))
			}
		}
	}
}

// Cancel retires pending tasks without running them, stops the running
// one, and wait raises "run N cancelled"; a second cancel, or cancelling a
// finished run, does nothing.
func TestRunCancel(t *testing.T) {
	sp := newSpace(t)
	for mode, w := range liveWorkers(t) {
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
			t.Errorf("%s mode: wait after cancel: %v", mode, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("%s mode: cancel took %v", mode, el)
		}
		if get64(xb) != 1 {
			t.Errorf("%s mode: the pending task ran after the cancel", mode)
		}
		r.Cancel() // a finished run: nothing happens
		if err := r.Wait(0); !strings.Contains(err.Error(), "cancelled") {
			t.Errorf("%s mode: a finished run changed: %v", mode, err)
		}
		mustRun(t, w, func(o *Orchestrator) error {
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 0)
			return err
		})
	}
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

// A chip or SUB process that stops answering (SIGSTOP) while it runs a
// task is noticed within health_timeout: the task fails naming it, the
// rest of the worker goes on, and the slot's next task runs in a new
// process.
func TestStoppedChildIsDetected(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{Level: 3, DeviceIDs: []int{0, 1}, NumSubWorkers: 1, Mode: "process",
		Launcher: testLauncher(), HealthTimeout: 600 * time.Millisecond})
	for _, k := range []string{"spin", "add1"} {
		register(t, w, procKernel{k})
	}
	for _, sub := range []bool{false, true} {
		x, xb := hostI64(t, sp, 1)
		r := must(w.Submit(asBuild(func(o *Orchestrator) error {
			if sub {
				_, err := o.SubmitSub(kernel(t, w, "spin"), mkArgs(x, OutputExisting))
				return err
			}
			_, err := o.SubmitNext(kernel(t, w, "spin"), mkArgs(x, OutputExisting), nil, 0)
			return err
		})))
		poll(t, "the kernel to start", func() bool { return get64(xb) == 1 })
		p := w.chipProcs[0]
		if sub {
			p = w.subProcs[0]
		}
		p.cur.Load().cmd.Process.Signal(syscall.SIGSTOP)
		start := time.Now()
		err := r.Wait(10 * time.Second)
		if !r.Done() || !strings.Contains(err.Error(), "stopped answering") {
			t.Fatalf("sub %v: a stopped child: %v", sub, err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("sub %v: noticed after %v", sub, el)
		}
		mustRun(t, w, func(o *Orchestrator) error {
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 1)
			return err
		})
		mustRun(t, w, func(o *Orchestrator) error {
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, InOut), nil, 0)
			return err
		})
		if get64(xb) != 3 {
			t.Errorf("sub %v: after the stop: %d", sub, get64(xb))
		}
	}
}

// close is bounded: a run whose kernel does not finish is cancelled after
// close_timeout, and close says so; nothing is left behind.
func TestCloseIsBounded(t *testing.T) {
	sp := newSpace(t)
	for _, mode := range []string{"thread", "process"} {
		cfg := Config{Level: 3, DeviceIDs: []int{0}, CloseTimeout: 300 * time.Millisecond}
		if mode == "process" {
			cfg.Mode, cfg.Launcher = "process", testLauncher()
		}
		w, err := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: cfg.DeviceIDs, Mode: cfg.Mode, Launcher: cfg.Launcher, CloseTimeout: cfg.CloseTimeout})
		if err != nil {
			t.Fatal(err)
		}
		must(w.Register(procKernel{"hang"}, nil))
		must(w.Register(procKernel{"spin"}, nil))
		if err := w.Init(); err != nil {
			t.Fatal(err)
		}
		x, xb := hostI64(t, sp, 1)
		hang := kernel(t, w, "hang")
		if mode == "thread" { // a Go kernel that heeds no stop cannot be ended in this process: use one that does
			hang = kernel(t, w, "spin")
		}
		must(w.Submit(asBuild(func(o *Orchestrator) error {
			_, err := o.SubmitNext(hang, mkArgs(x, OutputExisting), nil, 0)
			return err
		})))
		poll(t, "the kernel to start", func() bool { return get64(xb) == 1 })
		start := time.Now()
		err = w.Close()
		if el := time.Since(start); el > 300*time.Millisecond+5*time.Second {
			t.Errorf("%s mode: close took %v", mode, el)
		}
		if err == nil || !strings.Contains(err.Error(), "still running after close_timeout_s=300ms: cancelled") {
			t.Errorf("%s mode: close: %v", mode, err)
		}
	}
}

// orphanEnv makes this test binary the parent of a process-mode worker
// whose kernels spin, for a test to kill.
const orphanEnv = "SIMPLER_ENGINE_TEST_ORPHAN"

// runOrphanParent starts a process-mode worker of one chip and one SUB
// worker, sets a spinning task going on each, prints the children's pids
// and waits to be killed.
func runOrphanParent() int {
	p, _ := hal.Lookup("a2a3sim")
	w, err := NewWorker(Config{Level: 3, Platform: p, DeviceIDs: []int{0}, NumSubWorkers: 1, Mode: "process", Launcher: testLauncher()})
	if err == nil {
		err = w.Init()
	}
	var h *Handle
	if err == nil {
		h, err = w.Register(procKernel{"spin"}, nil)
	}
	sp := hostmem.NewSpace()
	addr, mem, err2 := sp.Alloc(16)
	if err == nil {
		err = err2
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	_, err = w.Submit(func(o *Orchestrator) (any, error) {
		a := Tensor{Addr: addr, Shape: []int{1}, DType: 7}
		b := Tensor{Addr: addr + 8, Shape: []int{1}, DType: 7}
		if _, err := o.SubmitNext(h, mkArgs(a, OutputExisting), nil, 0); err != nil {
			return nil, err
		}
		_, err := o.SubmitSub(h, mkArgs(b, OutputExisting))
		return nil, err
	})
	for err == nil && (get64(mem[:8]) != 1 || get64(mem[8:]) != 1) {
		time.Sleep(time.Millisecond) // waiting for both kernels to start
	}
	for _, p := range w.procs() {
		fmt.Println(p.pid())
	}
	fmt.Println("ready")
	select {}
}

// A chip or SUB process whose parent dies while its kernel spins stops
// the kernel and exits within its 2 s grace.
func TestOrphanChildrenEnd(t *testing.T) {
	exe, _ := os.Executable()
	parent := exec.Command(exe, "-test.run=^$")
	parent.Env = append(os.Environ(), orphanEnv+"=1")
	out, _ := parent.StdoutPipe()
	parent.Stderr = os.Stderr
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadString('\n')
		line = strings.TrimSpace(line)
		if err != nil || line == "ready" {
			break
		}
		n, err := strconv.Atoi(line)
		if err != nil {
			parent.Process.Kill()
			parent.Wait()
			t.Fatalf("the parent said %q", line)
		}
		pids = append(pids, n)
	}
	if len(pids) != 2 {
		parent.Process.Kill()
		parent.Wait()
		t.Fatalf("children %v", pids)
	}
	parent.Process.Kill()
	parent.Wait()
	start := time.Now()
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Since(start) > 3*time.Second {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("child %d outlived its parent by %v", pid, time.Since(start))
			}
			time.Sleep(20 * time.Millisecond) // polling for the process to go
		}
	}
	t.Logf("the children ended %v after their parent", time.Since(start))
	// The killed parent could not unlink its mailboxes; a later process's
	// sweep would (shm.SweepDead). This test removes them itself.
	left, _ := shm.Leftovers(fmt.Sprintf("simpler-%d-", parent.Process.Pid))
	for _, n := range left {
		os.Remove("/dev/shm/" + n)
	}
}

// Start-up deadlines are honoured as given and reported as TimeoutError:
// child processes given 1 ms. (A daemon that accepts but never answers:
// engine/remote's TestStartupDeadlineOfASilentDaemon.)
func TestStartupDeadlines(t *testing.T) {
	w, err := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0, 1}, Mode: "process", Launcher: testLauncher(), StartupTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = w.Init()
	if KindOf(err) != TimeoutError || time.Since(start) > time.Second {
		t.Errorf("1 ms start-up: %v after %v", err, time.Since(start))
	}
	w.Close()
}

// control_timeout_s bounds a control round trip to a child process: a
// malloc on a stopped chip fails at the configured bound.
func TestControlTimeoutIsHonoured(t *testing.T) {
	w := newWorker(t, Config{Level: 3, DeviceIDs: []int{0}, Mode: "process", Launcher: testLauncher(), ControlTimeout: 300 * time.Millisecond})
	p := w.chipProcs[0]
	p.cur.Load().cmd.Process.Signal(syscall.SIGSTOP)
	defer p.cur.Load().cmd.Process.Signal(syscall.SIGCONT)
	start := time.Now()
	_, err := w.Malloc(0, 8)
	el := time.Since(start)
	if KindOf(err) != TimeoutError || el < 300*time.Millisecond || el > 2*time.Second {
		t.Errorf("malloc on a stopped chip: %v after %v", err, el)
	}
}
