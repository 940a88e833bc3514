package proc

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

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/shm"
	"simpler/internal/enginetest"
)

// The liveness of process-mode workers: the engine's deadlines, cancel
// and close over child processes (engine's tests check them over
// threads), and the processes' own: a child that stops answering, one
// whose parent dies, start-up and control deadlines.

// liveWorker is a process-mode level-3 worker of two chips with the test
// kernels registered, and the log of its processes.
func liveWorker(t *testing.T) (*engine.Worker, *spawnLog) {
	w, log := procWorker(t, 2, 0)
	for _, k := range []string{"spin", "hang", "add1"} {
		register(t, w, procKernel{k})
	}
	return w, log
}

// A task past its deadline fails with a TimeoutError naming worker,
// callable and deadline, soon after it; its consumer is poisoned; the
// chip works for the next run. A kernel that heeds the stop ends at once;
// one that does not is killed with its child process, and the process is
// started again.
func TestTaskDeadline(t *testing.T) {
	sp := newSpace(t)
	w, _ := liveWorker(t)
	for _, k := range []string{"spin", "hang"} {
		x, xb := hostI64(t, sp, 1)
		start := time.Now()
		err := runDone(t, w, func(o *engine.Orchestrator) error {
			enginetest.Must(o.SubmitNext(kernel(t, w, k), mkArgs(x, engine.OutputExisting), &engine.CallConfig{Timeout: 200 * time.Millisecond}, 0))
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 1)
			return err
		})
		el := time.Since(start)
		if engine.KindOf(err) != engine.TimeoutError || !strings.Contains(err.Error(), `chip_worker 0 (device 0): task 1 running "`+k+`"`) || !strings.Contains(err.Error(), "deadline of 200ms") {
			t.Errorf("%s: %v", k, err)
		}
		if el > 200*time.Millisecond+2*time.Second {
			t.Errorf("%s: the run ended %v after it started", k, el)
		}
		if get64(xb) != 1 {
			t.Errorf("%s: the poisoned consumer ran", k)
		}
		mustRun(t, w, func(o *engine.Orchestrator) error {
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 0)
			return err
		})
		if get64(xb) != 2 {
			t.Errorf("%s: chip 0 after the deadline: %d", k, get64(xb))
		}
	}
}

// Cancel retires pending tasks without running them, stops the running
// one in its child, and wait raises "run N cancelled"; a second cancel,
// or cancelling a finished run, does nothing.
func TestRunCancel(t *testing.T) {
	sp := newSpace(t)
	w, _ := liveWorker(t)
	x, xb := hostI64(t, sp, 1)
	r := enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
		enginetest.Must(o.SubmitNext(kernel(t, w, "spin"), mkArgs(x, engine.OutputExisting), nil, 0))
		_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 1)
		return err
	})))
	poll(t, "the kernel to start", func() bool { return get64(xb) == 1 })
	start := time.Now()
	r.Cancel()
	r.Cancel()
	err := r.Wait(5 * time.Second)
	if engine.KindOf(err) != engine.RuntimeError || !strings.Contains(err.Error(), "cancelled") {
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
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 0)
		return err
	})
}

// A chip or SUB process that stops answering (SIGSTOP) while it runs a
// task is noticed within health_timeout: the task fails naming it, the
// rest of the worker goes on, and the slot's next task runs in a new
// process.
func TestStoppedChildIsDetected(t *testing.T) {
	sp := newSpace(t)
	log := &spawnLog{}
	w := newWorker(t, engine.Config{DeviceIDs: []int{0, 1}, NumSubWorkers: 1, HealthTimeout: 600 * time.Millisecond, Spawn: log})
	for _, k := range []string{"spin", "add1"} {
		register(t, w, procKernel{k})
	}
	for _, sub := range []bool{false, true} {
		x, xb := hostI64(t, sp, 1)
		r := enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
			if sub {
				_, err := o.SubmitSub(kernel(t, w, "spin"), mkArgs(x, engine.OutputExisting))
				return err
			}
			_, err := o.SubmitNext(kernel(t, w, "spin"), mkArgs(x, engine.OutputExisting), nil, 0)
			return err
		})))
		poll(t, "the kernel to start", func() bool { return get64(xb) == 1 })
		p := log.get(t, "chip_worker 0 (device 0)")
		if sub {
			p = log.get(t, "sub_worker 0")
		}
		stopProcess(t, p)
		start := time.Now()
		err := r.Wait(10 * time.Second)
		if !r.Done() || !strings.Contains(err.Error(), "stopped answering") {
			t.Fatalf("sub %v: a stopped child: %v", sub, err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("sub %v: noticed after %v", sub, el)
		}
		mustRun(t, w, func(o *engine.Orchestrator) error {
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 1)
			return err
		})
		mustRun(t, w, func(o *engine.Orchestrator) error {
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 0)
			return err
		})
		if get64(xb) != 3 {
			t.Errorf("sub %v: after the stop: %d", sub, get64(xb))
		}
	}
}

// close is bounded: a run whose kernel neither finishes nor heeds a stop
// is cancelled after close_timeout, its child is killed, and close says
// so; nothing is left behind.
func TestCloseIsBounded(t *testing.T) {
	sp := newSpace(t)
	cfg := engine.Config{Level: 3, DeviceIDs: []int{0}, CloseTimeout: 300 * time.Millisecond}
	processMode(&cfg)
	w, err := engine.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Must(w.Registry().Register(procKernel{"hang"}, nil))
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	x, xb := hostI64(t, sp, 1)
	enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(kernel(t, w, "hang"), mkArgs(x, engine.OutputExisting), nil, 0)
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

// orphanEnv makes this test binary the parent of a process-mode worker
// whose kernels spin, for a test to kill.
const orphanEnv = "SIMPLER_PROC_TEST_ORPHAN"

// runOrphanParent starts a process-mode worker of one chip and one SUB
// worker, sets a spinning task going on each, prints the children's pids
// and waits to be killed.
func runOrphanParent() int {
	p, _ := hal.Lookup("a2a3sim")
	log := &spawnLog{}
	w, err := engine.NewWorker(engine.Config{Level: 3, Platform: p, DeviceIDs: []int{0}, NumSubWorkers: 1, Mode: "process", Launcher: testLauncher(), Spawn: log})
	if err == nil {
		err = w.Init()
	}
	var h *engine.Handle
	if err == nil {
		h, err = w.Registry().Register(procKernel{"spin"}, nil)
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
	_, err = w.Submit(func(o *engine.Orchestrator) (any, error) {
		a := engine.Tensor{Addr: addr, Shape: []int{1}, DType: 7}
		b := engine.Tensor{Addr: addr + 8, Shape: []int{1}, DType: 7}
		if _, err := o.SubmitNext(h, mkArgs(a, engine.OutputExisting), nil, 0); err != nil {
			return nil, err
		}
		_, err := o.SubmitSub(h, mkArgs(b, engine.OutputExisting))
		return nil, err
	})
	for err == nil && (get64(mem[:8]) != 1 || get64(mem[8:]) != 1) {
		time.Sleep(time.Millisecond) // waiting for both kernels to start
	}
	for _, p := range log.all() {
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
	// A prefix of its own: what the killed parent leaves is not this
	// binary's to answer for, but the sweep's to remove.
	prefix := shm.NewPrefix()
	parent.Env = append(os.Environ(), orphanEnv+"=1", shm.PrefixEnv+"="+prefix)
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
	// The killed parent could not unlink its mailboxes. Either the last
	// child to exit removed them (a clean exit finishes the prefix: the
	// rest of its family is dead) or, with the parent and its children
	// gone and nothing holding the prefix's lock, the sweep proves them
	// dead and removes them. Nothing of the prefix remains.
	left, _ := shm.Leftovers(prefix)
	removed := shm.SweepPrefix(prefix)
	after, _ := shm.Leftovers(prefix)
	_, lerr := os.Lstat("/dev/shm/" + shm.LockName(prefix))
	if len(after) > 0 || lerr == nil {
		t.Errorf("the dead family's prefix: %v left, the sweep removed %v, and %v remain (lock present: %v)", left, removed, after, lerr == nil)
	}
}

// Start-up deadlines are honoured as given and reported as TimeoutError:
// child processes given 1 ms. (A daemon that accepts but never answers:
// engine/remote's TestStartupDeadlineOfASilentDaemon.)
func TestStartupDeadlines(t *testing.T) {
	cfg := engine.Config{Level: 3, DeviceIDs: []int{0, 1}, StartupTimeout: time.Millisecond}
	processMode(&cfg)
	w, err := engine.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = w.Init()
	if engine.KindOf(err) != engine.TimeoutError || time.Since(start) > time.Second {
		t.Errorf("1 ms start-up: %v after %v", err, time.Since(start))
	}
	w.Close()
}

// control_timeout_s bounds a control round trip to a child process: a
// malloc on a stopped chip fails at the configured bound.
func TestControlTimeoutIsHonoured(t *testing.T) {
	log := &spawnLog{}
	w := newWorker(t, engine.Config{DeviceIDs: []int{0}, ControlTimeout: 300 * time.Millisecond, Spawn: log})
	p := log.get(t, "chip_worker 0 (device 0)")
	stopProcess(t, p)
	defer p.cur.Load().cmd.Process.Signal(syscall.SIGCONT)
	start := time.Now()
	_, err := w.Devices().Malloc(0, 8)
	el := time.Since(start)
	if engine.KindOf(err) != engine.TimeoutError || el < 300*time.Millisecond || el > 2*time.Second {
		t.Errorf("malloc on a stopped chip: %v after %v", err, el)
	}
}

// stopProcess stops p's child with SIGSTOP and waits until it is stopped:
// the signal takes effect asynchronously, and a child spinning on its
// lane could otherwise answer one more request first.
func stopProcess(t *testing.T, p *process) {
	t.Helper()
	pid := p.pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	poll(t, fmt.Sprintf("process %d to stop", pid), func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// The state follows the command name, which is in parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		return err == nil && i > 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't')
	})
}
