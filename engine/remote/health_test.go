package remote

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
)

// The watch stepped on a made-up clock: a busy node that answers every
// probe at once is never dead however long its task runs; one that goes
// silent is dead at exactly its last answer plus the timeout (the watch
// wakes then), not a probe interval later.
func TestHealthWatchBoundIsTheTimeout(t *testing.T) {
	const timeout = time.Second
	for _, stopAt := range []time.Duration{0, 10 * time.Millisecond, 249 * time.Millisecond, 250 * time.Millisecond, 3*time.Second + 1} {
		w := newHealthWatch(timeout)
		now, heard := time.Duration(0), time.Duration(0)
		var dead time.Duration = -1
		for steps := 0; steps < 1000 && now < 20*time.Second; steps++ {
			act, wait := w.step(now, heard, true)
			if act == healthDead {
				dead = now
				break
			}
			if act == healthProbe && now < stopAt {
				heard = now // answered at once
			}
			if wait <= 0 {
				t.Fatalf("stop at %v: a step at %v asks to wait %v", stopAt, now, wait)
			}
			now += wait
		}
		last := min(heard, stopAt)
		if dead < 0 || dead != max(last, 0)+timeout {
			t.Errorf("silent from %v (last heard %v): dead at %v, want %v", stopAt, last, dead, last+timeout)
		}
	}
	// Idle, the watch owes nothing and only looks again soon.
	w := newHealthWatch(timeout)
	if act, wait := w.step(time.Hour, 0, false); act != healthWait || wait > idleLook {
		t.Errorf("idle: %v, wait %v", act, wait)
	}
	// Busy again after an hour idle: silence counts from now, not from
	// the last answer an hour ago.
	if act, _ := w.step(time.Hour, 0, true); act != healthProbe {
		t.Errorf("busy after idle: %v, want a probe", act)
	}
	if act, _ := w.step(time.Hour+timeout/2, 0, true); act == healthDead {
		t.Error("dead half a timeout after becoming busy")
	}
}

// A session process sent SIGSTOP while it runs a task is noticed within
// remote_session_timeout_s (1 s here) of its last answer, plus a little
// slack for a shared machine: the run fails with a TimeoutError naming the
// bound. Before, up to 4/3 of the bound passed. A live node's long task,
// longer than the bound, is not failed.
func TestStoppedSessionNoticedWithinTheBound(t *testing.T) {
	const timeout = time.Second
	d, addr := startDaemon(t)
	w := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(t), SessionTimeout: timeout}))
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	register(t, w, nodeOrch{procKernel{"node_spin"}})
	register(t, w, procKernel{"spin"})
	if err := w.Init(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	defer w.Close()
	spin, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_spin"}}.Digest())
	buf := enginetest.Must(outside(w).Malloc(0, 8))
	r := enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(spin, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: buf}}, engine.OutputExisting), nil, 0)
		return err
	})))
	sb := make([]byte, 8)
	poll(t, "the kernel to start on the node", func() bool {
		return Watch(buf, sb, 0) == nil && get64(sb) == 1
	})
	// Alive for longer than the bound: the probes are answered.
	running := time.Now()
	for time.Since(running) < timeout*3/2 {
		if err := nodeOf(w, 0).Lost(); err != nil {
			t.Fatalf("a live node's long task failed it after %v: %v", time.Since(running), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	procs := sessionProcs(d)
	if len(procs) != 1 {
		t.Fatalf("%d session processes, want 1", len(procs))
	}
	p := procs[0]
	stopped := time.Now()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer p.Signal(syscall.SIGCONT) // it ends once it sees its connection closed
	var lost error
	for lost == nil && time.Since(stopped) < 10*timeout {
		time.Sleep(5 * time.Millisecond)
		lost = nodeOf(w, 0).Lost()
	}
	took := time.Since(stopped)
	const slack = 250 * time.Millisecond
	if engine.KindOf(lost) != engine.TimeoutError || !strings.Contains(lost.Error(), "remote_session_timeout_s=1") {
		t.Fatalf("a stopped session: %v after %v; want a TimeoutError naming the bound", lost, took)
	}
	if took > timeout+slack {
		t.Errorf("a stopped session was noticed after %v; the bound is %v (+%v slack)", took, timeout, slack)
	}
	if took < timeout-timeout/probesPerTimeout-slack {
		t.Errorf("a stopped session was noticed after only %v: before its silence reached the bound", took)
	}
	if err := r.Wait(deadline); err == nil || !strings.Contains(err.Error(), "remote_worker 0") {
		t.Errorf("the run on the stopped node: %v", err)
	}
	t.Logf("noticed %v after SIGSTOP (bound %v)", took, timeout)
}
