package remote

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
)

func init() {
	// nap adds one to the int64 in tensor 0 after 2 ms, heeding no stop:
	// a task that is either not run or run whole.
	procKernels["nap"] = func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		time.Sleep(2 * time.Millisecond)
		b := taskBytes(a, c, 0)
		put64(b, get64(b)+1)
		return nil
	}
	// failOrSpin: the member whose scalar 0 is 0 fails at once; the
	// others spin until they are asked to stop.
	procKernels["failOrSpin"] = func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		if a.Scalars[0] == 0 {
			return engine.Errorf(engine.ValueError, "rank 0 gives up")
		}
		return procKernels["spin"](a, c, stop)
	}
}

// remoteRef is the int64 at the start of buffer h, as a task's tensor.
func remoteRef(h *engine.RemoteBuffer) remoteTensor {
	return remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: h}}
}

// readRemote is the int64 at the start of buffer h, read also while a
// run is in flight (Watch).
func readRemote(t *testing.T, w *engine.Worker, h *engine.RemoteBuffer) int64 {
	t.Helper()
	b := make([]byte, 8)
	if err := Watch(h, b, 0); err != nil {
		t.Fatal(err)
	}
	return get64(b)
}

// A cancel reports, task by task, what the daemon says happened: a task
// still in the daemon's queue did not start (and its buffer is as it
// was), one that ran and had to be ended with its session was stopped; a
// task that ran to its end while the cancel was on its way is reported as
// run, with its own outcome, and its result is there exactly once.
func TestRemoteCancelReportsWhatRan(t *testing.T) {
	_, addr := startDaemon(t)
	w := remoteWorker(t, addr, addr)
	register(t, w, nodeOrch{procKernel{"node_hang"}})
	register(t, w, procKernel{"hang"})
	register(t, w, nodeOrch{procKernel{"node_nap"}})
	register(t, w, procKernel{"nap"})
	hang, nap := kernelNode(t, w, "node_hang"), kernelNode(t, w, "node_nap")

	// Node 0 runs a kernel that heeds no stop, so the task queued behind
	// it is still queued when its own CANCEL arrives, whatever the order
	// of the two CANCELs.
	a, b := enginetest.Must(outside(w).Malloc(0, 8)), enginetest.Must(outside(w).Malloc(0, 8))
	r := enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
		if _, err := o.SubmitNext(hang, mkArgs(remoteRef(a), engine.OutputExisting), nil, 0); err != nil {
			return err
		}
		_, err := o.SubmitNext(nap, mkArgs(remoteRef(b), engine.InOut), nil, 0)
		return err
	})))
	poll(t, "the first task to run and the second to be queued on the node", func() bool {
		return readRemote(t, w, a) == 1 && nodeOf(w, 0).sentTasks() == 2
	})
	r.Cancel()
	err := r.Wait(10 * time.Second)
	var rep *engine.CancelReport
	if !errors.As(err, &rep) || !slices.Equal(rep.Stopped, []int{1}) || !slices.Equal(rep.NotStarted, []int{2}) {
		t.Fatalf("a running and a queued remote task cancelled: %v", err)
	}

	// Cancels that race runs of short tasks queued on the node, each at a
	// different moment; bounded in count and time.
	// Node 1 runs them.
	bufs := make([]*engine.RemoteBuffer, 4)
	for k := range bufs {
		bufs[k] = enginetest.Must(outside(w).Malloc(1, 8))
	}
	outcomes := map[string]int{}
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; i < 50 && time.Now().Before(deadline); i++ {
		before := make([]int64, len(bufs))
		for k, h := range bufs {
			before[k] = readRemote(t, w, h)
		}
		r := enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
			for _, h := range bufs {
				if _, err := o.SubmitNext(nap, mkArgs(remoteRef(h), engine.InOut), nil, 1); err != nil {
					return err
				}
			}
			return nil
		})))
		for start := time.Now(); time.Since(start) < time.Duration(i%10)*time.Millisecond; { // the cancel's moment varies
			runtime.Gosched()
		}
		r.Cancel()
		err := r.Wait(10 * time.Second)
		var rep *engine.CancelReport
		if err != nil && !errors.As(err, &rep) {
			t.Fatalf("cancel %d: %v", i, err)
		}
		for k, h := range bufs {
			id, after := k+1, readRemote(t, w, h)
			what, want := "ran", before[k]+1
			switch {
			case rep != nil && slices.Contains(rep.NotStarted, id):
				what, want = "not started", before[k]
			case rep != nil && slices.Contains(rep.Stopped, id):
				// Stopped on the node before its kernel started: nap
				// does not heed a stop, so it cannot stop half-way.
				what, want = "stopped", before[k]
			}
			outcomes[what]++
			if after != want {
				t.Fatalf("cancel %d: task %d reported %s, its buffer went %d -> %d (%v)", i, id, what, before[k], after, err)
			}
		}
	}
	t.Logf("outcomes of the racing cancels: %v", outcomes)
}

// A close while a remote session is stopped (SIGSTOP) mid-task returns
// within its bound: close_timeout_s, the grace of the cancel, and the
// end of the session. It used to hang: close held the worker's lock while
// the node's failure goroutine reported the task through it.
func TestCloseWhileSessionStopped(t *testing.T) {
	d, addr := startDaemon(t)
	w, err := newParent(engine.Config{Level: 4, Platform: sim(t), SessionTimeout: 30 * time.Second, CloseTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	register(t, w, nodeOrch{procKernel{"node_spin"}})
	register(t, w, procKernel{"spin"})
	if err := w.Init(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	spin := kernelNode(t, w, "node_spin")
	a := enginetest.Must(outside(w).Malloc(0, 8))
	r := enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(spin, mkArgs(remoteRef(a), engine.OutputExisting), nil, 0)
		return err
	})))
	poll(t, "the task to run on the node", func() bool { return readRemote(t, w, a) == 1 })
	procs := sessionProcs(d)
	if len(procs) != 1 {
		t.Fatalf("%d session processes, want 1", len(procs))
	}
	procs[0].Signal(syscall.SIGSTOP)
	defer procs[0].Signal(syscall.SIGCONT) // so that it sees its parent gone and exits
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	bound := 300*time.Millisecond + 3*engine.StopGrace + 2*time.Second
	select {
	case err := <-closed:
		if err == nil {
			t.Errorf("close forced a stopped session and said nothing")
		}
		t.Logf("close after %v: %v", time.Since(start), err)
	case <-time.After(bound):
		t.Fatalf("close did not return within %v of a stopped session", bound)
	}
	if !r.Done() {
		t.Errorf("the run is not done after close")
	}
	if err := r.Wait(0); err == nil {
		t.Errorf("the stopped session's task: no error")
	}
}

// A member of a group over two remote nodes that fails at once stops its
// sibling on the other node: the run fails with its error at once, and
// both nodes stay usable (the sibling stopped when asked; it was not
// ended with its session).
func TestRemoteGroupMemberFailureStopsSiblings(t *testing.T) {
	_, addr := startDaemon(t)
	w := remoteWorker(t, addr, addr)
	register(t, w, nodeOrch{procKernel{"node_failOrSpin"}})
	register(t, w, procKernel{"failOrSpin"})
	register(t, w, procKernel{"spin"})
	h := kernelNode(t, w, "node_failOrSpin")
	a, b := enginetest.Must(outside(w).Malloc(0, 8)), enginetest.Must(outside(w).Malloc(1, 8))
	start := time.Now()
	err := runDone(t, w, func(o *engine.Orchestrator) error {
		members := []*engine.TaskArgs{mkArgs(remoteRef(a), engine.OutputExisting, uint64(0)), mkArgs(remoteRef(b), engine.OutputExisting, uint64(1))}
		_, err := o.SubmitNextGroup(h, members, nil, []int{0, 1})
		return err
	})
	if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), "rank 0 gives up") || !strings.Contains(err.Error(), "remote_worker 0") {
		t.Errorf("the group's error: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the run ended %v after it started", el)
	}
	for id := range 2 {
		if lost := nodeOf(w, id).Lost(); lost != nil {
			t.Errorf("node %d after the group: %v", id, lost)
		}
	}
}
