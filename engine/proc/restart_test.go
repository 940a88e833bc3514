package proc

import (
	"syscall"
	"testing"
	"time"

	"simpler/engine"
)

// Issue 23, point 9: a control request that times out on a stopped chip
// child kills it, and the kill waits for the child to be reaped, so the
// next task on that chip starts the child again instead of failing with
// its stale "exited: signal: killed". Ten tries, each a new stop, kill
// and restart of the same chip process; all ten must succeed.
func TestKilledChildRestartsForNextTask(t *testing.T) {
	sp := newSpace(t)
	log := &spawnLog{}
	w := newWorker(t, engine.Config{DeviceIDs: []int{0}, ControlTimeout: 100 * time.Millisecond, Spawn: log})
	register(t, w, procKernel{"add1"})
	p := log.get(t, "chip_worker 0 (device 0)")
	x, xb := hostI64(t, sp, 1)
	const tries = 10
	ok := 0
	for i := range tries {
		before := p.pid()
		stopProcess(t, p)
		if _, err := w.Devices().Malloc(0, 8); engine.KindOf(err) != engine.TimeoutError {
			syscall.Kill(before, syscall.SIGCONT)
			t.Fatalf("try %d: malloc on a stopped chip: %v, want a TimeoutError", i, err)
		}
		err := runDone(t, w, func(o *engine.Orchestrator) error {
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 0)
			return err
		})
		if err != nil {
			t.Errorf("try %d: the task after the kill: %v", i, err)
			continue
		}
		if p.pid() == before {
			t.Errorf("try %d: the task ran, but in the killed process %d", i, before)
			continue
		}
		ok++
	}
	if ok != tries || get64(xb) != int64(ok) {
		t.Errorf("%d of %d tasks after a kill succeeded (tensor %d)", ok, tries, get64(xb))
	}
}
