package proc

import (
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
)

// The watch's arithmetic, stepped: pings every quarter of the timeout,
// each allowed to wait only until the last answer plus the timeout, so a
// child that stops answering just after an answer is dead at that answer
// plus the timeout, not at a later ping plus the timeout.
func TestChildWatchSteps(t *testing.T) {
	const T = time.Second
	w := newChildWatch(T)
	if w.every() != T/4 || w.deadline() != T {
		t.Fatalf("at the start: a ping every %v, the first due by %v; want %v and %v", w.every(), w.deadline(), T/4, T)
	}
	// Answers at 250 ms and 500 ms; the child stops after the second.
	if next := w.answered(250 * time.Millisecond); next != T/4 {
		t.Errorf("after an answer: next ping in %v, want %v", next, T/4)
	}
	w.answered(500 * time.Millisecond)
	// The ping sent at 750 ms may wait until 1.5 s, not 1.75 s.
	if got := w.deadline(); got != 1500*time.Millisecond {
		t.Errorf("the ping after the last answer (at 500 ms) must be answered by %v, want 1.5s", got)
	}
	// A lane held by another request (with its own deadline) restarts the
	// count from the moment it was found busy.
	w.laneBusy(2 * time.Second)
	if got := w.deadline(); got != 3*time.Second {
		t.Errorf("after a busy lane at 2 s: deadline %v, want 3s", got)
	}
	// A tiny timeout still pings at a sane interval.
	if got := newChildWatch(time.Millisecond).every(); got != time.Millisecond {
		t.Errorf("every for a 1 ms timeout: %v", got)
	}
}

// Issue 23 (leftover): a chip or SUB child stopped (SIGSTOP) while it runs
// a task, with health_timeout_s = 1, is noticed and its task failed within
// 1 s of the stop plus a small slack for the kill, not up to 4/3 s. The
// stop comes as the kernel starts, just before the watch's first ping,
// when the old watch needed a third of the timeout more.
func TestStoppedChildWithinHealthTimeout(t *testing.T) {
	const timeout, slack = time.Second, 250 * time.Millisecond
	sp := newSpace(t)
	log := &spawnLog{}
	w := newWorker(t, engine.Config{DeviceIDs: []int{0}, NumSubWorkers: 1, HealthTimeout: timeout, Spawn: log})
	register(t, w, procKernel{"spin"})
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
		start := time.Now()
		stopProcess(t, p)
		err := r.Wait(10 * time.Second)
		took := time.Since(start)
		if !r.Done() || err == nil || !strings.Contains(err.Error(), "stopped answering") {
			t.Fatalf("sub %v: a stopped child: %v", sub, err)
		}
		if took > timeout+slack {
			t.Errorf("sub %v: the stopped child was noticed %v after the stop, beyond health_timeout (%v) + %v", sub, took, timeout, slack)
		}
		t.Logf("sub %v: noticed %v after the stop", sub, took)
	}
}
